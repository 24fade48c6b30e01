"""Several models decoded as one: an ensemble (OpenNMT-py `-model a.pt b.pt`, fairseq
`--path a.pt:b.pt`, Marian `--models a.npz b.npz --weights 0.6 0.4`).

Every model encodes the source and keeps its own decoder state; at each step each one scores
the next token from the same prefix, and the ensemble combines the M scores into one by a rule:

  rule      the step's scores                            whose          weights
  prob      log sum_m w_m p_m   (a mixture)               fairseq        normalised to sum 1
  logprob   sum_m w_m log p_m   (log-linear, unnormalised) Marian          as given (default 1 each)
  opennmt   log_softmax(sum_m w_m logits_m)               OpenNMT-py      normalised to sum 1

fairseq's `EnsembleModel.forward_decoder` (sequence_generator.py) takes the logsumexp of the
models' log-probs minus log M; Marian's beam search adds each scorer's weighted log-probs
(`--weights`, 1 by default) to the path score and never renormalises; OpenNMT-py 3.5.1's
`EnsembleGenerator` (onmt/decoders/ensemble.py) averages its generators' outputs, which are
logits in 3.5.1 (a plain Linear), and its translator log-softmaxes the mean
(translator._decode_and_generate). The cross-attention (alignment, attention, coverage) is the
models' mean, as OpenNMT-py's `EnsembleDecoder.combine_attns`.

The models must share the target vocabulary (the same piece at every id) and the decoder's
start, end and pad ids. Each encodes the source with its own tokenizer: when they split it alike
(the same tokenizer and source vocabulary, which OpenNMT-py, fairseq and Marian require of an
ensemble) the batch's ids serve them all; otherwise each line carries every model's own ids
(`MemberSources`), and options that read the attention are refused, since the models' source
positions differ and their attention has no mean.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..options.bounded import shown
from ..options.config import ENSEMBLE_RULES as RULES
from ..options.config import ConfigError
from .checkpoint import LoadedModel, ModelError, ModelRules

if TYPE_CHECKING:
    from ..search.base import StepOutput

OPENNMT_FORMATS = ("opennmt-py", "eole")


def default_rule(formats: list[str]) -> str:
    """OpenNMT-py's own rule when every model is an OpenNMT-py or eole checkpoint (what
    `onmt_translate` gives their users), else fairseq's mixture of probabilities."""
    return "opennmt" if all(f in OPENNMT_FORMATS for f in formats) else "prob"


def rule_weights(rule: str, weights: list[float] | None, models: int) -> list[float]:
    """The weights a rule applies: a mixture's and a mean's sum to 1; Marian's are as given."""
    if weights is None:
        weights = [1.0] * models
    if len(weights) != models:
        raise ModelError(f"ensemble_weights: {len(weights)} weights for {models} models; give one per model")
    if rule == "logprob":
        return list(weights)
    total = sum(weights)
    return [w / total for w in weights]


class MemberSources(list):
    """A source line for models that split it differently: the first model's ids (what batching
    sorts by and the step limit counts), and every model's own ids in `members`."""

    def __init__(self, members: list[list[int]]) -> None:
        super().__init__(members[0])
        self.members = members

    def cut(self, limit: int, eos_id: int) -> tuple["MemberSources", bool]:
        """Each model's ids cut to `limit` with EOS kept, and whether any was cut."""
        cut = [ids[: limit - 1] + [eos_id] if len(ids) > limit else ids for ids in self.members]
        return MemberSources(cut), any(len(ids) > limit for ids in self.members)


class EnsembleTokenizer:
    """The first model's tokenizer (the target side is shared), except that a source line is
    encoded by every model's own tokenizer when they split it differently (`alike` False)."""

    def __init__(self, tokenizers: list) -> None:
        self.tokenizers = tokenizers
        self.alike = sources_alike(tokenizers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tokenizers[0], name)

    def encode(self, text: str) -> list[int]:
        if self.alike:
            return self.tokenizers[0].encode(text)
        return MemberSources([tokenizer.encode(text) for tokenizer in self.tokenizers])

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        if self.alike:
            return self.tokenizers[0].encode_pieces(pieces)
        raise ConfigError(
            "sources given as pieces: the ensemble's models split the source differently, "
            "each its own way; give the sources as text"
        )


