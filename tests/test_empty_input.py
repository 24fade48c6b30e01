"""An empty input is done without loading the model: the output is made as for any input (through
FILE.tmp, renamed; locked meanwhile), empty, with its summary line. The models here have weights
that cannot be read, so a load would fail the run. What is not known to be empty without reading
or waiting (a pipe still open, a partial output to resume) loads the model as before."""

import os
import shutil
import subprocess
import sys

import pytest

import nmtdecode
from nmtdecode.jobs.output_file import OutputFile
from nmtdecode.jobs.reading import has_ended_empty
from nmtdecode.jobs.run import nothing_to_read
from nmtdecode.options.config import Config

from tests.helpers import DEMO


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """A model whose folder is found to be a model, and whose weights fail to load."""
    path = tmp_path_factory.mktemp("broken") / "model"
    shutil.copytree(DEMO, path)
    (path / "model.safetensors").write_bytes(b"not safetensors")
    return path


@pytest.fixture()
def empty(tmp_path):
    path = tmp_path / "empty.en"
    path.write_bytes(b"")
    return path


def files_beside(output) -> list[str]:
    return sorted(p.name for p in output.parent.iterdir() if p.name.startswith(output.name))


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_an_empty_file_is_translated_without_loading_the_model(broken, empty, tmp_path, cli, fmt):
    output = tmp_path / "out.de"
    run = cli("translate", "-m", broken, "--src", empty, "--output", output, "--format", fmt, text=True)
    assert run.returncode == 0, run.stderr
    assert output.read_bytes() == b"" and files_beside(output) == ["out.de"]  # no FILE.tmp, journal or lock left
    assert run.stderr.startswith("nmtdecode: 0 sentences, 0 target tokens") and "model loaded" not in run.stderr
    again = cli("translate", "-m", broken, "--src", empty, "--output", output, "--resume", text=True)
    assert again.returncode == 0 and "is complete" in again.stderr


def test_an_empty_input_among_others_is_done_and_the_model_loads_for_the_others(broken, empty, tmp_path, cli):
    """The model loads once, for the inputs that have lines; with every input empty it does not."""
    (tmp_path / "two.en").write_bytes(b"")
    outputs = [tmp_path / "a.de", tmp_path / "b.de"]
    run = cli("translate", "-m", broken, "--src", empty, tmp_path / "two.en", "--output", *outputs, text=True)
    assert run.returncode == 0, run.stderr
    assert [o.read_bytes() for o in outputs] == [b"", b""] and "all 2 files" in run.stderr
    (tmp_path / "one.en").write_text("good morning\n", encoding="utf-8")
    failed = cli("translate", "-m", broken, "--src", empty, tmp_path / "one.en", "--output", *outputs, text=True)
    assert failed.returncode == 1 and "cannot read weights" in failed.stderr


def test_empty_pairs_are_scored_without_loading_the_model(broken, empty, tmp_path, cli):
    output = tmp_path / "scores.txt"
    run = cli("score", "-m", broken, "--src", empty, "--tgt", empty, "--output", output, text=True)
    assert run.returncode == 0, run.stderr
    assert output.read_bytes() == b"" and run.stderr.startswith("nmtdecode: 0 pairs")


@pytest.mark.parametrize("stdin", ["/dev/null", "a closed pipe", "an empty file"])
def test_stdin_that_ended_empty_loads_no_model(broken, empty, tmp_path, stdin):
    """A real process: its standard input /dev/null, a pipe whose writer closed it without
    writing, or an empty file redirected (`< FILE`)."""
    command = [sys.executable, "-m", "nmtdecode", "translate", "-m", str(broken), "--output", str(tmp_path / "o.de")]
    if stdin == "a closed pipe":
        with subprocess.Popen(command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
            proc.stdin.close()  # long before the process asks
            stderr, returncode = proc.stderr.read(), proc.wait(timeout=120)
    else:
        with open(stdin if stdin == "/dev/null" else empty, "rb") as f:
            run = subprocess.run(command, stdin=f, capture_output=True, text=True, timeout=120)
        stderr, returncode = run.stderr, run.returncode
    assert returncode == 0, stderr
    assert (tmp_path / "o.de").read_bytes() == b"" and stderr.startswith("nmtdecode: 0 sentences")


def test_what_has_ended_empty_is_known_without_reading_or_waiting(empty, tmp_path, monkeypatch):
    (tmp_path / "line.en").write_bytes(b"x\n")
    os.mkfifo(tmp_path / "fifo")
    assert has_ended_empty(str(empty))
    assert not has_ended_empty(str(tmp_path / "line.en"))
    assert not has_ended_empty(str(tmp_path / "fifo"))  # not opened: the job reads it as it comes
    assert not has_ended_empty(str(tmp_path / "missing.en"))  # reading it is the error
    read, write = os.pipe()
    with open(read, "rb", closefd=True) as reader, open(write, "wb", closefd=True) as writer:
        monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"buffer": reader})())
        assert not has_ended_empty("-")  # open, nothing written yet
        writer.write(b"x")
        writer.flush()
        assert not has_ended_empty("-")  # a byte waits
        assert reader.read(1) == b"x"
        writer.close()
        assert has_ended_empty("-")  # closed, nothing left: ended


def test_a_partial_output_to_resume_is_not_taken_for_empty(empty, tmp_path):
    """Under --resume, FILE.tmp with its journal is continued where the job's input is read and
    checked against it (here: refused, the input is not the one it was made from): the model loads."""
    output = tmp_path / "out.de"
    for side in ("out.de.tmp", "out.de.tmp.progress"):
        (tmp_path / side).write_text("{}")
    config = Config.from_layers([{"model": DEMO, "src": str(empty), "output": str(output), "resume": True}])
    assert not nothing_to_read(config, OutputFile(str(output)))
    assert nothing_to_read(config.over({"resume": False}), OutputFile(str(output)))


def test_empty_api_calls_decode_nothing(monkeypatch):
    translator = nmtdecode.Translator.load(DEMO, device="cpu")
    calls = []
    monkeypatch.setattr(translator.engine, "decode_batch", lambda *args: calls.append(args))
    monkeypatch.setattr(translator.engine, "score_batch", lambda *args: calls.append(args))
    assert translator.translate([]) == translator.translate_batch([]) == list(translator.translate_iterable([]))
    assert translator.score([], []) == translator.score_batch([], []) == [] and calls == []
