"""`nmtdecode inspect`: takes --model like the other commands, reports the stored dtype and the
target language a model decodes into by default."""

from types import SimpleNamespace

import pytest
import torch

from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.models.inspect import default_target_language, stored_dtypes

from tests.helpers import REPO

DEMO = REPO / "data" / "demo"


def test_inspect_takes_model_option_like_the_other_commands(model_dir, cli):
    positional = cli("inspect", model_dir, text=True)
    for flag in ("--model", "-m"):
        run = cli("inspect", flag, model_dir, text=True)
        assert run.returncode == 0, run.stderr
        assert run.stdout == positional.stdout
    assert "dtype:         stored float32; loaded as float32" in positional.stdout
    assert "target language: none (not a multilingual model)" in positional.stdout


@pytest.mark.parametrize("args", [[], ["PATH", "-m", "PATH"]])
def test_inspect_needs_the_model_once(model_dir, cli, args):
    run = cli("inspect", *[model_dir if a == "PATH" else a for a in args], text=True)
    assert run.returncode == 2 and "give the model once" in run.stderr and run.stderr.count("\n") == 1


def test_inspect_reports_the_stored_dtype_of_the_demo(cli):
    run = cli("inspect", "-m", DEMO, text=True)
    assert run.returncode == 0, run.stderr
    assert "dtype:         stored float16; loaded as float32" in run.stdout


def test_stored_dtypes_of_a_pytorch_bin(tmp_path):
    torch.save({"a": torch.zeros(2, dtype=torch.bfloat16), "ids": torch.zeros(2, dtype=torch.long)},
               tmp_path / "pytorch_model.bin")
    assert stored_dtypes(str(tmp_path)) == ["bfloat16"]


def _loaded(languages, forced=None, start=None):
    tokenizer = SimpleNamespace(languages=languages, decoder_start_id=start)
    return SimpleNamespace(tokenizer=tokenizer, rules=ModelRules(forced_bos_id=forced))


@pytest.mark.parametrize("loaded, expected", [
    (_loaded({}), "none (not a multilingual model)"),
    (_loaded({"de_DE": 7, "fr_XX": 8}, forced=8), "fr_XX (forced_bos_token_id; --tgt-lang changes it)"),
    (_loaded({"de_DE": 7, "fr_XX": 8}, start=7), "de_DE (decoder_start_token_id; fixed)"),
    (_loaded({"fra": 7, "deu": 8}), "none: give --tgt-lang"),
])
def test_default_target_language(loaded, expected):
    assert default_target_language(loaded) == expected
