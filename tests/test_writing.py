"""Writing results: in input order whatever order they come in; JSON without infinities."""

import io
import json

import pytest

from nmtdecode.engine.batching import Result
from nmtdecode.options.config import Config
from nmtdecode.engine.engine import Engine
from nmtdecode.jobs.run import translate_job
from nmtdecode.search.base import Hypothesis
from nmtdecode.jobs.writing import ResultWriter, breaks_lines, format_result


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
    line = format_result(Result(0, [Hypothesis([], float("-inf"), float("-inf"), [], False)], [""]), "jsonl")
    assert json.loads(line)["hypotheses"][0]["score"] is None


GENERATED = "Zeile eins\nZeile zwei\r\nZeile drei\rEnde"  # what a byte-level BPE model can generate


@pytest.mark.parametrize("fmt", ["text", "nbest", "nbest-marian"])
def test_line_formats_write_each_line_break_as_a_space(fmt):
    result = Result(0, [Hypothesis([5], -1.0, -1.0), Hypothesis([6], -2.0, -2.0)], [GENERATED, "zwei\nmal"])
    written = format_result(result, fmt)
    assert written.count("\n") == (1 if fmt == "text" else 2) and "\r" not in written
    assert "Zeile eins Zeile zwei Zeile drei Ende" in written
    assert breaks_lines(result, fmt) and not breaks_lines(Result(0, result.hypotheses, ["a", "b"]), fmt)


def test_jsonl_keeps_line_breaks_escaped():
    result = Result(0, [Hypothesis([5], -1.0, -1.0)], [GENERATED])
    written = format_result(result, "jsonl")
    assert written.count("\n") == 1 and json.loads(written)["hypotheses"][0]["text"] == GENERATED
    assert not breaks_lines(result, "jsonl")


@pytest.mark.parametrize("fmt", ["text", "nbest", "jsonl"])
def test_a_model_that_generates_line_breaks_still_gives_one_line_per_input(fmt, model_dir, tmp_path, capsys):
    """The whole job: every decoded text holds line breaks; the output has one line per input
    line (n-best: per hypothesis), and the job warns once and counts them in its summary."""
    src = tmp_path / "in.txt"
    src.write_text("a b\n\nthe cat\nx\n", encoding="utf-8")
    engine = Engine.load(Config.from_values({"model": str(model_dir)}))
    engine.loaded.tokenizer.decode = lambda ids: GENERATED
    out = tmp_path / "out.txt"
    translate_job(
        Config.from_values(
            {
                "model": str(model_dir),
                "src": str(src),
                "output": str(out),
                "format": fmt,
                "n_best": 1 if fmt == "text" else 2,
                "beam_size": 2,
                "max_length": 5,
            }
        ),
        engine,
    )
    lines = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == (8 if fmt == "nbest" else 4)  # the empty input line has its n-best too
    err = capsys.readouterr().err
    if fmt == "jsonl":
        assert "line breaks" not in err
    else:
        assert err.count("the model generated line breaks") == 1
        assert "4 outputs with line breaks written as spaces" in err
