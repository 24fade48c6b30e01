"""The progress bar and the summary line: a file is counted first (total, percent, ETA), the bar
moves per batch and shows tokens/s; no bar when answering line by line; typed input is streamed."""

import json
import re

import pytest

from nmtdecode.jobs import pipeline as npipeline
from nmtdecode.jobs import progress as nprogress
from nmtdecode.jobs import reading as nio
from nmtdecode.jobs import run as nrun

from tests.helpers import REPO

LINES = [
    "the house is red .",
    "",
    "a dog and a cat sleep in the garden .",
    "good morning",
    "thank you",
    "where is the station ?",
    "water",
    "   ",
]


@pytest.mark.parametrize(
    "content, lines",
    [
        (b"", 0),
        (b"\n", 1),
        (b"a\nb", 2),
        (b"a\nb\n", 2),
        (b"\n\n\n", 3),
        (b"a\r\nb\r\n", 2),
        (b"x" * (3 << 20) + b"\ny", 2),
    ],
)
def test_count_lines_of_a_regular_file(tmp_path, content, lines):
    path = tmp_path / "in.txt"
    path.write_bytes(content)
    assert nio.count_lines(str(path)) == lines
    assert len(list(nio.read_lines(str(path)))) == lines  # what the reader will deliver


def test_count_lines_of_stdin_redirected_from_a_file_leaves_its_position(tmp_path, monkeypatch):
    """`< FILE`: the lines from stdin's position on are counted (pread), and the reader still
    gets every one of them; a pipe cannot be counted."""
    import os

    path = tmp_path / "in.txt"
    path.write_bytes(b"first\nsecond\nthird\nlast")
    with open(path, "rb") as stdin:
        stdin.readline()  # a position past the start
        monkeypatch.setattr("sys.stdin", stdin)
        assert nio.count_lines("-") == 3
        assert stdin.read() == b"second\nthird\nlast"
    read_end, write_end = os.pipe()
    with open(read_end, "rb") as stdin, open(write_end, "wb") as writer:
        writer.write(b"a\nb\n")
        writer.flush()
        monkeypatch.setattr("sys.stdin", stdin)
        assert nio.count_lines("-") is None
    monkeypatch.setattr("sys.stdin", None)  # started with stdin closed
    assert nio.count_lines("-") is None


@pytest.fixture()
def bar_updates(monkeypatch):
    """stderr a terminal; the updates of the job's progress bar, recorded."""
    monkeypatch.setattr(nprogress, "stderr_is_terminal", lambda: True)
    updates, original = [], nrun.progress_bar

    def spy(config, done, *shown):
        bar = original(config, done, *shown)
        real = bar.update
        bar.update = lambda n=1: (updates.append(n), real(n))[1]
        return bar

    monkeypatch.setattr(nrun, "progress_bar", spy)
    return updates


def test_bar_has_a_total_moves_per_batch_and_shows_tokens_per_second(model_dir, lines_file, cli, bar_updates):
    src = lines_file(LINES)
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        src,
        "--batch-size",
        "2",
        "--beam-size",
        "2",
        "--max-length",
        "8",
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert sum(bar_updates) == len(LINES) and len(bar_updates) == 4  # blank lines, then 3 batches of 2
    assert "100%" in run.stderr and f"{len(LINES)}/{len(LINES)}" in run.stderr and "tokens/s" in run.stderr


@pytest.mark.parametrize("args", [["--stream"], ["--quiet"]])
def test_no_bar_when_streaming_or_quiet(model_dir, lines_file, cli, bar_updates, args):
    run = cli("translate", "--model", model_dir, "--src", lines_file(LINES), "--max-length", "8", *args, text=True)
    assert run.returncode == 0, run.stderr
    assert "%" not in run.stderr and "lines/s" not in run.stderr and "it/s" not in run.stderr


def test_typed_input_is_answered_line_by_line_without_a_bar(model_dir, cli, bar_updates, monkeypatch):
    """Typed lines come one at a time (nothing else is waiting after each): each is its own chunk,
    decoded and answered before the next is read, with no bar to mix with the typing."""
    monkeypatch.setattr(nrun, "stdin_is_terminal", lambda: True)
    monkeypatch.setattr(nio.LineReader, "ready", lambda self: False)  # no more line has been typed yet
    sizes, original = [], npipeline.chunks
    monkeypatch.setattr(
        npipeline,
        "chunks",
        lambda items, size, more_ready=None: (sizes.append(size), original(items, size, more_ready))[1],
    )
    decoded = []
    monkeypatch.setattr(npipeline, "cut", lambda chunk, *batching: (decoded.append(len(chunk)), [chunk])[1])
    run = cli("translate", "--model", model_dir, "--max-length", "8", stdin="good morning\nwater\n", text=True)
    assert run.returncode == 0, run.stderr
    assert decoded == [1, 1] and sizes == [4 * 32] and len(run.stdout.splitlines()) == 2
    assert "%" not in run.stderr and "2 sentences," in run.stderr


