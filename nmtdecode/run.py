"""Running `translate` jobs: one loop, for one process and for each torchrun rank.

    check every job's input and output, lock the outputs     (before torch is imported)
    engine = Engine.load(first job with work to do)
    for each job:  read its input in chunks -> cut into batches -> decode its share of the
                   batches -> write the results to its sink -> checkpoint after each chunk

In one process the share is every batch and the sink the output file, written in
input order (`WholeJob`). Under torchrun each rank decodes its batches into its part
file and rank 0 merges the parts (`ranks.Ranks`, `RankJob`). Either way an
interrupted job resumes at a chunk boundary (output_file.py). The CLI builds the
jobs' `Config`s (jobs.py) and calls `translate_job`; nothing here parses flags.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator, Protocol

from tqdm import tqdm

from . import signals
from .batching import chunk_size, chunks, cut
from .config import Config
from .models.detect import model_format
from .output_file import OutputFile
from .ranks import (Group, PartWriter, Ranks, check_job, check_layout, device_for, layouts, leave_group, merge,
                    threads_for)
from .reading import LineReader, PrefixLines, check_prefix, check_readable, count_lines
from .signature import job_signature
from .summary import Summary, count, seconds_left, timing, warn
from .jobs import check_written_files
from .writing import BothWriters, ResultWriter, SearchWriter, breaks_lines

if TYPE_CHECKING:
    from .engine import Engine


def translate_job(jobs: Config | list[Config], engine: Engine | None = None) -> Summary:
    """Run one job or several with one model load (`engine`, or loaded here from the first job's
    config, and only when some job has work to do).

    Every job's input and output are checked and every output locked before the model
    loads; a job complete under --resume is skipped; the locks are released however the
    run ends. Returns the summary of all jobs together (under torchrun, this rank's)."""
    jobs = [interactive(job) for job in ([jobs] if isinstance(jobs, Config) else jobs)]
    check_written_files(jobs)
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
        total = Summary()
        if pending:
            if engine is None:
                engine, load_seconds = load_engine(pending[0][0]), time.perf_counter() - started
            signals.job_started()  # from here a signal unwinds the run, keeping its outputs resumable
            for job, output, _ in pending:
                if not job.io.resume:
                    output.mark_unfinished()  # every output of the run, before the first is decoded
        several = len(jobs) > 1  # then each file's bar and summary line name it, and a total follows
        for job, output, dump in pending:
            share = WholeJob(dump, job.io.src) if several else WholeJob(dump, timed=(started, load_seconds))
            total.add(decode_job(job, engine, output, share)[0])
        if several and pending and not pending[0][0].runtime.quiet:
            print(total.line(f"nmtdecode: all {count(len(pending), 'file')}:")
                  + timing(load_seconds, time.perf_counter() - started), file=sys.stderr)
        return total
    except (KeyboardInterrupt, signals.Terminated) as stop:
        if not any(output is not None and not output.direct for output in outputs):
            setattr(stop, signals.STOPPED_NOTE, NOT_RESUMABLE)
        raise
    finally:
        for output in outputs + dumps:
            if output is not None:
                output.release()


# What a job stopped with only outputs written directly (stdout, a link, a device or a FIFO) left.
NOT_RESUMABLE = ("what was written so far is kept, but the output (standard output, a link, a device or a FIFO) "
                 "is written directly, so the job cannot be resumed: run it again")


def load_engine(config: Config) -> Engine:
    """The model on its device. torch is imported here, once the inputs and outputs are checked and
    the model path is found to be a model (models/detect.py), so that a wrong path, an unreadable
    input or a locked output fails in a fraction of a second."""
    for path in config.io.models:
        model_format(path)
    from .engine import Engine

    return Engine.load(config)


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
        print(f"nmtdecode: {job.io.output} is complete (no {output.tmp} to resume); nothing to do", file=sys.stderr)
    return None


class Share(Protocol):
    """The part of a job one process decodes, and where it goes."""

    shows_progress: bool  # a progress bar (on a terminal)
    reports_input: bool  # warns about the input's replaced lines
    where: str  # what messages about its output start with
    summary_prefix: str  # what its summary line starts with
    label: str  # the file its progress bar names ("": none)
    timed: tuple[float, float | None] | None  # (the run's start, the model's load time): added to its summary

    def mine(self, batches) -> list: ...  # its batches of a chunk's

    def sink(self, output: OutputFile, config: Config, first_index: int): ...  # put, end_chunk, close

    def complete(self, output: OutputFile): ...  # after the last chunk

    def abandon(self): ...  # after a failure


class WholeJob:
    """One process's share of a job: every batch, written in input order into the output (and
    each line's search into the --dump-beam file, when given). label: the file it names (one of
    several); timed: (the run's start, the model's load time or None), which the run's only job
    adds to its summary line."""

    shows_progress = True
    reports_input = True

    def __init__(self, dump: OutputFile | None = None, label: str = "",
                 timed: tuple[float, float | None] | None = None):
        self.dump, self.label, self.timed = dump, label, timed
        self.where = f"{label}: " if label else ""
        self.summary_prefix = f"nmtdecode: {label}:" if label else "nmtdecode:"

    def mine(self, batches) -> list:
        return list(batches)

    def sink(self, output: OutputFile, config: Config, first_index: int) -> ResultWriter | BothWriters:
        writer = ResultWriter(output.stream, config.io.format, config.io.token_scores, first_index)
        if self.dump is None:
            return writer
        self.dump.open(False, signature="")  # no checkpoints: a complete file or none
        return BothWriters(writer, SearchWriter(self.dump.stream))

    def complete(self, output: OutputFile):
        output.finish()
        if self.dump is not None:
            self.dump.finish()

    def abandon(self):
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

    def mine(self, batches) -> list:
        return self.ranks.mine(batches)

    def sink(self, output: OutputFile, config: Config, first_index: int) -> PartWriter:
        return PartWriter(output.stream, config.io.format, config.io.token_scores)

    def complete(self, output: OutputFile):
        pass  # PartWriter.close closed it; the merge finishes the job

    def abandon(self):
        pass


def decode_job(config: Config, engine: Engine, output: OutputFile, share: Share) -> tuple[Summary, int]:
    """Decode `share` (WholeJob or RankJob) of one job into `output`, checkpointed after each
    chunk; returns its summary and the input's line count."""
    config, decoder = engine.decoder(config)
    summary, start, source_bytes, waiting = Summary(), time.perf_counter(), 0, InputWait()
    job = JobInput(config, output, engine, where=share.where)
    sink = share.sink(output, config, job.done)
    if config.io.stream and stdin_is_terminal() and not config.runtime.quiet:
        print("nmtdecode: ready: type a line to translate it (Ctrl-D ends)", file=sys.stderr)
    try:
        with progress_bar(config, job.done, share.shows_progress, share.label) as progress:
            total_bytes = bytes_left(config.io.src, job.done, progress.total) if not progress.disable else None
            at_once = engine.batches_at_once(config)
            for _, batches in waiting.over(job.chunks()):
                for batch, results in engine.decode_batches(share.mine(batches), decoder, at_once):
                    for result in results:
                        sink.put(result)
                        summary.target_tokens += len(result.hypotheses[0].tokens)
                    summary.count(batch)
                    summary.count_joined(sum(breaks_lines(result, config.io.format) for result in results))
                    summary.unfinished += sum(not r.hypotheses[0].ended for r in results if r.hypotheses)
                    elapsed, eta = time.perf_counter() - start, ""
                    if total_bytes is not None:  # the bar shows the time left
                        source_bytes += sum(len(e.text.encode("utf-8")) + 1 for e in batch)
                        left = seconds_left(elapsed, source_bytes, total_bytes)
                        eta = "" if left is None else f", {tqdm.format_interval(left)} left"
                    progress.set_postfix_str(f"{summary.target_tokens / max(elapsed, 1e-9):.0f} tokens/s{eta}",
                                             refresh=False)
                    progress.update(len(batch))
                sink.end_chunk()
        sink.close()
    except BaseException:
        output.abandon()  # keeps FILE.tmp and its journal for --resume
        share.abandon()
        raise
    share.complete(output)
    summary.replaced = job.reader.replaced_lines
    summary.seconds = time.perf_counter() - start - (waiting.seconds if config.io.stream else 0.0)
    if summary.replaced and share.reports_input:
        warn(f"{summary.replaced} lines had invalid UTF-8, decoded with U+FFFD")
    if not config.runtime.quiet:
        timed = share.timed
        extra = "" if timed is None else timing(timed[1], time.perf_counter() - timed[0])
        print(summary.line(share.summary_prefix) + extra, file=sys.stderr)
    return summary, job.done


class InputWait:
    """The time spent waiting for the input's next batch: answering line by line, the time
    waiting for the next line is not decoding time."""

    def __init__(self):
        self.seconds = 0.0

    def over(self, batches: Iterable) -> Iterator:
        iterator = iter(batches)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            finally:
                self.seconds += time.perf_counter() - start
            yield batch


def _translate_ranks(jobs: list[Config], ranks: Ranks, engine: Engine | None) -> Summary:
    """This rank's share of every job, one after the other with one model load, each followed
    (rank 0) by its merge; returns this rank's summary of them all. As in one process, every
    job's files are claimed first, and once the model is loaded every part a new job has not
    written yet is marked unfinished, so that --resume after a stop never takes an older OUT
    for a job no rank had started."""
    for config in jobs:
        check_job(config)
    group, claimed, pending = Group(ranks), [], []
    try:
        for config in jobs:
            config = config.over({"threads": threads_for(config, ranks), "device": device_for(config, ranks)})
            output, part = OutputFile(config.io.output), OutputFile(ranks.part(config.io.output))
            claimed.append((output, part))
            if not _claim_share(config, ranks, group, output, part):
                pending.append((config, output, part))
        total = Summary()
        if pending:
            engine = engine or load_engine(pending[0][0])
            signals.job_started()  # from here a signal unwinds the run, keeping the parts resumable
            for config, _, part in pending:
                if not config.io.resume:
                    part.mark_unfinished()
        for config, output, part in pending:
            summary, lines = decode_job(config, engine, part, RankJob(ranks, part.path))
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
        print(f"nmtdecode: {io_cfg.output} is complete (no parts to resume); nothing to do", file=sys.stderr)
    return True


def job_examples(config: Config, lines, engine: Engine):
    """The Examples of a job's (index, line) pairs, each with its line of the --prefix file."""
    max_src_length = config.batching.max_src_length
    if config.io.prefix is None:
        yield from (engine.make_example(i, line, max_src_length) for i, line in lines)
        return
    prefixes = PrefixLines(config.io.prefix, config.io.on_invalid_utf8)
    for i, line in lines:
        yield engine.make_example(i, line, max_src_length, prefixes.line(i))
    prefixes.check_end()


def read_size(config: Config) -> int:
    """Lines read before decoding starts: a sort chunk from a file; from a pipe one batch's
    worth, so results come out as batches fill; one line with --stream."""
    batching = config.batching
    if config.io.stream:
        return 1
    if config.io.src == "-":  # with a token budget, assume ~16 tokens a line
        return batching.batch_size if batching.batch_type == "sents" else max(1, batching.batch_size // 16)
    return chunk_size(batching.batch_size, batching.batch_type)


class JobInput:
    """A job's input as one process and each torchrun rank read it: from where the job's output
    left off (--resume), as Examples in chunks of `read_size` lines, each chunk cut into
    length-sorted batches. Made, it opens the output with the job's signature."""

    def __init__(self, config: Config, output: OutputFile, engine: Engine, where: str = ""):
        self.config, self.output = config, output
        self.reader = LineReader(config.io.src, config.io.on_invalid_utf8)
        signals.job_started()  # from here a signal unwinds the job, keeping its output resumable
        signature = job_signature(config, engine.loaded.files)
        self.done = output.open(config.io.resume, signature)  # input lines done before
        lines = output.unfinished(self.reader, on_resume=lambda n: warn(f"{where}resuming after input line {n}"))
        self.examples = job_examples(config, lines, engine)

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
        return config.over({"stream": True})
    return config


def progress_bar(config: Config, done: int, wanted: bool = True, label: str = "") -> tqdm:
    """Lines done, of how many (a regular file is counted first: percent), tokens/s and the time
    left (by source bytes: summary.seconds_left); named by `label` (one file of several); on a
    terminal only, and not while answering line by line (it would mix with the typing)."""
    shown = wanted and not config.runtime.quiet and not config.io.stream and stderr_is_terminal()
    total = count_lines(config.io.src) if shown else None
    layout = {} if total is None else {"bar_format": "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"}
    return tqdm(total=total, initial=done, unit=" lines", disable=not shown, dynamic_ncols=True,
                desc=os.path.basename(label) or None, **layout)


def bytes_left(src: str, done: int, lines: int | None) -> int | None:
    """The source bytes still to decode of a regular file (`done` of its `lines` lines already are:
    their share of its size), or None (stdin, an uncounted input)."""
    if src == "-" or not lines or not os.path.isfile(src):
        return None
    return os.path.getsize(src) * (lines - done) // lines
