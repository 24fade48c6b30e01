"""Reading a job's input: line endings, the BOM, a missing final newline, invalid UTF-8, lines
that never end and devices."""

import io
import os
import subprocess
import sys

import pytest

from nmtdecode.jobs import reading
from nmtdecode.jobs.reading import InputError, check_readable, read_lines
from nmtdecode.options.config import ConfigError


def test_read_lines_handles_crlf_bom_and_missing_final_newline(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"\xef\xbb\xbfhello\r\nworld\n\nlast")
    assert list(read_lines(str(path))) == ["hello", "world", "", "last"]


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nbad \xff byte\n")
    with pytest.raises(InputError, match=r"bad.txt:2: invalid UTF-8"):
        list(read_lines(str(path)))


@pytest.mark.parametrize("ending", [b"\n", b""])
def test_a_line_longer_than_the_limit_stops_the_job_naming_it(tmp_path, monkeypatch, ending):
    """A binary file (or a device) has no line breaks: the reader stops after MAX_LINE_BYTES
    instead of holding the whole of it; a line of exactly the limit is read."""
    monkeypatch.setattr(reading, "MAX_LINE_BYTES", 8)
    path = tmp_path / "in.txt"
    path.write_bytes(b"1234567\nfine\n" + b"x" * 9 + ending)
    lines = read_lines(str(path))
    assert next(lines) == "1234567" and next(lines) == "fine"
    with pytest.raises(InputError, match=r"in.txt:3: a line longer than 8 bytes \(a binary file"):
        next(lines)


def test_a_pipe_without_line_breaks_stops_at_the_limit(monkeypatch):
    monkeypatch.setattr(reading, "MAX_LINE_BYTES", 1000)
    reader, writer = os.pipe()
    os.write(writer, b"short\n" + b"\0" * 5000)  # and more could come: the pipe stays open
    with os.fdopen(reader, "rb") as stream:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(stream))
        lines = read_lines("-")
        assert next(lines) == "short"
        with pytest.raises(InputError, match="<stdin>:2: a line longer than 1,000 bytes"):
            next(lines)
    os.close(writer)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_device_that_never_ends_is_refused_as_input(device):
    with pytest.raises(ConfigError, match=f"^{device} is a device, not a file of text"):
        check_readable(device)


def test_dev_null_is_an_empty_input():
    check_readable("/dev/null")
    assert list(read_lines("/dev/null")) == []


@pytest.mark.subprocess
def test_standard_input_from_dev_zero_is_refused_before_the_model_loads(tmp_path):
    with open("/dev/zero", "rb") as zero:
        run = subprocess.run(
            [sys.executable, "-m", "nmtdecode", "translate", "--model", tmp_path / "none"],
            stdin=zero,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert run.returncode == 2
    assert run.stderr == (
        "nmtdecode: error: standard input is a device, not a file of text (/dev/zero and the like "
        "never end); give a file, a pipe or a terminal\n"
    )
