"""Running `translate` jobs: in one process, and in each torchrun rank.

    check every job's input and output, lock the outputs     (before torch is imported)
    engine = Engine.load(first job with work to do); resolve every job (resolve.py)
    for each job:  pipeline.run(its input -> the engine -> its share's sink)

In one process the share is every batch and the sink the output file, written in input
order (`WholeJob`). Under torchrun each rank decodes its batches into its part file and
rank 0 merges the parts (ranks.py, `RankJob`). Either way the sink checkpoints the output
after each chunk, so an interrupted job resumes at a chunk boundary (output_file.py). The
CLI builds the jobs' `Config`s (jobs.py) and calls `translate_job`; nothing here parses flags.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Protocol

from . import signals
from ..options.config import Config
from .plan import check_model_spared, check_written_files
from .output_file import NOT_RESUMABLE, OutputFile
from .pipeline import LineSource, load_engine, run
from .progress import JobProgress, progress_bar, stdin_is_terminal
from .ranks import (
    Group,
    PartWriter,
    Ranks,
    check_job,
    check_layout,
    device_for,
    layouts,
    leave_group,
    merge,
    threads_for,
)
from .reading import check_prefix, check_readable
from ..engine.resolve import ResolvedJob, check_torchrun, check_translate, resolve, stream_typed_input
from ..engine.messages import count, print_warning, say
from .signature import job_signature
from .summary import Summary, timing
from .writing import BothWriters, ResultWriter, SearchWriter

if TYPE_CHECKING:
    from ..engine.batching import Example, Result
    from ..engine.engine import Engine


def translate_job(jobs: Config | list[Config], engine: Engine | None = None) -> Summary:
    """Run one job or several with one model load (`engine`, or loaded here from the first job's
    config, and only when some job has work to do).

    Every job's input and output are checked and every output locked before the model
    loads; a job complete under --resume is skipped; the locks are released however the
    run ends. Returns the summary of all jobs together (under torchrun, this rank's)."""
    typed = stdin_is_terminal()
    jobs = [stream_typed_input(job, typed) for job in ([jobs] if isinstance(jobs, Config) else jobs)]
    for job in jobs:
        check_translate(job)
    check_written_files(jobs)
    check_model_spared(jobs)
    ranks = Ranks.from_env()
    if ranks is not None:
        return _translate_ranks(jobs, ranks, engine)
    outputs, pending, dumps, started, load_seconds = [], [], [], time.perf_counter(), None
    try:
        for job in jobs:
            output = _claim(job, jobs)
            outputs.append(output)
            if output is not None:
                dump = _claim_dump(job, output)
                dumps.append(dump)
                pending.append((job, output, dump))
        for job, output, _ in pending:  # before the load: a stop during it must not leave an older output
            if not job.io.resume:  # looking complete to a --resume (a requeued Slurm job passes it)
                output.mark_unfinished()
        total, resolved = Summary(), []
        if pending:
            if engine is None:
                engine, load_seconds = load_engine(pending[0][0]), time.perf_counter() - started
            resolved = resolve_all([job for job, _, _ in pending], engine)
            signals.job_started()  # from here a signal unwinds the run, keeping its outputs resumable
        several = len(jobs) > 1  # then each file's bar and summary line name it, and a total follows
        for (job, output, dump), resolved_job in zip(pending, resolved):
            share = WholeJob(dump, job.io.src) if several else WholeJob(dump, timed=(started, load_seconds))
            total.add(decode_job(resolved_job, engine, output, share)[0])
        if several and pending and not pending[0][0].runtime.quiet:
            say(
                total.line(f"nmtdecode: all {count(len(pending), 'file')}:")
                + timing(load_seconds, time.perf_counter() - started)
            )
        return total
    except (KeyboardInterrupt, signals.Terminated) as stop:
        if not any(output is not None and not output.direct for output in outputs):
            setattr(stop, signals.STOPPED_NOTE, NOT_RESUMABLE)
        raise
    finally:
        for output in outputs + dumps:
            if output is not None:
                output.release()


def resolve_all(jobs: list[Config], engine: Engine) -> list[ResolvedJob]:
    """Every job of the run resolved on the loaded model (resolve.py), before any is decoded, with
    its notes about options that change nothing told on stderr."""
    check_model_spared(jobs, engine.loaded.files)  # what only the load learnt (a .pt names its tokenizers)
    resolved = [resolve(job, engine) for job in jobs]
    for job in resolved:
        for note in job.notes:
            print_warning(note)
    return resolved


def _claim_dump(job: Config, output: OutputFile) -> OutputFile | None:
    """Lock a job's --dump-beam file (written whole through FILE.tmp, as score's output: complete
    or absent); never its input, prefix or output."""
    io_cfg = job.io
    if io_cfg.dump_beam is None:
        return None
    dump = OutputFile(io_cfg.dump_beam)
    for path in (io_cfg.src, io_cfg.prefix, output.tmp):
        if path is not None:
            dump.refuse_source(path)
    dump.claim(False, resumable=False)
    return dump


def _claim(job: Config, jobs: list[Config]) -> OutputFile | None:
    """Check a job's input and lock its output (one process); None when --resume finds it complete."""
    check_readable(job.io.src)
    if job.io.prefix is not None:
        check_prefix(job.io.src, job.io.prefix, job.io.resume)
    output = OutputFile(job.io.output)
    for other in jobs:
        output.refuse_source(other.io.src)
    try:
        complete = output.claim(job.io.resume)
        if not output.direct:  # parts of an earlier torchrun job with this output
            check_layout(job.io.output, 1, job.io.resume)
    except BaseException:
        output.release()
        raise
    if not complete:
        return output
    output.release()
    if not job.runtime.quiet:
        say(f"nmtdecode: {job.io.output} is complete (no {output.tmp} to resume); nothing to do")
    return None


class ChunkWriter(Protocol):
    """A share's results into its output file: writing.ResultWriter, BothWriters or ranks.PartWriter."""

    def put(self, result: Result) -> None: ...

    def end_chunk(self) -> None: ...  # every result of the chunk is put

    def close(self) -> None: ...


class Share(Protocol):
    """The part of a job one process decodes, and where it goes."""

    @property
    def shows_progress(self) -> bool: ...  # a progress bar (on a terminal)

    @property
    def reports_input(self) -> bool: ...  # warns about the input's replaced lines

    @property
    def where(self) -> str: ...  # what messages about its output start with

    @property
    def summary_prefix(self) -> str: ...  # what its summary line starts with

    @property
    def label(self) -> str: ...  # the file its progress bar names ("": none)

    @property
    def timed(self) -> tuple[float, float | None] | None: ...  # (the run's start, the model's load time)

    def mine(self, batches: Iterable[list[Example]]) -> list[list[Example]]: ...  # its batches of a chunk's

    def writer(self, output: OutputFile, config: Config, first_index: int) -> ChunkWriter: ...

    def complete(self, output: OutputFile) -> None: ...  # after the last chunk

    def abandon(self) -> None: ...  # after a failure


class WholeJob:
    """One process's share of a job: every batch, written in input order into the output (and
    each line's search into the --dump-beam file, when given). label: the file it names (one of
    several); timed: (the run's start, the model's load time or None), which the run's only job
    adds to its summary line."""

    shows_progress = True
    reports_input = True

    def __init__(
        self, dump: OutputFile | None = None, label: str = "", timed: tuple[float, float | None] | None = None
    ) -> None:
        self.dump, self.label, self.timed = dump, label, timed
        self.where = f"{label}: " if label else ""
        self.summary_prefix = f"nmtdecode: {label}:" if label else "nmtdecode:"

    def mine(self, batches: Iterable[list[Example]]) -> list[list[Example]]:
        return list(batches)

    def writer(self, output: OutputFile, config: Config, first_index: int) -> ResultWriter | BothWriters:
        writer = ResultWriter(output.stream, config.io.format, config.io.token_scores, first_index)
        if self.dump is None:
            return writer
        self.dump.open(False, signature="")  # no checkpoints: a complete file or none
        return BothWriters(writer, SearchWriter(self.dump.stream))

    def complete(self, output: OutputFile) -> None:
        output.finish()
        if self.dump is not None:
            self.dump.finish()

    def abandon(self) -> None:
        if self.dump is not None:
            self.dump.abandon()  # with no journal, FILE.tmp is removed


@dataclass
class RankJob:
    """A torchrun rank's share of a job: its batches of every chunk, into its part file, which
    stays PART.tmp with its journal until rank 0 merges the parts."""

    ranks: Ranks
    part_name: str
    shows_progress = False
    label = ""
    timed = None

    @property
    def reports_input(self) -> bool:  # every rank reads (and counts) the whole input: rank 0 tells
        return self.ranks.rank == 0

    @property
    def where(self) -> str:
        return f"{self.part_name}: "

    @property
    def summary_prefix(self) -> str:
        return self.ranks.summary_prefix()

    def mine(self, batches: Iterable[list[Example]]) -> list[list[Example]]:
        return self.ranks.mine(batches)

    def writer(self, output: OutputFile, config: Config, first_index: int) -> PartWriter:
        return PartWriter(output.stream, config.io.format, config.io.token_scores)

    def complete(self, output: OutputFile) -> None:
        pass  # PartWriter.close closed it; the merge finishes the job

    def abandon(self) -> None:
        pass


def decode_job(job: ResolvedJob, engine: Engine, output: OutputFile, share: Share) -> tuple[Summary, int]:
    """Decode `share` (WholeJob or RankJob) of one job into `output` through the pipeline, its
    output checkpointed after each chunk; returns its summary and the input's line count."""
    config = job.config
    decoder = job.decoder(engine, trace=config.io.dump_beam is not None)
    signals.job_started()  # from here a signal unwinds the job, keeping its output resumable
    done = output.open(config.io.resume, job_signature(config, job.model_files))  # input lines done before
    source = LineSource(
        config,
        engine.make_example,
        done,
        output.check_input,
        on_resume=lambda n: print_warning(f"{share.where}resuming after input line {n}"),
    )
    sink = OutputSink(share.writer(output, config, done), output)
    if config.io.stream and stdin_is_terminal() and not config.runtime.quiet:
        say("nmtdecode: ready: type a line to translate it (Ctrl-D ends)")
    try:
        with progress_bar(config, done, share.shows_progress, share.label) as bar:
            counted = JobProgress(config, bar, done)

            def observe(batch: list[Example], results: list[Result]) -> None:
                counted(batch, results)
                if config.io.stream:  # what is written of the chunk so far goes out with each batch
                    output.stream.flush()

            lines = run(
                source,
                lambda batch: engine.decode_batch(batch, decoder),
                sink,
                job.batches_at_once,
                share.mine,
                observe,
            )
    except BaseException:
        output.abandon()  # keeps FILE.tmp and its journal for --resume
        share.abandon()
        raise
    share.complete(output)
    summary = counted.summary
    summary.replaced = source.reader.replaced_lines
    summary.seconds = time.perf_counter() - counted.start - source.reader.waited  # the rate is the decoding's
    if summary.replaced and share.reports_input:
        print_warning(f"{summary.replaced} lines had invalid UTF-8, decoded with U+FFFD")
    if not config.runtime.quiet:
        timed = share.timed
        extra = "" if timed is None else timing(timed[1], time.perf_counter() - timed[0])
        say(summary.line(share.summary_prefix) + extra)
    return summary, lines


class OutputSink:
    """The pipeline's sink of a translate job: its share's writer, into the output file, which
    each checkpoint makes durable (a chunk's lines are final: a resumed job starts after them)."""

    def __init__(self, writer: ChunkWriter, output: OutputFile) -> None:
        self.writer, self.output = writer, output

    def put(self, result: Result) -> None:
        self.writer.put(result)

    def checkpoint(self, lines_done: int, input_position: tuple[int, str]) -> None:
        self.writer.end_chunk()
        self.output.checkpoint(lines_done, input_position)

    def close(self) -> None:
        self.writer.close()


def _translate_ranks(jobs: list[Config], ranks: Ranks, engine: Engine | None) -> Summary:
    """This rank's share of every job, one after the other with one model load, each followed
    (rank 0) by its merge; returns this rank's summary of them all. As in one process, every
    job's files are claimed first, and before the model loads every part a new job has not
    written yet is marked unfinished, so that --resume after a stop never takes an older OUT
    for a job no rank had started."""
    for config in jobs:
        check_torchrun(config)
        check_job(config)
    group, claimed, pending = Group(ranks), [], []
    try:
        for config in jobs:
            config = config.over({"threads": threads_for(config, ranks), "device": device_for(config, ranks)})
            output, part = OutputFile(config.io.output), OutputFile(ranks.part(config.io.output))
            claimed.append((output, part))
            if not _claim_share(config, ranks, group, output, part):
                pending.append((config, output, part))
        for config, _, part in pending:  # before the load, as in one process
            if not config.io.resume:
                part.mark_unfinished()
        total, resolved = Summary(), []
        if pending:
            engine = engine or load_engine(pending[0][0])
            resolved = resolve_all([config for config, _, _ in pending], engine)
            signals.job_started()  # from here a signal unwinds the run, keeping the parts resumable
        for (config, output, part), job in zip(pending, resolved):
            summary, lines = decode_job(job, engine, part, RankJob(ranks, part.path))
            group.wait()  # every part complete
            if ranks.rank == 0:
                merge(output, [ranks.part(config.io.output, r) for r in range(ranks.world)], lines)
            group.wait()  # OUT written: the job ends for all
            total.add(summary)
        return total
    finally:
        for output, part in claimed:
            part.release()
            output.release()
        leave_group()


def _claim_share(config: Config, ranks: Ranks, group: Group, output: OutputFile, part: OutputFile) -> bool:
    """Lock a job's OUT (rank 0) and this rank's part, before the model loads; True when --resume
    finds the job complete (OUT there and no part of it), on every rank."""
    io_cfg = config.io
    for target in (output, part):
        target.refuse_source(io_cfg.src)
    if ranks.rank == 0:
        output.claim(False, resumable=False)  # the lock: one job on OUT, whatever its number of processes
    part.claim(io_cfg.resume)
    check_layout(io_cfg.output, ranks.world, io_cfg.resume, clean=ranks.rank == 0)
    complete = io_cfg.resume and os.path.lexists(io_cfg.output) and ranks.world not in layouts(io_cfg.output)
    if not group.all_ranks(complete):
        return False
    if ranks.rank == 0 and not config.runtime.quiet:
        say(f"nmtdecode: {io_cfg.output} is complete (no parts to resume); nothing to do")
    return True
