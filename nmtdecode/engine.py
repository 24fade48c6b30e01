"""The engine: a model loaded once, and what every caller does with it.

The command line's jobs (run.py), each torchrun rank, `score` (scoring.py) and the
Python API (api.py) all load through `Engine.load` and decode through the same
three calls: `decoder(config)` (a job's effective options, the model's own defaults
filled in, and its `BatchDecoder`), `make_example` (a line tokenized and cut as
every caller cuts it) and `decode_batch` (results, with the batch split in halves
when memory runs out); what a job reports is summary.py's. Nothing here knows about
files, locks or ranks: this module imports nothing from the job layer.
"""

from __future__ import annotations

import gc
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator

import torch

from . import beam_dump, memory
from .batching import Example, Result
from .config import Config, ConfigError, DecodingConfig, RuntimeConfig
from .decoding import BatchDecoder
from .models.checkpoint import LoadedModel, ModelError, largest_demand
from .models.ensemble import MemberSources
from .models.fixed_step import FixedShapeSteps, fixed_steps_for
from .models.traced_step import TracedSteps, traced_steps_for
from .models.loading import load_model
from .models.placement import Placement
from .pieces import aligned_result
from .search.base import Hypothesis
from .summary import warn

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(runtime: RuntimeConfig) -> torch.device:
    if runtime.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if runtime.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: {runtime.device} was asked for, but no CUDA device is available")
    return torch.device(runtime.device)


