"""OpenMP's idle workers sleep (OMP_WAIT_POLICY=PASSIVE) unless the user chose otherwise: spinning
workers made default-thread decoding several times slower on a machine shared with busy processes."""

import os
import subprocess
import sys

import pytest

from nmtdecode.cli import openmp_environment


@pytest.mark.parametrize("environ, added", [
    ({}, {"OMP_WAIT_POLICY": "PASSIVE"}),
    ({"OMP_NUM_THREADS": "2"}, {"OMP_WAIT_POLICY": "PASSIVE"}),
    ({"OMP_WAIT_POLICY": "ACTIVE"}, {}),
    ({"GOMP_SPINCOUNT": "300000"}, {}),
    ({"KMP_BLOCKTIME": "200"}, {}),
])
def test_passive_wait_unless_the_user_chose(environ, added):
    assert openmp_environment(environ, torch_loaded=False) == added


def test_nothing_added_once_torch_is_loaded():
    assert openmp_environment({}, torch_loaded=True) == {}


@pytest.mark.subprocess
@pytest.mark.parametrize("preset, seen", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_program_sets_it_before_torch_loads(preset, seen):
    """`main` sets it before any command runs, and importing the CLI does not load torch."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    if preset:
        env["OMP_WAIT_POLICY"] = preset
    probe = ("import os, sys\n"
             "from nmtdecode import cli\n"
             "assert 'torch' not in sys.modules\n"
             "cli.run = lambda argv: print(os.environ.get('OMP_WAIT_POLICY')) or 0\n"
             "cli.main([])\n")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == seen
