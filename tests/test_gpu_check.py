"""The GPU check (bench/gpu_check.py) runs its own code on CPU with --dry-run, so that the first
GPU it meets does not stop it on a typo: every section and every benchmark row must come out."""

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_gpu_check_runs_every_section_on_cpu(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), GPU_CHECK_OUT=str(tmp_path))
    run = subprocess.run([sys.executable, "bench/gpu_check.py", "--dry-run"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    table = (tmp_path / "gpu-check-dry.md").read_text(encoding="utf-8")
    assert (tmp_path / "gpu-check-dry.log").is_file()
    assert "FAILED" not in table and "skipped: time budget" not in table, table
    for section in ("## machine", "## pytest -m cuda", "## command-line job", "## benchmark", "## where a step"):
        assert section in table
    rows = [line for line in table.splitlines() if line.startswith(("| demo |", "| marian-base |", "| opennmt-base |"))]
    assert len(rows) == 3 * 3 * 2 * 2  # models x dtypes x beams x batch sizes, each measured
    assert all(float(row.split("|")[5]) > 0 for row in rows)  # nmtdecode's tokens/s
