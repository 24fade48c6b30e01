"""The loading layer: which format loads a path, in which order, and its errors. (What it
imports, checkpoint.py <- formats/* <- loading.py and nothing above, is test_imports.py's.)"""

import json
import os

import pytest

from nmtdecode.options.config import ConfigError
from nmtdecode.models import loading
from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.detect import model_format
from nmtdecode.models.formats import ct2, eole, huggingface, marian, native, opennmt

from tests.helpers import build_native_model


def test_a_load_names_every_file_it_read(model_dir):
    """What the resume signature hashes (signature.py): the config, the weights, the tokenizer."""
    loaded = loading.load_model(str(model_dir))
    assert sorted(os.path.basename(f) for f in loaded.files) == ["config.yaml", "model.safetensors", "spm.model"]
    assert all(os.path.isabs(f) for f in loaded.files)


def test_each_format_is_loaded_by_its_name():
    assert loading.FORMATS == {
        "native": native,
        "ctranslate2": ct2,
        "eole": eole,
        "huggingface": huggingface,
        "marian": marian,
        "opennmt-py": opennmt,
    }


def test_load_model_dispatches_on_the_file_each_format_detects(tmp_path):
    model_dir = build_native_model(tmp_path / "native")
    assert model_format(str(model_dir)) == "native"
    assert loading.load_model(str(model_dir)).format == "native"
    (model_dir / "config.json").write_text(json.dumps({"model_type": "t5"}))
    assert loading.load_model(str(model_dir)).format == "native"  # config.yaml wins over config.json
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text(json.dumps({"model_type": "umt5", "d_model": 8}))
    assert model_format(str(hf_dir)) == "huggingface"
    with pytest.raises(ModelError, match="model_type 'umt5' is not supported"):  # only the HF format says this
        loading.load_model(str(hf_dir))


def test_load_model_error_texts(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError) as error:
        loading.load_model(str(missing))
    assert str(error.value) == f"model: {missing} does not exist"
    (tmp_path / "file.txt").write_text("not a model")
    for path in (tmp_path, tmp_path / "file.txt"):
        with pytest.raises(ConfigError) as error:
            loading.load_model(str(path))
        assert str(error.value) == (
            f"model: {path} is not a model directory (no config.yaml for the native format, "
            "no config.json for Hugging Face, no decoder.yml for Marian, no model.bin for "
            "CTranslate2) nor an OpenNMT-py .pt checkpoint or a Marian .npz"
        )


@pytest.mark.parametrize("vocabulary", ["shared_vocabulary.json", "source_vocabulary.txt"])
def test_a_ctranslate2_folder_is_recognised_and_a_damaged_one_says_so_in_one_line(tmp_path, vocabulary, cli):
    """What CTranslate2's converters write (ctranslate2/specs/model_spec.py: model.bin, config.json
    without model_type, {shared,source,target}_vocabulary.json; .txt before 3.0) is read as such,
    before its config.json could pass for a Hugging Face one; a Marian directory's model.bin is not."""
    (tmp_path / "model.bin").write_bytes(b"\x00" * 16)
    (tmp_path / "config.json").write_text(json.dumps({"add_source_bos": False, "unk_token": "<unk>"}))
    (tmp_path / vocabulary).write_text('["<unk>", "<s>", "</s>"]')
    assert model_format(str(tmp_path)) == "ctranslate2"
    run = cli("translate", "--model", tmp_path, stdin="a\n", text=True)
    assert run.returncode == 1 and run.stderr.count("\n") == 1
    assert "model.bin: binary version 0 is not one CTranslate2 has written" in run.stderr
    (tmp_path / "config.json").unlink()
    (tmp_path / "decoder.yml").write_text("models: [model.bin]\n")
    assert model_format(str(tmp_path)) == "marian"


def test_a_hub_id_that_is_not_here_says_how_to_get_it(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"Helsinki-NLP/opus-mt-en-de does not exist; it looks like a Hugging Face "
        r"Hub id.*huggingface-cli download Helsinki-NLP/opus-mt-en-de",
    ):
        model_format("Helsinki-NLP/opus-mt-en-de")
    with pytest.raises(ConfigError) as plain:  # a path that is not an id gets no hint
        model_format(str(tmp_path / "missing" / "model"))
    assert "Hub" not in str(plain.value)
