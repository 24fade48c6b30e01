"""`nmtdecode inspect`: takes --model like the other commands, reports the stored dtype and the
target language a model decodes into by default."""

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from nmtdecode.models import inspect
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.models.inspect import default_target_language, stored_dtypes
from nmtdecode.models.stored import floats

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
    torch.save(
        {"a": torch.zeros(2, dtype=torch.bfloat16), "ids": torch.zeros(2, dtype=torch.long)},
        tmp_path / "pytorch_model.bin",
    )
    assert stored_dtypes(str(tmp_path)) == ["bfloat16"]


def _loaded(languages, forced=None, start=None):
    tokenizer = SimpleNamespace(languages=languages, decoder_start_id=start)
    return SimpleNamespace(tokenizer=tokenizer, rules=ModelRules(forced_bos_id=forced))


@pytest.mark.parametrize(
    "loaded, expected",
    [
        (_loaded({}), "none (not a multilingual model)"),
        (_loaded({"de_DE": 7, "fr_XX": 8}, forced=8), "fr_XX (forced_bos_token_id; --tgt-lang changes it)"),
        (_loaded({"de_DE": 7, "fr_XX": 8}, start=7), "de_DE (decoder_start_token_id; fixed)"),
        (_loaded({"fra": 7, "deu": 8}), "none: give --tgt-lang"),
    ],
)
def test_default_target_language(loaded, expected):
    assert default_target_language(loaded) == expected


def assert_inspect_matches_the_loaded_model(path: str, monkeypatch) -> inspect.Summary:
    """inspect read the model without loading it, and says what the loaded model says: every field
    of its configuration, rules, decoding defaults, languages, the parameters of the built model
    (tied ones once) and their dtype; its text the same, line for line."""
    loaded = inspect.loaded_summary(path)
    with monkeypatch.context() as patch:
        patch.setattr(inspect, "loaded_summary", lambda path: pytest.fail("inspect loaded the model"))
        described = inspect.summary(path)
        text = inspect.describe(path)
    assert described.cfg == loaded.cfg
    assert (described.format, described.rules, described.defaults) == (loaded.format, loaded.rules, loaded.defaults)
    assert (described.parameters, described.loaded_dtypes) == (loaded.parameters, loaded.loaded_dtypes)
    assert described.tokenizer.language_codes() == loaded.tokenizer.language_codes()
    monkeypatch.setattr(inspect, "summary", inspect.loaded_summary)
    assert text == inspect.describe(path)
    return described


@pytest.mark.parametrize("which", ["demo", "test model"])
def test_inspect_of_a_native_model_matches_the_load(model_dir, monkeypatch, which):
    assert_inspect_matches_the_loaded_model(str(DEMO) if which == "demo" else model_dir, monkeypatch)


def inspect_without_torch(path) -> str:
    """`nmtdecode inspect PATH` in a fresh interpreter, which checks that nothing on the way (the
    package, the CLI, the format, the tokenizer) imported torch: what it printed."""
    script = (
        "import sys\nfrom nmtdecode import cli\n"
        "cli.exit_now = sys.exit  # main ends the process at once: here it raises, so the check runs\n"
        "try:\n    cli.main(['inspect', sys.argv[1]])\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\nprint('checked')\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert run.stdout.endswith("checked\n")
    return run.stdout


@pytest.mark.subprocess
def test_inspect_of_the_demo_never_imports_torch():
    assert "format:        native" in inspect_without_torch(DEMO)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_a_stored_tensors_numbers_are_read_without_torch(dtype):
    tensor = torch.tensor([0.0, -0.0, 1.5, -2.25, 3e-3, 65504.0, float("inf")], dtype=dtype)
    raw = bytes(tensor.view(torch.uint8).tolist())
    name = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}[dtype]
    assert floats(raw, name, "t") == tensor.tolist()
