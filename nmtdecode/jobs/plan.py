"""The jobs of one `translate` run: one complete `Config` per input file.

A config file's values, each item of its `jobs:` list (or its lists of `src:` and
`output:`, or the --output-dir/--suffix rule), and the command line's flags are
planned into jobs that one model load serves, each job's options layered as config.py
layers them (file < item < command line); an item may set only options that need no
other model load.
"""

from __future__ import annotations

import os
from typing import Iterable

from ..options.bounded import shown
from ..options.config import KEY_SECTION, PER_JOB_KEYS, PLAN_KEYS, Config, ConfigError, option_names
from ..models.model_files import files_read
from .output_file import side_files


def file_identity(path: str) -> tuple:
    """What names one file however it is spelt: (device, inode) when it exists (through links,
    and hard links alike), else its path with every link and `..` resolved."""
    try:
        st = os.stat(path)
    except OSError:
        return ("path", os.path.realpath(path))
    return ("inode", st.st_dev, st.st_ino)


def _as_list(key: str, value: object) -> list[str]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{key}: expected a file name or a list of file names, got {shown(value)}")
    return list(values)


def output_name(src: str, output_dir: str | None, suffix: str | None) -> str:
    """The output of `src` by the --output-dir/--suffix rule: the input's name in `output_dir`
    (default: the input's own directory), its last extension replaced by `suffix` if given. A
    suffix that starts with a letter or digit is an extension (`de` is `.de`: a.en -> a.de); one
    that starts otherwise is appended as it is (`_de.txt`: a.en -> a_de.txt). Without a suffix
    the name stays (out/a.en: the directory tells them apart; the input itself is refused)."""
    if src == "-":
        raise ConfigError("output_dir: stdin (-) has no name to derive an output from; use --output")
    name = os.path.basename(src)
    if suffix:
        name = os.path.splitext(name)[0] + ("." + suffix if suffix[0].isalnum() else suffix)
    return os.path.join(output_dir if output_dir is not None else os.path.dirname(src), name)