class Engine:
    """A loaded model on its device, with the options it was loaded with."""

    def __init__(self, config: Config, loaded: LoadedModel, device: torch.device,
                 fixed_steps: FixedShapeSteps | None = None, traced_steps: TracedSteps | None = None):
        self.config, self.loaded, self.device = config, loaded, device
        self.fixed_steps = fixed_steps  # the CUDA-graph step (models/fixed_step.py), kept across batches and jobs
        self.traced_steps = traced_steps  # the CPU step recorded by TorchScript (models/traced_step.py), likewise

    @classmethod
    def load(cls, config: Config) -> "Engine":
        """Load the model onto its device, in its dtype, with its matrix-product backend."""
        runtime = config.runtime
        threads = runtime.operation_threads()
        if threads:
            torch.set_num_threads(threads)
        device = resolve_device(runtime)
        if runtime.quantize == "int8" and device.type != "cpu":
            raise ConfigError("quantize: int8 is for CPU decoding; on CUDA use --dtype float16 or bfloat16")
        # every weight read once, straight into its form on its device (models/placement.py)
        placement = Placement(device, DTYPES[runtime.dtype], "int8" if runtime.quantize == "int8" else runtime.gemm)
        loaded = load_model(config.io.model, config.io.ensemble_rule, config.io.ensemble_weights, placement)
        memory.tune_allocator()
        # What is loaded now lives as long as the process: exempt it from the cyclic garbage
        # collector, whose full passes over the model's objects otherwise interrupt decoding. No
        # collection first: it found ~20 unreachable objects among ~170,000 and took 80-100 ms.
        gc.freeze()
        return cls(config, loaded, device, fixed_steps_for(loaded.model, device, runtime.cuda_graphs, warn),
                   traced_steps_for(loaded.model, device, runtime.traced_step, runtime.quantize, warn))

    def decoder(self, config: Config, warn=warn, api: bool = False) -> tuple[Config, BatchDecoder]:
        """A job's effective config (the model's defaults under the user's options) and its
        decoder; options that change nothing are told to `warn`, named as command-line flags,
        or with `api` as the Python API's keyword arguments (and then none about --format)."""
        config, decoder = self.scorer(config)
        self.loaded.check_decoding(config.decoding)
        for note in ineffective(config, self.loaded.model.cfg.max_positions, self.device.type, api):
            warn(note)
        self._check_fits(config)
        return config, decoder

    def scorer(self, config: Config) -> tuple[Config, BatchDecoder]:
        """As `decoder`, for forced decoding (`score`), which no search option affects."""
        config = config.with_model_defaults(self.loaded.defaults)
        rules = self.loaded.rules_for(config.decoding.src_lang, config.decoding.tgt_lang)
        decoder = BatchDecoder(self.loaded.model, config.decoding, rules,
                               piece_id=getattr(self.loaded.tokenizer, "piece_id", None), fixed_steps=self.fixed_steps,
                               trace=config.io.dump_beam is not None, traced_steps=self.traced_steps)
        return config, decoder

    def encode_source(self, text: str | list[str], max_src_length: int | None) -> tuple[list[int], bool]:
        """A source line's ids, cut to the model's positions (or max_src_length) with its EOS kept,
        and whether it was cut: the one rule translate and score share. A list is the line's
        pieces, already tokenized (the Python API's token input)."""
        tokenizer = self.loaded.tokenizer
        ids = tokenizer.encode_pieces(text) if isinstance(text, list) else tokenizer.encode(text)
        cfg = self.loaded.model.cfg
        limit = min(max_src_length or cfg.max_positions, cfg.max_positions)
        if isinstance(ids, MemberSources):  # an ensemble's models, each with its own split
            return ids.cut(limit, cfg.eos_id)
        if len(ids) > limit:
            return ids[: limit - 1] + [cfg.eos_id], True
        return ids, False

    def make_example(self, index: int, text: str | list[str], max_src_length: int | None,
                     prefix: str | None = None) -> Example:
        """Tokenize one line (or take its pieces); whitespace-only lines (no pieces) get nothing to
        decode; long ones are cut (EOS kept). A target prefix is tokenized with the target
        tokenizer, without EOS."""
        prefix_ids = self.loaded.tokenizer.encode_target(prefix) if prefix and prefix.strip() else None
        if not (text if isinstance(text, list) else text.strip()):
            return Example(index, text, prefix=prefix_ids)
        ids, truncated = self.encode_source(text, max_src_length)
        return Example(index, text, ids, truncated=truncated, prefix=prefix_ids)

    def decode_batch(self, batch: list[Example], decoder: BatchDecoder) -> list[Result]:
        """The results of one batch, in its order."""
        tokenizer = self.loaded.tokenizer
        if batch[0].ids is None:  # empty lines: n_best hypotheses each, empty or their prefix (as CTranslate2)
            results = [self._nothing_to_decode(e, decoder.cfg) for e in batch]
            if decoder.trace:
                for e, result in zip(batch, results):
                    result.search = beam_dump.empty_record(e, result, decoder, tokenizer)
            return results

        def decode(part: list[Example]) -> list[Result]:
            prefixes = [e.prefix or [] for e in part] if any(e.prefix for e in part) else None
            sources, line_ids = [e.ids for e in part], [e.index for e in part]
            if decoder.trace:
                nbests, search = decoder.search_batch(sources, line_ids, prefixes)
            else:
                nbests = decoder.translate_batch(sources, line_ids, prefixes)
            results = [self.result(e, hyps, decoder.cfg) for e, hyps in zip(part, nbests)]
            if decoder.trace:
                for i, (e, result) in enumerate(zip(part, results)):
                    result.search = beam_dump.sentence_record(e, result, search, i, decoder, tokenizer)
            return results

        return self.in_halves_when_out_of_memory(batch, decode, lambda part: self._too_big(part, decoder))

    def batches_at_once(self, config: Config) -> int:
        return batches_at_once(config, self.device.type)

    def decode_batches(self, batches: Iterable[list[Example]], decoder: BatchDecoder,
                       at_once: int = 1) -> Iterator[tuple[list[Example], list[Result]]]:
        """Each batch with its results, in the order given, `at_once` batches decoded at the same
        time (--inter-threads, `in_order`). The model and the decoder are shared; all per-batch
        state (search, cache, processors) is the batch's own."""
        return in_order(lambda batch: self.decode_batch(batch, decoder), batches, at_once)

    def result(self, example: Example, hyps: list[Hypothesis], cfg: DecodingConfig) -> Result:
        """A line's result: each hypothesis's text, and with --replace-unk or --report-align what its
        alignment makes of it (pieces.py); the alignment itself is reported only when asked."""
        tokenizer = self.loaded.tokenizer
        if not (cfg.replace_unk or cfg.report_align):
            return Result(example.index, hyps, [tokenizer.decode(h.tokens) for h in hyps])
        mc = self.loaded.model.cfg
        special = {mc.eos_id, mc.bos_id, mc.pad_id, mc.decoder_start_id, *getattr(tokenizer, "languages", {}).values()}
        source_ids = example.ids or []
        source_pieces = tokenizer.source_pieces(example.text) if source_ids else []
        if example.truncated:  # cut as encode_source cuts the ids, its EOS kept
            source_pieces = source_pieces[: len(source_ids) - 1] + [tokenizer.source_piece(mc.eos_id) or ""]
        if len(source_pieces) != len(source_ids):
            raise RuntimeError(f"input line {example.index + 1}: the tokenizer gave {len(source_pieces)} pieces for "
                               f"{len(source_ids)} ids")
        result = aligned_result(example.index, hyps, tokenizer, source_ids, source_pieces, special, mc.unk_id,
                                cfg.replace_unk, cfg.report_align)
        if not cfg.alignment:
            for hyp in hyps:
                hyp.alignment = None
        return result

    def in_halves_when_out_of_memory(self, batch: list, work, too_big=lambda part: None) -> list:
        """work(batch), a list with one entry per item. When the device runs out of memory (or on
        CPU, `too_big` says it certainly would) the batch is split in halves and retried, down to
        single items (which then fail, naming the line)."""
        results, split = None, too_big(batch)
        if split is None:
            try:
                results = work(batch)
            except (RuntimeError, MemoryError) as error:  # torch.OutOfMemoryError is a RuntimeError
                if not memory.is_out_of_memory(error):
                    raise
                split = f"out of memory on a batch of {len(batch)} sentences; retrying it in halves"
            # retried only out here: inside `except`, the traceback keeps the failed attempt's tensors alive
        if results is not None:
            return results
        if len(batch) == 1:
            raise RuntimeError(f"out of memory on input line {batch[0].index + 1}, even alone; "
                               "try a smaller --beam-size, --max-src-length or --max-length")
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        warn(split)
        half = len(batch) // 2
        return (self.in_halves_when_out_of_memory(batch[:half], work, too_big)
                + self.in_halves_when_out_of_memory(batch[half:], work, too_big))

    def _check_fits(self, config: Config):
        """On CPU, refuse before decoding a beam that not even one sentence could be decoded with
        (memory.py: an allocation that large may end in the kernel's OOM killer, not an error)."""
        decoding, total = config.decoding, memory.total_bytes()
        width = decoding.rows_per_sentence
        if self.device.type != "cpu" or total is None or width == 1 or decoding.max_length < 2:
            return
        need = self.loaded.model.decoding_bytes(1, width, 2, DTYPES[config.runtime.dtype])
        if need > total:
            key = "n_best" if decoding.sampling else "beam_size"
            raise ConfigError(f"{key}: {width} needs at least {memory.readable_size(need)} for one "
                              f"sentence's second decoding step, more than the {memory.readable_size(total)} "
                              "this process can use; choose a smaller beam")

    def _too_big(self, batch: list[Example], decoder: BatchDecoder) -> str | None:
        """Why a CPU batch may not fit in the memory available now (a warning), or None: its need at
        the step limit, which decides a split, never a refusal (its sentences may end sooner)."""
        available = memory.available_bytes()
        if self.device.type != "cpu" or available is None or len(batch) == 1:
            return None
        positions = max(decoder.max_steps([len(e.ids) for e in batch]))
        model = self.loaded.model
        need = model.decoding_bytes(len(batch), decoder.cfg.rows_per_sentence, positions,
                                    next(model.parameters()).dtype)
        if need <= available:
            return None
        return (f"a batch of {len(batch)} sentences may need {memory.readable_size(need)} by its step limit, more than "
                f"the {memory.readable_size(available)} available; decoding it in halves")

    def _nothing_to_decode(self, example: Example, cfg) -> Result:
        """An empty source line's result: n_best hypotheses of its prefix (none: empty), scored 0, with
        one entry per token in every per-token array (no source position to align to: null)."""
        tokens = list(example.prefix or [])
        arrays = dict(alignment=[None] * len(tokens) if cfg.aligned else None,
                      attention=[[] for _ in tokens] if cfg.attention else None)
        hyps = [Hypothesis(list(tokens), 0.0, 0.0, [0.0] * len(tokens), **arrays) for _ in range(cfg.n_best)]
        return self.result(example, hyps, cfg)


