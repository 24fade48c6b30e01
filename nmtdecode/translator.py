"""The decoding loop: encode, step, let every piece of row state follow the search.

    memory = model.encode(src)                       # (B, S, d)
    cache  = model.init_cache(memory, src_mask)      # cross-attention K/V once per sentence
    tokens = search.start_tokens                     # (B,): one row per sentence at step 0
    for step in 0 .. max_steps-1:
        logits   = model.decode_step(tokens, cache)
        logprobs = processors(log_softmax(logits))   # min length, bans, forced tokens, n-gram blocking
        out      = search.advance(logprobs, step)    # one topk, per-sentence Beams; k rows per sentence after step 0
        cache.follow(out); processors.follow(out)    # reorder beams, widen after step 0, drop finished sentences
        tokens   = out.tokens

The search decides, the model computes, the translator only connects them
(search/base.py has the step contract).
"""

from __future__ import annotations

from typing import Protocol

import torch

from .config import DecodingConfig
from .models.checkpoint import ModelRules
from .search.base import Hypothesis, RowState, Search
from .search.beam import BeamSearch
from .search.greedy import GreedySearch
from .search.penalties import LengthPenalty
from .search.processors import BanTokens, ForceEosAtLimit, ForceFirstToken, MinLength, NoRepeatNgram, Processors


class Seq2SeqModel(Protocol):
    """What the loop needs from a model (models/transformer.py; the tests' probability tables).

    encode(src_ids (B, S), src_mask (B, S) bool) -> memory (B, S, d)
    init_cache(memory, src_mask) -> decoder state for the B sentences, with `follow(StepOutput)`
    decode_step(tokens (N,), cache) -> logits (N, V); N rows, each sentence's rows consecutive
    """

    cfg: object  # pad/unk/eos/decoder-start ids, max_positions

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor: ...

    def init_cache(self, memory: torch.Tensor, src_mask: torch.Tensor) -> RowState: ...

    def decode_step(self, tokens: torch.Tensor, cache: RowState) -> torch.Tensor: ...


