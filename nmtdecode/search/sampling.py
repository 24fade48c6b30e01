"""Random sampling: N samples per sentence, each token drawn from the filtered model distribution.

Filters, in this order (Hugging Face's warper order; CTranslate2's `RandomSampler` takes top-k
before the temperature, which commutes with it):

    temperature T   log-probs divided by T (T < 1 sharpens, T > 1 flattens)
    top-k K         keep every token at least as probable as the K-th (ties at the boundary
                    kept, as `TopKLogitsWarper`); 0 = off
    top-p P         keep the tokens whose more probable tokens hold less than P of the mass
                    (renormalised after top-k): the smallest set reaching P, as
                    `TopPLogitsWarper` and CTranslate2's `TopPMask`; tokens tied with the least
                    probable kept one are kept too; 1.0 = off

The most probable token always survives, so no row is ever empty.

Scores follow CTranslate2: a sample's reported log-prob is the sum of its tokens' log-probs in
the model distribution after the logit processors (bans, forced tokens), before temperature
and filtering, so that a sample's total is what `nmtdecode score` gives it (Hugging Face reports
the tempered, filtered scores instead). The N samples of a line come sorted by the ranking
score (the length-penalised total), best first.

Determinism. The uniform number that draws a row's token at a step is a hash of (seed, the
line's index in the input, the sample number, the step): `uniforms`. A sentence's samples so
depend on nothing else: not on the batch it was decoded in, its position there, or the other
lines. The draw is the inverse CDF: the first token whose cumulative probability exceeds u.
All of it is batched tensor arithmetic (int64 integer hashing, cumsum, searchsorted).
"""

from __future__ import annotations

from typing import Protocol

import torch

from .base import NEG_INF, RowFacts, SentenceRecords, StepOutput, attached_by_sentence, facts_by_sentence, to_host
from .beam import HOST, Beam
from .endings import Endings
from .penalties import LengthPenalty

MASK32 = 0xFFFFFFFF
GOLDEN32 = 0x9E3779B9  # 2^32 / golden ratio: separates the rounds of `hash32`
FIRST_LOOK = 64  # top-p on CPU: tokens looked at first (Filters._top_p_threshold)


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """x * c mod 2^32 for x in [0, 2^32), in int64 without overflow: x is split in 16-bit halves,
    so that no product exceeds 2^48."""
    low, high = x & 0xFFFF, x >> 16
    return (low * c + (((high * c) & 0xFFFF) << 16)) & MASK32


def _fmix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser: a bijection of [0, 2^32) in which every input bit flips
    each output bit with probability about 1/2."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x85EBCA6B)
    x = x ^ (x >> 13)
    x = _mul32(x, 0xC2B2AE35)
    return x ^ (x >> 16)


def hash32(*words) -> torch.Tensor:
    """A 32-bit hash of a sequence of words (int64 tensors, broadcast, or ints), each word taken
    mod 2^32: h <- fmix32((h + golden) ^ word) per word, from h = 0."""
    h = None
    for word in words:
        word = torch.as_tensor(word, dtype=torch.long) if not isinstance(word, torch.Tensor) else word
        base = torch.zeros_like(word) if h is None else h
        h = _fmix32(((base + GOLDEN32) & MASK32) ^ (word & MASK32))
    return h


def stream_keys(seed: int, lines: torch.Tensor, samples: torch.Tensor) -> torch.Tensor:
    """The key of each row's random stream: (seed, line index, sample number) -> 32 bits."""
    return hash32(seed & MASK32, seed >> 32, lines, samples)


def uniforms(keys: torch.Tensor, step: int) -> torch.Tensor:
    """One number in (0, 1) per row for this step, float64: (hash(key, step) + 0.5) / 2^32."""
    return (hash32(keys, step).double() + 0.5) / 2.0**32


