"""Shared fixtures: determinism, one tiny native model for the session, the CLI run in-process.

Most CLI behaviour (exit codes, messages, outputs) is checked with `cli`, which runs
`nmtdecode.cli.run` in this process: no interpreter start, no torch import per call.
Tests that need a real process (signals, kill -9, pipes, line-by-line streaming, and
one `python -m nmtdecode` smoke test) are marked `subprocess`.
"""

import atexit
import functools
import io
import itertools
import os
import re
import shutil
import sys
import tempfile
import traceback
from dataclasses import dataclass

import pytest

from nmtdecode.cli import run  # torch-free: torch comes with the first model load

# The test models are tiny: threads only add synchronisation, which on a busy machine costs
# more than the work itself. Subprocesses (the CLI tests) inherit the variable.
os.environ["OMP_NUM_THREADS"] = "1"
# Per-machine measurements (models/gemm.py) go to a fresh folder, not the user's cache.
# Removed when this process ends (each xdist worker has its own).
os.environ["NMTDECODE_CACHE"] = tempfile.mkdtemp(prefix="nmtdecode-test-cache-")
atexit.register(shutil.rmtree, os.environ["NMTDECODE_CACHE"], ignore_errors=True)


def pytest_configure(config):
    """torch in each process that runs tests, one thread each. pytest-xdist's controller loads
    this file too but only hands out tests: it does not import torch (1-1.5 s of every run)."""
    if getattr(config, "workerinput", None) is None and getattr(config.option, "dist", "no") != "no":
        return
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _deterministic():
    import torch

    if torch.cuda.is_available():
        torch.manual_seed(0)
    else:  # the CPU's generator is all there is; torch.manual_seed would also queue a seed for each device
        torch.default_generator.manual_seed(0)  # not yet started, formatting the stack each time (~1 ms)
    torch.backends.cuda.matmul.allow_tf32 = False  # parity tests compare fp32 results
    torch.backends.cudnn.allow_tf32 = False
    yield


PARITY_MODULE = re.compile(r"^pytestmark = pytest\.mark\.parity\b", re.MULTILINE)


def pytest_ignore_collect(collection_path, config):
    """A module marked parity as a whole is not even imported when the run's `-m` deselects every
    parity test (make test-fast, make test's AVX2 pass): its peers' imports (OpenNMT-py, eole,
    CTranslate2, transformers) cost 1-2 s in each worker."""
    marks = tuple(line.split(":")[0].strip() for line in config.getini("markers"))  # pyproject.toml's
    if collection_path.suffix != ".py" or not _deselects_parity(config.option.markexpr or "", marks):
        return None
    return True if PARITY_MODULE.search(collection_path.read_text(encoding="utf-8")) else None


@functools.cache
def _deselects_parity(markexpr: str, marks: tuple[str, ...]) -> bool:
    """Whether `-m markexpr` refuses every test marked parity, whatever its other `marks`."""
    if not markexpr:
        return False
    try:  # pytest's own parser of `-m` (private): another pytest's may differ
        from _pytest.mark.expression import Expression

        expression = Expression.compile(markexpr)
        others = [mark for mark in marks if mark != "parity"]
        return not any(
            expression.evaluate(lambda name, **_: name == "parity" or name in chosen)
            for size in range(len(others) + 1)
            for chosen in itertools.combinations(others, size)
        )
    except (ImportError, AttributeError, TypeError):
        return False  # collect every module: the same tests run, the parity modules imported


def pytest_collection_modifyitems(config, items):
    import torch

    skip = pytest.mark.skip(reason="needs a CUDA device")
    if not torch.cuda.is_available():
        for item in items:
            if "cuda" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """A tiny random native model (`build_native_model` defaults: 48 pieces), built once per
    session and shared: tests read it, never change it (copy it first)."""
    from tests.helpers import build_native_model

    return build_native_model(tmp_path_factory.mktemp("native") / "model")


@pytest.fixture()
def lines_file(tmp_path):
    """`lines_file(lines, name="in.txt")`: writes the lines, each ending in a newline, to a
    file in tmp_path and returns its path."""

    def write(lines, name="in.txt"):
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    return write


@pytest.fixture()
def as_cpu(monkeypatch):
    """`as_cpu(name)`: every kernel choice sees CPU class `name` of tests.helpers.CPUS (models/cpu.py's
    `current`, the one place they ask) until the test ends."""
    from nmtdecode.models import cpu
    from tests.helpers import CPUS

    def patch(name):
        monkeypatch.setattr(cpu, "current", lambda: CPUS[name])
        return CPUS[name]

    return patch


@dataclass
class CliResult:
    """What `subprocess.run` would report: exit code, stdout and stderr (bytes, or str with text=True)."""

    returncode: int
    stdout: bytes | str
    stderr: bytes | str


@pytest.fixture()
def cli(monkeypatch, capsysbinary):
    """`cli(*args, stdin=b"", text=False, cwd=None)`: `nmtdecode ARGS` run in this process.

    stdin (bytes, or str encoded as UTF-8) becomes `sys.stdin.buffer`; stdout and stderr are
    captured as bytes and decoded as UTF-8 with text=True; cwd is the working directory
    during the call. An exception that escapes `run` (only with --debug) is printed as the
    interpreter prints it, with exit code 1, as a process would end. The capture is
    pytest's capsysbinary, so a test using `cli` cannot also ask for capsys.
    """

    def invoke(*args, stdin=b"", text=False, cwd=None):
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        capsysbinary.readouterr()  # drop whatever the test printed before
        with monkeypatch.context() as patch:
            patch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
            if cwd is not None:
                patch.chdir(cwd)
            try:
                code = run([str(arg) for arg in args])
            except Exception:
                traceback.print_exc()
                code = 1
        out, err = capsysbinary.readouterr()
        return CliResult(code, out.decode("utf-8"), err.decode("utf-8")) if text else CliResult(code, out, err)

    return invoke
