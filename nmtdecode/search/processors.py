"""Logit processors: rules applied to each step's scores before the search.

Every processor follows the `Processor` protocol below. Most act on
log-probabilities, after the loop's log_softmax; one whose `stage` is "logits"
acts on the raw logits before it (the repetition penalty is defined there); with
none of those, the logits are not touched. A processor edits the (N, V) scores in
place (the tensor is fresh each step and owned by the loop, so no copy is made)
and returns them. A banned token gets -inf; a forced token gets log-prob 0 and
every other token -inf, so reported scores are those of the processed
distribution (as in Hugging Face's beam search).

The option values reaching the processors were checked where options are
declared (options/table.py, options/rules.py), so the processors do not check them again.
"""

from __future__ import annotations

from typing import Iterable, Protocol, runtime_checkable

import torch

from .base import NEG_INF, StepOutput


@runtime_checkable
class Processor(Protocol):
    """A rule on one step's scores (N, V), one row per hypothesis.

    stage: "logits" (before the log_softmax) or "logprobs" (after it; the default when absent).
    needs_history: whether it reads `rows.history` (kept only when some processor does).
    __call__(scores, step, rows) -> scores: edits `scores` in place at 0-based `step`; `rows` is
        the `RowHistory` all processors share.
    A processor with row state of its own also has `follow(out: StepOutput)`: row r of the next
    step continues row out.origin[r] (rows reordered, widened after step 0, finished sentences
    dropped), exactly as the decoder cache follows the search.
    steady_from: the first step from which it does the same operations at every step (reads
        neither the step number nor the growing history), so that a CUDA graph captured at one
        step may replay it at the next (search/device/graphs.py); None (or absent): never.
    """

    def __call__(self, scores: torch.Tensor, step: int, rows: RowHistory, /) -> torch.Tensor: ...


class RowHistory:
    """What processors may know about each row: its token history and its last step.

    history (N, step+1): the decoder start token then every token chosen so
    far, kept only when a processor asks for it. last_step (N,): the step at
    which each row's sentence reaches its step limit. step (1,): the step being
    decoded, on the device (`follow` counts it), which a rule compares with
    without reading a host value, as a step replayed as a CUDA graph needs.
    """

    def __init__(self, start_tokens: torch.Tensor, last_step: torch.Tensor, keep_history: bool) -> None:
        self._history = start_tokens[:, None] if keep_history else None
        self.last_step = last_step
        self.step = torch.zeros(1, dtype=torch.long, device=last_step.device)

    @property
    def history(self) -> torch.Tensor:
        """The tokens so far, for a processor that declares `needs_history` (else none are kept)."""
        if self._history is None:
            raise RuntimeError("a processor reads the token history without declaring needs_history")
        return self._history

    @history.setter
    def history(self, tokens: torch.Tensor) -> None:
        self._history = tokens

    def state(self) -> dict[str, torch.Tensor]:
        """Its tensors by name (Processors.state)."""
        own = {"last_step": self.last_step, "step": self.step}
        return own if self._history is None else own | {"history": self._history}

    def bind(self, state: dict[str, torch.Tensor]) -> None:
        for name, value in state.items():
            setattr(self, "_history" if name == "history" else name, value)

    def follow(self, out: StepOutput) -> None:
        """Row r of the next step continues row out.origin[r] and adds out.tokens[r]."""
        self.step += 1
        if out.origin is not None:
            self.last_step = self.last_step.index_select(0, out.origin)
        if self._history is not None:
            past = self._history if out.origin is None else self._history.index_select(0, out.origin)
            self._history = torch.cat([past, out.tokens[:, None]], dim=1)


class MinLength:
    """EOS is banned while fewer than `min_length` tokens have been generated (EOS not counted)."""

    def __init__(self, min_length: int, eos_id: int, stage: str = "logprobs") -> None:
        self.min_length, self.eos_id = min_length, eos_id
        self.steady_from = min_length  # nothing to do from there on
        self.stage = stage  # or "logits": then the log-probs are renormalised over what is allowed (CTranslate2)

    def __call__(self, logprobs: torch.Tensor, step: int, rows: RowHistory) -> torch.Tensor:
        if step < self.min_length:
            logprobs[:, self.eos_id] = NEG_INF
        return logprobs


class BanTokens:
    """These tokens are never generated (e.g. pad, or unk with --ban-unk)."""

    def __init__(self, token_ids: Iterable[int], device: torch.device | str = "cpu", stage: str = "logprobs") -> None:
        self.index = torch.tensor(sorted(set(token_ids)), dtype=torch.long, device=device)
        self.stage = stage  # as MinLength's
        self.steady_from = 0

    def __call__(self, logprobs: torch.Tensor, step: int, rows: RowHistory) -> torch.Tensor:
        return logprobs.index_fill_(1, self.index, NEG_INF)


