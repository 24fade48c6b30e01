"""Input that arrives as it comes (a pipe, a terminal, --stream): what is waiting is decoded at
once, a line is never held back for input that has not come, a full pipe is batched as a file,
and the summary's rate counts decoding, not waiting.

The readers and the chunks are checked in this process on a real pipe; one real process
checks the whole program on a pipe written slowly."""

import io
import os
import re
import select
import subprocess
import sys
import threading
import time

import pytest

from nmtdecode.engine.batching import chunks
from nmtdecode.cli import run
from nmtdecode.engine.engine import Engine
from nmtdecode.jobs.reading import ArrivingLines, LineReader

from tests.test_reliability import NORMAL, command


def test_arriving_lines_say_when_a_whole_line_is_waiting():
    read, write = os.pipe()
    lines = ArrivingLines(read)
    assert not lines.ready()  # nothing written
    os.write(write, b"one\ntw")
    assert lines.ready()
    got = iter(lines)
    assert next(got) == b"one\n" and not lines.ready()  # "tw" is not a whole line yet
    os.write(write, b"o\nthree")
    os.close(write)
    assert lines.ready() and list(got) == [b"two\n", b"three"] and lines.ready()  # the end needs no wait
    os.close(read)


def test_the_time_blocked_for_input_is_counted_as_waiting():
    read, write = os.pipe()
    lines = ArrivingLines(read)
    timer = threading.Timer(0.3, lambda: (os.write(write, b"late\n"), os.close(write)))
    timer.start()
    assert list(lines) == [b"late\n"]
    timer.join()
    assert 0.25 < lines.waited < 5
    os.close(read)


def test_a_file_is_always_ready_and_never_waits(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("a\nb\n")
    reader = LineReader(str(path))
    assert list(reader) == ["a", "b"] and reader.ready() and reader.waited == 0.0


def test_chunks_end_where_the_waiting_items_end():
    waiting = iter([True, False, True, True, True, True, True])
    assert list(chunks(range(7), 3, lambda: next(waiting))) == [[0, 1], [2, 3, 4], [5, 6]]
    assert list(chunks(range(7), 3)) == [[0, 1, 2], [3, 4, 5], [6]]


@pytest.fixture()
def pipe_stdin(monkeypatch):
    """`pipe_stdin(data)`: stdin becomes a real pipe holding `data`, its writer closed (a full pipe)."""

    opened = []

    def make(data: bytes):
        read, write = os.pipe()
        os.write(write, data)
        os.close(write)
        opened.append(io.TextIOWrapper(os.fdopen(read, "rb"), encoding="utf-8"))
        monkeypatch.setattr(sys, "stdin", opened[-1])

    yield make
    for stream in opened:
        stream.close()


@pytest.fixture()
def batches(monkeypatch):
    """The input lines (indexes) of each batch the engine decodes, in order."""
    decoded = []
    decode = Engine.decode_batch

    def recorded(self, batch, decoder):
        decoded.append(sorted(e.index for e in batch))
        return decode(self, batch, decoder)

    monkeypatch.setattr(Engine, "decode_batch", recorded)
    return decoded


@pytest.mark.parametrize("stream", [False, True])
def test_a_full_pipe_is_decoded_in_whole_sorted_batches(
    model_dir, lines_file, pipe_stdin, batches, cli, capsysbinary, stream
):
    """30 lines waiting in a pipe give the file's output, decoded in whole batches of 4 sorted by
    length: without --stream all 30 together, as a file's lines (they were once cut 4 at a time);
    with it, 16 at a time (STREAM_BATCHES = 4 batches), so that a line's answer waits for at most
    its chunk's other batches (--stream once decoded one line at a time)."""
    lines = [NORMAL[i % len(NORMAL)] for i in range(30)]
    args = ["translate", "--model", str(model_dir), "--batch-size", "4", "--max-length", "8", "-q"]
    expected = cli(*args, "--src", lines_file(lines)).stdout
    from_file = list(batches)
    batches.clear()
    pipe_stdin("".join(line + "\n" for line in lines).encode())
    capsysbinary.readouterr()
    assert run(args + (["--stream"] if stream else [])) == 0
    assert capsysbinary.readouterr().out == expected
    assert [len(batch) for batch in batches] == [4] * 7 + [2]
    if stream:
        assert all(max(b) < 16 for b in batches[:4]) and all(min(b) >= 16 for b in batches[4:])
        assert batches[:4] != [list(range(i, i + 4)) for i in range(0, 16, 4)]  # sorted, not in input order
    else:
        assert batches == from_file and any(max(b) >= 16 for b in batches[:4])


@pytest.mark.subprocess
@pytest.mark.parametrize("stream", [False, True])
def test_a_line_is_answered_before_the_next_arrives_and_waiting_is_not_decoding(model_dir, stream):
    """`(echo good morning; sleep 2; echo thank you) | nmtdecode translate`: the first answer comes
    while the second line has not been written, with or without --stream, and the summary's
    seconds leave out the two seconds of waiting."""
    proc = subprocess.Popen(
        command("translate", "--model", model_dir, "--max-length", 8, *(["--stream"] if stream else [])),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with proc:
        proc.stdin.write(b"good morning\n")
        proc.stdin.flush()
        answered = select.select([proc.stdout], [], [], 60)[0]
        first = proc.stdout.readline() if answered else b""
        time.sleep(2)
        proc.stdin.write(b"thank you\n")
        proc.stdin.close()
        rest, stderr = proc.stdout.read(), proc.stderr.read()
        proc.wait(timeout=120)
    assert answered, "the first line was not answered before the second came"
    assert proc.returncode == 0 and first.endswith(b"\n") and rest.count(b"\n") == 1
    seconds = float(re.search(rb"2 sentences, \d+ target tokens in ([0-9.]+) s", stderr).group(1))
    assert seconds < 1.5, stderr
