"""The engine (and torch) imported with the cyclic garbage collector paused (engine/importing.py):
the collector comes back as it was, and only nmtdecode's own process (the program, cli.main)
freezes what the import made."""

import gc
import subprocess
import sys

import pytest

from nmtdecode.engine import importing
from nmtdecode.engine.engine import Engine
from tests.helpers import REPO


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_comes_back_as_it_was_and_nothing_is_frozen_in_a_callers_process(enabled):
    was, frozen = gc.isenabled(), gc.get_freeze_count()
    (gc.enable if enabled else gc.disable)()
    try:
        assert importing.import_engine() is Engine
        assert gc.isenabled() is enabled and gc.get_freeze_count() <= frozen  # frozen ones may die
    finally:
        (gc.enable if was else gc.disable)()


def test_the_programs_own_process_freezes_what_the_import_made(monkeypatch):
    monkeypatch.setattr(importing, "_process_is_ours", True)
    was = gc.isenabled()
    gc.enable()
    try:
        assert importing.import_engine() is Engine
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        (gc.enable if was else gc.disable)()
        gc.unfreeze()


@pytest.mark.subprocess
def test_a_short_job_makes_no_full_collection(model_dir, tmp_path):
    """Importing torch made three full collections of the process's objects; the program's
    one-line job on a fresh interpreter now makes none, and still writes its line."""
    (tmp_path / "in.txt").write_text("water\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    code = (
        "import gc, os, sys\n"
        "full = []\n"
        "def count(phase, info):\n"
        "    if phase == 'stop' and info['generation'] == 2:\n"
        "        full.append(1)\n"
        "gc.callbacks.append(count)\n"
        "from nmtdecode import cli\n"
        "def report(code):\n"
        "    print(code, len(full), gc.isenabled(), gc.get_freeze_count() > 0, flush=True)\n"
        "    os._exit(code)\n"
        "cli.exit_now = report\n"
        f"cli.main(['translate', '--model', {str(model_dir)!r}, '--src', {str(tmp_path / 'in.txt')!r},"
        f" '--output', {str(out)!r}, '--quiet'])\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["0", "0", "True", "True"]
    assert len(out.read_text(encoding="utf-8").splitlines()) == 1
