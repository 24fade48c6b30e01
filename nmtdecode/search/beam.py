"""Beam search: per-sentence bookkeeping (`Beam`) over batched arithmetic (`BeamSearch`).

The vocabulary follows OpenNMT-py's original `Beam` (Klein et al. 2017): each
sentence keeps, for every step t and beam slot j, the token chosen
(`next_ys[t][j]`) and the slot of step t-1 it extends (`prev_ks[t][j]`);
`get_hyp` walks these backpointers to rebuild a hypothesis.

The arithmetic is batched as in fairseq / Hugging Face / CTranslate2. A step is
two parts:

1. `select_candidates`: add each row's running score to its log-probs and
   take the 2k best continuations of every sentence (each row's own best
   first, `best_continuations`). This is the part another strategy (sampling,
   diverse groups) would replace.
2. `commit`: the k best candidates not ending in EOS stay alive; the EOS
   candidates ranked within the top k finish; one small device->host copy
   hands each sentence's rows to its `Beam`; finished sentences leave.

Why 2k candidates: a candidate that ends in EOS leaves the beam for the
`finished` pool, and its slot is refilled from the next best non-EOS
candidate, so k hypotheses stay alive. Each slot has a single EOS
continuation, hence at most k of the 2k candidates end, and at least k go on.
As in Hugging Face, only EOS candidates ranked within the top k are kept as
finished hypotheses.

Step 0 has one row per sentence (all k hypotheses would start alike), and its
2k best continuations seed the k slots; from step 1 on a sentence has k rows.

When a sentence stops. The pool keeps the `beam_size` best finished
hypotheses; `true`, `false` and `never` are the `early_stopping` modes of
Hugging Face's `GenerationConfig`, `top` is the rule of OpenNMT's `Beam`
(`eos_top`), OpenNMT-py and CTranslate2:
    top    once the top-ranked candidate of a step has ended (at this step or
           an earlier one) and the pool holds n_best hypotheses;
    true   as soon as the pool holds beam_size finished hypotheses;
    false  when the pool is full and the best alive hypothesis, scored at its
           current length, does not beat the worst finished one (a heuristic);
    never  when the pool is full and no alive hypothesis can beat the worst
           finished one at any length up to the step limit (exact).
At its step limit every top-k candidate is finished, ended by EOS or not.
CTranslate2's own rule (`--early-stopping ctranslate2`, src/decoding.cc) is
`top` without a length or coverage penalty and `true` with one (it stops
once beam_size hypotheses have ended, n_best <= beam_size): BatchDecoder
chooses between them.

Peers on `top`: CTranslate2 applies it only without length or coverage
penalty (otherwise it waits for beam_size x patience finished hypotheses)
and remembers that the top candidate ended, as here; OpenNMT-py asks that the
top candidate end at the very step it stops, which only differs for n_best > 1.

OpenNMT-py's own beam (`opennmt=True`, for its checkpoints: onmt/translate/
beam_search.py `advance`/`update_finished`) differs in two ways: the slots
of a step are its k best candidates, and one that ends in EOS stays in its
slot as an empty one for the next step (k-1 go on, not refilled from the
2k); and `top` stops only at a step whose top candidate ends.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F

from .base import (
    NEG_INF,
    Hypothesis,
    RowFacts,
    SentenceRecords,
    StepOutput,
    attached_per_slot,
    path_hypothesis,
    to_host,
)
from .penalties import LengthPenalty


@dataclass
class Finished:
    score: float  # after the length and coverage penalties: the ranking key
    total: float  # sum of log-probs
    step: int  # step at which the last token was chosen
    prev: int  # slot at step-1 that it extends
    token: int  # the last token (EOS unless cut at the step limit)
    attached: dict = field(default_factory=dict)  # what is attached to the last token (base.py:ATTACHED)


class Beam:
    """Search state of one source sentence."""

    def __init__(
        self,
        size: int,
        max_steps: int,
        penalty: LengthPenalty,
        early_stopping: str = "false",
        n_best: int = 1,
        top_at_stop_step: bool = False,
    ) -> None:
        self.size = size
        self.top_at_stop_step = top_at_stop_step  # `top` asks the top candidate of the last step to end
        self.max_steps = max_steps
        self.penalty = penalty
        self.early_stopping = early_stopping
        self.n_best = n_best
        self.top_ended = False  # the top-ranked candidate of some step has ended (rule `top`)
        self.next_ys: list[list[int]] = []  # next_ys[t][j]: token of slot j at step t
        self.prev_ks: list[list[int]] = []  # prev_ks[t][j]: slot at step t-1 that slot j extends
        self.scores: list[list[float]] = []  # scores[t][j]: total log-prob of slot j after step t
        # attached[name][t][j]: what was recorded with next_ys[t][j], when asked: "alignment" (its
        # source position), "attention" (its weights over the source)
        self.attached: dict[str, list[list]] = {}
        self.finished: list[Finished] = []  # the best `size` finished hypotheses, best first
        self.ended: list[Finished] | None = None  # every hypothesis that ended, in order, when traced (--dump-beam)
        self.done = False

    def is_last_step(self, step: int) -> bool:
        return step + 1 >= self.max_steps

    def advance(
        self,
        step: int,
        tokens: list[int],
        prev: list[int],
        scores: list[float],
        ended: list[tuple],
        top_ended: bool = False,
        attached: list[dict] | None = None,
        best: float | None = None,
    ) -> None:
        """Record step `step`: the alive slots (tokens, prev, scores, and what is attached to each
        slot's token), the hypotheses that ended at this step as (prev, token, total[, coverage
        penalty, attached, ranked]) (see `add_finished`), and whether the top-ranked one did.
        `best`: the ranked total the stop rule bounds with (default: the best alive slot's)."""
        self.top_ended = top_ended or (self.top_ended and not self.top_at_stop_step)
        for end in ended:
            self.add_finished(step, *end)
        self.extend(tokens, prev, scores, attached)
        # the bound leaves the coverage penalty out: it is >= 0, so the bound stays an upper one
        best = max(scores) if best is None else best
        self.done = self.is_last_step(step) or self.cannot_improve(step, best_alive=best)

    def extend(
        self, tokens: list[int], prev: list[int], scores: list[float], attached: list[dict] | None = None
    ) -> None:
        """attached: per slot, {name: value} (base.py:attached_per_slot), or None."""
        self.next_ys.append(tokens)
        self.prev_ks.append(prev)
        self.scores.append(scores)
        for name in attached[0] if attached else ():
            self.attached.setdefault(name, []).append([slot[name] for slot in attached])

    def add_finished(
        self,
        step: int,
        prev: int,
        token: int,
        total: float,
        coverage_penalty: float = 0.0,
        attached: dict | None = None,
        ranked: float | None = None,
    ) -> None:
        """`ranked`: the total the search ranks by, when it is not the log-prob total (diverse
        beam search adds its diversity penalties); the length penalty turns it into the score."""
        ranked = total if ranked is None else ranked
        if ranked == NEG_INF:
            return  # unreachable continuation (masked token or empty slot)
        score = self.penalty(ranked, step + 1) - coverage_penalty
        # keep the pool sorted, best first; a tie goes after the earlier hypothesis
        finished = Finished(score, total, step, prev, token, attached or {})
        if self.ended is not None:
            self.ended.append(finished)
        bisect.insort_right(self.finished, finished, key=lambda f: -f.score)
        del self.finished[self.size :]

    def cannot_improve(self, step: int, best_alive: float) -> bool:
        if self.early_stopping == "top":
            return self.top_ended and len(self.finished) >= self.n_best
        if len(self.finished) < self.size:
            return False
        if self.early_stopping == "true":
            return True
        length = step + 1  # tokens generated so far by the alive hypotheses
        if self.early_stopping == "never":
            bound = self.penalty.best_possible(best_alive, length, self.max_steps)
        else:
            bound = self.penalty(best_alive, length)
        return bound <= self.finished[-1].score

    def get_hyp(self, step: int, slot: int, attached: bool = False) -> tuple:
        """Tokens of slot `slot` at step `step` back to the start and their running totals, and
        with `attached` what was recorded with each token ({name: list}: alignment, attention)."""
        path = []  # (step, slot) of each token, last first
        for t in range(step, -1, -1):
            path.append((t, slot))
            slot = self.prev_ks[t][slot]
        path.reverse()
        tokens, totals = [self.next_ys[t][j] for t, j in path], [self.scores[t][j] for t, j in path]
        if not attached:
            return tokens, totals
        return tokens, totals, {name: [steps[t][j] for t, j in path] for name, steps in self.attached.items()}

    def hypothesis(self, f: Finished, eos_id: int) -> Hypothesis:
        """The finished hypothesis `f`; the final EOS is not one of its tokens, its log-prob is
        `eos_score` (so token_scores, alignment and attention have one entry per token)."""
        tokens: list[int] = []
        totals: list[float] = []
        along: dict[str, list] = {name: [] for name in f.attached}
        if f.step > 0:
            tokens, totals, along = self.get_hyp(f.step - 1, f.prev, attached=True)
        along = {name: along[name] + [value] for name, value in f.attached.items()}
        return path_hypothesis(tokens + [f.token], totals + [f.total], along, f.score, eos_id)


@dataclass
class Candidates:
    """Continuations of each active sentence, best first; every field (n, c)."""

    scores: torch.Tensor  # total log-prob of the extended hypothesis: what the search ranks by
    tokens: torch.Tensor  # the token it adds
    prev: torch.Tensor  # the slot (row of its sentence) of this step that it extends
    totals: torch.Tensor | None = None  # the model's log-prob total, where `scores` add more (diverse.py)

    def take(self, index: torch.Tensor) -> "Candidates":
        """Columns `index` (n, c') of each row."""
        return Candidates(*(None if t is None else t.gather(1, index) for t in self._fields()))

    def rows(self, index: torch.Tensor) -> "Candidates":
        """Rows (sentences) `index`."""
        return Candidates(*(None if t is None else t[index] for t in self._fields()))

    def _fields(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        return self.scores, self.tokens, self.prev, self.totals


def top_candidates(
    totals: torch.Tensor, wanted: int, vocab: int, eos_id: int, columns: torch.Tensor | None = None
) -> Candidates:
    """The `wanted` best of each row of totals (n, width*V), best first (top_k). A vocabulary
    smaller than that is padded with impossible EOS candidates. `columns` (n, width*V), given,
    holds the token of each column (best_continuations: each row's own best, not the vocabulary)."""
    scores, ids = top_k(totals, min(wanted, totals.size(1)))
    tokens, prev = (ids % vocab if columns is None else columns.gather(1, ids)), ids // vocab
    if scores.size(1) < wanted:
        missing = (0, wanted - scores.size(1))
        scores = F.pad(scores, missing, value=NEG_INF)
        tokens, prev = F.pad(tokens, missing, value=eos_id), F.pad(prev, missing, value=0)
    return Candidates(scores, tokens, prev)


def keep_alive(candidates: Candidates, k: int, eos_id: int, refill: bool) -> Candidates:
    """BeamSearch.keep_alive, shared with the device search (device_beam.py)."""
    ends = candidates.tokens == eos_id
    if refill:
        order = ends.to(torch.uint8).argsort(dim=1, stable=True)[:, :k]
    else:
        order = torch.arange(k, device=ends.device).expand(ends.size(0), k)
    alive = candidates.take(order)
    for values in (alive.scores, alive.totals):
        if values is not None:
            values.masked_fill_(alive.tokens == eos_id, NEG_INF)
    return alive


BLOCK = 32  # top_k's block width


def top_k(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """values.topk(k, dim=1) (values and column indices, best first) for long rows, in two small
    topks instead of one long one. Each row is cut into blocks of BLOCK columns; the k blocks
    with the largest maxima hold the row's k largest values (each block ranked above them has a
    value at least as large), so the topk of those k * BLOCK candidates is the row's. On CPU,
    ~2x faster at 160 rows of 6,000 (one beam-5 step of a batch of 32). Ties between equal
    values may come out in another order than one topk's; the values are the same."""
    n, m = values.shape
    whole = m // BLOCK * BLOCK
    if whole < 4 * k * BLOCK or values.device.type != "cpu" or values.stride(1) != 1:
        return values.topk(k, dim=1)  # short rows: one topk is as fast; a GPU's topk is one fast kernel
    blocks = values.as_strided((n, whole // BLOCK, BLOCK), (values.stride(0), BLOCK, 1))  # a view: no copy
    chosen = blocks.amax(dim=2).topk(k, dim=1).indices  # (n, k) the blocks with the k largest maxima
    candidates = blocks.gather(1, chosen[:, :, None].expand(n, k, BLOCK)).view(n, k * BLOCK)
    columns = (chosen[:, :, None] * BLOCK + torch.arange(BLOCK, device=values.device)).view(n, k * BLOCK)
    if whole < m:  # the last, partial block: always a candidate
        candidates = torch.cat([candidates, values[:, whole:]], dim=1)
        columns = torch.cat([columns, torch.arange(whole, m, device=values.device).expand(n, m - whole)], dim=1)
    best, at = candidates.topk(k, dim=1)
    return best, columns.gather(1, at)


def best_continuations(logprobs: torch.Tensor, alive_scores: torch.Tensor, n: int, k: int, eos_id: int) -> Candidates:
    """The 2k best continuations of each of n sentences over all its rows. A row's running score
    is the same for each of its tokens, so a sentence's 2k best are among its rows' own 2k best:
    those are taken first (top_k of each row), the running score added to them alone, then the
    2k best of the sentence's width x 2k. The same candidates as one topk of (n, width*V) with the
    scores added everywhere, without a pass over every row's vocabulary to add them."""
    best, tokens = top_k(logprobs, min(2 * k, logprobs.size(1)))  # (rows, 2k)
    totals = (best + alive_scores[:, None]).view(n, -1)
    return top_candidates(totals, 2 * k, best.size(1), eos_id, tokens.view(n, -1))


def extended_rows(prev: torch.Tensor, width: int) -> torch.Tensor:
    """The row each candidate extends: slots prev (n, c) of sentences of `width` rows -> rows (n, c)."""
    return torch.arange(prev.size(0), device=prev.device)[:, None] * width + prev


class BeamRows(Protocol):
    """What `next_beam_rows` reads and sets of a beam search, the host's or the device's."""

    k: int
    width: int
    alive_scores: torch.Tensor

    def leaving(self) -> torch.Tensor | None: ...


def next_beam_rows(search: BeamRows, alive: Candidates) -> tuple[StepOutput, Candidates]:
    """Rows of the next step: k per sentence that stays (`search.leaving()`), each continuing the
    row it extends; also the alive slots of the sentences kept."""
    origin = extended_rows(alive.prev, search.width)  # (n, k)
    keep = search.leaving()
    if keep is not None:
        origin, alive = origin[keep], alive.rows(keep)
    search.width = search.k
    search.alive_scores = alive.scores.reshape(-1)
    return StepOutput(tokens=alive.tokens.reshape(-1), origin=origin.reshape(-1), keep=keep), alive


class BeamSearch(SentenceRecords):
    """Beam search over a batch of sentences: one row per sentence at step 0, then k.

    Rows are sentence-major (rows i*k .. i*k+k-1 are sentence i's slots);
    `alive_scores` (rows,) holds each row's total log-prob.
    """

    kind, stop_rule = "beam", None

    def __init__(
        self,
        *,
        batch_size: int,
        beam_size: int,
        max_steps: list[int],
        start_id: int,
        eos_id: int,
        penalty: LengthPenalty,
        early_stopping: str,
        device: torch.device | str,
        n_best: int = 1,
        opennmt: bool = False,
    ) -> None:
        self.k = beam_size
        self.width = 1  # rows per sentence in the current step
        self.eos_id = eos_id
        self.refill = not opennmt  # an EOS candidate's slot goes to the next best one (else stays empty)
        self.beams = [Beam(beam_size, m, penalty, early_stopping, n_best, top_at_stop_step=opennmt) for m in max_steps]
        self.active = list(range(batch_size))  # sentence index of each active sentence
        self.alive_scores = torch.zeros(batch_size, device=device)
        self.start_tokens = torch.full((batch_size,), start_id, dtype=torch.long, device=device)

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput:
        """logprobs (n*width, V) of this step; consumed."""
        return self.commit(self.select_candidates(logprobs), step, facts)

    def select_candidates(self, logprobs: torch.Tensor) -> Candidates:
        """The 2k best continuations of every sentence over all its rows: the topk of (n, width*V)."""
        return best_continuations(logprobs, self.alive_scores, len(self.active), self.k, self.eos_id)

    def commit(self, candidates: Candidates, step: int, facts: RowFacts | None = None) -> StepOutput:
        """Keep k alive, hand finished ones to the Beams, drop sentences that are done."""
        alive = self.keep_alive(candidates)
        self.record(candidates, alive, step, facts)
        return self._next_rows(alive)

    def keep_alive(self, candidates: Candidates) -> Candidates:
        """The k best candidates not ending in EOS (a stable sort keeps rank order); an EOS
        candidate only fills a slot when fewer than k could go on, as an empty slot (-inf).
        Without `refill` (OpenNMT-py), simply the k best, each EOS one as an empty slot."""
        return keep_alive(candidates, self.k, self.eos_id, self.refill)

    def record(self, candidates: Candidates, alive: Candidates, step: int, facts: RowFacts | None = None) -> None:
        """One device->host copy; each sentence's rows to its Beam."""
        k = self.k
        top_prev = candidates.prev[:, :k]
        tensors = dict(
            top_scores=candidates.scores[:, :k],
            top_tokens=candidates.tokens[:, :k],
            top_prev=top_prev,
            scores=alive.scores,
            tokens=alive.tokens,
            prev=alive.prev,
        )
        if candidates.totals is not None:
            tensors.update(top_totals=candidates.totals[:, :k], totals=alive.totals)
        host = to_host(**tensors, **self._facts_of(facts, top_prev, alive.prev))
        for i, sentence in enumerate(self.active):
            if not self.beams[sentence].done:
                self._record(
                    self.beams[sentence], step, {name: rows[i] for name, rows in host.items()}, facts is not None
                )

    def _facts_of(self, facts: RowFacts | None, top_prev: torch.Tensor, alive_prev: torch.Tensor) -> dict:
        """For the host copy: the row facts of the top candidates (coverage penalty, attached) and
        of the alive ones (attached), read from the row each candidate extends, (n, k * width)."""
        if facts is None:
            return {}

        def of(fact: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:  # fact (rows,) or (rows, S); prev (n, c)
            return fact[extended_rows(prev, self.width)].flatten(1)

        picked = {} if facts.penalty is None else {"top_penalty": of(facts.penalty, top_prev)}
        for name, fact in facts.attached().items():
            picked["top_" + name], picked[name] = of(fact, top_prev), of(fact, alive_prev)
        return picked

    def _record(self, beam: Beam, step: int, row: dict, with_facts: bool) -> None:
        """One sentence's share of the host copy -> its Beam. Ended hypotheses go as (prev, token,
        log-prob total[, coverage penalty, attached][, ranked total]); the Beam keeps log-prob
        totals for its slots and ranks by the ranked ones (diverse.py), by default the same."""
        last = beam.is_last_step(step)
        k = len(row["top_tokens"])
        columns = [row["top_prev"], row["top_tokens"], row.get("top_totals", row["top_scores"])]
        attached = None
        if with_facts or "top_totals" in row:  # each candidate's coverage penalty and attached facts
            columns += [row.get("top_penalty", [0.0] * k), attached_per_slot(row, "top_", k) or [None] * k]
            attached = attached_per_slot(row, "", k)
        if "top_totals" in row:
            columns.append(row["top_scores"])
        ended = [end for end in zip(*columns) if last or end[1] == self.eos_id]  # (prev, token, total, ...)
        top_ended = last or row["top_tokens"][0] == self.eos_id
        beam.advance(
            step,
            row["tokens"],
            row["prev"],
            row.get("totals", row["scores"]),
            ended,
            top_ended,
            attached,
            best=self.stop_bound(row),
        )

    def stop_bound(self, row: dict) -> float:
        """The ranked total the stop rule bounds with: the best alive slot's."""
        return max(row["scores"])

    def _next_rows(self, alive: Candidates) -> StepOutput:
        """Rows of the next step: k per sentence still searched, each continuing the row it extends."""
        out, kept = next_beam_rows(self, alive)
        self.alive_totals = None if kept.totals is None else kept.totals.reshape(-1)
        return out
