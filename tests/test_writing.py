"""Writing results: in input order whatever order they come in; JSON without infinities."""

import io

from nmtdecode.batching import Result
from nmtdecode.search.base import Hypothesis
from nmtdecode.writing import ResultWriter


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
