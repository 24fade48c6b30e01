"""The decoding loop of one batch: encode, step, let every piece of row state follow the search.

    memory = model.encode(src)                       # (B, S, d)
    cache  = steps.init_cache(memory, src_mask, ...) # cross-attention K/V once per sentence
    tokens = search.start_tokens                     # (B,): one row per sentence at step 0
    for step in 0 .. max_steps-1:
        logits   = steps.decode_step(tokens, cache)      # and cache.attention, when recorded
        logprobs = processors(log_softmax(processors.on_logits(logits)))  # repetition penalty; then
                                                     # min length, bans, forced tokens, n-gram blocking
        out      = search.advance(logprobs, step, facts)  # one topk, per-sentence Beams; k rows per sentence
                                                     # after step 0; facts: coverage penalty, alignment
        cache.follow(out); processors.follow(out)    # reorder beams, widen after step 0, drop finished sentences
        tokens   = out.tokens

The search decides, the model computes, `BatchDecoder` only connects them
(search/base.py has the step contract). The search keeps its records on the host
(search/beam.py: a `Beam` per sentence, one copy a step) or as tensors on the device
(search/device/beam.py: the host reads a done flag every few steps, so `search.done`
may become true a few steps late); the loop is the same for both. How the model's steps run (eagerly, traced on
a CPU, as CUDA graphs) is the step runner's (models/steps.py), which the engine chose
when it loaded the model; the cache is a DecoderState (models/state.py). Where the
model's steps are CUDA graphs, the device search's share of a step (the processors, the
log-softmax, `advance` up to its host part) is replayed as one too (`graphed`:
search/device/graphs.py). It knows
nothing of files or jobs: resolve.py builds one per job and the engine (engine.py) feeds it
batches. `decode` is the one entry (a batch's n-best lists, and with `trace` its search for
--dump-beam); `stepwise` is the same loop a step at a time (the API's generate_tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol, Sequence, cast

import torch

from ..models.architecture import TransformerConfig
from ..models.checkpoint import ModelRules
from ..models.ensemble import Ensemble, MemberSources
from ..models.state import DecoderState
from ..models.steps import EagerSteps, StepRunner
from ..options.config import DecodingConfig
from ..search.base import Hypothesis, RowFacts, Search, SentenceRecords, StepOutput, Strategy
from ..search.beam import BeamSearch
from ..search.device.beam import DeviceBeamSearch
from ..search.device.done_flags import check_interval
from ..search.device.graphs import GraphedSearch, GraphedStep, SearchGraphs
from ..search.device.greedy import DeviceGreedySearch
from ..search.device.sampling import DeviceSampling
from ..search.diverse import DiverseBeamSearch
from ..search.greedy import GreedySearch
from ..search.penalties import Coverage, LengthPenalty
from ..search.processors import (
    BanTokens,
    BlockNgramRepeat,
    ForceEosAtLimit,
    ForceFirstToken,
    ForcePrefix,
    MinLength,
    NoRepeatNgram,
    Processor,
    Processors,
    RepetitionPenalty,
    steady_from,
)
from ..search.sampling import Filters, SamplingSearch
from ..search.stop_rules import beam_rule

DeviceSearch = DeviceBeamSearch | DeviceGreedySearch | DeviceSampling


# Sentences in a batch from which `--search-on auto` searches on a GPU: there the two searches tied at
# 32 sentences and the device search led from 64 (docs/speed.md#the-search-on-the-device).
DEVICE_SEARCH_FROM = 64
# With its steps replayed as CUDA graphs (search/device/graphs.py) it led at every size measured.
GRAPHED_DEVICE_SEARCH_FROM = 1
AUTO_DEVICE_SEARCH_ON = ("cuda",)  # device types where `auto` may choose it (on a CPU both searches tie)


@dataclass(frozen=True)
class Strategies:
    """The search classes of one place the search runs: the host's bookkeeping or the device's
    tensors (search/device_*.py). Diverse beams run on the host only."""

    sampling: type
    greedy: type
    beam: type


ON_HOST = Strategies(sampling=SamplingSearch, greedy=GreedySearch, beam=BeamSearch)
ON_DEVICE = Strategies(sampling=DeviceSampling, greedy=DeviceGreedySearch, beam=DeviceBeamSearch)


class Seq2SeqModel(Protocol):
    """What the loop needs from a model (models/transformer.py; the tests' probability tables).

    encode(src_ids (B, S), src_mask (B, S) bool) -> memory (B, S, d)
    init_cache(memory, src_mask) -> decoder state for the B sentences, with `follow(StepOutput)`
    decode_step(tokens (N,), cache) -> logits (N, V); N rows, each sentence's rows consecutive;
        when cache.record_attention is set, it also leaves in cache.attention (N, S) float32 the
        cross-attention weights of each row over its source (0 at padded positions)
    log_probs(scores (N, V) float32) -> log-probabilities, optional: a model's own normalisation of
        its step's scores (an ensemble's rule, models/ensemble.py); without it, log_softmax (in place)
    """

    cfg: TransformerConfig  # pad/unk/eos/decoder-start ids, max_positions

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor: ...

    def init_cache(self, memory: torch.Tensor, src_mask: torch.Tensor) -> DecoderState: ...

    def decode_step(self, tokens: torch.Tensor, cache: DecoderState) -> torch.Tensor: ...


@dataclass
class Decoded:
    """What `BatchDecoder.decode` found for a batch."""

    nbests: list[list[Hypothesis]]  # each source's n-best hypotheses, best first, in the batch's order
    search: SentenceRecords | None = None  # with `trace`: the search, whose per-sentence records --dump-beam writes


class BatchDecoder:
    """Decodes batches of source ids with one model and one job's decoding options."""

    def __init__(
        self,
        model: Seq2SeqModel,
        decoding: DecodingConfig,
        rules: ModelRules | None = None,
        shrink: bool = True,
        banned_ids: Sequence[int] = (),
        excluded_ids: Sequence[int] = (),
        steps: StepRunner | None = None,
        trace: bool = False,
        search_on: str = "host",
        warn: Callable[[str], None] | None = None,
    ) -> None:
        """banned_ids, excluded_ids: the ids of --banned-tokens and --ignore-when-blocking (resolve.py).
        steps: how the model's steps run (models/steps.py; the engine's choice), default eagerly.
        trace: the searches keep every hypothesis that ends, and `decode` returns the search (--dump-beam).
        search_on: where the search runs (--search-on): `device`, as tensor operations on the device
        where it holds the options (else on the host, and `warn` is told which option it lacks);
        `host`; `auto`, on a GPU the device where it holds the options, for every batch where its
        steps replay as CUDA graphs, else for batches of DEVICE_SEARCH_FROM sentences or more;
        else the host (`on_device`)."""
        self.model = model
        self.log_probs = getattr(model, "log_probs", log_softmax)  # optional in Seq2SeqModel (an ensemble's rule)
        self.trace = trace
        self.steps = steps or EagerSteps(model)
        self.cfg = decoding
        self.rules = rules or ModelRules()
        self.shrink = shrink  # drop finished sentences from the batch (off only to test that it changes nothing)
        # CTranslate2's rule counts the tokens as CTranslate2 does, whatever trained the model
        offset = 0 if decoding.early_stopping == "ctranslate2" else self.rules.length_offset
        self.penalty = LengthPenalty(decoding.length_penalty, decoding.alpha, offset)
        mc = model.cfg
        self.start_id = mc.decoder_start_id if self.rules.decoder_start_id is None else self.rules.decoder_start_id
        self.eos_id = mc.eos_id
        self.pad_id, self.unk_id = mc.pad_id, mc.unk_id
        self.banned_ids, self.excluded_ids = list(banned_ids), list(excluded_ids)
        refusal = self.device_search_refusal() if search_on != "host" else None
        if refusal and warn and search_on == "device":
            warn(f"the search runs on the host: the device search does not hold {refusal} (docs/search.md)")
        self.search_on = "host" if refusal else search_on
        self.check_every = check_interval(self.device)  # steps between the device search's done checks
        # the model's own bans and those asked for, made once: a captured search step reads their ids
        self.ban_rules = self.bans(self.rule_stage)
        # the device search's steps as CUDA graphs, where the model's steps are and the options allow
        # (search/device/graphs.py); a failed capture is told as the step runner tells its own, at once
        graphed = self.device.type == "cuda" and getattr(self.steps, "graphs", False) and self.graphs_hold_the_options()
        self.search_graphs = SearchGraphs(getattr(self.steps, "warn", None)) if graphed else None

    def on_device(self, sentences: int) -> bool:
        """Whether a batch of `sentences` searches on the device."""
        if self.search_on == "auto":
            smallest = DEVICE_SEARCH_FROM if self.search_graphs is None else GRAPHED_DEVICE_SEARCH_FROM
            return self.device.type in AUTO_DEVICE_SEARCH_ON and sentences >= smallest
        return self.search_on == "device"

    def graphs_hold_the_options(self) -> bool:
        """Whether with these options the device search's steps can replay as CUDA graphs, once the
        processors act alike (`graphed`): a beam or greedy search without attention facts (then
        the loop records no attention), with one model's log-softmax."""
        cfg = self.cfg
        return (
            not cfg.sampling
            and not cfg.attention_readers
            and self.log_probs is log_softmax
            and steady_from(self.processor_chain()) is not None
        )

    def device_search_refusal(self) -> str | None:
        """The option asked for that the device search (search/device/beam.py) does not hold, or None."""
        if self.trace:
            return "--dump-beam"
        if self.cfg.beam_groups > 1:
            return "--beam-groups"
        return None

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

    def forced_steps(self, batch_size: int, prefixes: list[list[int]] | None) -> list[int]:
        """Per sentence, how many leading steps have their token forced: the model's first token
        (target-language tag, BART's BOS), then the --prefix."""
        first = int(self.rules.forced_bos_id is not None)
        return [first + len(p) for p in prefixes] if prefixes else [first] * batch_size

    def make_search(
        self,
        batch_size: int,
        max_steps: list[int],
        line_ids: list[int] | None = None,
        prefixes: list[list[int]] | None = None,
    ) -> Search:
        """The strategy, searched on the host: sampling (its random streams keyed by each sentence's
        input line, `line_ids`, default 0..B-1), greedy for beam size 1, diverse beams for beam
        groups, else beam search."""
        search = self._strategy(ON_HOST, self._search_options(batch_size, max_steps), line_ids, prefixes)
        if self.trace:
            search.trace()
        return search

    def make_device_search(
        self,
        batch_size: int,
        max_steps: list[int],
        line_ids: list[int] | None = None,
        prefixes: list[list[int]] | None = None,
    ) -> DeviceSearch:
        """The strategy as tensor operations on the device (search/device/beam.py, greedy.py,
        sampling.py), for what `device_search_refusal` accepts."""
        options = dict(self._search_options(batch_size, max_steps), check_every=self.check_every)
        return self._strategy(ON_DEVICE, options, line_ids, prefixes)

    def _search_options(self, batch_size: int, max_steps: list[int]) -> dict[str, Any]:
        """What every strategy is built with."""
        return dict(
            batch_size=batch_size,
            max_steps=max_steps,
            start_id=self.start_id,
            eos_id=self.eos_id,
            penalty=self.penalty,
            device=self.device,
        )

    def _strategy(
        self,
        kinds: "Strategies",
        common: dict[str, Any],
        line_ids: list[int] | None,
        prefixes: list[list[int]] | None,
    ) -> Any:
        """The strategy the options ask for, of the host's or the device's kinds."""
        cfg, batch_size = self.cfg, common["batch_size"]
        if cfg.sampling:
            search = kinds.sampling(
                samples=cfg.n_best,
                filters=Filters(cfg.temperature, cfg.top_k, cfg.top_p),
                seed=cfg.seed,
                line_ids=line_ids or list(range(batch_size)),
                **common,
            )
        elif cfg.beam_size == 1:
            search = kinds.greedy(**common)
        elif cfg.beam_groups > 1:  # the device's kinds have none: device_search_refusal sends it to the host
            search = DiverseBeamSearch(
                beam_size=cfg.beam_size,
                groups=cfg.beam_groups,
                diversity_penalty=cfg.diversity_penalty,
                early_stopping=cfg.early_stopping,
                n_best=cfg.n_best,
                forced_steps=self.forced_steps(batch_size, prefixes),
                **common,
            )
        else:
            rule, opennmt = self.stop_rule()
            search = kinds.beam(
                beam_size=cfg.beam_size, early_stopping=rule, n_best=cfg.n_best, opennmt=opennmt, **common
            )
        search.shrink = self.shrink
        return search

    def stop_rule(self) -> tuple[str, bool]:
        """Beam search's stop rule and whether it is OpenNMT-py's beam (search/stop_rules.py)."""
        return beam_rule(self.cfg.early_stopping, self.rules.opennmt_beam, self.penalised())

    def penalised(self) -> bool:
        """Whether a length or coverage penalty changes scores (CTranslate2's early exit needs neither)."""
        cfg = self.cfg
        return (self.penalty.name != "none" and self.penalty.alpha != 0) or cfg.coverage_acts

    def make_processors(
        self, search: Strategy, max_steps: list[int], prefixes: list[list[int]] | None = None
    ) -> Processors:
        last_step = torch.tensor(max_steps, device=self.device) - 1
        return Processors(self.processor_chain(prefixes), search.start_tokens, last_step)

    def processor_chain(self, prefixes: list[list[int]] | None = None) -> list[Processor]:
        """The rules on each step's scores that the options ask for, in the order they apply."""
        cfg, rules, stage = self.cfg, self.rules, self.rule_stage
        chain: list[Processor] = []
        if cfg.repetition_penalty != 1.0:
            chain.append(RepetitionPenalty(cfg.repetition_penalty))
        if cfg.no_repeat_ngram_size:
            chain.append(NoRepeatNgram(cfg.no_repeat_ngram_size, stage))
        if cfg.block_ngram_repeat:
            chain.append(BlockNgramRepeat(cfg.block_ngram_repeat, self.excluded_ids, self.device))
        chain += self.ban_rules
        if cfg.min_length:
            chain.append(MinLength(cfg.min_length, self.eos_id, stage))
        if rules.forced_bos_id is not None:
            chain.append(ForceFirstToken(rules.forced_bos_id))
        if rules.forced_eos:
            chain.append(ForceEosAtLimit(self.eos_id))
        if prefixes and any(prefixes):  # last: a prefix longer than the step limit is cut there, not ended
            chain.append(ForcePrefix(prefixes, int(rules.forced_bos_id is not None), self.device))
        return chain

    @property
    def rule_stage(self) -> str:
        """Where the bans and the length rules act: CTranslate2's on the logits (the log-probs it
        scores are renormalised over what is allowed), else on the log-probs."""
        return "logits" if self.cfg.early_stopping == "ctranslate2" else "logprobs"

    def bans(self, stage: str) -> list[BanTokens]:
        """The tokens never generated: the model's own (pad, its start token) and those asked for
        (--ban-unk, --banned-tokens), at `stage`; where that is the logits (CTranslate2's rule),
        the model's own stay on the log-probs: a model converted for CTranslate2 has no such bans,
        it scores them (next to nothing, in a trained model)."""
        model, asked = set(self.rules.banned_ids), ({self.unk_id} if self.cfg.ban_unk else set()) | set(self.banned_ids)
        if stage == "logprobs":
            return [BanTokens(model | asked, self.device)] if model | asked else []
        return ([BanTokens(model, self.device)] if model else []) + (
            [BanTokens(asked, self.device, stage)] if asked else []
        )

    def make_attention(self, cache: DecoderState, src_mask: torch.Tensor) -> AttentionFacts | None:
        """What the search needs from the cross-attention, or None (then none is recorded)."""
        cfg, readers = self.cfg, self.cfg.attention_readers
        if not readers:
            return None
        coverage = Coverage(cfg.coverage_penalty, cfg.beta, src_mask) if "coverage_penalty" in readers else None
        cache.record_attention = True
        return AttentionFacts(coverage, cfg.aligned, cfg.attention)

    def pad(self, sources: list[list[int]], pad_id: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The padded ids (B, S) and their mask, True = real token. One tensor from padded lists:
        much faster than filling a tensor row by row
        (docs/speed.md#measurements-behind-design-choices)."""
        longest, device = max(len(s) for s in sources), self.device
        pad_id = self.pad_id if pad_id is None else pad_id
        ids = torch.tensor([list(s) + [pad_id] * (longest - len(s)) for s in sources], dtype=torch.long, device=device)
        lengths = torch.tensor([len(s) for s in sources], device=device)
        return ids, torch.arange(longest, device=device)[None, :] < lengths[:, None]

    @torch.inference_mode()  # the results are read from the search's inference tensors
    def decode(
        self, sources: list[list[int]], line_ids: list[int] | None = None, prefixes: list[list[int]] | None = None
    ) -> Decoded:
        """Source id sequences (EOS included) -> the n-best hypotheses of each, in the same order,
        and with `trace` the search that found them (its per-sentence records, for --dump-beam).

        line_ids: each source's line in the input (sampling draws from streams keyed by it;
        default 0..B-1). prefixes: target token ids forced at the start of each output (after
        the model's forced first token), scored 0; may be empty."""
        for search in self.stepwise(sources, line_ids, prefixes):  # noqa: B007 - the last one is wanted
            pass  # the last step leaves every sentence done
        nbests = self.trimmed(search.results(self.cfg.n_best), sources)
        return Decoded(nbests, cast(SentenceRecords, search) if self.trace else None)  # traced: on the host

    def trimmed(self, results: list[list[Hypothesis]], sources: list[list[int]]) -> list[list[Hypothesis]]:
        """Attention rows as long as each source, not the padded batch."""
        if self.cfg.attention:
            for source, hyps in zip(sources, results):
                for hyp in hyps:
                    hyp.attention = [row[: len(source)] for row in hyp.attention or []]
        return results

    @torch.inference_mode()
    def stepwise(
        self, sources: list[list[int]], line_ids: list[int] | None = None, prefixes: list[list[int]] | None = None
    ) -> Iterator[Search | DeviceSearch]:
        """The decoding loop, a step at a time: yields the search (the host's, or the device's when
        `on_device` for the batch) after each step, the last time when every sentence is done. A host search's
        per-sentence records hold what was chosen so far (the API's generate_tokens reads them);
        a caller that stops early leaves the batch unfinished."""
        memory, src_mask = self.encode(sources)
        max_steps = self.max_steps([len(s) for s in sources])
        make_search = self.make_device_search if self.on_device(len(sources)) else self.make_search
        search: Search | DeviceSearch = make_search(len(sources), max_steps, line_ids, prefixes)
        cache = self.steps.init_cache(memory, src_mask, max(max_steps), self.cfg.rows_per_sentence)
        processors = self.make_processors(search, max_steps, prefixes)
        attention = self.make_attention(cache, src_mask)
        states = (cache, processors) if attention is None else (cache, processors, attention)
        tokens = search.start_tokens
        for step in range(max(max_steps)):
            logits = self.steps.decode_step(tokens, cache)
            if step == 0 and not bool((logits < math.inf).all()):  # NaN or +inf; -inf may be a bias's ban
                raise NonFiniteValues("the first step's logits")

            def score(logits: torch.Tensor) -> torch.Tensor:  # float32 logits -> processed log-probs, in place
                return processors(self.log_probs(processors.on_logits(logits, step)), step)  # on_logits: mostly none

            graphs = self.search_graphs
            if graphs is not None and graphs.on and self.graphed(search, processors, step):
                graphed = cast(GraphedSearch, search)
                out = graphed.next_rows(graphs.choose(GraphedStep(graphed, processors), logits, score))
            else:
                facts = None if attention is None else attention.facts(cache.attention)
                out = search.advance(score(logits.float()), step, facts)
            yield search
            if search.done:
                break
            for state in states:
                state.follow(out)
            tokens = out.tokens

    def graphed(self, search: Any, processors: Processors, step: int) -> bool:
        """Whether this step's search replays as a CUDA graph (search/device/graphs.py), given
        search graphs (made where the options allow them): a device beam or greedy search, every
        processor doing the same work from this step on."""
        steady = processors.steady_from
        return hasattr(search, "choose") and steady is not None and step >= steady

    def encode(self, sources: list[list[int]]) -> tuple[Any, torch.Tensor]:
        """The batch's memory and source mask: the padded ids through the model's encoder, or, for
        an ensemble whose models split the source differently (MemberSources), each model's own."""
        if isinstance(sources[0], MemberSources):  # the mask of the first model's ids is the search's
            each = self.pad_each(cast("list[MemberSources]", sources))
            return cast(Ensemble, self.model).encode_each(each), each[0][1]
        src, src_mask = self.pad(sources)
        memory = self.model.encode(src, src_mask)
        # checked once a batch, as the first step's logits are (which an ensemble's memories reach)
        if isinstance(memory, torch.Tensor) and not bool(torch.isfinite(memory).all()):
            raise NonFiniteValues("the encoder's output")
        return memory, src_mask

    def pad_each(self, sources: list[MemberSources]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each ensemble model's own ids of the batch, padded with its own pad id, and their masks."""
        return [
            self.pad([s.members[m] for s in sources], model.cfg.pad_id)
            for m, model in enumerate(cast(Ensemble, self.model).members)
        ]

    def forced_prefix(self) -> list[int]:
        """What the decoder is fed before any target token: the decoder start token, then the
        token forced at step 0 when the model has one (target-language tag, BART's BOS)."""
        forced = self.rules.forced_bos_id
        return [self.start_id] + ([] if forced is None else [forced])

    @torch.inference_mode()
    def score(self, sources: list[list[int]], targets: list[list[int]]) -> list[float]:
        """Forced decoding: total log-prob of each target (EOS appended) given its source.

        Targets are the tokens after any forced first token (as `encode_target` gives them). The
        decoder input is what `decode` feeds: the forced prefix, the target, then EOS is
        predicted. The forced token counts 0, as in `decode` (it is forced, not chosen),
        so the score of a translation's own ended 1-best equals its `total`."""
        token_logprobs, gold_mask = self._forced(sources, targets)
        return token_logprobs.masked_fill(~gold_mask, 0.0).sum(dim=1).tolist()

    @torch.inference_mode()
    def score_tokens(
        self, sources: list[list[int]], targets: list[list[int]]
    ) -> list[tuple[list[int], list[float], float]]:
        """Per token, as `decode`'s hypotheses give them: (tokens, token_scores, eos_score)
        of each target; tokens with the forced first token and without EOS, token_scores one per
        token (the forced token's 0 first), eos_score the log-prob of the final EOS."""
        token_logprobs, _ = self._forced(sources, targets)
        forced = self.forced_prefix()[1:]
        rows = token_logprobs.tolist()
        return [(forced + t, [0.0] * len(forced) + row[: len(t)], row[len(t)]) for t, row in zip(targets, rows)]

    def _forced(self, sources: list[list[int]], targets: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T) log-prob of each target token and EOS after the forced prefix, and its mask."""
        prefix = self.forced_prefix()
        tgt_in, _ = self.pad([prefix + t for t in targets])
        gold, gold_mask = self.pad([t + [self.eos_id] for t in targets])
        if isinstance(sources[0], MemberSources):
            each = self.pad_each(cast("list[MemberSources]", sources))
            logits = cast(Ensemble, self.model).forward_each(each, tgt_in)
        else:
            logits = cast(Any, self.model)(*self.pad(sources), tgt_in)  # teacher forcing: the model's forward
        logits = logits[:, len(prefix) - 1 :]  # the positions that predict gold
        logprobs = self.log_probs(logits.float())
        return logprobs.gather(2, gold[:, :, None])[:, :, 0], gold_mask


class NonFiniteValues(RuntimeError):
    """The model computed NaN or infinity from finite weights and ids: weights out of any trained
    range (a tampered int8 scale of 1e30), which would decode lines of nothing that look decoded."""


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """A model's step logits -> log-probabilities (unless it has its own `log_probs`), in place: at a
    256k vocabulary a second (rows, V) tensor each step is a gigabyte of new memory every 16 steps
    of a beam-4 batch of 16. torch's kernel reads each row's value before writing it, so the
    result is the same bits (tests/test_decoding.py checks it)."""
    return torch.log_softmax(logits, dim=-1, out=logits)


class AttentionFacts:
    """Turns each step's cross-attention (N, S) into the RowFacts the search records: the
    coverage penalty of each row with this step counted, and the source position each row
    attends most (the alignment of the token it chooses). Follows the search (a RowState)."""

    def __init__(self, coverage: Coverage | None, alignment: bool, attention: bool = False) -> None:
        self.coverage, self.alignment, self.attention = coverage, alignment, attention

    def facts(self, attention: torch.Tensor | None) -> RowFacts:
        """The facts of a step's cross-attention (N, S): the decoder state's, recorded since
        make_attention asked it to."""
        if attention is None:
            raise RuntimeError("the decoding step recorded no cross-attention, though asked to")
        return RowFacts(
            penalty=None if self.coverage is None else self.coverage.add(attention),
            alignment=attention.argmax(dim=1) if self.alignment else None,
            attention=attention if self.attention else None,
        )

    def follow(self, out: StepOutput) -> None:
        if self.coverage is not None:
            self.coverage.follow(out)
