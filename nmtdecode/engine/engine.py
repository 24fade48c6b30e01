"""The engine: a model loaded once, and what every job does with it.

The command line's jobs, each torchrun rank, `score` and the Python API all load through
`Engine.load` and work through the same calls: `make_example` (a line tokenized and cut as
every caller cuts it) and `decode_batch` / `score_batch` (one batch's results with a job's
decoder, which resolve.py builds on the loaded model; split in halves when memory runs out).
The job pipeline (pipeline.py) feeds it batches. Nothing here knows about files, locks or
ranks: this module imports nothing from the job layer.
"""

from __future__ import annotations

import contextlib
import gc
import math
from typing import Any, Callable, Iterator, Protocol, TypeVar

import torch

from ..models import memory
from ..models.checkpoint import LoadedModel
from ..models.ensemble import MemberSources
from ..models.loading import load_model
from ..models.placement import Placement
from ..models.steps import StepRunner, step_runner_for
from ..options.config import Config, ConfigError, DecodingConfig
from ..search.base import Hypothesis
from . import beam_dump
from .alignment import aligned_result
from .batching import Example, PairScore, Result
from .decoding import BatchDecoder, NonFiniteValues
from .messages import print_warning
from .system import device_for


class Indexed(Protocol):
    index: int  # the input line (named when even one alone does not fit)