def _items(values: dict) -> list[dict]:
    """The {src, output, overrides...} of each job, from `jobs:` or from src/output lists."""
    output_dir, suffix = values.pop("output_dir", None), values.pop("suffix", None)
    for key, value in (("output_dir", output_dir), ("suffix", suffix)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {shown(value)}")
    derive = output_dir is not None or suffix is not None
    sources, outputs = values.pop("src", None), values.pop("output", None)
    if derive and outputs is not None:
        raise ConfigError("output: give either --output or --output-dir/--suffix, not both")
    if "jobs" in values:
        if sources is not None or outputs is not None:
            raise ConfigError("jobs: give either jobs: or src:/output: at the top of the file, not both")
        return [_job_item(n, item, output_dir, suffix) for n, item in enumerate(_job_list(values.pop("jobs")), 1)]
    sources = _as_list("src", "-" if sources is None else sources)
    if outputs is None and not derive and len(sources) > 1:
        raise ConfigError(
            f"output: {len(sources)} input files need an output each: give --output with one file "
            "per input, or --output-dir DIR and/or --suffix SUFFIX (outputs named after the inputs)"
        )
    outputs = [output_name(s, output_dir, suffix) for s in sources] if derive else outputs
    outputs = _as_list("output", "-" if outputs is None else outputs)
    if len(outputs) != len(sources):
        raise ConfigError(
            f"output: {len(sources)} input files but {len(outputs)} outputs; give one output per "
            "input, or --output-dir DIR / --suffix SUFFIX"
        )
    return [{"src": s, "output": o} for s, o in zip(sources, outputs)]


def _job_list(jobs: object) -> list:
    if not isinstance(jobs, list) or not jobs:
        raise ConfigError("jobs: expected a list of {src: FILE, output: FILE, ...} items")
    return jobs


def _job_item(n: int, item: object, output_dir: str | None, suffix: str | None) -> dict:
    """Item `n` of `jobs:` checked: a src, an output (or the output_dir/suffix rule's), and only
    options that need no other model load."""
    if not isinstance(item, dict) or "src" not in item:
        raise ConfigError(f"jobs: item {n} must be a mapping with at least src: FILE")
    item = option_names(item, f"jobs: item {n}")
    refused = sorted(k for k in item if k not in PER_JOB_KEYS)
    if refused:
        where = "set it at the top of the file" if refused[0] in KEY_SECTION else "unknown option"
        raise ConfigError(
            f"jobs: item {n} sets {shown(refused[0])}, which cannot differ between the jobs of "
            f"one run (one model load): {where}; an item may set {', '.join(sorted(PER_JOB_KEYS))}"
        )
    if "output" not in item:
        if output_dir is None and suffix is None:
            raise ConfigError(f"jobs: item {n} has no output (give output:, or output_dir:/suffix: at the top)")
        item["output"] = output_name(item["src"], output_dir, suffix)
    return item


def plan_jobs(file_values: dict, flags: dict) -> list[Config]:
    """The jobs of one run, each a complete `Config`: the config file's options, an item's own
    (`jobs:`), then the command line's, which override both. Inputs given on the command
    line replace the file's; every job has its own output file (or the only one stdout)."""
    values = dict(file_values)
    if "src" in flags:
        values.pop("jobs", None)
    elif "output" in flags and "jobs" in values:
        raise ConfigError("output: the config file lists jobs, each with its output; give --src with --output")
    files = ("src", "output", *PLAN_KEYS)
    items = _items({k: v for layer in (values, flags) for k, v in layer.items() if k in files})
    file_options = {k: v for k, v in values.items() if k not in files}
    flag_options = {k: v for k, v in flags.items() if k not in files}
    for key, what in (("prefix", "a prefix file"), ("dump_beam", "a beam dump")):
        if len(items) > 1 and {**file_options, **flag_options}.get(key) is not None:
            raise ConfigError(
                f"{key}: {what} goes with one input; with several, give each its own ({key}: in each item of jobs:)"
            )
    jobs = [Config.from_layers([file_options, item, flag_options]) for item in items]
    if len(jobs) > 1 and any(job.io.src == "-" or job.io.output == "-" for job in jobs):
        raise ConfigError(
            "src: with several inputs each needs its own output file; stdin and stdout serve only a single job"
        )
    return jobs


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
            files += written_beside(key, path, what)
    return files


def written_beside(key: str, path: str, what: str) -> list[tuple[str, str, str]]:
    """(option, name, what it is) of a file written through output_file.OutputFile and of the
    files kept beside it (side_files)."""
    return [(key, path, what)] + [(key, side, f"a file kept beside {what} {path}") for side in side_files(path)]


def check_model_spared(jobs: list[Config], model_files: Iterable[str] | None = None) -> None:
    """No job of the run writes a file its model is read from: before the load, the files named by
    the model's format (models/model_files.py); after it, `model_files`, every file it read."""
    files = files_read(jobs[0].io.model) if model_files is None else model_files
    refuse_model_files([written for job in jobs for written in written_files(job)], files)


def refuse_model_files(written: Iterable[tuple[str, str, str]], model_files: Iterable[str]) -> None:
    """No file a job writes (`written_files`' triples) is a file its model is read from (weights,
    configs, tokenizers, vocabularies, an ensemble member's: models/model_files.py before the
    load, LoadedModel.files after it), compared as files: through links and other spellings."""
    protected: dict[tuple, str] = {}
    for name in model_files:
        identity = file_identity(name)
        if identity[0] == "inode":
            protected.setdefault(identity, name)
    for key, path, what in written:
        found = protected.get(file_identity(path))
        if found is None:
            continue
        alias = "" if os.path.realpath(found) == os.path.realpath(path) else f" (it is {found})"
        where = "" if what in WRITTEN.values() else f" ({what})"
        raise ConfigError(
            f"{key}: {path}{where} is a file the model is read from{alias}: writing it would destroy "
            f"the model; choose another --{key.replace('_', '-')}"
        )


def make_output_dir(file_values: dict, flags: dict) -> None:
    """Create the --output-dir (the command line's, else the config file's) if it is missing."""
    output_dir = flags.get("output_dir", file_values.get("output_dir"))
    if isinstance(output_dir, str) and not os.path.isdir(output_dir):
        try:
            os.makedirs(output_dir, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"output_dir: cannot create {output_dir}: {e.strerror}") from None
