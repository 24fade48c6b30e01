"""Config validation and merging; reading, batching and ordered writing."""

import io

import pytest

from nmtdecode.batching import Example, Result, cut
from nmtdecode.config import Config, ConfigError
from nmtdecode.reading import InputError, read_lines
from nmtdecode.search.base import Hypothesis
from nmtdecode.writing import ResultWriter


def test_yaml_booleans_and_numbers_are_coerced():
    config = Config.from_values({"early_stopping": True, "alpha": 1, "beam_size": 3})
    assert config.decoding.early_stopping == "true"
    assert config.decoding.alpha == 1.0 and isinstance(config.decoding.alpha, float)


@pytest.mark.parametrize("values, message", [
    ({"min_length": 11, "max_length": 10}, "min_length: 11 is greater than max_length"),
    ({"batch_type": "words"}, "batch_type: 'words' is not one of sents, tokens"),
    ({"device": "tpu"}, "device: 'tpu' is not one of"),
    ({"alpha": "high"}, "alpha: expected float"),
    ({"beam_size": True}, "beam_size: expected int"),
])
def test_invalid_values_name_the_key(values, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        Config.from_values(values)


def test_model_defaults_fill_only_what_the_user_left_unset():
    config = Config.from_values({"beam_size": 2})
    merged = config.with_model_defaults({"beam_size": 6, "max_length": 40, "early_stopping": True})
    assert merged.decoding.beam_size == 2  # the user's value wins
    assert merged.decoding.max_length == 40
    assert merged.decoding.early_stopping == "true"


def test_read_lines_handles_crlf_bom_and_missing_final_newline(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"\xef\xbb\xbfhello\r\nworld\n\nlast")
    assert list(read_lines(str(path))) == ["hello", "world", "", "last"]


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nbad \xff byte\n")
    with pytest.raises(InputError, match=r"bad.txt:2: invalid UTF-8"):
        list(read_lines(str(path)))


def examples(lengths):
    return [Example(i, "x", None if n == 0 else [7] * n) for i, n in enumerate(lengths)]


def test_batches_are_sorted_longest_first_and_cover_every_line():
    got = list(cut(examples([3, 0, 9, 1, 5, 5, 0, 2]), batch_size=3, batch_type="sents"))
    assert sorted(e.index for b in got for e in b) == list(range(8))
    decoded = [b for b in got if b[0].ids is not None]
    assert [[len(e.ids) for e in b] for b in decoded] == [[9, 5, 5], [3, 2, 1]]
    assert [e.index for e in decoded[0]] == [2, 4, 5]  # equal lengths keep input order


def test_token_batches_count_padding():
    got = list(cut(examples([10, 4, 4, 4, 4, 3]), batch_size=12, batch_type="tokens"))
    # 10 alone (a second row would make 2 x 10); then 3 rows x 4 = 12; then 4 and 3 (2 x 4 = 8)
    assert [[len(e.ids) for e in b] for b in got] == [[10], [4, 4, 4], [4, 3]]


def test_ordered_writer_emits_in_input_order():
    out = io.StringIO()
    writer = ResultWriter(out, "text")
    for index in (2, 0, 3, 1):
        writer.put(Result(index, [Hypothesis([], 0.0, 0.0)], [f"line {index}"]))
        if index == 0:
            assert out.getvalue() == "line 0\n"  # 0 is written at once, 2 waits for 1
    writer.close()
    assert out.getvalue() == "line 0\nline 1\nline 2\nline 3\n"


def test_jsonl_writes_null_for_infinite_scores():
    import json

    from nmtdecode.writing import format_result

    line = format_result(Result(0, [Hypothesis([], float("-inf"), float("-inf"), [], False)], [""]), "jsonl")
    assert json.loads(line)["hypotheses"][0]["score"] is None


@pytest.mark.parametrize("text, message", [
    ("beam_size: 4\nalpha: 1\nbeam_size: 5\n", "job.yaml:3: 'beam_size' is given twice"),
    ("beam-size: 4\nbeam_size: 5\n", "'beam_size' is given twice (spelt with - and with _)"),
    ("jobs:\n  - {src: a, output: b, n_best: 1, n-best: 2}\n", "item 1: 'n_best' is given twice"),
])
def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path, cli, text, message):
    """As on the command line, a repeated option is an error, not the last one winning."""
    path = tmp_path / "job.yaml"
    path.write_text(text)
    run = cli("translate", "-c", path, text=True)
    assert run.returncode == 2 and message in run.stderr and run.stderr.count("\n") == 1
