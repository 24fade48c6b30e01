"""The Python API (`nmtdecode.Translator`, issue 21): the same results as the command line."""

import json
import subprocess
import sys

import pytest

import nmtdecode
from nmtdecode.config import ConfigError

from tests.test_cli import LINES

OPTIONS = {"max_length": 8, "batch_size": 3, "device": "cpu"}


@pytest.fixture(scope="module")
def translator(model_dir):
    return nmtdecode.Translator.load(str(model_dir), **OPTIONS)


@pytest.fixture()
def src_file(lines_file):
    return lines_file(LINES, "input.txt")


def cli_output(cli, model_dir, src_file, *more):
    run = cli("translate", "--model", model_dir, "--src", src_file, "--max-length", 8, "--batch-size", 3,
              "--quiet", *more, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("beam", [1, 4])
def test_translate_returns_the_command_lines_lines(translator, cli, model_dir, src_file, beam):
    expected = cli_output(cli, model_dir, src_file, "--beam-size", beam).split("\n")[:-1]
    assert translator.translate(LINES, beam_size=beam) == expected
    assert expected[1] == expected[3] == ""  # empty and blank sources give empty outputs


def test_nbest_translations_carry_the_command_lines_scores(translator, cli, model_dir, src_file):
    lines = cli_output(cli, model_dir, src_file, "--beam-size", 4, "--n-best", 3, "--format", "jsonl",
                       "--token-scores").splitlines()
    results = translator.translate(LINES, beam_size=4, n_best=3)
    assert len(results) == len(lines)
    for result, line in zip(results, lines):
        expected = json.loads(line)["hypotheses"]
        assert [(t.text, t.score, t.log_prob, t.tokens, t.token_scores, t.eos_score) for t in result] == [
            (h["text"], h["score"], h["log_prob"], h["tokens"], h["token_scores"], h["eos_score"]) for h in expected]
    assert isinstance(translator.translate(["water"], scores=True)[0][0], nmtdecode.Translation)


def test_results_do_not_depend_on_batching(translator):
    assert translator.translate(LINES, batch_size=1) == translator.translate(LINES, batch_size=64)


def test_translate_file_is_the_command_lines_job(translator, cli, model_dir, src_file, tmp_path):
    expected = cli_output(cli, model_dir, src_file, "--format", "nbest", "--n-best", 2)
    summary = translator.translate_file(str(src_file), str(tmp_path / "out.txt"), format="nbest", n_best=2)
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == expected and summary.sentences == len(LINES)
    again = translator.translate_file(str(src_file), str(tmp_path / "out.txt"), resume=True)
    assert again.sentences == 0  # complete: skipped


def test_score_is_the_command_lines_score(translator, cli, model_dir, src_file, lines_file):
    targets = [line[::-1] for line in LINES]
    run = cli("score", "--model", model_dir, "--src", src_file, "--tgt", lines_file(targets, "tgt.txt"), text=True)
    assert run.returncode == 0, run.stderr
    expected = [float(x) for x in run.stdout.split()]  # the CLI scores 32 pairs a batch, this 3: rounding
    assert translator.score(LINES, targets) == pytest.approx(expected, abs=1e-4)


def test_options_fixed_at_load_are_refused_per_call(translator, model_dir):
    with pytest.raises(ConfigError, match="device: is fixed when the model loads"):
        translator.translate(["water"], device="cpu")
    with pytest.raises(ConfigError, match="beam_size"):
        translator.translate(["water"], beam_size=0)
    with pytest.raises(ConfigError, match="src"):
        nmtdecode.Translator.load(str(model_dir), src="in.txt")
    with pytest.raises(TypeError, match="list of strings"):
        translator.translate("water")
    with pytest.raises(TypeError, match="source 1 is NoneType, not a string"):
        translator.translate(["a", None])
    with pytest.raises(TypeError, match="prefix 0 is int, not a string"):
        translator.translate(["a"], prefixes=[3])


@pytest.mark.subprocess
def test_import_stays_cheap():
    code = "import sys, nmtdecode; nmtdecode.Translator; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