class Translator:
    def __init__(self, model: Seq2SeqModel, decoding: DecodingConfig, rules: ModelRules | None = None,
                 shrink: bool = True):
        self.model = model
        self.cfg = decoding
        self.rules = rules or ModelRules()
        self.shrink = shrink  # drop finished sentences from the batch (off only to test that it changes nothing)
        self.penalty = LengthPenalty(decoding.length_penalty, decoding.alpha, self.rules.length_offset)
        mc = model.cfg
        self.start_id, self.eos_id = mc.decoder_start_id, mc.eos_id
        self.pad_id, self.unk_id = mc.pad_id, mc.unk_id

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def max_steps(self, source_lengths: list[int]) -> list[int]:
        """Step limit of each sentence: max_length, or max_len_a * |src| + max_len_b when
        max_len_b is given (|src| counts the source tokens fed to the encoder, EOS included),
        never more than the decoder has positions for."""
        cfg, limit = self.cfg, self.model.cfg.max_positions
        if cfg.max_len_b is None:
            return [min(cfg.max_length, limit)] * len(source_lengths)
        return [max(1, min(cfg.max_length, limit, int(cfg.max_len_a * n + cfg.max_len_b))) for n in source_lengths]

    def make_search(self, batch_size: int, max_steps: list[int]) -> Search:
        common = dict(batch_size=batch_size, max_steps=max_steps, start_id=self.start_id, eos_id=self.eos_id,
                      penalty=self.penalty, device=self.device)
        if self.cfg.beam_size == 1:
            search = GreedySearch(**common)
        else:
            search = BeamSearch(beam_size=self.cfg.beam_size, early_stopping=self.cfg.early_stopping,
                                n_best=self.cfg.n_best, opennmt=self.rules.opennmt_beam, **common)
        search.shrink = self.shrink
        return search

    def make_processors(self, search: Search, max_steps: list[int]) -> Processors:
        cfg, rules = self.cfg, self.rules
        chain = []
        if cfg.no_repeat_ngram_size:
            chain.append(NoRepeatNgram(cfg.no_repeat_ngram_size))
        banned = set(rules.banned_ids) | ({self.unk_id} if cfg.ban_unk else set())
        if banned:
            chain.append(BanTokens(banned))
        if cfg.min_length:
            chain.append(MinLength(cfg.min_length, self.eos_id))
        if rules.forced_bos_id is not None:
            chain.append(ForceFirstToken(rules.forced_bos_id))
        if rules.forced_eos:
            chain.append(ForceEosAtLimit(self.eos_id))
        last_step = torch.tensor(max_steps, device=self.device) - 1
        return Processors(chain, search.start_tokens, last_step)

    def pad(self, sources: list[list[int]]):
        longest = max(len(s) for s in sources)
        ids = torch.full((len(sources), longest), self.pad_id, dtype=torch.long)
        for row, source in enumerate(sources):
            ids[row, : len(source)] = torch.tensor(source, dtype=torch.long)
        ids = ids.to(self.device)
        mask = torch.arange(longest, device=self.device)[None, :] < torch.tensor(
            [len(s) for s in sources], device=self.device)[:, None]
        return ids, mask

    @torch.inference_mode()
    def translate_batch(self, sources: list[list[int]]) -> list[list[Hypothesis]]:
        """Source id sequences (EOS included) -> the n-best hypotheses of each, in the same order."""
        src, src_mask = self.pad(sources)
        memory = self.model.encode(src, src_mask)
        max_steps = self.max_steps([len(s) for s in sources])
        search = self.make_search(len(sources), max_steps)
        cache = self.model.init_cache(memory, src_mask)
        processors = self.make_processors(search, max_steps)
        tokens = search.start_tokens
        for step in range(max(max_steps)):
            logits = self.model.decode_step(tokens, cache)
            logprobs = processors(torch.log_softmax(logits.float(), dim=-1), step)
            out = search.advance(logprobs, step)
            if search.done:
                break
            for state in (cache, processors):
                state.follow(out)
            tokens = out.tokens
        return search.results(self.cfg.n_best)

    def forced_prefix(self) -> list[int]:
        """What the decoder is fed before any target token: the decoder start token, then the
        token forced at step 0 when the model has one (target-language tag, BART's BOS)."""
        forced = self.rules.forced_bos_id
        return [self.start_id] + ([] if forced is None else [forced])

    @torch.inference_mode()
    def score(self, sources: list[list[int]], targets: list[list[int]]) -> list[float]:
        """Forced decoding: total log-prob of each target (EOS appended) given its source.

        Targets are the tokens after any forced first token (as `encode_target` gives them). The
        decoder input is what `translate_batch` feeds: the forced prefix, the target, then EOS is
        predicted. The forced token counts 0, as in `translate_batch` (it is forced, not chosen),
        so the score of a translation's own ended 1-best equals its `total`."""
        token_logprobs, gold_mask = self._forced(sources, targets)
        return token_logprobs.masked_fill(~gold_mask, 0.0).sum(dim=1).tolist()

    @torch.inference_mode()
    def score_tokens(self, sources: list[list[int]], targets: list[list[int]]) -> list[tuple[list[int], list[float]]]:
        """Per token, as `translate_batch`'s hypotheses give them: (tokens, token_scores) of each
        target, tokens with the forced first token and without EOS, token_scores with the forced
        token's 0 and EOS's log-prob last."""
        token_logprobs, _ = self._forced(sources, targets)
        forced = self.forced_prefix()[1:]
        rows = token_logprobs.tolist()
        return [(forced + t, [0.0] * len(forced) + row[: len(t) + 1]) for t, row in zip(targets, rows)]

    def _forced(self, sources, targets):
        """(B, T) log-prob of each target token and EOS after the forced prefix, and its mask."""
        prefix = self.forced_prefix()
        src, src_mask = self.pad(sources)
        tgt_in, _ = self.pad([prefix + t for t in targets])
        gold, gold_mask = self.pad([t + [self.eos_id] for t in targets])
        logits = self.model(src, src_mask, tgt_in)[:, len(prefix) - 1 :]  # the positions that predict gold
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        return logprobs.gather(2, gold[:, :, None])[:, :, 0], gold_mask