def test_typed_input_gets_a_prompt_and_its_rate_leaves_out_the_waiting(model_dir, cli, monkeypatch, capsysbinary):
    """The second line arrives 0.6 s after the first (a person typing, here a pipe written late):
    the summary's time is the decoding's, the wall time holds the wait."""
    import io
    import os
    import sys
    import threading

    from nmtdecode.cli import run as cli_run

    monkeypatch.setattr(nrun, "stdin_is_terminal", lambda: True)
    read, write = os.pipe()
    os.write(write, b"good morning\n")
    late = threading.Timer(0.6, lambda: (os.write(write, b"water\n"), os.close(write)))
    with io.TextIOWrapper(os.fdopen(read, "rb"), encoding="utf-8") as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        late.start()
        code = cli_run(["translate", "--model", str(model_dir), "--max-length", "4"])
        late.join()
    err = capsysbinary.readouterr().err.decode()
    assert code == 0, err
    assert err.startswith("nmtdecode: ready: type a line to translate it (Ctrl-D ends)\n")
    seconds = float(re.search(r"target tokens? in ([\d.]+) s", err).group(1))
    wall = float(re.search(r", ([\d.]+) s in all", err).group(1))
    assert seconds < 0.5 < 0.6 <= wall


def test_summary_says_one_sentence(model_dir, cli):
    run = cli("translate", "--model", model_dir, "--max-length", "1", stdin="good morning\n", text=True)
    assert run.returncode == 0, run.stderr
    assert "nmtdecode: 1 sentence, 1 target token in" in run.stderr


def test_summary_counts_outputs_the_step_limit_cut_and_states_load_and_wall_time(cli):
    """The demo model, whose outputs end: with a step limit of 3 some are cut, counted as JSONL says."""
    src = REPO / "data" / "demo" / "sample.en"
    common = ["translate", "--model", REPO / "data" / "demo", "--src", src, "--beam-size", "2", "--max-length", "3"]
    records = cli(*common, "--format", "jsonl", "-q", text=True)
    unfinished = sum(not json.loads(line)["hypotheses"][0]["ended"] for line in records.stdout.splitlines())
    lines = len(records.stdout.splitlines())
    assert 0 < unfinished < lines
    run = cli(*common, text=True)
    assert run.returncode == 0, run.stderr
    summary = run.stderr.splitlines()[-1]
    assert f"; {unfinished} of {lines} outputs unfinished (cut by the step limit" in summary
    load, wall = map(float, re.search(r"; model loaded in ([\d.]+) s, ([\d.]+) s in all$", summary).groups())
    decoding = float(re.search(r"target tokens? in ([\d.]+) s", summary).group(1))
    assert 0 < load and load + decoding <= wall + 0.02
    assert "unfinished" not in cli(*common[:-1], "50", text=True).stderr


def test_several_files_name_each_bar_and_summary_and_end_with_a_total(model_dir, lines_file, cli, bar_updates):
    a, b = lines_file(LINES, "a.en"), lines_file(LINES[:3], "b.en")
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        a,
        b,
        "--suffix",
        "de",
        "--max-length",
        "8",
        "--batch-size",
        "2",
        text=True,
    )
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.replace("\r", "\n").splitlines() if line.startswith("nmtdecode:")]
    assert lines[0].startswith(f"nmtdecode: {a}: {len(LINES)} sentences,")
    assert lines[1].startswith(f"nmtdecode: {b}: 3 sentences,")
    tokens = [int(re.search(r"(\d+) target tokens", line).group(1)) for line in lines[:2]]
    assert lines[2].startswith(f"nmtdecode: all 2 files: {len(LINES) + 3} sentences, {sum(tokens)} target tokens")
    assert "model loaded in" in lines[2] and "model loaded" not in lines[0] + lines[1]
    assert "a.en: " in run.stderr and "b.en: " in run.stderr and " left" in run.stderr  # the bars: name, time left


def test_time_left_is_by_source_bytes_not_lines():
    from nmtdecode.jobs.summary import seconds_left

    assert seconds_left(10.0, 25, 100) == 30.0  # a quarter of the bytes took 10 s: 30 s for the rest
    assert seconds_left(10.0, 0, 100) is None and seconds_left(1.0, 5, None) is None
    assert nprogress.bytes_left("-", 0, 10) is None
