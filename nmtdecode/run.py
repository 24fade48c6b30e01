"""One `translate` job: load, read, batch, decode, write in input order, report.

The CLI builds a `Config` and calls `translate_job`; nothing here parses flags.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

import torch
from tqdm import tqdm

from .config import Config, ConfigError, RuntimeConfig
from .io import Example, OrderedWriter, Result, batches, read_lines
from .models.loading import LoadedModel, load_model
from .search.base import Hypothesis
from .translator import Translator

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class Summary:
    sentences: int = 0
    target_tokens: int = 0
    truncated: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        rate = self.target_tokens / self.seconds if self.seconds > 0 else 0.0
        text = (f"nmtdecode: {self.sentences} sentences, {self.target_tokens} target tokens "
                f"in {self.seconds:.2f} s ({rate:.1f} tokens/s)")
        if self.truncated:
            text += f"; {self.truncated} source lines truncated"
        return text


def resolve_device(runtime: RuntimeConfig) -> torch.device:
    if runtime.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if runtime.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: {runtime.device} was asked for, but no CUDA device is available")
    return torch.device(runtime.device)


def prepare(config: Config) -> tuple[Config, LoadedModel, Translator]:
    """Load the model onto its device and build the translator with the effective config."""
    if config.runtime.threads:
        torch.set_num_threads(config.runtime.threads)
    device = resolve_device(config.runtime)
    if config.io.model is None:
        raise ConfigError("model: no model given (--model PATH or `model:` in the config file)")
    loaded = load_model(config.io.model)
    config = config.with_model_defaults(loaded.defaults)
    loaded.model.to(device=device, dtype=DTYPES[config.runtime.dtype])
    translator = Translator(loaded.model, config.decoding, loaded.rules_for(config.decoding.src_lang, config.decoding.tgt_lang))
    return config, loaded, translator


def make_example(index: int, text: str, loaded: LoadedModel, max_src_length: int | None) -> Example:
    """Tokenize one line; whitespace-only lines get nothing to decode; long ones are cut (EOS kept)."""
    if not text.strip():
        return Example(index, text)
    ids = loaded.tokenizer.encode(text)
    cfg = loaded.model.cfg
    limit = min(max_src_length or cfg.max_positions, cfg.max_positions)
    if len(ids) > limit:
        return Example(index, text, ids[: limit - 1] + [cfg.eos_id], truncated=True)
    return Example(index, text, ids)


def decode_batch(batch: list[Example], translator: Translator, loaded: LoadedModel) -> list[Result]:
    if batch[0].ids is None:
        return [Result(e.index, [Hypothesis([], 0.0, 0.0)], [""]) for e in batch]
    nbests = translator.translate_batch([e.ids for e in batch])
    return [Result(e.index, hyps, [loaded.tokenizer.decode(h.tokens) for h in hyps]) for e, hyps in zip(batch, nbests)]


class AtomicOutput:
    """Output written to `PATH.tmp` and renamed to PATH only when the job completes; `-` is stdout."""

    def __init__(self, path: str):
        self.path = path
        self.tmp = None if path == "-" else f"{path}.tmp"

    def __enter__(self):
        if self.tmp is None:
            return sys.stdout
        try:
            self.stream = open(self.tmp, "w", encoding="utf-8", newline="\n")
        except OSError as e:
            raise ConfigError(f"output: cannot write {self.path}: {e.strerror}") from None
        return self.stream

    def __exit__(self, kind, value, tb):
        if self.tmp is None:
            sys.stdout.flush()
            return False
        self.stream.close()
        if kind is None:
            os.replace(self.tmp, self.path)
        return False


def translate_job(config: Config) -> Summary:
    config, loaded, translator = prepare(config)
    summary, start = Summary(), time.perf_counter()
    show_progress = not config.runtime.quiet and sys.stderr.isatty()
    lines = read_lines(config.io.src)
    examples = (make_example(i, line, loaded, config.batching.max_src_length) for i, line in enumerate(lines))
    with AtomicOutput(config.io.output) as stream, tqdm(unit=" lines", disable=not show_progress) as progress:
        writer = OrderedWriter(stream, config.io.format, config.io.token_scores)
        for batch in batches(examples, config.batching.batch_size, config.batching.batch_type):
            for result in decode_batch(batch, translator, loaded):
                writer.put(result)
                summary.target_tokens += len(result.hypotheses[0].tokens)
            summary.sentences += len(batch)
            summary.truncated += sum(e.truncated for e in batch)
            progress.update(len(batch))
        writer.close()
    summary.seconds = time.perf_counter() - start
    if not config.runtime.quiet:
        print(summary.line(), file=sys.stderr)
    return summary


def score_job(config: Config, src_path: str, tgt_path: str):
    """Print the forced-decoding log-probability of each (source, target) line pair."""
    config, loaded, translator = prepare(config)
    sources, targets = list(read_lines(src_path)), list(read_lines(tgt_path))
    if len(sources) != len(targets):
        raise ConfigError(f"--src has {len(sources)} lines but --tgt has {len(targets)}")
    size = config.batching.batch_size
    for start in range(0, len(sources), size):
        src = [loaded.tokenizer.encode(s) for s in sources[start : start + size]]
        tgt = [loaded.tokenizer.encode_target(t) for t in targets[start : start + size]]
        for total in translator.score(src, tgt):
            print(f"{total:.6f}")