Item = TypeVar("Item", bound=Indexed)
Out = TypeVar("Out")

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class Engine:
    """A loaded model on its device, with the options it was loaded with."""

    def __init__(self, config: Config, loaded: LoadedModel, device: torch.device, steps: StepRunner) -> None:
        self.config, self.loaded, self.device = config, loaded, device
        self.steps = steps  # how decoding steps run (models/steps.py), chosen at load, kept across batches and jobs
        self.source_prefix = ""  # the job's --source-prefix, set with its languages (resolve.py)

    @classmethod
    def load(cls, config: Config) -> "Engine":
        """Load the model onto its device, in its dtype, with its matrix-product backend."""
        runtime = config.runtime
        threads = runtime.operation_threads()
        if runtime.threads and threads != runtime.threads:
            print_warning(
                f"threads: {runtime.threads} is more than the {threads} CPUs this process may use; using {threads}"
            )
        if threads:
            torch.set_num_threads(threads)
        device = device_for(runtime)  # system.py: there, and computing in the options' precision
        # every weight read once, straight into its form on its device (models/placement.py)
        placement = Placement(device, DTYPES[runtime.dtype], "int8" if runtime.quantize == "int8" else runtime.gemm)
        io = config.io
        loaded = load_model(io.model, io.ensemble_rule, io.ensemble_weights, placement, io.tokenizer)
        memory.tune_allocator()
        # What is loaded now lives as long as the process: exempt it from the cyclic garbage
        # collector, whose full passes over the model's objects otherwise interrupt decoding. No
        # collection first: a freshly loaded model holds next to no garbage, and a full pass over its
        # objects would delay every load (docs/speed.md#measurements-behind-design-choices).
        gc.freeze()
        return cls.around(config, loaded, device)

    @classmethod
    def around(cls, config: Config, loaded: LoadedModel, device: torch.device) -> "Engine":
        """The engine of a model loaded on `device` (by `load`, or moved back there after it was
        kept in host memory: the CTranslate2 stand-in's unload_model), its step runner made for it."""
        runtime = config.runtime
        steps = step_runner_for(
            loaded.model, device, runtime.cuda_graphs, runtime.traced_step, runtime.quantize, print_warning
        )
        return cls(config, loaded, device, steps)

    def decoding_bytes(self, sentences: int, width: int, positions: int) -> int:
        """What decoding `sentences` sentences of `width` rows up to `positions` needs (models/transformer.py)."""
        return self.loaded.model.decoding_bytes(sentences, width, positions, DTYPES[self.config.runtime.dtype])

    def encode_source(self, text: str | list[str], max_src_length: int | None) -> tuple[list[int], bool]:
        """A source line's ids, the job's --source-prefix before its text, cut to the model's
        positions (or max_src_length) with its EOS kept, and whether it was cut: the one rule
        translate, score and the Python API share. A list is the line's pieces, already tokenized
        (the Python API's token input), taken as they are."""
        tokenizer = self.loaded.tokenizer
        if isinstance(text, list) and self.source_prefix:
            raise ConfigError(
                "source_prefix: a source given as pieces is taken as it is; put the prefix's pieces in it"
            )
        ids = tokenizer.encode_pieces(text) if isinstance(text, list) else tokenizer.encode(self.source_prefix + text)
        cfg = self.loaded.model.cfg
        limit = min(max_src_length or cfg.max_positions, cfg.max_positions)
        if isinstance(ids, MemberSources):  # an ensemble's models, each with its own split
            return ids.cut(limit, cfg.eos_id)
        if len(ids) > limit:
            return ids[: limit - 1] + [cfg.eos_id], True
        return ids, False

    def target_ids(self, target: str | list[str]) -> list[int]:
        """A target or a target prefix as ids, without EOS: text through the target tokenizer, or
        pieces (as CTranslate2 takes them), each the id of that target vocabulary entry (<unk> for
        one the vocabulary lacks)."""
        tokenizer = self.loaded.tokenizer
        if isinstance(target, str):
            return tokenizer.encode_target(target)
        unk = self.loaded.model.cfg.unk_id
        return [unk if found is None else found for found in map(tokenizer.piece_id, target)]

    def make_example(
        self, index: int, text: str | list[str], max_src_length: int | None, prefix: str | list[str] | None = None
    ) -> Example:
        """Tokenize one line (or take its pieces); whitespace-only lines (no pieces) get nothing to
        decode; long ones are cut (EOS kept). A target prefix (text or pieces) becomes target ids
        without EOS (`target_ids`)."""
        prefix_ids = None
        if prefix is not None and (prefix if isinstance(prefix, list) else prefix.strip()):
            prefix_ids = self.target_ids(prefix)
        if not (text if isinstance(text, list) else text.strip()):
            return Example(index, text, prefix=prefix_ids)
        ids, truncated = self.encode_source(text, max_src_length)
        return Example(index, text, ids, truncated=truncated, prefix=prefix_ids)

    def decode_batch(self, batch: list[Example], decoder: BatchDecoder) -> list[Result]:
        """The results of one batch, in its order; split in halves when memory runs out."""
        tokenizer = self.loaded.tokenizer
        if batch[0].ids is None:  # empty lines: n_best hypotheses each, empty or their prefix (as CTranslate2)
            results = [self._nothing_to_decode(e, decoder.cfg) for e in batch]
            if decoder.trace:
                for e, result in zip(batch, results):
                    result.search = beam_dump.empty_record(e, result, decoder, tokenizer)
            return results

        def decode(part: list[Example]) -> list[Result]:
            prefixes = [e.prefix or [] for e in part] if any(e.prefix for e in part) else None
            with nonfinite_named(part):
                decoded = decoder.decode([e.ids_to_decode() for e in part], [e.index for e in part], prefixes)
            check_numbers(part, [[h.total for h in hyps] for hyps in decoded.nbests])
            results = [self.result(e, hyps, decoder.cfg) for e, hyps in zip(part, decoded.nbests)]
            if decoded.search is not None:  # --dump-beam
                for i, (e, result) in enumerate(zip(part, results)):
                    result.search = beam_dump.sentence_record(e, result, decoded.search, i, decoder, tokenizer)
            return results

        return in_halves_when_out_of_memory(batch, decode, lambda part: self.too_big(part, decoder))

    def score_batch(self, batch: list[Example], decoder: BatchDecoder, by_token: bool = False) -> list[PairScore]:
        """Forced decoding of a batch of pairs (scoring.pair_examples): each target's total log-probability, and
        with `by_token` its tokens and per-token log-probabilities (BatchDecoder.score_tokens)."""

        def score(part: list[Example]) -> list[PairScore]:
            sources, targets = [e.ids_to_decode() for e in part], [e.target_to_score() for e in part]
            with nonfinite_named(part):
                if not by_token:
                    scores = [
                        PairScore(e.index, total, len(target) + 1)
                        for e, target, total in zip(part, targets, decoder.score(sources, targets))
                    ]
                else:
                    scores = [
                        PairScore(e.index, sum(token_scores) + eos, len(target) + 1, tokens, token_scores, eos)
                        for e, target, (tokens, token_scores, eos) in zip(
                            part, targets, decoder.score_tokens(sources, targets)
                        )
                    ]
            check_numbers(part, [[s.total] for s in scores])
            return scores

        return in_halves_when_out_of_memory(batch, score)

    def result(self, example: Example, hyps: list[Hypothesis], cfg: DecodingConfig) -> Result:
        """A line's result: each hypothesis's text, and with --replace-unk or --report-align what its
        alignment makes of it (word_alignment.py); the alignment itself is reported only when asked."""
        tokenizer = self.loaded.tokenizer
        if not (cfg.replace_unk or cfg.report_align):
            return Result(example.index, hyps, [tokenizer.decode(h.tokens) for h in hyps])
        mc = self.loaded.model.cfg
        special = {mc.eos_id, mc.bos_id, mc.pad_id, mc.decoder_start_id, *tokenizer.languages.values()}
        source_ids = example.ids or []
        text = example.text if isinstance(example.text, list) else self.source_prefix + example.text
        source_pieces = tokenizer.source_pieces(text) if source_ids else []
        if example.truncated:  # cut as encode_source cuts the ids, its EOS kept
            source_pieces = source_pieces[: len(source_ids) - 1] + [tokenizer.source_piece(mc.eos_id) or ""]
        if len(source_pieces) != len(source_ids):
            raise RuntimeError(
                f"input line {example.index + 1}: the tokenizer gave {len(source_pieces)} pieces for "
                f"{len(source_ids)} ids"
            )
        result = aligned_result(
            example.index,
            hyps,
            tokenizer,
            source_ids,
            source_pieces,
            special,
            mc.unk_id,
            cfg.replace_unk,
            cfg.report_align,
        )
        if not cfg.alignment:
            for hyp in hyps:
                hyp.alignment = None
        return result

    def too_big(self, batch: list[Example], decoder: BatchDecoder) -> str | None:
        """Why a CPU batch may not fit in the memory available now (a warning), or None: its need at
        the step limit, which decides a split, never a refusal (its sentences may end sooner)."""
        available = memory.available_bytes()
        if self.device.type != "cpu" or available is None or len(batch) == 1:
            return None
        positions = max(decoder.max_steps([len(e.ids_to_decode()) for e in batch]))
        model = self.loaded.model
        need = model.decoding_bytes(
            len(batch), decoder.cfg.rows_per_sentence, positions, next(model.parameters()).dtype
        )
        if need <= available:
            return None
        return (
            f"a batch of {len(batch)} sentences may need {memory.readable_size(need)} by its step limit, more than "
            f"the {memory.readable_size(available)} available; decoding it in halves"
        )

    def _nothing_to_decode(self, example: Example, cfg: DecodingConfig) -> Result:
        """An empty source line's result: n_best hypotheses of its prefix (none: empty), scored 0, with
        one entry per token in every per-token array (no source position to align to: null)."""
        tokens = list(example.prefix or [])
        arrays: dict[str, Any] = dict(
            alignment=[None] * len(tokens) if cfg.aligned else None,
            attention=[[] for _ in tokens] if cfg.attention else None,
        )
        hyps = [Hypothesis(list(tokens), 0.0, 0.0, [0.0] * len(tokens), **arrays) for _ in range(cfg.n_best)]
        return self.result(example, hyps, cfg)