def in_order(work, items: Iterable, at_once: int = 1) -> Iterator[tuple]:
    """(item, work(item)) for each item, in the order given, with `at_once` items worked on at the
    same time, each by a thread of its own. Decoding, torch releases the GIL inside its
    operations, so one batch's matrix products run while another's Python bookkeeping does, as
    CTranslate2's inter_threads replicas do."""
    if at_once == 1:
        for item in items:
            yield item, work(item)
        return
    with ThreadPoolExecutor(at_once, thread_name_prefix="nmtdecode-batch") as pool:
        pending: deque = deque()  # (item, future) in the order given, at most at_once
        try:
            for item in items:
                pending.append((item, pool.submit(work, item)))
                if len(pending) == at_once:
                    item, future = pending.popleft()
                    yield item, future.result()
            while pending:
                item, future = pending.popleft()
                yield item, future.result()
        finally:  # stopped early (an error, a signal): what has not started never will
            for _, future in pending:
                future.cancel()


def batches_at_once(config: Config, device_type: str) -> int:
    """--inter-threads on CPU; one batch at a time on CUDA (its steps replay one captured graph)
    and when answering line by line (each line is answered before the next is read)."""
    if device_type != "cpu" or config.io.stream:
        return 1
    return config.runtime.inter_threads


def ineffective(config: Config, max_positions: int, device_type: str, api: bool = False) -> list[str]:
    """Warnings for options that change nothing (or only slow things down) in this job: not
    errors, since a shared config file may well set them for another model or format. Options
    are named as flags, or with `api` as keyword arguments; the Python API has no --format
    (its methods' results say which options show: api.py warns about those)."""
    decoding, user = config.decoding, config.user_keys
    notes = [] if api else format_notes(config)
    flag = keyword if api else cli_flag
    if "beta" in user and decoding.beta != 0 and decoding.coverage_penalty == "none":
        notes.append(f"beta: {decoding.beta} has no effect without {flag('coverage_penalty', 'wu', 'summary')}")
    if decoding.coverage_penalty != "none" and decoding.beta == 0:
        wanted = "beta > 0" if api else "--beta B, B > 0"
        notes.append(f"coverage_penalty: {decoding.coverage_penalty} with beta 0 changes nothing ({wanted})")
    if "max_length" in user and decoding.max_length > max_positions:
        notes.append(f"max_length: {decoding.max_length} is above the model's {max_positions} target positions, "
                     f"which cap every output at {max_positions} tokens")
    if "diversity_penalty" in user and decoding.beam_groups == 1:
        notes.append(f"diversity_penalty: has no effect without {flag('beam_groups')} above 1")
    if decoding.ignore_when_blocking and not decoding.block_ngram_repeat:
        notes.append(f"ignore_when_blocking: has no effect without {flag('block_ngram_repeat')}")
    sampling = "sampling=True" if api else "--sampling"
    if not decoding.sampling:
        notes += [f"{key}: has no effect without {sampling}{'' if api else ' (sampling: true)'}"
                  for key in ("temperature", "top_k", "top_p", "seed") if key in user]
    elif "early_stopping" in user:
        notes.append(f"early_stopping: has no effect with {sampling} (each sample ends at EOS or the step limit)")
    if config.runtime.inter_threads > 1 and batches_at_once(config, device_type) == 1:
        where = "on CUDA" if device_type != "cpu" else "when answering line by line (--stream)"
        notes.append(f"inter_threads: has no effect {where}: one batch is decoded at a time")
    if config.runtime.dtype == "float16" and device_type == "cpu":
        notes.append("dtype: float16 on CPU has few native kernels and is usually slower than float32 "
                     "(bfloat16 is fast on CPUs with AMX)")
    return notes


def format_notes(config: Config) -> list[str]:
    """Options whose results the job's output format does not write."""
    io, decoding, notes = config.io, config.decoding, []
    if decoding.n_best > 1 and io.format == "text":
        notes.append(f"n_best: {decoding.n_best} has no effect with --format text, which writes the best "
                     "hypothesis only (--format nbest or jsonl writes them all)")
    if io.token_scores and io.format != "jsonl":
        notes.append(f"token_scores: has no effect with --format {io.format} (it adds fields to jsonl)")
    for key in ("alignment", "attention"):
        if getattr(decoding, key) and io.format != "jsonl" and io.dump_beam is None:
            notes.append(f"{key}: has no effect with --format {io.format} (it adds fields to jsonl and --dump-beam)")
    return notes


def cli_flag(key: str, *values: str) -> str:
    """An option as the command line spells it: `--coverage-penalty wu or summary`."""
    return f"--{key.replace('_', '-')}" + (f" {' or '.join(values)}" if values else "")


def keyword(key: str, *values: str) -> str:
    """An option as the Python API spells it: `coverage_penalty='wu' or 'summary'`."""
    return key + (f"={' or '.join(map(repr, values))}" if values else "")
