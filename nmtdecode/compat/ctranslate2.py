"""CTranslate2's `Translator` on nmtdecode: a CTranslate2 script runs unchanged on the original
checkpoint (no conversion) once it imports this module instead of `ctranslate2`:

    from nmtdecode.compat import ctranslate2          # was: import ctranslate2
    translator = ctranslate2.Translator("data/demo", device="cpu")
    results = translator.translate_batch([["\u2581good", "\u2581morning"]])
    results[0].hypotheses[0]                          # ['\u2581Guten', '\u2581Morgen']

It takes CTranslate2's argument names and defaults (ctranslate2_options.py) and returns its
result types: pieces in and out, `TranslationResult`, `ScoringResult`, `GenerationStepResult`,
`ExecutionStats`, futures with `asynchronous=True`, a `callback` per step. At its defaults the
search is CTranslate2's (`--early-stopping ctranslate2` with the average length penalty): the same
n-best lists, and scores within CTranslate2's own rounding. An argument it does not support is
refused by name. The work is nmtdecode's Python API (api.py); every call runs on one worker
thread, in the order made. docs/ctranslate2.md lists what differs.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Generator, Iterable, Iterator

from .. import api
from ..jobs.output_file import written_whole
from .ctranslate2_alternatives import alternatives
from .ctranslate2_loading import ModelSlot
from .ctranslate2_options import (
    DECODING_DEFAULTS,
    GENERATE_KEYS,
    LOAD_DEFAULTS,
    UnsupportedArgument,
    batching_options,
    check_alternatives,
    decoding_options,
    filled,
    load_options,
    refuse_unsupported,
    get_supported_compute_types,
    windows,
    start_groups,
)
from .ctranslate2_results import (
    AsyncScoringResult,
    AsyncTranslationResult,
    ExecutionStats,
    GenerationStepResult,
    ScoringResult,
    TranslationResult,
)

__version__ = "4.8.5"  # the CTranslate2 release whose Python API this module mirrors (tested against it)

__all__ = [
    "Translator",
    "TranslationResult",
    "ScoringResult",
    "GenerationStepResult",
    "ExecutionStats",
    "AsyncTranslationResult",
    "AsyncScoringResult",
    "UnsupportedArgument",
    "set_random_seed",
    "get_cuda_device_count",
    "get_supported_compute_types",
    "contains_model",
    "__version__",
]

_random_seed = 0  # set_random_seed's, for sampling


def set_random_seed(seed: int) -> None:
    """The seed of the samples drawn after it (nmtdecode's draws, not CTranslate2's)."""
    global _random_seed
    _random_seed = seed


def get_cuda_device_count() -> int:
    import torch

    return torch.cuda.device_count()


def contains_model(path: str) -> bool:
    """Whether `path` is a model nmtdecode reads (not a CTranslate2 conversion: its original)."""
    from ..models.detect import model_format

    try:
        model_format(path)
    except ValueError:
        return False
    return True


class Translator:
    """CTranslate2's Translator over the model at `model_path`, a checkpoint nmtdecode reads."""

    def __init__(self, model_path: str, device: str = "cpu", **options: Any) -> None:
        """device "auto" is a GPU where there is one; compute_type "auto" is CTranslate2's choice
        for the device (int8 on a CPU that multiplies in int8 natively); `compute_type` says what
        was chosen."""
        args = filled("Translator", options, LOAD_DEFAULTS)
        self._slot = ModelSlot(model_path, load_options(device, args))
        engine = self._slot.api.engine
        self._tokenizer, self._model = engine.loaded.tokenizer, engine.loaded.model.cfg
        self._work = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nmtdecode-ctranslate2")
        self.model_path = model_path
        self.device = engine.device.type  # "cpu" or "cuda", never "auto"
        self.device_index = [engine.device.index or 0]
        quantized = engine.loaded.gemm == "int8"  # --quantize int8, or a CTranslate2 folder stored in int8
        self.compute_type = "int8_float32" if quantized else engine.config.runtime.dtype
        self.num_translators = args["inter_threads"]
        self.tensor_parallel = False

    @property
    def model_is_loaded(self) -> bool:
        """Whether the model is loaded and ready (False after unload_model)."""
        return self._slot.loaded

    def unload_model(self, to_cpu: bool = False) -> None:
        """Free the model's memory until load_model; with to_cpu=True a GPU model's weights are kept
        in host memory (on a CPU nothing changes). The calls made before it run first."""
        self._work.submit(self._slot.unload, to_cpu).result()

    def load_model(self, keep_cache: bool = False) -> None:
        """Load the model back (from its files, or from the weights unload_model(to_cpu=True) kept,
        which keep_cache=True keeps in host memory as well)."""
        self._work.submit(self._slot.load, keep_cache).result()

    def translate_batch(
        self,
        source: list[list[str]],
        target_prefix: list[list[str] | None] | None = None,
        *,
        max_batch_size: int = 0,
        batch_type: str = "examples",
        asynchronous: bool = False,
        callback: Callable[[GenerationStepResult], bool] | None = None,
        **decoding: Any,
    ) -> list:
        """Each source's hypotheses as a TranslationResult (AsyncTranslationResults with
        asynchronous=True). With a callback (beam_size=1), each token is passed to it as the search
        chooses it; a True answer ends that source's hypothesis there."""
        args = self._decoding("translate_batch", decoding)
        batching = batching_options(max_batch_size, batch_type, len(source))
        sources = [self._source(s) for s in source]
        prefixes = None if target_prefix is None else [list(p) if p else None for p in target_prefix]
        if args["return_alternatives"]:
            check_alternatives(args, callback)
            work = partial(self._alternatives, sources, prefixes, args, batching)
        elif callback is None:
            work = partial(self._translate, sources, prefixes, args, self._call_options(batching, args))
        elif args["beam_size"] != 1 or args["num_hypotheses"] != 1:
            raise ValueError("The callback function is not compatible with beam_size > 1 or num_hypotheses > 1")
        else:
            options = self._call_options(batching, args)
            work = partial(self._translate_stepwise, sources, prefixes, args, options, callback)
        return self._submit(work, asynchronous, AsyncTranslationResult, len(sources))

    def translate_iterable(
        self,
        source: Iterable[list[str]],
        target_prefix: Iterable[list[str]] | None = None,
        max_batch_size: int = 32,
        batch_type: str = "examples",
        **options: Any,
    ) -> Iterator[TranslationResult]:
        """translate_batch over an iterable, a window of sources at a time (sorted and batched
        inside it), each result yielded in input order."""
        for sources, prefixes in windows(source, target_prefix, max_batch_size, batch_type):
            yield from self.translate_batch(
                sources, prefixes, max_batch_size=max_batch_size, batch_type=batch_type, **options
            )

    def score_batch(
        self,
        source: list[list[str]],
        target: list[list[str]],
        *,
        max_batch_size: int = 0,
        batch_type: str = "examples",
        max_input_length: int = 1024,
        offset: int = 0,
        asynchronous: bool = False,
    ) -> list:
        """Each target's pieces with EOS appended and the log-probability of each (ScoringResult),
        the first `offset` left out."""
        options = {
            **batching_options(max_batch_size, batch_type, len(source)),
            "max_src_length": max_input_length or None,
        }
        work = partial(self._score, [self._source(s) for s in source], [list(t) for t in target], options, offset)
        return self._submit(work, asynchronous, AsyncScoringResult, len(source))

    def score_iterable(
        self,
        source: Iterable[list[str]],
        target: Iterable[list[str]],
        max_batch_size: int = 64,
        batch_type: str = "examples",
        **options: Any,
    ) -> Iterator[ScoringResult]:
        """score_batch over two iterables, a window at a time, in input order."""
        for sources, targets in windows(source, target, max_batch_size, batch_type):
            yield from self.score_batch(
                sources, targets, max_batch_size=max_batch_size, batch_type=batch_type, **options
            )

    def generate_tokens(
        self,
        source: list[str],
        target_prefix: list[str] | None = None,
        *,
        return_log_prob: bool = False,
        **decoding: Any,
    ) -> Iterator[GenerationStepResult]:
        """One source's tokens as the search chooses them (greedy, or sampled with sampling_topk),
        the end token last when the hypothesis ends with it."""
        args = self._decoding(
            "generate_tokens", filled("generate_tokens", decoding, {k: DECODING_DEFAULTS[k] for k in GENERATE_KEYS})
        )
        options = self._options("generate_tokens", {**args, "beam_size": 1})
        for step in self._steps(self._source(source), list(target_prefix) if target_prefix else None, options, 0):
            yield step if return_log_prob else dataclasses.replace(step, log_prob=None)

    def translate_file(
        self,
        source_path: str,
        output_path: str,
        target_path: str | None = None,
        *,
        max_batch_size: int = 32,
        read_batch_size: int = 0,
        batch_type: str = "examples",
        with_scores: bool = False,
        source_tokenize_fn: Callable[[str], list[str]] | None = None,
        target_tokenize_fn: Callable[[str], list[str]] | None = None,
        target_detokenize_fn: Callable[[list[str]], str] | None = None,
        **decoding: Any,
    ) -> ExecutionStats:
        """Translate a file of tokenized lines (pieces separated by spaces, or `source_tokenize_fn`'s)
        into `output_path`: each hypothesis a line (`SCORE ||| ` first with with_scores), its pieces
        joined by spaces (or `target_detokenize_fn`'s text). `target_path`: target prefixes.
        `read_batch_size` changes nothing here (lines are sorted a chunk at a time, as translate does)."""
        if bool(source_tokenize_fn) != bool(target_detokenize_fn):
            raise ValueError("source_tokenize_fn and target_detokenize_fn should both be set or none at all")
        if target_path and source_tokenize_fn and not target_tokenize_fn:
            raise ValueError("target_tokenize_fn should be set when passing a target file")
        tokenize, target_tokenize = source_tokenize_fn or str.split, target_tokenize_fn or str.split
        detokenize = target_detokenize_fn or " ".join
        start, examples, tokens = time.perf_counter(), 0, 0
        with written_whole(output_path, [source_path] + ([target_path] if target_path else [])) as out:
            prefixes = None if target_path is None else map(target_tokenize, _lines(target_path))
            for result in self.translate_iterable(
                map(tokenize, _lines(source_path)),
                prefixes,
                max_batch_size=max_batch_size,
                batch_type=batch_type,
                return_scores=with_scores,
                **decoding,
            ):
                examples, tokens = examples + 1, tokens + len(result.hypotheses[0])
                for n, hypothesis in enumerate(result.hypotheses):
                    out.write((f"{result.scores[n]:g} ||| " if with_scores else "") + detokenize(hypothesis) + "\n")
        return ExecutionStats(tokens, examples, (time.perf_counter() - start) * 1000)

    # the work, on the worker thread

    def _submit(self, work: Callable[[], list], asynchronous: bool, wrapper: type, count: int) -> list:
        self._slot.api  # noqa: B018 - a call to an unloaded model fails here, as CTranslate2's
        future = self._work.submit(work)
        return [wrapper(future, i) for i in range(count)] if asynchronous else future.result()

    def _translate(self, sources: list, prefixes: list | None, args: dict, options: dict) -> list[TranslationResult]:
        nbests = self._by_start(self._slot.api.translate_batch, sources, prefixes, options)
        return [self._result(source, hyps, args) for source, hyps in zip(sources, nbests)]

    def _by_start(self, call: Callable[..., list], sources: list, firsts: list | None, options: dict) -> list:
        """call(sources, prefixes or targets, **options) per group of start_groups (one group
        unless the folder leaves its decoder start to each prefix's first token), the results in
        the sources' order."""
        results: list = [None] * len(sources)
        for code, indices, rests in start_groups(self._tokenizer, firsts, len(sources)):
            found = call([sources[i] for i in indices], rests, **options, **({"tgt_lang": code} if code else {}))
            for i, result in zip(indices, found):
                results[i] = result
        return results

    def _alternatives(
        self, sources: list, prefixes: list | None, args: dict, batching: dict
    ) -> list[TranslationResult]:
        """return_alternatives: each source's alternatives after its prefix, in their order."""
        given = [(p or []) for p in prefixes] if prefixes else [[] for _ in sources]
        options_for = partial(self._call_options, batching)
        found = alternatives(self._slot.api, sources, given, args, options_for, self._piece)
        return [
            self._result(source, [a.hypothesis for a in alts], args, [a.score for a in alts])
            for source, alts in zip(sources, found)
        ]

    def _result(
        self, source: list[str], hyps: list[api.Translation], args: dict, scores: list[float] | None = None
    ) -> TranslationResult:
        """A source's TranslationResult: its best num_hypotheses (of more samples, at beam_size > 1),
        their scores (the hypotheses' own unless given), and their attention over the source's
        pieces, as CTranslate2 gives it: not over the EOS the model adds."""
        hyps = hyps[: args["num_hypotheses"]]
        return TranslationResult(
            [self._hypothesis(source, hyp, args) for hyp in hyps],
            ([hyp.score for hyp in hyps] if scores is None else scores) if args["return_scores"] else [],
            [[row[: len(source)] for row in hyp.attention or []] for hyp in hyps] if args["return_attention"] else [],
        )

    def _translate_stepwise(
        self,
        sources: list,
        prefixes: list | None,
        args: dict,
        options: dict,
        callback: Callable[[GenerationStepResult], bool],
    ) -> list[TranslationResult]:
        """translate_batch with a callback: each source a token at a time (as CTranslate2 calls it,
        with beam_size 1), its hypothesis ended early when the callback returns True."""
        results = []
        for batch_id, source in enumerate(sources):
            prefix = None if prefixes is None else prefixes[batch_id]
            steps, chosen, total = self._steps(source, prefix, options, batch_id), [], 0.0
            while True:
                try:
                    step = next(steps)
                except StopIteration as end:  # the whole hypothesis
                    results.append(self._result(source, [end.value], args))
                    break
                chosen += [step.token] if step.token_id != self._model.eos_id else []
                total += step.log_prob or 0.0
                told = step if args["return_scores"] else dataclasses.replace(step, log_prob=None)
                if callback(told) and not step.is_last:  # cut here: CTranslate2's score of what was chosen
                    steps.close()
                    pieces = (start_groups(self._tokenizer, [prefix], 1)[0][2][0] or []) + chosen
                    scores = [total / len(pieces) ** args["length_penalty"]] if args["return_scores"] else []
                    results.append(TranslationResult([pieces], scores, []))
                    break
        return results

    def _steps(
        self, source: list[str], prefix: list[str] | None, options: dict, batch_id: int
    ) -> Generator[GenerationStepResult, None, api.Translation]:
        """One source's chosen tokens as CTranslate2's step results, its prefix's left out, the EOS
        that ends it last (is_last), or its last token when the step limit cuts it; returns the
        hypothesis."""
        code, _, (prefix,) = start_groups(self._tokenizer, [prefix], 1)[0]
        tokens = self._slot.api.generate_tokens(source, prefix, **options, **({"tgt_lang": code} if code else {}))
        while True:
            try:
                token = next(tokens)
            except StopIteration as end:
                final = end.value
                break
            if token.step >= len(prefix or []):
                yield GenerationStepResult(
                    token.step, batch_id, token.token_id, 0, token.piece or "", token.log_prob, None, token.is_last
                )
        if final.ended and final.eos_score is not None:
            eos = self._model.eos_id
            yield GenerationStepResult(
                len(final.tokens), batch_id, eos, 0, self._piece(eos), final.eos_score, None, True
            )
        return final

    def _score(self, sources: list, targets: list, options: dict, offset: int) -> list[ScoringResult]:
        eos = self._piece(self._model.eos_id)
        return [
            ScoringResult(
                ([self._piece(t) for t in s.tokens] + [eos])[offset:], (s.token_scores + [s.eos_score])[offset:]
            )
            for s in self._by_start(self._slot.api.score_batch, sources, targets, options)
        ]

    # CTranslate2's terms and ours

    def _decoding(self, method: str, given: dict) -> dict:
        """The decoding arguments of a call with CTranslate2's defaults filled in (an end_token that
        is the model's EOS is the default), those nmtdecode does not support refused at once."""
        args = filled(method, given, DECODING_DEFAULTS)
        if args["end_token"] in ([self._piece(self._model.eos_id)], self._piece(self._model.eos_id)):
            args["end_token"] = None
        refuse_unsupported(method, args, DECODING_DEFAULTS)
        return args

    def _call_options(self, batching: dict, args: dict) -> dict:
        """translate_batch's API options for these decoding arguments and this batching."""
        return {**self._options("translate_batch", args), **batching}

    def _options(self, method: str, args: dict) -> dict:
        options = decoding_options(method, args, self._model.max_positions)
        return {**options, "seed": _random_seed} if options.get("sampling") else options

    def _source(self, pieces: list[str]) -> list[str]:
        """A source's pieces without the EOS a converted model may need given (CTranslate2's docs
        append it for some): the model's tokenizer adds its own. A CTranslate2 folder's tokenizer
        takes them as CTranslate2 does, as they are."""
        pieces = list(pieces)
        if getattr(self._tokenizer, "pieces_as_given", False):
            return pieces
        eos = self._tokenizer.source_piece(self._model.eos_id)
        return pieces[:-1] if pieces and pieces[-1] == eos else pieces

    def _piece(self, token_id: int) -> str:
        return self._tokenizer.target_piece(token_id) or ""

    def _hypothesis(self, source: list[str], hyp: api.Translation, args: dict) -> list[str]:
        """A hypothesis's pieces; with replace_unknowns each <unk> is the source piece it attends most."""
        pieces = [self._piece(t) for t in hyp.tokens]
        if args["replace_unknowns"] and hyp.alignment is not None:
            for t, (token, position) in enumerate(zip(hyp.tokens, hyp.alignment)):
                if token == self._model.unk_id and position is not None and position < len(source):
                    pieces[t] = source[position]
        return pieces


def _lines(path: str) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield line.rstrip("\r\n")