class Filters:
    """Temperature, top-k and top-p, as the module docstring defines them."""

    def __init__(self, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> None:
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p

    def __call__(self, logprobs: torch.Tensor) -> torch.Tensor:
        """(n, V) log-probs -> (n, V) tempered scores with the filtered-out tokens at -inf (a new tensor)."""
        scores = logprobs / self.temperature if self.temperature != 1.0 else logprobs.clone()
        if self.top_k == 0 and self.top_p == 1.0:
            return scores
        vocab = scores.size(1)
        limit = min(self.top_k, vocab) if self.top_k else vocab  # the tokens top-p may look at
        best, threshold = None, torch.full_like(scores[:, :1], NEG_INF)
        if self.top_k:
            best = largest(scores, limit)
            threshold = best[:, -1:]  # top-k: every token at least as probable as the k-th
        if self.top_p < 1.0:
            threshold = torch.maximum(threshold, self._top_p_threshold(scores, threshold, best, limit))
        return scores.masked_fill_(scores < threshold, NEG_INF)

    def _top_p_threshold(
        self, scores: torch.Tensor, top_k_threshold: torch.Tensor | None, best: torch.Tensor | None, limit: int
    ) -> torch.Tensor:
        """(n, 1) the score of the least probable token top-p keeps, with the probabilities
        renormalised over what top-k kept (ties at its boundary included).

        Only the most probable tokens up to the mass P matter. Sorting the whole vocabulary is
        slow on CPU (docs/speed.md#measurements-behind-design-choices), so there each row looks at its
        best 64 tokens first, and the rows whose look has not reached P at 4 times more, and so on
        (translation distributions are peaked: most rows stop at once); elsewhere one sort."""
        total = scores.masked_fill(scores < top_k_threshold, NEG_INF).logsumexp(dim=1, keepdim=True)
        if best is not None or scores.device.type != "cpu":
            return self._cut(largest(scores, limit) if best is None else best, total)[0]
        threshold = torch.empty_like(total)
        rows, look = torch.arange(scores.size(0), device=scores.device), min(limit, FIRST_LOOK)
        while rows.numel():
            cut, reached = self._cut(largest(scores[rows], look), total[rows])
            settled = reached | (look == limit)
            threshold[rows[settled]] = cut[settled]
            rows, look = rows[~settled], min(4 * look, limit)
        return threshold

    def _cut(self, best: torch.Tensor, total: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """From each row's best scores (sorted) and its log-normaliser: the (n, 1) least score top-p
        keeps among them, and (n,) whether they hold the mass P (so that no other token is kept)."""
        probs = (best - total).exp()
        above = probs.cumsum(dim=1) - probs  # the mass of the tokens ranked before each
        count = (above < self.top_p).sum(dim=1, keepdim=True).clamp_(min=1)
        return best.gather(1, count - 1), above[:, -1] >= self.top_p


def largest(scores: torch.Tensor, k: int) -> torch.Tensor:
    """(n, k) the k largest scores of each row, largest first (a full sort when k is the whole
    row: on CPU much faster than topk of that size)."""
    if k < scores.size(1):
        return scores.topk(k, dim=1).values
    return scores.sort(dim=1, descending=True).values


def cumulative(scores: torch.Tensor) -> torch.Tensor:
    """(n, V) filtered scores -> (n, V) cumulative probabilities, in float64: exact enough that
    the last equals the total and a token of probability 0 is never drawn."""
    return torch.softmax(scores.double(), dim=1).cumsum_(dim=1)


def draw(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: in each row, the first token whose cumulative probability exceeds
    u (n,) times the row's total."""
    target = (u * cdf[:, -1])[:, None]
    return torch.searchsorted(cdf, target, right=True)[:, 0].clamp_(max=cdf.size(1) - 1)


class Draws:
    """The draws of N samples per sentence, as the module docstring defines them: each row's
    random stream, whether its sample is still going and its total. Shared by the host search
    (`SamplingSearch`) and the device one (device/sampling.py)."""

    def __init__(
        self, *, samples: int, filters: Filters, seed: int, line_ids: list[int], eos_id: int, device: torch.device | str
    ) -> None:
        self.n, self.filters, self.eos_id = samples, filters, eos_id
        lines = torch.tensor(line_ids, dtype=torch.long, device=device).repeat_interleave(samples)
        sample_ids = torch.arange(samples, device=device).repeat(len(line_ids))
        self.keys = stream_keys(seed, lines, sample_ids)  # (B*N,) one stream per (sentence, sample)
        self.alive = torch.ones(len(line_ids) * samples, dtype=torch.bool, device=device)
        self.alive_scores = torch.zeros(len(line_ids) * samples, device=device)

    def __call__(self, logprobs: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """logprobs (n, V) at step 0, (n*N, V) after -> each sample's token and total (n*N,), and
        at step 0 the row each sample continues (origin: the widening), else None."""
        if step > 0:  # the rows of ended samples draw EOS at no cost (their draws are ignored)
            logprobs.masked_fill_(~self.alive[:, None], NEG_INF)[:, self.eos_id].masked_fill_(~self.alive, 0.0)
        cdf, origin = cumulative(self.filters(logprobs)), None
        if step == 0:  # widen: each sentence's one row seeds its N samples
            origin = torch.arange(logprobs.size(0), device=logprobs.device).repeat_interleave(self.n)
            cdf, logprobs = cdf[origin], logprobs[origin]
        tokens = draw(cdf, uniforms(self.keys, step))
        token_scores = logprobs.gather(1, tokens[:, None])[:, 0]
        # a sample that ended is fed EOS; one with no possible token (every one banned) ends
        tokens = tokens.masked_fill_(~self.alive | (token_scores == NEG_INF), self.eos_id)
        totals = self.alive_scores + token_scores.masked_fill_(~self.alive, 0.0)
        self.alive = self.alive & (tokens != self.eos_id)
        self.alive_scores = totals
        return tokens, totals, origin

    def keep(self, rows: torch.Tensor) -> None:
        """Only the samples `rows` (of the sentences kept) go on."""
        self.keys, self.alive, self.alive_scores = self.keys[rows], self.alive[rows], self.alive_scores[rows]


class SamplingSearch(SentenceRecords):
    """N samples per sentence, one row each: step 0 has one row per sentence, whose
    distribution seeds the N samples (each with its own uniform); the rows then never reorder.
    A sample that ends waits, fed EOS and ignored, until every sample of its sentence has ended
    (the rows of a sentence stay together, as in beam search). Each sentence's samples live in
    one `Beam` of N slots: slot j is sample j, finished samples in its pool, sorted by score."""

    kind = "sampling"
    ends: Endings

    def __init__(
        self,
        *,
        batch_size: int,
        samples: int,
        max_steps: list[int],
        start_id: int,
        eos_id: int,
        penalty: LengthPenalty,
        device: torch.device | str,
        filters: Filters,
        seed: int,
        line_ids: list[int],
    ) -> None:
        self.n = samples
        self.eos_id = eos_id
        self.draws = Draws(samples=samples, filters=filters, seed=seed, line_ids=line_ids, eos_id=eos_id, device=device)
        self.beams = [Beam(samples, m) for m in max_steps]
        self.ends = Endings(sentences=batch_size, size=samples, max_steps=max_steps, penalty=penalty, device=HOST)
        self.active = list(range(batch_size))
        self.start_tokens = torch.full((batch_size,), start_id, dtype=torch.long, device=device)

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput:
        """logprobs (n, V) at step 0, (n*N, V) after: one token per sample. facts: what to record
        with each row's token (coverage penalty, alignment, attention), per row of logprobs."""
        n = len(self.active)
        going = self.draws.alive.view(n, self.n)  # the samples not ended before this step's draw
        tokens, totals, origin = self.draws(logprobs, step)
        host = to_host(
            tokens=tokens.view(n, self.n),
            totals=totals.view(n, self.n),
            going=going,
            alive=self.draws.alive.view(n, self.n),
            **facts_by_sentence(facts, n, origin),
        )
        last = self.ends.at_limit(step + 1)
        ends = host["going"] & ((host["tokens"] == self.eos_id) | last[:, None])
        merged = self.ends.end(step + 1, host["totals"], ends, host.get("penalty"))
        self.ends.done |= last | ~host["alive"].any(dim=1)
        rows = {name: host[name].tolist() for name in host if name not in ("going", "alive", "penalty")}
        prev = [0] * self.n if step == 0 else list(range(self.n))  # sample j continues slot j (the start row at 0)
        ended = zip(merged.valid.tolist(), merged.score.tolist(), merged.order.tolist())
        along = attached_by_sentence(rows, "", self.n)
        for sentence, sampled, running, attached, (valid, score, order), done in zip(
            self.active, rows["tokens"], rows["totals"], along, ended, self.ends.done.tolist()
        ):
            beam = self.beams[sentence]
            if True in valid:
                beam.finish(step, valid, score, running, prev, sampled, attached, order)
            beam.extend(sampled, prev, running, attached)
            beam.done = done
        return next_sample_rows(self, tokens, origin)


class SampleRows(Protocol):
    """What `next_sample_rows` reads of a sampling search, the host's or the device's."""

    n: int  # samples per sentence
    draws: Draws

    def leaving(self) -> torch.Tensor | None: ...


def next_sample_rows(search: SampleRows, tokens: torch.Tensor, origin: torch.Tensor | None) -> StepOutput:
    """Rows of the next step: each sample of a sentence that stays (`search.leaving()`) continues itself."""
    keep = search.leaving()
    if keep is None:
        return StepOutput(tokens=tokens, origin=origin)
    rows = (keep[:, None] * search.n + torch.arange(search.n, device=keep.device)).reshape(-1)  # their samples
    search.draws.keep(rows)
    return StepOutput(tokens=tokens[rows], origin=rows if origin is None else origin[rows], keep=keep)
