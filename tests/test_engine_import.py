"""The engine (and torch) imported with the cyclic garbage collector paused (engine/importing.py):
the collector comes back as it was, and only the command line's own process freezes what the
import made."""

import gc
import subprocess
import sys

import pytest

from nmtdecode.engine.engine import Engine
from nmtdecode.engine.importing import import_engine
from tests.helpers import REPO


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_comes_back_as_it_was_and_the_api_freezes_nothing(enabled):
    was, frozen = gc.isenabled(), gc.get_freeze_count()
    (gc.enable if enabled else gc.disable)()
    try:
        assert import_engine() is Engine
        assert gc.isenabled() is enabled and gc.get_freeze_count() == frozen
    finally:
        (gc.enable if was else gc.disable)()


def test_the_command_lines_process_freezes_what_the_import_made():
    was = gc.isenabled()
    gc.enable()
    try:
        assert import_engine(own_process=True) is Engine
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        (gc.enable if was else gc.disable)()
        gc.unfreeze()


@pytest.mark.subprocess
def test_a_short_job_makes_no_full_collection(model_dir, tmp_path):
    """Importing torch made three full collections of the process's objects; a one-line job on
    a fresh interpreter now makes none, and still writes its line."""
    (tmp_path / "in.txt").write_text("water\n", encoding="utf-8")
    code = (
        "import gc, sys\n"
        "full = []\n"
        "def count(phase, info):\n"
        "    if phase == 'stop' and info['generation'] == 2:\n"
        "        full.append(1)\n"
        "gc.callbacks.append(count)\n"
        "from nmtdecode.cli import run\n"
        f"code = run(['translate', '--model', {str(model_dir)!r}, '--src', {str(tmp_path / 'in.txt')!r},"
        f" '--output', {str(tmp_path / 'out.txt')!r}, '--quiet'])\n"
        "print(code, len(full), gc.isenabled())\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["0", "0", "True"]
    assert len((tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()) == 1