# fbgemm's message when the activations it quantizes hold NaN or infinity (int8 decoding)
FBGEMM_NONFINITE = "ChooseQuantizationParams"


def damaged(examples: list[Example]) -> str:
    lines = sorted(e.index + 1 for e in examples)
    where = f"input line {lines[0]}" if len(lines) == 1 else f"the batch of input lines {lines[0]} to {lines[-1]}"
    return (
        f"{where}: the model computed NaN or infinite values; its weights are damaged "
        "(a tampered file, or a checkpoint saved after training diverged)"
    )


def check_numbers(part: list[Example], totals: list[list[float]]) -> None:
    """A model whose weights are finite but out of range (a scale of 1e30) computes NaN: its
    log-probabilities rank nothing, and the line written would only look decoded."""
    for example, numbers in zip(part, totals):
        if any(math.isnan(n) for n in numbers):
            raise RuntimeError(damaged([example]))


@contextlib.contextmanager
def nonfinite_named(part: list[Example]) -> Iterator[None]:
    """int8 products refuse NaN or infinite activations in fbgemm's words: said as check_numbers says it."""
    try:
        yield
    except RuntimeError as error:
        if not isinstance(error, NonFiniteValues) and FBGEMM_NONFINITE not in str(error):
            raise
        raise RuntimeError(damaged(part)) from None


def in_halves_when_out_of_memory(
    batch: list[Item],
    work: Callable[[list[Item]], list[Out]],
    too_big: Callable[[list[Item]], str | None] = lambda part: None,
) -> list[Out]:
    """work(batch), a list with one entry per item. When the device runs out of memory (or on CPU,
    `too_big` says it certainly would) the batch is split in halves and retried, down to single
    items (which then fail, naming the line)."""
    split = too_big(batch)
    if split is None:
        try:
            return work(batch)
        except (RuntimeError, MemoryError) as error:  # torch.OutOfMemoryError is a RuntimeError
            if not memory.is_out_of_memory(error):
                raise
            split = f"out of memory on a batch of {len(batch)} sentences; retrying it in halves"
    # retried only out here: inside `except`, the traceback keeps the failed attempt's tensors alive
    if len(batch) == 1:
        raise RuntimeError(
            f"out of memory on input line {batch[0].index + 1}, even alone; "
            "try a smaller --beam-size, --max-src-length or --max-length"
        )
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    print_warning(split)
    half = len(batch) // 2
    return in_halves_when_out_of_memory(batch[:half], work, too_big) + in_halves_when_out_of_memory(
        batch[half:], work, too_big
    )
