"""A beam step's arithmetic, batched over the sentences, the same for the host search (beam.py,
diverse.py) and the device search (device/beam.py):

1. `best_continuations`: the 2k best continuations of every sentence (`Candidates`, best first),
   each row's running score added to its log-probs; with a large vocabulary on the CPU, to each
   row's own 2k best only.
2. `keep_alive`: the k best candidates not ending in EOS stay alive; the search records the
   top k (those that end finish: endings.py).
3. `next_beam_rows`: the rows of the next step, k per sentence still searched.

Why 2k candidates: a candidate that ends in EOS leaves the beam for the `finished` pool, and
its slot is refilled from the next best non-EOS candidate, so k hypotheses stay alive. Each
slot has a single EOS continuation, hence at most k of the 2k candidates end, and at least k
go on. As in Hugging Face, only EOS candidates ranked within the top k are kept as finished
hypotheses. OpenNMT-py's own beam (`refill` off) keeps its k best candidates as the slots, an
ended one as an empty slot for the next step (k-1 go on, not refilled from the 2k).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch
import torch.nn.functional as F

from .base import NEG_INF, StepOutput


@dataclass
class Candidates:
    """Continuations of each active sentence, best first; every field (n, c)."""

    scores: torch.Tensor  # total log-prob of the extended hypothesis: what the search ranks by
    tokens: torch.Tensor  # the token it adds
    prev: torch.Tensor  # the slot (row of its sentence) of this step that it extends
    totals: torch.Tensor | None = None  # the model's log-prob total, where `scores` add more (diverse.py)

    def take(self, index: torch.Tensor) -> "Candidates":
        """Columns `index` (n, c') of each row."""
        return self._map(lambda t: t.gather(1, index))

    def first(self, k: int) -> "Candidates":
        """The k best of each row."""
        return self._map(lambda t: t[:, :k])

    def rows(self, index: torch.Tensor) -> "Candidates":
        """Rows (sentences) `index`."""
        return self._map(lambda t: t[index])

    def _map(self, pick: Callable[[torch.Tensor], torch.Tensor]) -> "Candidates":
        """The same part of every field."""
        totals = None if self.totals is None else pick(self.totals)
        return Candidates(pick(self.scores), pick(self.tokens), pick(self.prev), totals)


def top_candidates(totals: torch.Tensor, wanted: int, vocab: int, eos_id: int) -> Candidates:
    """The `wanted` best of each row of totals (n, width*V), best first (top_k). A vocabulary
    smaller than that is padded with impossible EOS candidates."""
    scores, ids = top_k(totals, min(wanted, totals.size(1)))
    return padded(Candidates(scores, ids % vocab, ids // vocab), wanted, eos_id)


def padded(candidates: Candidates, wanted: int, eos_id: int) -> Candidates:
    """`wanted` candidates in each row: those given, then impossible EOS ones (a vocabulary
    smaller than the candidates a step asks for)."""
    missing = (0, wanted - candidates.scores.size(1))
    if not missing[1]:
        return candidates
    scores = F.pad(candidates.scores, missing, value=NEG_INF)
    tokens, prev = F.pad(candidates.tokens, missing, value=eos_id), F.pad(candidates.prev, missing, value=0)
    return Candidates(scores, tokens, prev)


def keep_alive(candidates: Candidates, k: int, eos_id: int, refill: bool) -> Candidates:
    """The k best candidates not ending in EOS (a stable sort keeps rank order); an EOS candidate
    only fills a slot when fewer than k could go on, as an empty slot (-inf). Without `refill`
    (OpenNMT-py), simply the k best, each EOS one as an empty slot."""
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
    value at least as large), so the topk of those k * BLOCK candidates is the row's. On CPU that
    is faster than one topk over a long row (docs/speed.md#measurements-behind-design-choices).
    Ties between equal values may come out in another order than one topk's; the values are the
    same."""
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


# From this vocabulary size on, each row's own best are taken before the running scores are added
# (best_continuations): a pass over every log-prob saved, against two small topks a row.
ROW_FIRST_VOCAB = 65536


def best_continuations(
    logprobs: torch.Tensor, alive_scores: torch.Tensor, n: int, k: int, eos_id: int, host: bool = True
) -> Candidates:
    """The 2k best continuations of each of n sentences over all its rows (n*width, V): the best
    of logprobs + each row's running score. The host search on the CPU (`host`) reads where the
    ties are: equal scores come by row, then token (as a stable sort of (n, width*V) orders
    them), and from ROW_FIRST_VOCAB tokens a sentence's 2k best are found among its rows' own 2k
    best (top_in_order), the running score added to those alone. Below it the score is added to
    every log-prob (in place) and the 2k best of (n, width*V) are taken; so too on a GPU and in
    the device search, by top_k without a read on the host, ties in its own order."""
    vocab = logprobs.size(1)
    if logprobs.device.type != "cpu" or not host:
        totals = logprobs.add_(alive_scores[:, None]).view(n, -1)
        return top_candidates(totals, 2 * k, vocab, eos_id)
    if vocab < ROW_FIRST_VOCAB:
        scores, ids = top_in_order(logprobs.add_(alive_scores[:, None]).view(n, -1), 2 * k)
        return padded(Candidates(scores, ids % vocab, ids // vocab), 2 * k, eos_id)
    totals, tokens = top_in_order(logprobs, 2 * k, alive_scores)
    scores, ids = totals.reshape(n, -1).sort(dim=1, descending=True, stable=True)
    ids = ids[:, : 2 * k]
    candidates = Candidates(scores[:, : 2 * k], tokens.reshape(n, -1).gather(1, ids), ids // tokens.size(1))
    return padded(candidates, 2 * k, eos_id)


def top_in_order(
    values: torch.Tensor, k: int, offsets: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best of each row of values (+ its offset, given one) and their columns, best first,
    equal ones by column: the first k of a stable descending sort. top_k finds ties in its own
    order: where there are any, they are sorted again, and a row whose k-th value equals its
    (k+1)-th (a tie cut by the boundary: -inf entries, mostly) is sorted whole, so that its
    first columns are those kept."""
    k = min(k, values.size(1))
    best, columns = top_k(values, min(k + 1, values.size(1)))
    if offsets is not None:
        best = best + offsets[:, None]
    ties = best[:, 1:] == best[:, :-1]
    if not ties.any():  # distinct values (float32 log-probs, mostly): top_k's order is the order
        return best[:, :k], columns[:, :k]
    if k < values.size(1):
        cut = ties[:, k - 1].nonzero().squeeze(1)
        if len(cut):
            whole = values[cut] if offsets is None else values[cut] + offsets[cut, None]
            whole_sorted = whole.sort(dim=1, descending=True, stable=True)
            best[cut], columns[cut] = whole_sorted.values[:, : k + 1], whole_sorted.indices[:, : k + 1]
        best, columns = best[:, :k], columns[:, :k]
    by_column = columns.argsort(dim=1)
    best, columns = best.gather(1, by_column), columns.gather(1, by_column)
    by_value = best.argsort(dim=1, descending=True, stable=True)
    return best.gather(1, by_value), columns.gather(1, by_value)


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
