"""OpenMP's idle workers spin briefly, then sleep (GOMP_SPINCOUNT=10000), unless the user chose
otherwise: long-spinning workers made default-thread decoding up to 30x slower on a machine shared
with busy processes, and always-sleeping ones 45% slower on an idle one."""

import os
import subprocess
import sys

import pytest

from nmtdecode.cli import OPENMP_WAIT_SETTINGS, openmp_environment

from tests.helpers import REPO


@pytest.mark.parametrize(
    "environ, added",
    [
        ({}, {"GOMP_SPINCOUNT": "10000"}),
        ({"OMP_NUM_THREADS": "2"}, {"GOMP_SPINCOUNT": "10000"}),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, {}),
        ({"GOMP_SPINCOUNT": "300000"}, {}),
        ({"KMP_BLOCKTIME": "200"}, {}),
    ],
)
def test_short_spin_unless_the_user_chose(environ, added):
    assert openmp_environment(environ, torch_loaded=False) == added


def test_nothing_added_once_torch_is_loaded():
    assert openmp_environment({}, torch_loaded=True) == {}


def without_a_wait_choice() -> dict:
    """This process's environment without the variables by which a user chooses OpenMP's wait."""
    return {k: v for k, v in os.environ.items() if k not in OPENMP_WAIT_SETTINGS}


@pytest.mark.subprocess
@pytest.mark.parametrize("preset, seen", [(None, "10000"), ("ACTIVE", "None")])
def test_the_program_sets_it_before_torch_loads(preset, seen):
    """`main` sets it before any command runs, and importing the CLI does not load torch."""
    env = without_a_wait_choice()
    if preset:
        env["OMP_WAIT_POLICY"] = preset  # the user's choice: no GOMP_SPINCOUNT added
    probe = (
        "import os, sys\n"
        "from nmtdecode import cli\n"
        "assert 'torch' not in sys.modules\n"
        "cli.run = lambda argv: print(os.environ.get('GOMP_SPINCOUNT')) or 0\n"
        "cli.main([])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == seen


@pytest.mark.subprocess
def test_a_benchmark_worker_starts_as_the_program_does():
    """bench/worker.py's nmtdecode process is prepared as `nmtdecode`'s (cli.prepare_process), so
    that its figures are the command's: OpenMP's short spin, torch imported after it."""
    env = without_a_wait_choice()
    probe = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(REPO / 'bench')!r})\n"
        "import worker\n"
        "worker.start_as_the_command()\n"
        "print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["10000", "True"]


def test_more_threads_than_cpus_are_as_many_as_the_cpus(monkeypatch):
    from nmtdecode.options.config import Config

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert Config.from_values({"threads": 1000}).runtime.operation_threads() == 2
    assert Config.from_values({"threads": 2}).runtime.operation_threads() == 2
    assert Config.from_values({"threads": 1}).runtime.operation_threads() == 1


@pytest.mark.subprocess
def test_more_threads_than_cpus_are_said_not_run(model_dir):
    """Before: --threads 1000 started a thousand OpenMP workers on a few CPUs, silently."""
    cpus = len(os.sched_getaffinity(0))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "nmtdecode",
            "translate",
            "-m",
            model_dir,
            "--threads",
            "1000",
            "--max-length",
            "2",
            "-q",
        ],
        input="hello\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0 and len(run.stdout.splitlines()) == 1
    assert run.stderr == (
        f"nmtdecode: warning: threads: 1000 is more than the {cpus} CPUs this process may use; using {cpus}\n"
    )
