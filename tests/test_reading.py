"""Reading a job's input: line endings, the BOM, a missing final newline, invalid UTF-8."""

import pytest

from nmtdecode.jobs.reading import InputError, read_lines


def test_read_lines_handles_crlf_bom_and_missing_final_newline(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"\xef\xbb\xbfhello\r\nworld\n\nlast")
    assert list(read_lines(str(path))) == ["hello", "world", "", "last"]


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nbad \xff byte\n")
    with pytest.raises(InputError, match=r"bad.txt:2: invalid UTF-8"):
        list(read_lines(str(path)))
