"""Beam search: per-sentence bookkeeping (`Beam`) over batched arithmetic (`BeamSearch`).

The vocabulary follows OpenNMT-py's original `Beam` (Klein et al. 2017): each
sentence keeps, for every step t and beam slot j, the token chosen
(`next_ys[t][j]`) and the slot of step t-1 it extends (`prev_ks[t][j]`);
`get_hyp` walks these backpointers to rebuild a hypothesis.

The arithmetic is batched as in fairseq / Hugging Face / CTranslate2. A step is
two parts:

1. `select_candidates`: add each row's running score to its log-probs and
   take, with one `topk`, the 2k best continuations of every sentence. This is
   the part another strategy (sampling, diverse groups) would replace.
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
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .base import NEG_INF, Hypothesis, SentenceRecords, StepOutput, to_host
from .penalties import LengthPenalty

EARLY_STOPPING = ("top", "true", "false", "never")


@dataclass
class Finished:
    score: float  # after the length penalty: the ranking key
    total: float  # sum of log-probs
    step: int  # step at which the last token was chosen
    prev: int  # slot at step-1 that it extends
    token: int  # the last token (EOS unless cut at the step limit)


class Beam:
    """Search state of one source sentence."""

    def __init__(self, size: int, max_steps: int, penalty: LengthPenalty, early_stopping: str = "false",
                 n_best: int = 1, top_at_stop_step: bool = False):
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
        self.finished: list[Finished] = []  # the best `size` finished hypotheses, best first
        self.done = False

    def is_last_step(self, step: int) -> bool:
        return step + 1 >= self.max_steps

    def advance(self, step: int, tokens: list[int], prev: list[int], scores: list[float],
                ended: list[tuple[int, int, float]], top_ended: bool = False):
        """Record step `step`: the alive slots (tokens, prev, scores), the hypotheses that
        ended at this step as (prev, token, total), and whether the top-ranked one did."""
        self.top_ended = top_ended or (self.top_ended and not self.top_at_stop_step)
        for p, token, total in ended:
            self.add_finished(step, p, token, total)
        self.extend(tokens, prev, scores)
        self.done = self.is_last_step(step) or self.cannot_improve(step, best_alive=max(scores))

    def extend(self, tokens: list[int], prev: list[int], scores: list[float]):
        self.next_ys.append(tokens)
        self.prev_ks.append(prev)
        self.scores.append(scores)

    def add_finished(self, step: int, prev: int, token: int, total: float):
        if total == NEG_INF:
            return  # unreachable continuation (masked token or empty slot)
        score = self.penalty(total, step + 1)
        # keep the pool sorted, best first; a tie goes after the earlier hypothesis
        bisect.insort_right(self.finished, Finished(score, total, step, prev, token), key=lambda f: -f.score)
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

    def get_hyp(self, step: int, slot: int) -> tuple[list[int], list[float]]:
        """Tokens of slot `slot` at step `step` back to the start, and their running totals."""
        tokens, totals = [], []
        for t in range(step, -1, -1):
            tokens.append(self.next_ys[t][slot])
            totals.append(self.scores[t][slot])
            slot = self.prev_ks[t][slot]
        return tokens[::-1], totals[::-1]

    def hypothesis(self, f: Finished, eos_id: int) -> Hypothesis:
        tokens, totals = self.get_hyp(f.step - 1, f.prev) if f.step > 0 else ([], [])
        tokens, totals = tokens + [f.token], totals + [f.total]
        token_scores = [b - a for a, b in zip([0.0] + totals[:-1], totals)]
        ended = f.token == eos_id
        return Hypothesis(tokens[:-1] if ended else tokens, f.score, f.total, token_scores, ended)

    def nbest(self, n: int, eos_id: int) -> list[Hypothesis]:
        """Always n hypotheses, best first: when fewer than n were reachable (the other
        continuations masked), impossible empty ones (score -inf) keep n entries a line."""
        found = [self.hypothesis(f, eos_id) for f in self.finished[:n]]
        return found + [Hypothesis([], NEG_INF, NEG_INF, [], False) for _ in range(n - len(found))]


@dataclass
class Candidates:
    """Continuations of each active sentence, best first; every field (n, c)."""

    scores: torch.Tensor  # total log-prob of the extended hypothesis
    tokens: torch.Tensor  # the token it adds
    prev: torch.Tensor  # the slot (row of its sentence) of this step that it extends

    def take(self, index: torch.Tensor) -> "Candidates":
        """Columns `index` (n, c') of each row."""
        return Candidates(self.scores.gather(1, index), self.tokens.gather(1, index), self.prev.gather(1, index))

    def rows(self, index: torch.Tensor) -> "Candidates":
        """Rows (sentences) `index`."""
        return Candidates(self.scores[index], self.tokens[index], self.prev[index])


class BeamSearch(SentenceRecords):
    """Beam search over a batch of sentences: one row per sentence at step 0, then k.

    Rows are sentence-major (rows i*k .. i*k+k-1 are sentence i's slots);
    `alive_scores` (rows,) holds each row's total log-prob.
    """

    def __init__(self, *, batch_size, beam_size, max_steps, start_id, eos_id, penalty, early_stopping, device,
                 n_best=1, opennmt=False):
        if early_stopping not in EARLY_STOPPING:
            raise ValueError(f"early_stopping {early_stopping!r} is not one of {list(EARLY_STOPPING)}")
        self.k = beam_size
        self.width = 1  # rows per sentence in the current step
        self.eos_id = eos_id
        self.refill = not opennmt  # an EOS candidate's slot goes to the next best one (else stays empty)
        self.beams = [Beam(beam_size, m, penalty, early_stopping, n_best, top_at_stop_step=opennmt)
                      for m in max_steps]
        self.active = list(range(batch_size))  # sentence index of each active sentence
        self.alive_scores = torch.zeros(batch_size, device=device)
        self.start_tokens = torch.full((batch_size,), start_id, dtype=torch.long, device=device)

    def advance(self, logprobs: torch.Tensor, step: int) -> StepOutput:
        """logprobs (n*width, V) of this step; consumed (turned into totals in place)."""
        return self.commit(self.select_candidates(logprobs), step)

    def select_candidates(self, logprobs: torch.Tensor) -> Candidates:
        """The 2k best continuations of every sentence over all its rows: one topk of (n, width*V)."""
        n, vocab, wanted = len(self.active), logprobs.size(1), 2 * self.k
        totals = logprobs.add_(self.alive_scores[:, None]).view(n, -1)
        scores, ids = totals.topk(min(wanted, totals.size(1)), dim=1)
        tokens, prev = ids % vocab, ids // vocab
        if scores.size(1) < wanted:  # a vocabulary smaller than 2k: pad with impossible EOS candidates
            missing = (0, wanted - scores.size(1))
            scores = F.pad(scores, missing, value=NEG_INF)
            tokens, prev = F.pad(tokens, missing, value=self.eos_id), F.pad(prev, missing, value=0)
        return Candidates(scores, tokens, prev)

    def commit(self, candidates: Candidates, step: int) -> StepOutput:
        """Keep k alive, hand finished ones to the Beams, drop sentences that are done."""
        k = self.k
        ends = candidates.tokens == self.eos_id
        if self.refill:
            # the k best candidates not ending in EOS stay alive (a stable sort keeps rank order);
            # an EOS candidate only fills a slot when fewer than k could go on, as an empty slot
            order = ends.to(torch.uint8).argsort(dim=1, stable=True)[:, :k]
        else:  # OpenNMT-py: the k best, each EOS one as an empty slot
            order = torch.arange(k, device=ends.device).expand(ends.size(0), k)
        alive = candidates.take(order)
        alive.scores.masked_fill_(alive.tokens == self.eos_id, NEG_INF)
        host = to_host(top_scores=candidates.scores[:, :k], top_tokens=candidates.tokens[:, :k],
                       top_prev=candidates.prev[:, :k], scores=alive.scores, tokens=alive.tokens, prev=alive.prev)
        for i, sentence in enumerate(self.active):
            if not self.beams[sentence].done:
                self._record(self.beams[sentence], step, {name: rows[i] for name, rows in host.items()})
        return self._next_rows(alive)

    def _record(self, beam: Beam, step: int, row: dict):
        """One sentence's share of the host copy -> its Beam."""
        last = beam.is_last_step(step)
        ended = [(p, t, s) for s, t, p in zip(row["top_scores"], row["top_tokens"], row["top_prev"])
                 if last or t == self.eos_id]
        top_ended = last or row["top_tokens"][0] == self.eos_id
        beam.advance(step, row["tokens"], row["prev"], row["scores"], ended, top_ended)

    def _next_rows(self, alive: Candidates) -> StepOutput:
        """Rows of the next step: k per sentence still searched, each continuing the row it extends."""
        n = len(self.active)
        origin = torch.arange(n, device=alive.prev.device)[:, None] * self.width + alive.prev  # (n, k)
        still = self.survivors()
        keep = None
        if len(still) < n:
            keep = torch.tensor(still, dtype=torch.long, device=origin.device)
            origin, alive = origin[keep], alive.rows(keep)
            self.active = [self.active[i] for i in still]
        self.width = self.k
        self.alive_scores = alive.scores.reshape(-1)
        return StepOutput(tokens=alive.tokens.reshape(-1), origin=origin.reshape(-1), keep=keep)
