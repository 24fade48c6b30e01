"""`nmtdecode inspect` without torch says what the full load says, for the formats whose weight
files it reads as safetensors headers: Hugging Face families (built with transformers, with their
tokenizers) and eole directories (built with eole); the native format is tests/models/test_inspect.py's."""

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests import peer_eole
from tests.models.formats import test_hf_tokenizers as hf_tokenizers
from tests.models.formats.test_eole_parity import VARIANTS
from tests.models.formats.test_huggingface_parity import build
from tests.models.test_inspect import assert_inspect_matches_the_loaded_model

pytestmark = pytest.mark.parity  # the models are built with peer libraries: in make test, not in make test-fast


def with_tokenizer(family, path):
    """A model directory of `family` with the tokenizer files transformers saves for it."""
    build(family, path)
    tokenizer = path.parent / "tokenizer"
    tokenizer.mkdir()
    if family == "marian":
        saved, _ = hf_tokenizers._marian_dir(tokenizer, separate=False)
    else:  # mBART-50: its language codes
        saved, _, _ = hf_tokenizers._mbart(tokenizer, fifty=True)
    for name in ("config.json", "generation_config.json"):
        (tokenizer / "saved" / name).unlink(missing_ok=True)
    shutil.copytree(saved, path, dirs_exist_ok=True)
    return path


def restored(path, dtype, zero_bias: bool):
    """The checkpoint's weights stored again in `dtype`, its final_logits_bias zeroed when asked
    (a zero bias is not a parameter of our model: it must not be counted)."""
    tensors = load_file(path / "model.safetensors")
    if zero_bias:
        tensors["final_logits_bias"] = torch.zeros_like(tensors["final_logits_bias"])
    save_file(
        {name: tensor.to(dtype).contiguous() for name, tensor in tensors.items()},
        path / "model.safetensors",
        metadata={"format": "pt"},
    )


@pytest.mark.parametrize("dtype, zero_bias", [(torch.float32, False), (torch.bfloat16, False), (torch.float16, True)])
def test_inspect_of_a_marian_directory_matches_the_load(tmp_path, monkeypatch, dtype, zero_bias):
    path = with_tokenizer("marian", tmp_path / "model")
    restored(path, dtype, zero_bias)
    model = assert_inspect_matches_the_loaded_model(str(path), monkeypatch)
    assert model.cfg.final_logits_bias is not zero_bias


def test_inspect_of_an_mbart50_directory_matches_the_load(tmp_path, monkeypatch):
    path = with_tokenizer("mbart", tmp_path / "model")
    model = assert_inspect_matches_the_loaded_model(str(path), monkeypatch)
    assert len(model.tokenizer.language_codes()) == 52


def test_inspect_of_a_sharded_m2m100_without_tokenizer_fails_as_the_load_does(tmp_path, monkeypatch):
    """Every weight file is read (the shards of model.safetensors.index.json); a missing tokenizer
    is the same one-line error either way."""
    from nmtdecode.models import inspect
    from nmtdecode.models.checkpoint import ModelError

    build("m2m_100", tmp_path)
    with pytest.raises(ModelError) as described:
        inspect.summary(str(tmp_path))
    with pytest.raises(ModelError) as loaded:
        inspect.loaded_summary(str(tmp_path))
    assert str(described.value) == str(loaded.value)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_inspect_of_an_eole_directory_matches_the_load(tmp_path, monkeypatch, variant):
    _, path = peer_eole.build(tmp_path / "model", seed=0, **VARIANTS[variant])
    assert_inspect_matches_the_loaded_model(str(path), monkeypatch)


def _t5_directory(root, variant):
    """A T5 `variant` saved with its tokenizer files (ByT5: none; its config names ByT5Tokenizer)."""
    from tests.models.formats import t5_models
    from tests.models.formats.test_hf_spiece import MADLAD_TAGS, _t5

    if variant == "byt5":
        t5_models.build("byt5", root / "model", config={"tokenizer_class": "ByT5Tokenizer"})
        return root / "model"
    tags = MADLAD_TAGS if variant == "madlad" else ()
    saved, _, tokenizer = _t5(root, extra_ids=0 if tags else 5, user_defined=tags)
    t5_models.build(variant, root / "model", config={"vocab_size": len(tokenizer)})
    shutil.copytree(saved, root / "model", dirs_exist_ok=True)
    return root / "model"


@pytest.mark.parametrize("variant", ["t5", "t5-v1.1", "byt5", "madlad"])
def test_inspect_of_a_t5_directory_matches_the_load(tmp_path, monkeypatch, variant):
    from nmtdecode.models import inspect

    path = _t5_directory(tmp_path, variant)
    model = assert_inspect_matches_the_loaded_model(str(path), monkeypatch)
    assert model.cfg.tie_output is (variant == "t5")  # v1.0 ties its output, the others store lm_head
    text = inspect.describe(str(path))
    assert ", 4 heads of 12, ffn 48, " in text and "pre-norm (RMS), relative positions" in text


def test_inspect_of_a_pegasus_directory_matches_the_load(tmp_path, monkeypatch):
    from tests.models.formats.test_t5_cli import pegasus_directory

    model_dir, _, _ = pegasus_directory(tmp_path)
    assert_inspect_matches_the_loaded_model(str(model_dir), monkeypatch)


@pytest.mark.subprocess
def test_inspect_of_a_t5_directory_never_imports_torch(tmp_path):
    from tests.models.test_inspect import inspect_without_torch

    assert "format:        huggingface/t5" in inspect_without_torch(_t5_directory(tmp_path, "t5-v1.1"))
