"""--dump-beam: each input line's search as one JSON object, for `nmtdecode show` (show.py).

OpenNMT-py 0.x wrote its `-dump_beam` file from each sentence's `Beam` (translate/Translator.py
`translate_batch`, its `beam_accum`: `predicted_ids`, `beam_parent_ids` and `scores`, one list
per step and one value per beam slot), for OpenNMT's VisTools. The same three lists are what
our `Beam` keeps (search/beam.py), so they are written as they are, with what a reader needs
to draw the search without the model:

    index            the input line (0-based); the file has one object per input line, in order
    source           the line; source_pieces: its tokens as the model saw them (EOS included)
    search           beam, greedy, sampling or diverse; beam_size (slots per beam), groups, n_best
    stop_rule        the beam's early_stopping rule (greedy and sampling: "eos", the first EOS)
    length_penalty   {name, alpha, offset}: score = total / penalty(length + offset)
    max_steps        the sentence's step limit
    eos_id           the end token; pieces: {id: piece} for every target id below
    beams            one per group (one unless diverse), each:
        predicted_ids[t][j]    token of slot j at step t
        beam_parent_ids[t][j]  the slot of step t-1 it extends (0 at step 0: one start row)
        scores[t][j]           its total log-prob (null: an empty slot)
        alignments[t][j]       its source position (when --alignment)
        finished               every hypothesis that ended, in the order it did: step, parent
                               (the slot of step-1 it extends), token, score (ranking), log_prob,
                               ended (false: cut at the step limit)
    nbest            the hypotheses written, best first: beam and finished (which record above;
                     null for an impossible filler), tokens, text, score, log_prob, ended, and
                     attention (rows: target tokens, columns: source pieces) and alignment when
                     --attention / --alignment asked for them

A finished hypothesis' tokens are its parent's path (walk beam_parent_ids back from
(step-1, parent)) plus its own token; `show` draws that path for each n-best entry.

A line with nothing to decode (empty) has search "none", no beams, and its n-best.
Nothing is recorded unless the option is given: the searches keep every ended hypothesis
(Beam.ended) only then; the other lists are what they keep anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from .batching import finite_or_null

if TYPE_CHECKING:
    from ..models.checkpoint import Tokenizer
    from .batching import Example, Result
    from .decoding import BatchDecoder
    from ..search.base import Hypothesis, SentenceRecords
    from ..search.beam import Beam


def _scores(steps: list[list[float]]) -> list[list[float | None]]:
    return [[finite_or_null(x) for x in step] for step in steps]


def target_pieces(tokenizer: Tokenizer, ids: Iterable[int]) -> dict[str, str]:
    """{id: piece} of target ids, as the tokenizer names them (`<id>` for one it does not know)."""
    return {str(i): tokenizer.target_piece(i) or f"<{i}>" for i in sorted(set(ids))}


def source_pieces(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    return [tokenizer.source_piece(i) or f"<{i}>" for i in ids]


def beam_record(beam: Beam, eos_id: int) -> dict:
    """One Beam's lists, as OpenNMT-py named them, and every hypothesis that ended."""
    record = {"predicted_ids": beam.next_ys, "beam_parent_ids": beam.prev_ks, "scores": _scores(beam.scores)}
    if "alignment" in beam.attached:
        record["alignments"] = beam.attached["alignment"]
    record["finished"] = [
        {
            "step": f.step,
            "parent": f.prev,
            "token": f.token,
            "score": finite_or_null(f.score),
            "log_prob": finite_or_null(f.total),
            "ended": f.token == eos_id,
        }
        for f in beam.ended or []
    ]
    return record


def nbest_entry(hyp: Hypothesis, text: str, where: tuple[int, int] | None) -> dict:
    entry: dict[str, Any] = {
        "beam": None if where is None else where[0],
        "finished": None if where is None else where[1],
        "tokens": hyp.tokens,
        "text": text,
        "score": finite_or_null(hyp.score),
        "log_prob": finite_or_null(hyp.total),
        "ended": hyp.ended,
    }
    if hyp.attention is not None:
        entry["attention"] = hyp.attention
    if hyp.alignment is not None:
        entry["alignment"] = hyp.alignment
    return entry


def sentence_record(
    example: Example,
    result: Result,
    search: SentenceRecords,
    sentence: int,
    decoder: BatchDecoder,
    tokenizer: Tokenizer,
) -> dict:
    """The dump of one decoded line: `sentence` is its position in the batch `search` searched,
    `result` its Result (n-best hypotheses and their texts)."""
    cfg = decoder.cfg
    beams = search.beams_of(sentence)
    ended_at = [{id(f): j for j, f in enumerate(beam.ended or [])} for beam in beams]
    chosen: list[tuple[int, int] | None] = [(g, ended_at[g][id(f)]) for g, f in search.chosen(sentence, cfg.n_best)]
    chosen += [None] * (len(result.hypotheses) - len(chosen))  # impossible fillers
    records = [beam_record(beam, decoder.eos_id) for beam in beams]
    ids = {decoder.eos_id}
    for record in records:
        ids.update(i for step in record["predicted_ids"] for i in step)
        ids.update(f["token"] for f in record["finished"])
    for hyp in result.hypotheses:
        ids.update(hyp.tokens)
    penalty = decoder.penalty
    return {
        "index": example.index,
        "source": example.text,
        "source_pieces": source_pieces(tokenizer, example.ids_to_decode()),
        "search": search.kind,
        "beam_size": beams[0].size,
        "groups": len(beams),
        "n_best": cfg.n_best,
        "stop_rule": search.stop_rule or cfg.early_stopping,
        "length_penalty": {"name": penalty.name, "alpha": penalty.alpha, "offset": penalty.offset},
        "max_steps": beams[0].max_steps,
        "eos_id": decoder.eos_id,
        "pieces": target_pieces(tokenizer, ids),
        "beams": records,
        "nbest": [nbest_entry(h, t, w) for h, t, w in zip(result.hypotheses, result.texts, chosen)],
    }


def empty_record(example: Example, result: Result, decoder: BatchDecoder, tokenizer: Tokenizer) -> dict:
    """The dump of a line with nothing to decode: its n-best (empty, or its prefix) only."""
    ids = {decoder.eos_id} | {i for hyp in result.hypotheses for i in hyp.tokens}
    return {
        "index": example.index,
        "source": example.text,
        "source_pieces": [],
        "search": "none",
        "n_best": decoder.cfg.n_best,
        "eos_id": decoder.eos_id,
        "pieces": target_pieces(tokenizer, ids),
        "beams": [],
        "nbest": [nbest_entry(h, t, None) for h, t in zip(result.hypotheses, result.texts)],
    }
