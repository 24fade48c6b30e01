"""OpenMP's idle workers spin briefly, then sleep (GOMP_SPINCOUNT=10000), unless the user chose
otherwise: long-spinning workers made default-thread decoding up to 30x slower on a machine shared
with busy processes, and always-sleeping ones 45% slower on an idle one."""

import os
import subprocess
import sys

import pytest

from nmtdecode.cli import openmp_environment


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


@pytest.mark.subprocess
@pytest.mark.parametrize("preset, seen", [(None, "10000"), ("ACTIVE", "None")])
def test_the_program_sets_it_before_torch_loads(preset, seen):
    """`main` sets it before any command runs, and importing the CLI does not load torch."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
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
