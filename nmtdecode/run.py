"""One `translate` job: load, read, batch, decode, write in input order, report.

The CLI builds a `Config` and calls `translate_job`; nothing here parses flags.
Input is read in chunks (`JobInput`, which each torchrun rank reads too); each
chunk is cut into length-sorted batches, decoded, written in input order, and
checkpointed, so that an interrupted job resumes at a chunk boundary
(`output.OutputFile`). The input and the output are checked, and the output
locked, before the model loads.
`score` (scoring.py) loads the model and cuts sources with the functions here.
"""

from __future__ import annotations

import gc
import sys
import time
from dataclasses import dataclass, replace

import torch
from tqdm import tqdm

from . import memory, signals
from .config import Config, ConfigError, RuntimeConfig
from .io import (Example, LineReader, OrderedWriter, PrefixLines, Result, check_prefix, check_readable, chunk_size,
                 chunks, count_lines, cut)
from .models.checkpoint import LoadedModel
from .models.loading import load_model
from .models.gemm import apply_backend, choose_backend
from .models.quantize import quantize_int8
from .output import OutputFile
from .ranks import Ranks, check_layout, translate_ranks
from .search.base import Hypothesis
from .signature import job_signature
from .translator import Translator
from .usage import ineffective

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Summary:
    sentences: int = 0
    target_tokens: int = 0
    truncated: int = 0
    replaced: int = 0
    seconds: float = 0.0

    def add(self, other: "Summary"):
        for name in ("sentences", "target_tokens", "truncated", "replaced", "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def count(self, examples: list[Example]):
        """Count decoded source lines, and those cut to the model's length; the first cut one
        of the job gets a warning."""
        truncated = sum(e.truncated for e in examples)
        if truncated and not self.truncated:
            warn("source lines longer than the model's positions (or --max-src-length) are cut")
        self.sentences += len(examples)
        self.truncated += truncated

    def line(self) -> str:
        rate = self.target_tokens / self.seconds if self.seconds > 0 else 0.0
        text = (f"nmtdecode: {_count(self.sentences, 'sentence')}, {_count(self.target_tokens, 'target token')} "
                f"in {self.seconds:.2f} s ({rate:.1f} tokens/s)")
        if self.truncated:
            text += f"; {_count(self.truncated, 'source line')} truncated"
        if self.replaced:
            text += f"; {_count(self.replaced, 'line')} with invalid UTF-8 replaced"
        return text


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def warn(message: str):
    print(f"nmtdecode: warning: {message}", file=sys.stderr)


def resolve_device(runtime: RuntimeConfig) -> torch.device:
    if runtime.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if runtime.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: {runtime.device} was asked for, but no CUDA device is available")
    return torch.device(runtime.device)


def load(config: Config) -> tuple[LoadedModel, torch.device]:
    """Load the model onto its device, in its dtype, with its matrix-product backend."""
    if config.runtime.threads:
        torch.set_num_threads(config.runtime.threads)
    device = resolve_device(config.runtime)
    if config.io.model is None:
        raise ConfigError("model: no model given (--model PATH or `model:` in the config file)")
    loaded = load_model(config.io.model)
    dtype = DTYPES[config.runtime.dtype]
    loaded.model.to(device=device, dtype=dtype)
    if config.runtime.quantize == "int8":
        if device.type != "cpu":
            raise ConfigError("quantize: int8 is for CPU decoding; on CUDA use --dtype float16 or bfloat16")
        quantize_int8(loaded.model)
    else:
        loaded.gemm = choose_backend(loaded.model, config.runtime.gemm, device, dtype)
        apply_backend(loaded.model, loaded.gemm)
    # What is loaded now lives as long as the job: exempt it from the cyclic garbage collector,
    # whose full passes over the model's objects otherwise interrupt decoding.
    gc.collect()
    gc.freeze()
    return loaded, device


def decoder(config: Config, loaded: LoadedModel, device: torch.device) -> tuple[Config, Translator]:
    """The effective config of one job (the model's defaults filled in) and its decoding loop."""
    config = config.with_model_defaults(loaded.defaults)
    for note in ineffective(config, loaded.model.cfg.max_positions, device.type):
        warn(note)
    check_fits(config, loaded, device)
    rules = loaded.rules_for(config.decoding.src_lang, config.decoding.tgt_lang)
    return config, Translator(loaded.model, config.decoding, rules,
                              piece_id=getattr(loaded.tokenizer, "piece_id", None))


def prepare(config: Config) -> tuple[Config, LoadedModel, Translator]:
    """Load the model onto its device and build the translator with the effective config."""
    loaded, device = load(config)
    config, translator = decoder(config, loaded, device)
    return config, loaded, translator


def encode_source(text: str, loaded: LoadedModel, max_src_length: int | None) -> tuple[list[int], bool]:
    """A source line's ids, cut to the model's positions (or max_src_length) with its EOS kept,
    and whether it was cut: the one rule translate and score share."""
    ids = loaded.tokenizer.encode(text)
    cfg = loaded.model.cfg
    limit = min(max_src_length or cfg.max_positions, cfg.max_positions)
    if len(ids) > limit:
        return ids[: limit - 1] + [cfg.eos_id], True
    return ids, False


def make_example(index: int, text: str, loaded: LoadedModel, max_src_length: int | None,
                 prefix: str | None = None) -> Example:
    """Tokenize one line; whitespace-only lines get nothing to decode; long ones are cut (EOS kept).
    A target prefix is tokenized with the target tokenizer, without EOS."""
    prefix_ids = loaded.tokenizer.encode_target(prefix) if prefix and prefix.strip() else None
    if not text.strip():
        return Example(index, text, prefix=prefix_ids)
    ids, truncated = encode_source(text, loaded, max_src_length)
    return Example(index, text, ids, truncated=truncated, prefix=prefix_ids)


def job_examples(config: Config, lines, loaded: LoadedModel):
    """The Examples of a job's (index, line) pairs, each with its line of the --prefix file."""
    max_src_length = config.batching.max_src_length
    if config.io.prefix is None:
        yield from (make_example(i, line, loaded, max_src_length) for i, line in lines)
        return
    prefixes = PrefixLines(config.io.prefix, config.io.on_invalid_utf8)
    for i, line in lines:
        yield make_example(i, line, loaded, max_src_length, prefixes.line(i))
    prefixes.check_end()


def check_fits(config: Config, loaded: LoadedModel, device: torch.device):
    """On CPU, refuse before decoding a beam that not even one sentence could be decoded with
    (memory.py: an allocation that large may end in the kernel's OOM killer, not an error)."""
    decoding, total = config.decoding, memory.total_bytes()
    width = decoding.rows_per_sentence
    if device.type != "cpu" or total is None or width == 1 or decoding.max_length < 2:
        return
    need = loaded.model.decoding_bytes(1, width, 2, DTYPES[config.runtime.dtype])
    if need > total:
        key = "n_best" if decoding.sampling else "beam_size"
        raise ConfigError(f"{key}: {width} needs at least {memory.gigabytes(need)} for one "
                          f"sentence's second decoding step, more than the {memory.gigabytes(total)} "
                          "this process can use; choose a smaller beam")


def too_big(batch: list[Example], translator: Translator, loaded: LoadedModel) -> str | None:
    """Why a CPU batch may not fit in the memory available now (a warning), or None: its need at
    the step limit, which decides a split, never a refusal (its sentences may end sooner)."""
    available = memory.available_bytes()
    if translator.device.type != "cpu" or available is None or len(batch) == 1:
        return None
    positions = max(translator.max_steps([len(e.ids) for e in batch]))
    dtype = next(loaded.model.parameters()).dtype
    need = loaded.model.decoding_bytes(len(batch), translator.cfg.rows_per_sentence, positions, dtype)
    if need <= available:
        return None
    return (f"a batch of {len(batch)} sentences may need {memory.gigabytes(need)} by its step limit, more than the "
            f"{memory.gigabytes(available)} available; decoding it in halves")


def decode_batch(batch: list[Example], translator: Translator, loaded: LoadedModel) -> list[Result]:
    """Results for one batch. When the device runs out of memory (or on CPU, would certainly
    run out) the batch is split in halves and retried, down to single sentences (which then
    fail, naming the line)."""
    if batch[0].ids is None:  # empty lines: n_best hypotheses each, empty or their prefix (as CTranslate2)
        return [_nothing_to_decode(e, translator.cfg, loaded) for e in batch]
    nbests, split = None, too_big(batch, translator, loaded)
    if split is None:
        try:
            prefixes = [e.prefix or [] for e in batch] if any(e.prefix for e in batch) else None
            nbests = translator.translate_batch([e.ids for e in batch], [e.index for e in batch], prefixes)
        except (RuntimeError, MemoryError) as error:  # torch.OutOfMemoryError is a RuntimeError
            if not memory.is_out_of_memory(error):
                raise
            split = f"out of memory on a batch of {len(batch)} sentences; retrying it in halves"
        # retried only out here: inside `except`, the traceback keeps the failed attempt's tensors alive
    if nbests is None:
        if len(batch) == 1:
            raise RuntimeError(f"out of memory on input line {batch[0].index + 1}, even alone; "
                               "try a smaller --beam-size, --max-src-length or --max-length")
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        warn(split)
        half = len(batch) // 2
        return decode_batch(batch[:half], translator, loaded) + decode_batch(batch[half:], translator, loaded)
    return [Result(e.index, hyps, [loaded.tokenizer.decode(h.tokens) for h in hyps]) for e, hyps in zip(batch, nbests)]


def _nothing_to_decode(example: Example, cfg, loaded: LoadedModel) -> Result:
    """An empty source line's result: n_best hypotheses of its prefix (none: empty), scored 0, with
    one entry per token in every per-token array (no source position to align to: null)."""
    tokens = list(example.prefix or [])
    arrays = dict(alignment=[None] * len(tokens) if cfg.alignment else None,
                  attention=[[] for _ in tokens] if cfg.attention else None)
    hyps = [Hypothesis(list(tokens), 0.0, 0.0, [0.0] * len(tokens), **arrays) for _ in range(cfg.n_best)]
    return Result(example.index, hyps, [loaded.tokenizer.decode(tokens)] * cfg.n_best)


def read_size(config: Config) -> int:
    """Lines read before decoding starts: a sort chunk from a file; from a pipe one batch's
    worth, so results come out as batches fill; one line with --stream."""
    if config.io.stream:
        return 1
    if config.io.src == "-":  # with a token budget, assume ~16 tokens a line
        return config.batching.batch_size if config.batching.batch_type == "sents" else max(1, config.batching.batch_size // 16)
    return chunk_size(config.batching.batch_size, config.batching.batch_type)


class JobInput:
    """A job's input as one process and each torchrun rank (ranks.py) read it: from where the
    job's output left off (--resume), as Examples in chunks of `read_size` lines, each chunk
    cut into length-sorted batches. Made, it opens the output with the job's signature."""

    def __init__(self, config: Config, output: OutputFile, loaded: LoadedModel, where: str = ""):
        self.config, self.output = config, output
        self.reader = LineReader(config.io.src, config.io.on_invalid_utf8)
        signals.job_started()  # from here a signal unwinds the job, keeping its output resumable
        self.done = output.open(config.io.resume, job_signature(config))  # input lines done before
        lines = output.unfinished(self.reader, on_resume=lambda n: warn(f"{where}resuming after input line {n}"))
        self.examples = job_examples(config, lines, loaded)

    def chunks(self):
        """(chunk, its batches), in input order. Asking for the next one says that this one's
        output is written: it is checkpointed, and a resumed job starts after it."""
        batching = self.config.batching
        for chunk in chunks(self.examples, read_size(self.config)):
            yield chunk, cut(chunk, batching.batch_size, batching.batch_type)
            self.done = chunk[-1].index + 1
            self.output.checkpoint(self.done, self.reader.position())


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def stderr_is_terminal() -> bool:
    return sys.stderr is not None and sys.stderr.isatty()


def interactive(config: Config) -> Config:
    """Typed input (stdin a terminal) is answered line by line, as with --stream."""
    io_cfg = config.io
    if io_cfg.src == "-" and not io_cfg.stream and not io_cfg.resume and stdin_is_terminal():
        return replace(config, io=replace(io_cfg, stream=True))
    return config


def progress_bar(config: Config, done: int) -> tqdm:
    """Lines done, of how many (a regular file is counted first: percent and ETA), and tokens/s;
    on a terminal only, and not while answering line by line (it would mix with the typing)."""
    shown = not config.runtime.quiet and not config.io.stream and stderr_is_terminal()
    total = count_lines(config.io.src) if shown else None
    return tqdm(total=total, initial=done, unit=" lines", disable=not shown, dynamic_ncols=True)


def translate_job(jobs: Config | list[Config], translator=None) -> Summary:
    """Run one job or several with one model load (`translator`, an `api.Translator`, or
    loaded here from the first job's config, and only when some job has work to do).

    Every job's input and output are checked and every output locked before the model
    loads; a job complete under --resume is skipped; the locks are released however the
    run ends. Returns the summary of all jobs together."""
    jobs = [interactive(job) for job in ([jobs] if isinstance(jobs, Config) else jobs)]
    ranks = Ranks.from_env()
    if ranks is not None:  # under torchrun each process decodes its share of every job (ranks.py)
        return translate_ranks(jobs, ranks)
    outputs, pending = [], []
    try:
        for job in jobs:
            check_readable(job.io.src)
            if job.io.prefix is not None:
                check_prefix(job.io.src, job.io.prefix)
            output = OutputFile(job.io.output)
            outputs.append(output)
            for other in jobs:
                output.refuse_source(other.io.src)
            complete = output.claim(job.io.resume)
            if not output.direct:  # parts of an earlier torchrun job with this output
                check_layout(job.io.output, 1, job.io.resume)
            if not complete:
                pending.append((job, output))
            elif not job.runtime.quiet:
                print(f"nmtdecode: {job.io.output} is complete (no {output.tmp} to resume); nothing to do",
                      file=sys.stderr)
        total = Summary()
        if pending and translator is None:
            from .api import Translator as PublicTranslator

            translator = PublicTranslator.from_config(pending[0][0])
        for job, output in pending:
            total.add(_translate(job, output, translator))
        return total
    finally:
        for output in outputs:
            output.release()


def _translate(config: Config, output: OutputFile, loaded_translator) -> Summary:
    loaded = loaded_translator.loaded
    config, translator = decoder(config, loaded, loaded_translator.device)
    summary, start = Summary(), time.perf_counter()
    job = JobInput(config, output, loaded)
    writer = OrderedWriter(output.stream, config.io.format, config.io.token_scores, first_index=job.done)
    try:
        with progress_bar(config, job.done) as progress:
            for chunk, batches in job.chunks():
                for batch in batches:
                    for result in decode_batch(batch, translator, loaded):
                        writer.put(result)
                        summary.target_tokens += len(result.hypotheses[0].tokens)
                    rate = summary.target_tokens / max(time.perf_counter() - start, 1e-9)
                    progress.set_postfix_str(f"{rate:.0f} tokens/s", refresh=False)
                    progress.update(len(batch))
                summary.count(chunk)
        writer.close()
    except BaseException:
        output.abandon()  # keeps FILE.tmp and its journal for --resume
        raise
    output.finish()
    summary.replaced = job.reader.replaced_lines
    summary.seconds = time.perf_counter() - start
    if summary.replaced:
        warn(f"{summary.replaced} lines had invalid UTF-8, decoded with U+FFFD")
    if not config.runtime.quiet:
        print(summary.line(), file=sys.stderr)
    return summary