def sources_alike(tokenizers: list) -> bool:
    """Whether the tokenizers split every source line into the same ids (with the languages set now)."""
    first = tokenizers[0].source_identity()
    return all(tokenizer.source_identity() == first for tokenizer in tokenizers[1:])


class EnsembleCache:
    """The decoder states of the ensemble's models for one batch, following the search together:
    a DecoderState (models/state.py); `attention` is their mean, when recorded."""

    def __init__(self, members: list) -> None:
        self.members = members
        self.attention: torch.Tensor | None = None

    @property
    def record_attention(self) -> bool:
        return self.members[0].record_attention

    @record_attention.setter
    def record_attention(self, value: bool) -> None:
        for cache in self.members:
            cache.record_attention = value

    def follow(self, out: StepOutput) -> None:
        for cache in self.members:
            cache.follow(out)


class Ensemble(nn.Module):
    """M models behind the one model interface the decoding loop uses (decoding.Seq2SeqModel).

    `encode` gives each model's memory, `init_cache` each model's decoder state, and
    `decode_step` the combined scores of the next token, which `log_probs` turns into the
    log-probabilities the search ranks."""

    members: Any  # an nn.ModuleList of Transformers (a Module's attributes carry no types of their own)

    def __init__(self, members: list[nn.Module], rule: str, weights: list[float]) -> None:
        super().__init__()
        if rule not in RULES:
            raise ModelError(f"ensemble_rule: {shown(rule)} is not one of {', '.join(RULES)}")
        self.members = nn.ModuleList(members)
        self.rule = rule
        self.weights = rule_weights(rule, weights, len(members))
        self.log_weights = [math.log(w) for w in self.weights]
        # The decoding loop reads ids and limits from here: the first model's, within every model's positions.
        self.cfg = replace(self.members[0].cfg, max_positions=min(m.cfg.max_positions for m in self.members))

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each model's memory of the batch, with the source mask it goes with."""
        return self.encode_each([(src_ids, src_mask)] * len(self.members))

    def encode_each(self, sources: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The same, each model over its own (ids, mask) of the batch (MemberSources)."""
        return [(model.encode(ids, mask), mask) for model, (ids, mask) in zip(self.members, sources)]

    def init_cache(
        self, memory: list[tuple[torch.Tensor, torch.Tensor]], src_mask: torch.Tensor | None = None
    ) -> EnsembleCache:
        return EnsembleCache([model.init_cache(m, mask) for model, (m, mask) in zip(self.members, memory)])

    def decode_step(self, tokens: torch.Tensor, cache: EnsembleCache) -> torch.Tensor:
        """tokens (N,) -> the combined scores of the next token (N, V); with attention recorded, its
        mean over the models in cache.attention."""
        logits = [model.decode_step(tokens, state) for model, state in zip(self.members, cache.members)]
        if cache.record_attention:
            cache.attention = torch.stack([state.attention for state in cache.members]).mean(0)
        return self.combine(logits)

    def combine(self, logits: list[torch.Tensor]) -> torch.Tensor:
        """The models' logits (each (..., V)) -> the rule's scores (..., V), in float32. Folded one
        model at a time, in place: a stack and a reduction over it cost several times more
        (docs/speed.md#measurements-behind-design-choices)."""
        combined = None
        for weight, log_weight, x in zip(self.weights, self.log_weights, logits):
            if self.rule == "opennmt":
                combined = x.float() * weight if combined is None else combined.add_(x.float(), alpha=weight)
                continue
            term = torch.log_softmax(x.float(), dim=-1)
            if self.rule == "logprob":
                term = term if weight == 1 else term.mul_(weight)
                combined = term if combined is None else combined.add_(term)
            else:  # prob: log(w p) = log w + log p, summed in log space
                term = term if log_weight == 0 else term.add_(log_weight)
                combined = term if combined is None else torch.logaddexp(combined, term, out=combined)
        return combined

    def log_probs(self, scores: torch.Tensor) -> torch.Tensor:
        """The search's log-probabilities from the combined scores: normalised, except Marian's
        log-linear sum, which its beam search ranks as it is."""
        return scores if self.rule == "logprob" else torch.log_softmax(scores, dim=-1)

    def forward(self, src_ids: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher forcing (`score`): the combined scores (B, T, V) of every target position."""
        return self.forward_each([(src_ids, src_mask)] * len(self.members), tgt_in)

    def forward_each(self, sources: list[tuple[torch.Tensor, torch.Tensor]], tgt_in: torch.Tensor) -> torch.Tensor:
        """The same, each model over its own (ids, mask) of the batch (MemberSources)."""
        return self.combine([model(ids, mask, tgt_in) for model, (ids, mask) in zip(self.members, sources)])

    def decoding_bytes(self, sentences: int, width: int, positions: int, dtype: torch.dtype) -> int:
        return sum(model.decoding_bytes(sentences, width, positions, dtype) for model in self.members)


def check_members(loaded: list[LoadedModel]) -> None:
    """One line naming the first thing that keeps these models from decoding as one: another
    target vocabulary, other decoder ids or rules, another split of the source."""
    first = loaded[0]
    for other in loaded[1:]:
        names = f"{other.path} and {first.path}"
        for key in ("decoder_start_id", "eos_id", "pad_id", "unk_id"):
            a, b = getattr(first.model.cfg, key), getattr(other.model.cfg, key)
            if a != b:
                raise ModelError(
                    f"ensemble: {names} differ in {key} ({b} and {a}); an ensemble's models share "
                    "the decoder's start, end and special tokens"
                )
        difference = first_difference(target_pieces(first), target_pieces(other))
        if difference is not None:
            raise ModelError(
                f"ensemble: {names} have different target vocabularies ({difference}); an ensemble's "
                "models must share the target vocabulary, the same piece at every id"
            )


def target_pieces(loaded: LoadedModel) -> list[str | None]:
    return [loaded.tokenizer.target_piece(i) for i in range(loaded.model.cfg.tgt_vocab_size)]


def first_difference(a: list, b: list) -> str | None:
    """Where two vocabularies first differ, in words, or None when they are the same."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"id {i} is {shown(y)} in one and {shown(x)} in the other"
    if len(a) != len(b):
        return f"{len(b)} and {len(a)} entries"
    return None


def ensemble_of(loaded: list[LoadedModel], rule: str | None, weights: list[float] | None) -> LoadedModel:
    """The models as one LoadedModel: the Ensemble, their tokenizers (the first one's for the target),
    the first one's defaults, the rules every model agrees on, and the files of all of them."""
    check_members(loaded)
    rule = rule or default_rule([m.format for m in loaded])
    model = Ensemble([m.model for m in loaded], rule, weights)
    tokenizer = EnsembleTokenizer([m.tokenizer for m in loaded])
    return EnsembleLoaded(
        model=model,
        tokenizer=tokenizer,
        format="ensemble",
        path=loaded[0].path,
        rules=loaded[0].rules,
        defaults=dict(loaded[0].defaults),
        files=tuple(dict.fromkeys(f for m in loaded for f in m.files)),
        members=loaded,
        gemm=loaded[0].gemm,
    )


class EnsembleLoaded(LoadedModel):
    """LoadedModel of an ensemble; `members` are the models as loaded, for their own rules."""

    def __init__(self, members: list[LoadedModel], **fields) -> None:
        super().__init__(**fields)
        self.members = members

    def rules_for(self, src_lang: str | None, tgt_lang: str | None) -> ModelRules:
        """The first model's rules for these languages (its search rules: OpenNMT-py's beam, the
        length offset); every model must force the same first token and end alike, and none may
        generate what another bans. Whether they split the source alike is known from here."""
        rules = [m.rules_for(src_lang, tgt_lang) for m in self.members]
        for other, member in zip(rules[1:], self.members[1:]):
            for key in ("forced_bos_id", "decoder_start_id", "forced_eos"):
                if getattr(other, key) != getattr(rules[0], key):
                    raise ModelError(
                        f"ensemble: {member.path} and {self.members[0].path} differ in {key} "
                        f"({getattr(other, key)} and {getattr(rules[0], key)}); an ensemble's models "
                        "must start and end alike"
                    )
        self.tokenizer.alike = sources_alike(self.tokenizer.tokenizers)
        banned = tuple(sorted({i for r in rules for i in r.banned_ids}))
        return replace(rules[0], banned_ids=banned)

    @property
    def shares_source_positions(self) -> bool:
        """Known once `rules_for` has set the languages (a tag may split the source differently)."""
        return self.tokenizer.alike
