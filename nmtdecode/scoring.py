"""`nmtdecode score`: forced decoding, the log-probability of given (source, target) line pairs.

Pairs are read, sorted and batched as translate batches its lines (by source length,
in chunks), scored through the job's decoder (`BatchDecoder.score`), and written in
input order: one number a line (text), or JSONL records with the tokens and per-token
log-probs as translate gives them. Sources are cut as translate cuts them; the output
is translate's `OutputFile`, written whole (no --resume). The last line on stderr
gives the pairs, the target tokens (EOS included) and the corpus's mean log-probability
per token and perplexity.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Iterator

from . import signals
from .batching import Example, chunk_size, chunks, cut
from .config import SCORE_FORMATS, BatchingConfig, Config, ConfigError
from .output_file import OutputFile
from .ranks import Ranks
from .reading import InputError, LineReader, check_readable, count_lines
from .run import NOT_RESUMABLE, load_engine, progress_bar
from .summary import count, warn
from .writing import OrderedWriter

if TYPE_CHECKING:
    from .decoding import BatchDecoder
    from .engine import Engine


@dataclass
class ScoreSummary:
    pairs: int = 0
    tokens: int = 0  # target tokens scored, each pair's EOS included
    log_prob: float = 0.0
    truncated: list[int] = field(default_factory=list)  # line numbers of the sources cut
    seconds: float = 0.0

    def line(self) -> str:
        per_token = self.log_prob / self.tokens if self.tokens else 0.0
        rate = self.tokens / self.seconds if self.seconds > 0 else 0.0
        return (f"nmtdecode: {count(self.pairs, 'pair')}, {count(self.tokens, 'target token')} in {self.seconds:.2f} s "
                f"({rate:.1f} tokens/s); log-prob per token {per_token:.4f}, perplexity {math.exp(-per_token):.2f}")


def score_job(config: Config, tgt: str) -> ScoreSummary:
    """Score the pairs of lines of config.io.src and `tgt` into config.io.output in config.io.format.
    Input and output are checked, and the output locked, before the model loads."""
    if Ranks.from_env() is not None:  # every rank would print every score
        raise ConfigError("score runs in one process: start it without torchrun")
    io_cfg = config.io
    if io_cfg.format not in SCORE_FORMATS:
        raise ConfigError(f"format: score writes {' or '.join(SCORE_FORMATS)}, not {io_cfg.format}")
    for path in (io_cfg.src, tgt):
        check_readable(path)
    counts = count_lines(io_cfg.src), count_lines(tgt)
    if None not in counts and counts[0] != counts[1]:
        raise ConfigError(f"--src has {counts[0]} lines but --tgt has {counts[1]}")
    out = OutputFile(io_cfg.output)
    for path in (io_cfg.src, tgt):
        out.refuse_source(path)
    out.claim(False, resumable=False)
    try:
        engine = load_engine(config)
        signals.job_started()
        config, decoder = engine.scorer(config)
        out.open(False, signature="")  # no checkpoints: a complete file or none
        try:
            summary = _score_into(out, config, engine, decoder, tgt)
        except BaseException:
            out.abandon()  # with no journal, FILE.tmp is removed
            raise
        out.finish()
    except (KeyboardInterrupt, signals.Terminated) as stop:
        setattr(stop, signals.STOPPED_NOTE,
                NOT_RESUMABLE if out.direct else "nothing was kept (score writes its output file whole): run it again")
        raise
    finally:
        out.release()
    if summary.truncated:
        warn(f"source {_lines(summary.truncated)} longer than the model's positions (or --max-src-length): cut, "
             "as translate cuts them")
    if not config.runtime.quiet:
        print(summary.line(), file=sys.stderr)
    return summary


def _score_into(out: OutputFile, config: Config, engine: Engine, decoder: BatchDecoder, tgt: str) -> ScoreSummary:
    summary, start = ScoreSummary(), time.perf_counter()
    sources = LineReader(config.io.src, config.io.on_invalid_utf8)
    targets = LineReader(tgt, config.io.on_invalid_utf8)
    writer, tokens = OrderedWriter(out.stream), config.io.format == "jsonl"
    examples = pair_examples(engine, decoder, _pairs(sources, targets), config.batching.max_src_length)
    with progress_bar(config, 0) as progress:
        for batch, scored in scored_batches(engine, decoder, examples, config.batching, tokens):
            for example, result in zip(batch, scored):
                total = sum(result[1]) + result[2] if tokens else result
                writer.put(example.index, _record(example.index, result, total) if tokens else f"{total:.6f}\n")
                summary.log_prob += total
                summary.tokens += len(example.target) + 1
            summary.pairs += len(batch)
            summary.truncated += [e.index + 1 for e in batch if e.truncated]
            progress.update(len(batch))
    writer.close()
    summary.truncated.sort()
    summary.seconds = time.perf_counter() - start
    return summary


def _pairs(sources: Iterable[str], targets: Iterable[str]) -> Iterator[tuple[int, str, str]]:
    """(index, source, target) of two files read in step; their line counts must agree."""
    sources, targets = iter(sources), iter(targets)
    for index, source in enumerate(sources):
        target = next(targets, None)
        if target is None:
            raise InputError(f"--tgt has {index} lines, fewer than --src")
        yield index, source, target
    if next(targets, None) is not None:
        raise InputError("--tgt has more lines than --src")


def _record(index: int, result: tuple, total: float) -> str:
    tokens, token_scores, eos = result
    return json.dumps({"index": index, "log_prob": total, "tokens": tokens, "token_scores": token_scores,
                       "eos_score": eos}, ensure_ascii=False) + "\n"


def pair_examples(engine: Engine, decoder: BatchDecoder, pairs, max_src_length: int | None) -> Iterator[Example]:
    """An Example per (index, source, target): the source cut as translate cuts it (an empty one
    is scored too: it is EOS alone), the target ids in `target`. A target the decoder has no
    positions for cannot be scored: an error names its line."""
    room = engine.loaded.model.cfg.max_positions - len(decoder.forced_prefix())  # what the decoder may still be fed
    for index, source, target in pairs:
        target_ids = engine.loaded.tokenizer.encode_target(target)
        if len(target_ids) > room:
            raise InputError(f"target line {index + 1} has {len(target_ids)} tokens; with its forced prefix the "
                             f"decoder has positions for {room}: it cannot be scored")
        ids, truncated = engine.encode_source(source, max_src_length)
        yield Example(index, source, ids, truncated=truncated, target=target_ids)


def scored_batches(engine: Engine, decoder: BatchDecoder, examples: Iterable[Example], batching: BatchingConfig,
                   tokens: bool = False) -> Iterator[tuple[list[Example], list]]:
    """(batch, its scores) in translate's batches: each pair's total log-probability, or with
    `tokens` its (tokens, token_scores, eos_score) as `BatchDecoder.score_tokens` gives them."""
    score = decoder.score_tokens if tokens else decoder.score
    for chunk in chunks(examples, chunk_size(batching.batch_size, batching.batch_type)):
        for batch in cut(chunk, batching.batch_size, batching.batch_type):
            yield batch, engine.in_halves_when_out_of_memory(
                batch, lambda part: score([e.ids for e in part], [e.target for e in part]))


def score_pairs(engine: Engine, config: Config, sources: list, targets: list[str]) -> list[float]:
    """The total log-probability of each target given its source, in their order (the Python API)."""
    return _in_order(engine, *engine.scorer(config), sources, targets, tokens=False)


def score_pairs_by_token(engine: Engine, config: Config, sources: list,
                         targets: list[str]) -> tuple[list[tuple], int]:
    """Each pair's (tokens, token_scores, eos_score) as `BatchDecoder.score_tokens` gives them, in
    their order, and how many tokens the model forces at the start of each (scored 0)."""
    config, decoder = engine.scorer(config)
    return _in_order(engine, config, decoder, sources, targets, tokens=True), len(decoder.forced_prefix()) - 1


def _in_order(engine: Engine, config: Config, decoder: BatchDecoder, sources: list, targets: list[str],
              tokens: bool) -> list:
    examples = pair_examples(engine, decoder, ((i, s, t) for i, (s, t) in enumerate(zip(sources, targets))),
                             config.batching.max_src_length)
    found = [None] * len(sources)
    for batch, scores in scored_batches(engine, decoder, examples, config.batching, tokens):
        for example, score in zip(batch, scores):
            found[example.index] = score
    return found


def _lines(numbers: list[int], shown: int = 5) -> str:
    """`line 3`, `lines 3, 8`, `lines 3, 8, 9, 12, 20 and 4 more`."""
    head = ", ".join(map(str, numbers[:shown]))
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return f"line {head}" if len(numbers) == 1 else f"lines {head}{more}"
