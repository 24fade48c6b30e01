"""`nmtdecode score`: forced decoding, the log-probability of given (source, target) line pairs.

A score job runs through the job pipeline (pipeline.py) as translate does: its source reads
the pairs (`PairSource`, sources cut as translate cuts them), the engine scores each batch
(`Engine.score_batch`, by length-sorted batches in chunks), and its sink writes in input order
one number a line (text), or JSONL records with the tokens and per-token log-probs as translate
gives them. The output is translate's `OutputFile`, written whole (no --resume). The last line
on stderr gives the pairs, the target tokens (EOS included) and the corpus's mean log-probability
per token and perplexity.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Iterator

from . import signals
from ..engine.batching import Example, PairScore, chunk_size, chunks
from ..options.config import Config, ConfigError
from .output_file import NOT_RESUMABLE, OutputFile
from .pipeline import ListSink, load_engine, run
from .progress import progress_bar
from .ranks import Ranks
from .files import check_score_files
from .reading import InputError, LineReader, has_ended_empty
from ..engine.resolve import resolve
from ..engine.messages import count, print_warning, say
from .writing import OrderedWriter, TextStream

if TYPE_CHECKING:
    from ..engine.decoding import BatchDecoder
    from ..engine.engine import Engine


@dataclass
class ScoreSummary:
    pairs: int = 0
    tokens: int = 0  # target tokens scored, each pair's EOS included
    log_prob: float = 0.0
    truncated: list[int] = field(default_factory=list)  # line numbers of the sources cut
    seconds: float = 0.0

    def add(self, batch: list[Example], scores: list[PairScore]) -> None:
        """Count a scored batch: its pairs, their target tokens (EOS included) and log-probabilities."""
        for score in scores:
            self.log_prob += score.total
            self.tokens += score.length
        self.pairs += len(batch)
        self.truncated += [e.index + 1 for e in batch if e.truncated]

    def line(self) -> str:
        per_token = self.log_prob / self.tokens if self.tokens else 0.0
        rate = self.tokens / self.seconds if self.seconds > 0 else 0.0
        return (
            f"nmtdecode: {count(self.pairs, 'pair')}, {count(self.tokens, 'target token')} in {self.seconds:.2f} s "
            f"({rate:.1f} tokens/s); log-prob per token {per_token:.4f}, perplexity {math.exp(-per_token):.2f}"
        )


def score_job(config: Config, tgt: str, normalize: bool = False) -> ScoreSummary:
    """Score the pairs of lines of config.io.src and `tgt` into config.io.output in config.io.format,
    each line's total log-probability or, with `normalize`, its mean per scored token. Input and
    output are checked, and the output locked, before the model loads."""
    if Ranks.from_env() is not None:  # every rank would print every score
        raise ConfigError("score runs in one process: start it without torchrun")
    config.validate("score")
    io_cfg = config.io
    check_score_files(io_cfg.src, tgt)
    out = OutputFile(io_cfg.output)
    for path in (io_cfg.src, tgt):
        out.refuse_source(path)
    out.claim(False, resumable=False)
    try:
        if has_ended_empty(io_cfg.src) and has_ended_empty(tgt):  # no pair to score: no model to load
            signals.job_started()
            out.open(False, signature="")
            summary = ScoreSummary()
        else:
            engine = load_engine(config)
            job = resolve(config, engine, scoring=True)
            signals.job_started()
            out.open(False, signature="")  # no checkpoints: a complete file or none
            try:
                summary = _score_into(out, job.config, engine, job.decoder, tgt, normalize)
            except BaseException:
                out.abandon()  # with no journal, FILE.tmp is removed
                raise
        out.finish()
    except (KeyboardInterrupt, signals.Terminated) as stop:
        setattr(
            stop,
            signals.STOPPED_NOTE,
            NOT_RESUMABLE if out.direct else "nothing was kept (score writes its output file whole): run it again",
        )
        raise
    finally:
        out.release()
    if summary.truncated:
        print_warning(
            f"source {_lines(summary.truncated)} longer than the model's positions (or --max-src-length): "
            "cut, as translate cuts them"
        )
    if not config.runtime.quiet:
        say(summary.line())
    return summary


def _score_into(
    out: OutputFile, config: Config, engine: Engine, decoder: BatchDecoder, tgt: str, normalize: bool
) -> ScoreSummary:
    summary, start, by_token = ScoreSummary(), time.perf_counter(), config.io.format == "jsonl"
    sources = LineReader(config.io.src, config.io.on_invalid_utf8)
    targets = LineReader(tgt, config.io.on_invalid_utf8)
    source = PairSource(
        pair_examples(engine, decoder, _pairs(sources, targets), config.batching.max_src_length), config
    )
    with progress_bar(config, 0) as bar:

        def counted(batch: list[Example], scores: list[PairScore]) -> None:
            summary.add(batch, scores)
            bar.update(len(batch))

        writer = ScoreWriter(out.stream, by_token, normalize)
        run(source, lambda batch: engine.score_batch(batch, decoder, by_token), writer.put, observe=counted)
        writer.close()
    summary.truncated.sort()
    summary.seconds = time.perf_counter() - start
    return summary


class PairSource:
    """The pipeline's source of a score job: its pairs as Examples (`pair_examples`), in chunks
    of the size translate sorts together."""

    done = 0

    def __init__(self, examples: Iterable[Example], config: Config) -> None:
        self.examples, self.batching = examples, config.batching

    def chunks(self) -> Iterator[list[Example]]:
        return chunks(self.examples, chunk_size(self.batching.batch_size, self.batching.batch_type))

    def position(self) -> tuple[int, str]:
        return 0, ""  # a score job is written whole: nothing to resume from


class ScoreWriter:
    """Where a score job's results go: each pair's total log-probability a line (with `normalize`
    its mean per scored token), or with `by_token` its JSONL record, in input order (the file is
    written whole: no checkpoints)."""

    def __init__(self, stream: TextStream, by_token: bool, normalize: bool = False) -> None:
        self.lines, self.by_token, self.normalize = OrderedWriter(stream), by_token, normalize

    def put(self, score: PairScore) -> None:
        if self.by_token:
            self.lines.put(score.index, _record(score, self.normalize))
        else:
            self.lines.put(score.index, f"{score.total / score.length if self.normalize else score.total:.6f}\n")

    def close(self) -> None:
        self.lines.close()


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


def _record(score: PairScore, normalize: bool) -> str:
    record = {
        "index": score.index,
        "log_prob": score.total,
        "tokens": score.tokens,
        "token_scores": score.token_scores,
        "eos_score": score.eos_score,
    }
    if normalize:
        record["mean_log_prob"] = score.total / score.length
    return json.dumps(record, ensure_ascii=False) + "\n"


def pair_examples(
    engine: Engine,
    decoder: BatchDecoder,
    pairs: Iterable[tuple[int, str | list, str | list]],
    max_src_length: int | None,
) -> Iterator[Example]:
    """An Example per (index, source, target): the source cut as translate cuts it (an empty one
    is scored too: it is EOS alone), the target ids in `target`. A target the decoder has no
    positions for cannot be scored: an error names its line."""
    room = engine.loaded.model.cfg.max_positions - len(decoder.forced_prefix())  # what the decoder may still be fed
    for index, source, target in pairs:
        target_ids = engine.target_ids(target)
        if len(target_ids) > room:
            raise InputError(
                f"target line {index + 1} has {len(target_ids)} tokens; with its forced prefix the "
                f"decoder has positions for {room}: it cannot be scored"
            )
        ids, truncated = engine.encode_source(source, max_src_length)
        yield Example(index, source, ids, truncated=truncated, target=target_ids)


def score_pairs(
    engine: Engine, config: Config, sources: list, targets: list, by_token: bool = False
) -> list[PairScore]:
    """Each pair's PairScore in their order (the Python API), batched as `score` batches; a
    target is text or pieces (`Engine.target_ids`)."""
    job = resolve(config, engine, scoring=True)
    examples = pair_examples(
        engine,
        job.decoder,
        ((i, s, t) for i, (s, t) in enumerate(zip(sources, targets))),
        job.config.batching.max_src_length,
    )
    sink = ListSink(len(sources))
    run(PairSource(examples, job.config), lambda batch: engine.score_batch(batch, job.decoder, by_token), sink.put)
    return sink.results


def _lines(numbers: list[int], shown: int = 5) -> str:
    """`line 3`, `lines 3, 8`, `lines 3, 8, 9, 12, 20 and 4 more`."""
    head = ", ".join(map(str, numbers[:shown]))
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return f"line {head}" if len(numbers) == 1 else f"lines {head}{more}"
