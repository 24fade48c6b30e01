"""The loading layer: which format loads a path, in which order, and its errors. (What it
imports, checkpoint.py <- formats/* <- loading.py and nothing above, is test_imports.py's.)"""

import json
import os

import pytest

from nmtdecode.config import ConfigError
from nmtdecode.models import loading
from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.detect import model_format
from nmtdecode.models.formats import eole, huggingface, native, opennmt

from tests.helpers import build_native_model


def test_a_load_names_every_file_it_read(model_dir):
    """What the resume signature hashes (signature.py): the config, the weights, the tokenizer."""
    loaded = loading.load_model(str(model_dir))
    assert sorted(os.path.basename(f) for f in loaded.files) == ["config.yaml", "model.safetensors", "spm.model"]
    assert all(os.path.isabs(f) for f in loaded.files)


def test_each_format_is_loaded_by_its_name():
    assert loading.FORMATS == {"native": native, "eole": eole, "huggingface": huggingface, "opennmt-py": opennmt}


def test_load_model_dispatches_on_the_file_each_format_detects(tmp_path):
    model_dir = build_native_model(tmp_path / "native")
    assert model_format(str(model_dir)) == "native"
    assert loading.load_model(str(model_dir)).format == "native"
    (model_dir / "config.json").write_text(json.dumps({"model_type": "t5"}))
    assert loading.load_model(str(model_dir)).format == "native"  # config.yaml wins over config.json
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text(json.dumps({"model_type": "t5", "d_model": 8}))
    assert model_format(str(hf_dir)) == "huggingface"
    with pytest.raises(ModelError, match="model_type 't5' is not supported"):  # only the HF format says this
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
        assert str(error.value) == (f"model: {path} is not a model directory (no config.yaml for the native format, "
                                    "no config.json for Hugging Face) nor an OpenNMT-py .pt checkpoint")
