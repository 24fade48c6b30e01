"""File and system checks of a run, before its model loads: what the options name must exist,
be readable, and be written by no one else.

The options' own values and combinations are checked where they are declared (options/);
what needs the loaded model, by engine/resolve.py; what this machine's device and CPU can
do, by engine/system.py. Here: the inputs (readable; a --prefix file with a line per source
line), the files a run writes (no file written twice, none an input: output_file.py refuses
those as it claims them), the --output-dir (created), and what torchrun and score need of their
files. Errors are ConfigErrors (exit code 2), or the reader's InputError for an input that
cannot be read (exit code 1).
"""

from __future__ import annotations

import os
import stat

from ..options.config import Config, ConfigError
from .output_file import OutputFile, side_files
from .reading import check_readable, count_lines


def check_inputs(config: Config) -> None:
    """The job's input is readable, and so is its --prefix file, with as many lines."""
    io_cfg = config.io
    check_readable(io_cfg.src)
    if io_cfg.prefix is not None:
        check_prefix(io_cfg.src, io_cfg.prefix, io_cfg.resume)


def check_prefix(src: str, prefix: str, resume: bool = False) -> None:
    """The prefix file is readable and, when the source is a regular file too, has as many lines.
    A pipe or FIFO is read once, as the job goes (it cannot be counted, nor hashed for the resume
    signature, so it cannot be resumed)."""
    check_readable(prefix)
    if resume and not os.path.isfile(prefix):
        raise ConfigError(
            f"--resume: the prefixes come from {prefix}, a pipe or device, which cannot be read again "
            "to check that they are the ones the partial output was made with; give a file"
        )
    counts = count_lines(src), count_lines(prefix)
    if None not in counts and counts[0] != counts[1]:
        raise ConfigError(
            f"prefix: {prefix} has {counts[1]} lines but {src} has {counts[0]}; give one prefix line per source line"
        )


def check_torchrun_files(config: Config) -> None:
    """What torchrun needs of a job's files: a regular input file (every process reads it whole)
    and an output file to put parts beside (its options: entries.py's "torchrun")."""
    io_cfg = config.io
    check_inputs(config)
    if not stat.S_ISREG(os.stat(io_cfg.src).st_mode):
        raise ConfigError(
            f"under torchrun every process reads the whole input: --src {io_cfg.src} must be a "
            "regular file, not a pipe or device"
        )
    if OutputFile(io_cfg.output).direct:
        raise ConfigError(
            "under torchrun --output must be a file (each process writes FILE.part-RANK-of-WORLD "
            "beside it), not stdout, a link or a device"
        )


def check_score_files(src: str, tgt: str) -> None:
    """score's two inputs are readable and, where both can be counted, pair up line by line."""
    for path in (src, tgt):
        check_readable(path)
    counts = count_lines(src), count_lines(tgt)
    if None not in counts and counts[0] != counts[1]:
        raise ConfigError(f"--src has {counts[0]} lines but --tgt has {counts[1]}")


def file_identity(path: str) -> tuple:
    """What names one file however it is spelt: (device, inode) when it exists (through links,
    and hard links alike), else its path with every link and `..` resolved."""
    try:
        st = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return ("inode", st.st_dev, st.st_ino)


def check_written_files(jobs: list[Config]) -> None:
    """No file is written twice in a run: by two jobs (their outputs, their --dump-beam files, the
    files each keeps beside them: FILE.tmp, its journal, FILE.lock) or by one job twice. Files
    are compared as files, not as names: `--output x.de.tmp x.de` would have the second job
    take the first one's finished output for its own temporary file."""
    seen: dict[tuple, tuple] = {}  # file -> (the key, what it is, the name that named it first, its job)
    for number, job in enumerate(jobs):
        for key, path, what in written_files(job):
            identity = file_identity(path)
            if identity not in seen:
                seen[identity] = (key, what, path, number)
                continue
            first_key, first_what, first_path, first_job = seen[identity]
            if first_job == number:
                raise ConfigError(
                    f"{key}: {path} is the job's --{first_key.replace('_', '-')}"
                    + ("" if first_what == WRITTEN[first_key] else f" ({first_what})")
                    + "; give it a file of its own"
                )
            alias = (
                "" if first_path == path else f" (it is {first_path}, through a link or another spelling of the path)"
            )
            whose = "two jobs" if (first_key, first_what) == (key, what) else "another job"
            raise ConfigError(f"{key}: {path} is {first_what} of {whose}{alias}")


WRITTEN = {"output": "the output", "dump_beam": "the beam dump"}  # the files a job writes


def written_files(job: Config) -> list[tuple[str, str, str]]:
    """(option, name, what it is) of every file `job` writes: its output and beam dump, and beside
    each the files the job keeps there while it runs (output_file.side_files)."""
    files = []
    for key, what in WRITTEN.items():
        path = getattr(job.io, key)
        if path is not None and path != "-":
            files.append((key, path, what))
            files += [(key, side, f"a file kept beside {what} {path}") for side in side_files(path)]
    return files


def make_output_dir(file_values: dict, flags: dict) -> None:
    """Create the --output-dir (the command line's, else the config file's) if it is missing."""
    output_dir = flags.get("output_dir", file_values.get("output_dir"))
    if isinstance(output_dir, str) and not os.path.isdir(output_dir):
        try:
            os.makedirs(output_dir, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"output_dir: cannot create {output_dir}: {e.strerror}") from None
