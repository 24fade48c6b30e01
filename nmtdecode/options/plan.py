"""The jobs of one `translate` run: one complete `Config` per input file.

A config file's values, each item of its `jobs:` list (or its lists of `src:` and
`output:`, or the --output-dir/--suffix rule), and the command line's flags are
planned into jobs that one model load serves, each job's options layered as config.py
layers them (file < item < command line); an item may set only options that need no
other model load (entries.py). Nothing here touches a file: whether the inputs can be
read and the outputs written is jobs/files.py's.
"""

from __future__ import annotations

import os

from .bounded import shown
from .config import Config
from .entries import check_given
from .layers import option_names
from .option import ConfigError
from .table import PLAN_KEYS


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
    check_given("jobs: item", item, item=n)
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
