"""Running `translate` jobs: one skeleton, whatever share of each job this process decodes.

    check every job's options, input and output                  (before torch is imported)
    claim each job's share: lock its files; --resume skips a complete job
    mark each new share unfinished                                (before the load, which takes minutes)
    load the engine once (not at all when every input is known to be empty); resolve every job (resolve.py)
    for each job: its share through the pipeline (its input -> the engine -> its sink), then complete it
    release every lock, however the run ends

The share is the parameter. In one process it is the whole job (`WholeJob`, a world of one):
every batch, written in input order into the output file. Under torchrun it is a rank's
(`RankJob`): its batches into its part file; then the ranks wait for each other and rank 0
merges the parts (ranks.py). Either way the sink checkpoints its file after each chunk, so an
interrupted job resumes at a chunk boundary (output_file.py). The CLI builds the jobs'
`Config`s (options/plan.py) and calls `translate_job`; nothing here parses flags.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Protocol, cast

from . import signals
from ..options.config import Config
from .files import check_inputs, check_torchrun_files, check_written_files
from .output_file import NOT_RESUMABLE, OutputFile
from .pipeline import LineSource, load_engine, run
from .progress import JobProgress, progress_bar, stdin_is_terminal
from .ranks import (
    Group,
    PartWriter,
    Ranks,
    check_layout,
    device_for,
    layouts,
    leave_group,
    merge,
    threads_for,
)
from .reading import has_ended_empty
from ..engine.resolve import ResolvedJob, resolve
from ..engine.messages import count, print_warning, say
from .signature import job_signature
from .summary import Summary, timing
from .writing import ResultWriter

if TYPE_CHECKING:
    from ..engine.batching import Example, Result
    from ..engine.engine import Engine


def translate_job(jobs: Config | list[Config], engine: Engine | None = None) -> Summary:
    """Run one job or several with one model load (`engine`, or loaded here from the first job's
    config, and only when some job has work to do): in one process every batch of each, under
    torchrun this rank's share of each.

    Every job's input and output are checked and every output locked before the model
    loads; a job complete under --resume is skipped; the locks are released however the
    run ends. Returns the summary of all jobs together (under torchrun, this rank's)."""
    typed = stdin_is_terminal()
    jobs = [stream_typed_input(job, typed) for job in ([jobs] if isinstance(jobs, Config) else jobs)]
    for job in jobs:
        job.validate("translate")
    check_written_files(jobs)
    ranks = Ranks.from_env()
    if ranks is None:
        several = len(jobs) > 1  # then each file's bar and summary line name it, and a total follows
        return decode_shares([WholeJob(job, jobs, several) for job in jobs], engine, several)
    for job in jobs:
        job.validate("torchrun")
        check_torchrun_files(job)
    group = Group(ranks)
    try:
        return decode_shares([RankJob(job, ranks, group) for job in jobs], engine)
    finally:
        leave_group()


def stream_typed_input(config: Config, stdin_is_terminal: bool) -> Config:
    """The job, answering line by line (as --stream) when its input is typed at a terminal."""
    io_cfg = config.io
    if io_cfg.src == "-" and not io_cfg.stream and not io_cfg.resume and stdin_is_terminal:
        return config.over({"stream": True})
    return config


def decode_shares(shares: list[Share], engine: Engine | None, several: bool = False) -> Summary:
    """The skeleton: claim every share, mark the new ones unfinished, load once, resolve all,
    decode each, release all; `several`: a total line follows the jobs' own."""
    started, load_seconds, total = time.perf_counter(), None, Summary()
    try:
        pending = []
        for share in shares:
            output = share.claim()
            if output is not None:
                pending.append((share, output))
        for share, output in pending:  # before the load: a stop during it must not leave an older
            if not share.config.io.resume:  # output looking complete to a --resume (a requeued Slurm job passes it)
                output.mark_unfinished()
        empty = [nothing_to_read(share.config, output) for share, output in pending]
        decoded = [claimed for claimed, nothing in zip(pending, empty) if not nothing]
        resolved: Iterator[ResolvedJob] = iter(())
        if decoded:  # the model loads only for inputs that may hold a line
            if engine is None:
                engine, load_seconds = load_engine(decoded[0][0].config), time.perf_counter() - started
            resolved = iter(resolve_all([share.config for share, _ in decoded], engine))
            signals.job_started()  # from here a signal unwinds the run, keeping its outputs resumable
        for (share, output), nothing in zip(pending, empty):
            clock = (started, load_seconds)
            if nothing:
                total.add(complete_empty(share, output, clock))
            else:
                total.add(decode_job(next(resolved), cast("Engine", engine), share, output, clock))
        if several and pending and not pending[0][0].config.runtime.quiet:
            say(
                total.line(f"nmtdecode: all {count(len(pending), 'file')}:")
                + timing(load_seconds, time.perf_counter() - started)
            )
        return total
    except (KeyboardInterrupt, signals.Terminated) as stop:
        if not any(share.resumable for share in shares):
            setattr(stop, signals.STOPPED_NOTE, NOT_RESUMABLE)
        raise
    finally:
        for share in shares:
            share.release()


def resolve_all(jobs: list[Config], engine: Engine) -> list[ResolvedJob]:
    """Every job of the run resolved on the loaded model (resolve.py), before any is decoded, with
    its notes about options that change nothing told on stderr."""
    resolved = [resolve(job, engine) for job in jobs]
    for job in resolved:
        for note in job.notes:
            print_warning(note)
    return resolved


def nothing_to_read(config: Config, output: OutputFile) -> bool:
    """Whether a job's input is known to be empty before the model loads (reading.has_ended_empty),
    its output starts anew (no partial output to resume, whose input is checked as it is read) and
    its prefixes, if any, are a file (counted against the source when claimed)."""
    io_cfg = config.io
    prefix_counted = io_cfg.prefix is None or os.path.isfile(io_cfg.prefix)
    return prefix_counted and not output.resumes(io_cfg.resume) and has_ended_empty(io_cfg.src)


class Share(Protocol):
    """The part of a job one process decodes, and where it goes: `WholeJob` or `RankJob`."""

    config: Config  # the job as this process runs it
    shows_progress: bool  # a progress bar (on a terminal)
    label: str  # the file its progress bar and summary line name ("": none)
    timed: bool  # its summary line adds the run's load and wall time
    where: str  # what messages about its output start with

    @property
    def resumable(self) -> bool: ...  # a stop now leaves what --resume continues

    @property
    def reports_input(self) -> bool: ...  # warns about the input's replaced lines

    @property
    def summary_prefix(self) -> str: ...  # what its summary line starts with

    def claim(self) -> OutputFile | None: ...  # lock its files: the one it decodes into; None: nothing to do

    def mine(self, batches: Iterable[list[Example]]) -> list[list[Example]]: ...  # its batches of a chunk's

    def sink(self, output: OutputFile, first_index: int) -> ResultWriter | PartWriter: ...  # once `output` is open

    def complete(self, lines: int) -> None: ...  # after its last chunk: the job's output made whole

    def abandon(self) -> None: ...  # after a failure: its files kept for --resume

    def release(self) -> None: ...  # however the run ends


class WholeJob:
    """One process's share of a job (a world of one): every batch, written in input order into the
    output (and each line's search into the --dump-beam file, when given). Of several jobs, each
    names its file; the run's only job adds the run's timing to its summary line."""

    shows_progress = True
    reports_input = True

    def __init__(self, config: Config, jobs: list[Config], several: bool) -> None:
        self.config, self.jobs = config, jobs  # every job's input is refused as this one's output
        self.label, self.timed = (config.io.src, False) if several else ("", True)
        self.where = f"{self.label}: " if several else ""
        self.summary_prefix = f"nmtdecode: {self.label}:" if several else "nmtdecode:"
        self.output: OutputFile | None = None  # claimed, with work to do
        self.dump: OutputFile | None = None

    @property
    def resumable(self) -> bool:
        return self.output is not None and not self.output.direct

    def claim(self) -> OutputFile | None:
        """Check the job's input and lock its output (and its --dump-beam file); None when --resume
        finds the output complete."""
        io_cfg = self.config.io
        check_inputs(self.config)
        output = OutputFile(io_cfg.output)
        for other in self.jobs:
            output.refuse_source(other.io.src)
        try:
            complete = output.claim(io_cfg.resume)
            if not output.direct:  # parts of an earlier torchrun job with this output
                check_layout(io_cfg.output, 1, io_cfg.resume)
        except BaseException:
            output.release()
            raise
        if complete:
            output.release()
            if not self.config.runtime.quiet:
                say(f"nmtdecode: {io_cfg.output} is complete (no {output.tmp} to resume); nothing to do")
            return None
        self.output = output
        if io_cfg.dump_beam is not None:  # written whole through FILE.tmp, as score's output: complete or absent
            self.dump = OutputFile(io_cfg.dump_beam)
            for path in (io_cfg.src, io_cfg.prefix, output.tmp):  # never its input, prefix or output
                if path is not None:
                    self.dump.refuse_source(path)
            self.dump.claim(False, resumable=False)
        return output

    def mine(self, batches: Iterable[list[Example]]) -> list[list[Example]]:
        return list(batches)

    def sink(self, output: OutputFile, first_index: int) -> ResultWriter:
        io_cfg, dump = self.config.io, None
        if self.dump is not None:
            self.dump.open(False, signature="")  # no checkpoints: a complete file or none
            dump = self.dump.stream
        return ResultWriter(output.stream, io_cfg.format, io_cfg.token_scores, first_index, dump, output.checkpoint)

    def complete(self, lines: int) -> None:
        for done in (self.output, self.dump):
            if done is not None:
                done.finish()

    def abandon(self) -> None:
        for kept in (self.output, self.dump):  # the output's FILE.tmp and journal kept for --resume;
            if kept is not None:  # the dump's, with no journal, removed
                kept.abandon()

    def release(self) -> None:
        for claimed in (self.output, self.dump):
            if claimed is not None:
                claimed.release()


@dataclass
class RankJob:
    """A torchrun rank's share of a job: its batches of every chunk, into its part file, which
    stays PART.tmp with its journal until rank 0 merges the parts into the job's output."""

    config: Config
    ranks: Ranks
    group: Group
    shows_progress = False
    label = ""
    timed = False
    resumable = True  # a part is a regular file, checkpointed as it is written

    def __post_init__(self) -> None:
        config, ranks = self.config, self.ranks
        self.config = config.over({"threads": threads_for(config, ranks), "device": device_for(config, ranks)})
        self.merged, self.part = OutputFile(self.config.io.output), OutputFile(ranks.part(self.config.io.output))
        self.where = f"{self.part.path}: "

    @property
    def reports_input(self) -> bool:  # every rank reads (and counts) the whole input: rank 0 tells
        return self.ranks.rank == 0

    @property
    def summary_prefix(self) -> str:
        return self.ranks.summary_prefix()

    def claim(self) -> OutputFile | None:
        """Lock the job's output (rank 0) and this rank's part, before the model loads; None when
        --resume finds the job complete (its output there and no part of it), on every rank."""
        io_cfg, ranks = self.config.io, self.ranks
        for target in (self.merged, self.part):
            target.refuse_source(io_cfg.src)
        if ranks.rank == 0:
            self.merged.claim(False, resumable=False)  # the lock: one job on OUT, whatever its number of processes
        self.part.claim(io_cfg.resume)
        check_layout(io_cfg.output, ranks.world, io_cfg.resume, clean=ranks.rank == 0)
        complete = io_cfg.resume and os.path.lexists(io_cfg.output) and ranks.world not in layouts(io_cfg.output)
        if not self.group.all_ranks(complete):
            return self.part
        if ranks.rank == 0 and not self.config.runtime.quiet:
            say(f"nmtdecode: {io_cfg.output} is complete (no parts to resume); nothing to do")
        return None

    def mine(self, batches: Iterable[list[Example]]) -> list[list[Example]]:
        return self.ranks.mine(batches)

    def sink(self, output: OutputFile, first_index: int) -> PartWriter:
        return PartWriter(output, self.config.io.format, self.config.io.token_scores)

    def complete(self, lines: int) -> None:
        """Every part complete, rank 0 merges them into the job's output; the job ends for all."""
        self.group.wait()
        if self.ranks.rank == 0:
            output = self.config.io.output
            merge(self.merged, [self.ranks.part(output, r) for r in range(self.ranks.world)], lines)
        self.group.wait()

    def abandon(self) -> None:
        self.part.abandon()  # PART.tmp and its journal kept for --resume

    def release(self) -> None:
        self.part.release()
        self.merged.release()


def decode_job(
    job: ResolvedJob, engine: Engine, share: Share, output: OutputFile, clock: tuple[float, float | None]
) -> Summary:
    """Decode `share` of one job into `output` through the pipeline, the file checkpointed after
    each chunk, then complete it; returns its summary. `clock`: the run's start and the model's
    load time (None: loaded before), which a `timed` share's summary line adds."""
    config = job.config
    signals.job_started()  # from here a signal unwinds the job, keeping its output resumable
    done = output.open(config.io.resume, job_signature(config, job.model_files))  # input lines done before
    source = LineSource(
        config,
        engine.make_example,
        done,
        output.check_input,
        on_resume=lambda n: print_warning(f"{share.where}resuming after input line {n}"),
    )
    sink = share.sink(output, done)
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
                lambda batch: engine.decode_batch(batch, job.decoder),
                sink.put,
                job.batches_at_once,
                share.mine,
                observe,
                sink.checkpoint,
            )
            sink.close()
    except BaseException:
        share.abandon()  # keeps FILE.tmp and its journal for --resume
        raise
    summary = counted.summary
    summary.replaced = source.reader.replaced_lines
    summary.seconds = time.perf_counter() - counted.start - source.reader.waited  # the rate is the decoding's
    share.complete(lines)
    if summary.replaced and share.reports_input:
        print_warning(f"{summary.replaced} lines had invalid UTF-8, decoded with U+FFFD")
    return report(summary, config, share, clock)


def complete_empty(share: Share, output: OutputFile, clock: tuple[float, float | None]) -> Summary:
    """A job whose input is empty (`nothing_to_read`), done without the model: its output made as
    `decode_job` makes it of no lines (FILE.tmp, then renamed; the lock as ever), its summary line
    told. Its resume signature leaves out files its model would read outside its folder (the
    loader names them), which no resume compares: the job completes here."""
    config = share.config
    signals.job_started()
    output.open(config.io.resume, job_signature(config))
    try:
        share.sink(output, 0).close()
    except BaseException:
        share.abandon()
        raise
    share.complete(0)
    return report(Summary(), config, share, clock)


def report(summary: Summary, config: Config, share: Share, clock: tuple[float, float | None]) -> Summary:
    """A job's summary, its line said on stderr (unless quiet); a `timed` share's adds the run's
    load and wall time (`clock`: the run's start and the load's seconds, None: no load)."""
    if not config.runtime.quiet:
        extra = timing(clock[1], time.perf_counter() - clock[0]) if share.timed else ""
        say(summary.line(share.summary_prefix) + extra)
    return summary
