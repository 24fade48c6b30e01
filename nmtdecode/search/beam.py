"""Beam search: per-sentence bookkeeping (`Beam`) over batched arithmetic (`BeamSearch`).

The vocabulary follows OpenNMT-py's original `Beam` (Klein et al. 2017): each
sentence keeps, for every step t and beam slot j, the token chosen
(`next_ys[t][j]`) and the slot of step t-1 it extends (`prev_ks[t][j]`);
`get_hyp` walks these backpointers to rebuild a hypothesis.

The arithmetic is batched as in fairseq / Hugging Face / CTranslate2: per step
one add of the running scores, one `topk` of 2k candidates over the k*V
continuations of every active sentence, and one small device->host copy that
the `Beam` objects read their rows from.

Why 2k candidates: a candidate that ends in EOS leaves the beam for the
`finished` pool, and its slot is refilled from the next best non-EOS
candidate, so k hypotheses stay alive. Each slot has a single EOS
continuation, hence at most k of the 2k candidates end, and at least k go on.
As in Hugging Face, only EOS candidates ranked within the top k are kept as
finished hypotheses.

Which slot a continuing hypothesis occupies does not matter to the search,
so it stays in the slot it extends where it can (`stable_slots`): then the
decoder cache only has to move the rows of hypotheses that forked.

When a sentence stops (the `early_stopping` modes of Hugging Face's
`GenerationConfig`, with a pool of `beam_size` finished hypotheses):
    true   as soon as the pool holds beam_size finished hypotheses;
    false  when the pool is full and the best alive hypothesis, scored at its
           current length, does not beat the worst finished one (a heuristic);
    never  when the pool is full and no alive hypothesis can beat the worst
           finished one at any length up to the step limit (exact).
At its step limit every top-k candidate is finished, ended by EOS or not.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch

from .base import Hypothesis, Search, StepOutput
from .penalties import LengthPenalty

NEG_INF = float("-inf")
EARLY_STOPPING = ("true", "false", "never")


@dataclass
class Finished:
    score: float  # after the length penalty: the ranking key
    total: float  # sum of log-probs
    step: int  # step at which the last token was chosen
    prev: int  # slot at step-1 that it extends
    token: int  # the last token (EOS unless cut at the step limit)


class Beam:
    """Search state of one source sentence."""

    def __init__(self, size: int, max_steps: int, penalty: LengthPenalty, early_stopping: str = "false"):
        self.size = size
        self.max_steps = max_steps
        self.penalty = penalty
        self.early_stopping = early_stopping
        self.next_ys: list[list[int]] = []  # next_ys[t][j]: token of slot j at step t
        self.prev_ks: list[list[int]] = []  # prev_ks[t][j]: slot at step t-1 that slot j extends
        self.scores: list[list[float]] = []  # scores[t][j]: total log-prob of slot j after step t
        self.finished: list[Finished] = []  # the best `size` finished hypotheses, best first
        self.done = False

    def is_last_step(self, step: int) -> bool:
        return step + 1 >= self.max_steps

    def advance(self, step, tokens, prev, scores, ended):
        """Record step `step`: the alive slots (tokens, prev, scores) and the hypotheses
        that ended at this step as (prev, token, total)."""
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
        if not self.finished:  # every continuation was masked: an empty output keeps the line
            return [Hypothesis([], NEG_INF, NEG_INF, [], False)]
        return [self.hypothesis(f, eos_id) for f in self.finished[:n]]


def stable_slots(prev: torch.Tensor) -> torch.Tensor:
    """Slot assignment for the k continuing candidates of each sentence, given in rank order
    with the slot each extends, prev (n, k). Returns perm (n, k): slot j gets candidate perm[j].

    The best candidate extending slot p keeps slot p; the others (second children of a
    slot) fill the slots whose hypothesis had no child, in order. E.g. prev [2, 2, 0, 3]:
    slots 2, 0, 3 keep their candidates 0, 2, 3 and candidate 1 moves into free slot 1,
    so perm = [2, 1, 0, 3].
    """
    n, k = prev.shape
    rank = torch.arange(k, device=prev.device)
    same_slot = prev[:, :, None] == prev[:, None, :]  # (n, k, k)
    better = rank[None, :] < rank[:, None]  # [c, d]: d ranks before c
    first = ~(same_slot & better).any(dim=2)  # (n, k): the best child of its slot
    taken = torch.zeros_like(prev).scatter_reduce_(1, prev, first.long(), reduce="amax")
    free = torch.argsort(taken, dim=1, stable=True)  # free slots first, in order
    turn = (torch.cumsum(~first, dim=1) - 1).clamp(min=0)  # i-th candidate without a slot
    target = torch.where(first, prev, free.gather(1, turn))  # slot of each candidate
    return torch.empty_like(prev).scatter_(1, target, rank.expand(n, k))


class BeamSearch(Search):
    """Beam search over a batch of sentences, k rows per sentence.

    Rows are sentence-major (rows i*k .. i*k+k-1 are sentence i's slots).
    `alive_scores` holds each row's total log-prob; at the start only slot 0
    is live (-inf elsewhere) so step 0 does not pick k copies of one token.
    """

    def __init__(self, *, batch_size, beam_size, max_steps, start_id, eos_id, penalty, early_stopping, device):
        if early_stopping not in EARLY_STOPPING:
            raise ValueError(f"early_stopping {early_stopping!r} is not one of {list(EARLY_STOPPING)}")
        self.k = self.width = beam_size
        self.eos_id = eos_id
        self.beams = [Beam(beam_size, m, penalty, early_stopping) for m in max_steps]
        self.active = list(range(batch_size))  # sentence index of each active sentence
        scores = torch.full((batch_size, beam_size), NEG_INF, device=device)
        scores[:, 0] = 0.0
        self.alive_scores = scores.view(-1)
        self.last_tokens = torch.full((batch_size * beam_size,), start_id, dtype=torch.long, device=device)

    def advance(self, logprobs: torch.Tensor, step: int) -> StepOutput:
        """logprobs (n*k, V) of this step; consumed (turned into totals in place)."""
        n, k, vocab = len(self.active), self.k, logprobs.size(1)
        # (1) every continuation of every slot, ranked per sentence: one topk
        totals = logprobs.add_(self.alive_scores[:, None]).view(n, k * vocab)
        cand_scores, cand_ids = totals.topk(2 * k, dim=1)  # (n, 2k), best first
        cand_prev, cand_tokens = cand_ids // vocab, cand_ids % vocab
        # (2) the k best candidates not ending in EOS stay alive (stable: keeps rank order)
        keep = (cand_tokens == self.eos_id).to(torch.uint8).argsort(dim=1, stable=True)[:, :k]
        keep = keep.gather(1, stable_slots(cand_prev.gather(1, keep)))  # ... each in its own slot if it can
        alive_scores, alive_tokens, alive_prev = (x.gather(1, keep) for x in (cand_scores, cand_tokens, cand_prev))
        # (3) one host copy: the top-k candidates (for finished hypotheses) and the alive slots
        packed = [cand_scores[:, :k], cand_tokens[:, :k], cand_prev[:, :k], alive_scores, alive_tokens, alive_prev]
        rows = torch.cat([x.double() for x in packed], dim=1).cpu().tolist()
        # (4) per-sentence bookkeeping
        for sentence, row in zip(self.active, rows):
            if not self.beams[sentence].done:
                self._record(self.beams[sentence], step, row)
        # (5) sentences that are done leave the batch
        still = self.survivors()
        origin = (torch.arange(n, device=keep.device)[:, None] * k + alive_prev)  # (n, k) rows of this step
        shrunk = len(still) < n
        if shrunk:
            index = torch.tensor(still, dtype=torch.long, device=keep.device)
            origin, alive_scores, alive_tokens = (x.index_select(0, index) for x in (origin, alive_scores, alive_tokens))
            self.active = [self.active[i] for i in still]
        self.alive_scores = alive_scores.reshape(-1)
        self.last_tokens = alive_tokens.reshape(-1)
        moved = None if shrunk else [i * k + j for i, row in enumerate(rows) for j, p in enumerate(row[5 * k :])
                                     if int(p) != j]
        return StepOutput(origin=origin.reshape(-1), shrunk=shrunk, moved=moved)

    def _record(self, beam: Beam, step: int, row: list[float]):
        k = self.k
        scores, tokens, prev = row[:k], row[k : 2 * k], row[2 * k : 3 * k]
        last = beam.is_last_step(step)
        ended = [
            (int(p), int(t), s) for s, t, p in zip(scores, tokens, prev) if last or int(t) == self.eos_id
        ]
        alive = row[3 * k :]
        beam.advance(step, [int(t) for t in alive[k : 2 * k]], [int(p) for p in alive[2 * k :]], alive[:k], ended)
