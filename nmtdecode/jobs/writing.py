"""Writing results as text: the output formats, and in input order whatever order they come in.

Formats: `text` (the best hypothesis), `nbest` (`INDEX ||| TEXT ||| SCORE`, Moses'),
`nbest-marian` (Marian's, with the total log-prob as feature F0 and, with --token-scores, its
WordScores field) and `jsonl` (every hypothesis with its scores, optional tokens, per-token
scores and alignment). The
file they go to (temporary file, journal, lock, resume) is output_file.py's.

One output line per input line (one per hypothesis in the n-best formats), always: a
model that generates line breaks (a byte-level BPE vocabulary has the newline) gets
each written as a space in those formats (`one_line`), and the job warns; JSONL keeps
the text as it is, escaped.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..engine.batching import Result, finite_or_null

if TYPE_CHECKING:
    from ..search.base import Hypothesis


class TextStream(Protocol):
    """Where text goes: an OutputFile's stream (output_file.py), or sys.stdout."""

    def write(self, text: str) -> object: ...

    def flush(self) -> object: ...


LINE_BREAK = re.compile(r"\r\n|\r|\n")  # what ends a line for `wc -l` and Python's universal newlines


def one_line(text: str) -> str:
    return LINE_BREAK.sub(" ", text)


def breaks_lines(result: Result, fmt: str) -> bool:
    """Whether a text `format_result` writes for this result held a line break (now a space)."""
    texts = result.texts[:1] if fmt == "text" else result.texts
    return fmt != "jsonl" and any(LINE_BREAK.search(text) for text in texts)


def format_result(result: Result, fmt: str, token_scores: bool = False) -> str:
    """The output text of one input line, with its trailing newline(s)."""
    # --report-align: Pharaoh pairs after the text (OpenNMT-py's -report_align, Marian's --alignment),
    # last in Moses' n-best (its alignment field), after the text in Marian's
    pairs = [f" ||| {p}" for p in result.pharaoh] if result.pharaoh is not None else [""] * len(result.texts)
    if fmt == "text":
        return one_line(result.texts[0] if result.texts else "") + (pairs[0] if result.texts else "") + "\n"
    if fmt == "nbest":
        return "".join(
            f"{result.index} ||| {one_line(text)} ||| {hyp.score:.6f}{align}\n"
            for hyp, text, align in zip(result.hypotheses, result.texts, pairs)
        )
    if fmt == "nbest-marian":  # Marian's: the model's total log-prob as feature F0, then the ranking score
        words = [word_scores(hyp) if token_scores else "" for hyp in result.hypotheses]
        return "".join(
            f"{result.index} ||| {one_line(text)}{align}{scores} ||| F0= {hyp.total:.6f} ||| {hyp.score:.6f}\n"
            for hyp, text, align, scores in zip(result.hypotheses, result.texts, pairs, words)
        )
    hyps: list[dict[str, Any]] = []
    for hyp, text in zip(result.hypotheses, result.texts):
        entry: dict[str, Any] = {
            "text": text,
            "score": finite_or_null(hyp.score),
            "log_prob": finite_or_null(hyp.total),
            "ended": hyp.ended,
        }
        if token_scores or hyp.alignment is not None or hyp.attention is not None:
            entry["tokens"] = hyp.tokens
        if token_scores:  # one per token; EOS's apart (null when the step limit cut the hypothesis)
            entry["token_scores"] = hyp.token_scores
            entry["eos_score"] = hyp.eos_score
        if hyp.alignment is not None:
            entry["alignment"] = hyp.alignment
        if hyp.attention is not None:
            entry["attention"] = hyp.attention
        if result.pharaoh is not None:  # --report-align: the pieces the indexes count, and the pairs
            entry["pieces"], entry["pharaoh"] = result.pieces[len(hyps)], result.pharaoh[len(hyps)]
        hyps.append(entry)
    record = {"index": result.index, "hypotheses": hyps}
    if result.source_pieces is not None:
        record["source_pieces"] = result.source_pieces
    return json.dumps(record, ensure_ascii=False) + "\n"


def word_scores(hyp: Hypothesis) -> str:
    """Marian's --word-scores field of an n-best entry: each target token's log-probability, the
    final EOS's last when the hypothesis ended (Marian's words are the vocabulary's pieces)."""
    scores = hyp.token_scores + ([] if hyp.eos_score is None else [hyp.eos_score])
    return " ||| WordScores=" + "".join(f" {score:.5f}" for score in scores)


class OrderedWriter:
    """Writes the text of input lines in input order, whatever order it comes in.

    `stream` is a text stream; `first_index` is the input line the output starts at
    (not 0 when a job resumes).
    """

    def __init__(self, stream: TextStream, first_index: int = 0) -> None:
        self.stream = stream
        self.pending: dict[int, str] = {}
        self.next_index = first_index

    def put(self, index: int, text: str) -> None:
        self.pending[index] = text
        while self.next_index in self.pending:
            self.stream.write(self.pending.pop(self.next_index))
            self.next_index += 1

    def close(self) -> None:
        if self.pending:
            raise RuntimeError(f"results for lines {sorted(self.pending)[:5]}... could not be written in order")
        self.stream.flush()


class ResultWriter:
    """A translate job's sink in one process: each result formatted and written in input order,
    and with `dump` its search too, into the --dump-beam file (beam_dump.py), one JSON object a
    line. `checkpoint`: the output file's own, given to the pipeline after each chunk (the
    chunk's lines are all written then, in order; ranks.PartWriter is a torchrun rank's sink)."""

    def __init__(
        self,
        stream: TextStream,
        fmt: str,
        token_scores: bool = False,
        first_index: int = 0,
        dump: TextStream | None = None,
        checkpoint: Callable[[int, tuple[int, str]], None] | None = None,
    ) -> None:
        self.lines, self.fmt, self.token_scores = OrderedWriter(stream, first_index), fmt, token_scores
        self.searches = None if dump is None else OrderedWriter(dump)
        self.checkpoint = checkpoint

    def put(self, result: Result) -> None:
        self.lines.put(result.index, format_result(result, self.fmt, self.token_scores))
        if self.searches is not None:
            self.searches.put(result.index, json.dumps(result.search, ensure_ascii=False) + "\n")

    def close(self) -> None:
        self.lines.close()
        if self.searches is not None:
            self.searches.close()