class ForceFirstToken:
    """The first generated token is `token_id` (mBART/M2M100/NLLB target-language tag;
    Hugging Face's `forced_bos_token_id`)."""

    def __init__(self, token_id: int) -> None:
        self.token_id = token_id
        self.steady_from = 1

    def __call__(self, logprobs: torch.Tensor, step: int, rows: RowHistory) -> torch.Tensor:
        if step == 0:
            logprobs.fill_(NEG_INF)[:, self.token_id] = 0.0
        return logprobs


class ForceEosAtLimit:
    """A row at its last step must end with EOS (Hugging Face's `forced_eos_token_id`). The step is
    compared on the device (`rows.step`), so the same operations serve every step."""

    def __init__(self, eos_id: int) -> None:
        self.eos_id = eos_id
        self.steady_from = 0

    def __call__(self, logprobs: torch.Tensor, step: int, rows: RowHistory) -> torch.Tensor:
        at_limit = (rows.last_step == rows.step)[:, None]  # (N, 1)
        forced = torch.full_like(logprobs[:1], NEG_INF)
        forced[0, self.eos_id] = 0.0
        return torch.where(at_limit, forced, logprobs, out=logprobs)


def ngram_matches(history: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every n-gram of each row's history (N, W, n), and which of them (N, W) start with the
    row's last n-1 tokens: the n-grams that the next token would repeat by its last token."""
    windows = history.unfold(1, n, 1)
    prefix = history[:, history.size(1) - n + 1 :]  # (N, n-1): what the next n-gram starts with
    return windows, (windows[:, :, :-1] == prefix[:, None, :]).all(dim=2)


class NoRepeatNgram:
    """No n-gram occurs twice in a row's history (Hugging Face's `no_repeat_ngram_size`;
    the history starts with the decoder start token).

    Example, n=2, history [s a b a]: the last token `a` was followed by `b`
    before, so `b` is banned. Batched: compare every window of the history
    with the last n-1 tokens and scatter -inf onto the tokens that followed
    each match; no host copy.
    """

    needs_history = True

    def __init__(self, ngram_size: int, stage: str = "logprobs") -> None:
        self.stage = stage  # as MinLength's
        self.n = ngram_size

    def __call__(self, logprobs: torch.Tensor, step: int, rows: RowHistory) -> torch.Tensor:
        history = rows.history
        if history.size(1) < self.n:
            return logprobs
        windows, matches = ngram_matches(history, self.n)
        penalty = torch.zeros(matches.shape, dtype=logprobs.dtype, device=logprobs.device)
        return logprobs.scatter_add_(1, windows[:, :, -1], penalty.masked_fill_(matches, NEG_INF))


class RepetitionPenalty:
    """CTRL's repetition penalty (Keskar et al. 2019, arXiv:1909.05858), on the logits before the
    softmax: each token already generated in the row has its logit divided by `penalty` when
    positive, multiplied by it when negative (penalty > 1 discourages repeats, < 1 favours them).

    As Hugging Face's RepetitionPenaltyLogitsProcessor and CTranslate2's RepetitionPenalty. The
    tokens counted are the generated ones, a forced first token (language tag) included, as
    CTranslate2 counts its previous ids; the decoder start token is not (Hugging Face counts
    every decoder input id, so with BART, whose start token is EOS, it would penalise EOS too).
    """

    stage = "logits"
    needs_history = True

    def __init__(self, penalty: float) -> None:
        self.penalty = penalty

    def __call__(self, logits: torch.Tensor, step: int, rows: RowHistory) -> torch.Tensor:
        seen = rows.history[:, 1:]  # (N, step): the generated tokens, without the start token
        if seen.size(1) == 0:
            return logits
        before = logits.gather(1, seen)
        after = torch.where(before > 0, before / self.penalty, before * self.penalty)
        return logits.scatter_(1, seen, after)  # a repeated id writes the same value twice


class BlockNgramRepeat:
    """OpenNMT-py's `block_ngram_repeat` (onmt/translate/decode_strategy.py, v3:
    `block_ngram_repeats`, `maybe_update_forbidden_tokens`): a token that would repeat an n-gram
    of the row's history gets the finite score BLOCKED, lower than any real one, where
    `NoRepeatNgram` bans it (-inf). So a blocked continuation still ranks above an impossible
    one: when every continuation repeats, the search goes on (and returns a hypothesis scored
    about -1e21) instead of dying.

    An n-gram holding one of `excluded` (OpenNMT-py's `ignore_when_blocking`) is never
    recorded, so it may repeat. The history starts with the decoder start token, as there.
    Example, n=2, history [s a b a]: the bigram (a b) was seen, so `b` scores BLOCKED; with b
    excluded nothing is blocked.

    Two details differ on purpose: OpenNMT-py overwrites the running total with -1e21 where
    this sets the token's log-prob (totals then differ by the hypothesis' own, tiny beside
    1e21); and a banned token (-inf) stays banned. OpenNMT-py's n=1 blocks nothing (its n-1
    token lookup slices `[-0:]`); here n=1 blocks every token already in the history.
    """

    BLOCKED = -1e21  # OpenNMT-py's -10e20
    needs_history = True

    def __init__(self, ngram_size: int, excluded: Iterable[int] = (), device: torch.device | str = "cpu") -> None:
        self.n = ngram_size
        self.excluded = torch.tensor(sorted(set(excluded)), dtype=torch.long, device=device)

    def __call__(self, logprobs: torch.Tensor, step: int, rows: RowHistory) -> torch.Tensor:
        history = rows.history
        if history.size(1) < self.n:
            return logprobs
        windows, recorded = ngram_matches(history, self.n)
        if self.excluded.numel():
            recorded &= ~torch.isin(windows, self.excluded).any(dim=2)
        hits = torch.zeros_like(logprobs).scatter_add_(1, windows[:, :, -1], recorded.to(logprobs.dtype))
        return torch.where(hits > 0, logprobs.clamp(max=self.BLOCKED), logprobs, out=logprobs)


class ForcePrefix:
    """Each row's target prefix is forced, token by token, from step `offset` on (after the
    model's forced first token, if any): log-prob 0 for the prefix token, -inf for every other,
    as `ForceFirstToken` scores forced tokens (CTranslate2's `target_prefix` counts them 0 too).

    prefixes: one token list per sentence (empty: nothing forced). The (N, longest) tensor
    follows the rows (`follow`), as RowHistory does.
    """

    def __init__(self, prefixes: list[list[int]], offset: int, device: torch.device | str) -> None:
        longest = max(len(p) for p in prefixes)
        self.tokens = torch.zeros((len(prefixes), longest), dtype=torch.long)
        for row, prefix in enumerate(prefixes):
            self.tokens[row, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
        self.tokens = self.tokens.to(device)
        self.lengths = torch.tensor([len(p) for p in prefixes], device=device)
        self.offset = offset
        self.steady_from = offset + longest

    def __call__(self, logprobs: torch.Tensor, step: int, rows: RowHistory) -> torch.Tensor:
        position = step - self.offset
        if not 0 <= position < self.tokens.size(1):
            return logprobs
        forcing = (position < self.lengths)[:, None]  # (N, 1)
        forced = torch.full_like(logprobs, NEG_INF).scatter_(1, self.tokens[:, position : position + 1], 0.0)
        return torch.where(forcing, forced, logprobs, out=logprobs)

    def follow(self, out: StepOutput) -> None:
        if out.origin is not None:
            self.tokens = self.tokens.index_select(0, out.origin)
            self.lengths = self.lengths.index_select(0, out.origin)


def steady_from(processors: list[Processor]) -> int | None:
    """The step from which every processor does the same work at each step; None if one never does."""
    steady = [getattr(p, "steady_from", None) for p in processors]
    return None if None in steady else max([s for s in steady if s is not None], default=0)


class Processors:
    """The processors of one batch, applied in order, and the row state they share: those of
    stage "logits" by `on_logits`, the others by calling it on the log-probabilities. All of
    them follow the search."""

    def __init__(self, processors: list[Processor], start_tokens: torch.Tensor, last_step: torch.Tensor) -> None:
        # stage, needs_history and follow are optional in the protocol: a processor of one's own
        # (a subclass's make_processors) may leave them out
        self.on_logits_chain = [p for p in processors if getattr(p, "stage", "logprobs") == "logits"]
        self.processors = [p for p in processors if getattr(p, "stage", "logprobs") != "logits"]
        self.following = [p for p in processors if hasattr(p, "follow")]
        keep_history = any(getattr(p, "needs_history", False) for p in processors)
        self.rows = RowHistory(start_tokens, last_step, keep_history)
        self.steady_from = steady_from(processors)

    def state(self) -> dict[str, torch.Tensor]:
        """The row state the rules read, by name (what a step replayed as a CUDA graph holds in
        place, search/device/graphs.py); `bind` puts such tensors in their places. A rule's own
        tensors are either the job's (the bans' ids) or read only before its `steady_from`."""
        return self.rows.state()

    def bind(self, state: dict[str, torch.Tensor]) -> None:
        self.rows.bind(state)

    def on_logits(self, logits: torch.Tensor, step: int) -> torch.Tensor:
        for processor in self.on_logits_chain:
            logits = processor(logits, step, self.rows)
        return logits

    def __call__(self, logprobs: torch.Tensor, step: int) -> torch.Tensor:
        for processor in self.processors:
            logprobs = processor(logprobs, step, self.rows)
        return logprobs

    def follow(self, out: StepOutput) -> None:
        self.rows.follow(out)
        for processor in self.following:  # row state of their own (ForcePrefix), whatever their stage
            processor.follow(out)
