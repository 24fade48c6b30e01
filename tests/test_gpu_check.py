"""The GPU check (bench/gpu_check.py, its measurements in bench/gpu_benchmark.py) runs its own
code on CPU with --dry-run, so that the first GPU it meets does not stop it on a typo: every
section and every benchmark row must come out."""

import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "bench"))
import gpu_benchmark  # noqa: E402
from gpu_check import DRY  # noqa: E402


@pytest.mark.slow
@pytest.mark.subprocess
def test_the_gpu_check_runs_every_section_on_cpu(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), GPU_CHECK_OUT=str(tmp_path))
    run = subprocess.run(
        [sys.executable, "bench/gpu_check.py", "--dry-run"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    table = (tmp_path / "gpu-check-dry.md").read_text(encoding="utf-8")
    assert (tmp_path / "gpu-check-dry.log").is_file()
    assert "FAILED" not in table and "skipped: time budget" not in table, table
    for section in (
        "## machine",
        "## pytest -m cuda",
        "## command-line job",
        "## benchmark",
        "## real-size shapes",
        "## where a step",
    ):
        assert section in table
    rows = [line for line in table.splitlines() if line.startswith(("| demo |", "| marian-base |", "| opennmt-base |"))]
    assert len(rows) == 3 * 3 * 2 * len(DRY.batches)  # models x dtypes x beams x batch sizes, each measured
    assert all(float(row.split("|")[5]) > 0 for row in rows)  # nmtdecode's tokens/s
    real = [line.split(" | ") for line in table.splitlines() if line.startswith(("| nllb-600m |", "| bart-large |"))]
    assert [(row[1], row[2], row[3]) for row in real] == [
        (dtype, beam, batch)
        for _ in range(2)
        for dtype in ("float16", "bfloat16")
        for beam in ("4", "5")
        for batch in map(str, DRY.batches)
    ]  # models x dtypes x beams x batch sizes (the dry run's), each measured
    assert all(
        float(row[4]) > 0 and float(row[5]) > 0 and row[7] == f"{DRY.real_sentences}/{DRY.real_sentences}"
        for row in real
    )  # both decoded, alike
    assert f"--search-on device agrees on {DRY.cli_lines}/{DRY.cli_lines} lines" in table
    profile = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in table.split("## where a step")[1].splitlines()
        if line.startswith("| ")
    ]
    assert [row[:2] for row in profile[2:5]] == [["eager", "host"], ["fixed shape", "host"], ["fixed shape", "device"]]
    assert all(float(row[-2]) > 0 and float(row[-1]) > 0 for row in profile[2:])  # launches counted


class TwoBatchPasses:
    """run_batches' translate over three sources in batches of two: numbers its calls (its
    outputs say which call made them), and captures() grows in each pass listed in `capturing`."""

    def __init__(self, capturing: set[int]):
        self.capturing, self.calls = capturing, 0

    def translate(self, batch):
        self.calls += 1
        return [self.calls] * len(batch)

    def captures(self) -> int:
        return sum(1 for p in self.capturing if p < self.calls // 2)  # passes finished


@pytest.mark.parametrize(
    ("capturing", "passes", "warm_up"),
    [
        ({0}, (2, 2), 2),
        ({0, 1}, (2, 2), 3),
        ({0, 1, 2}, (2, 2), 4),
        ({0, 1, 2, 3, 4}, (2, 2), 4),
        (set(), (1, 1), 1),
        ({0}, (1, 1), 2),
    ],
)  # the dry run's (1, 1): one warm-up pass unless it captured
def test_warm_up_passes_go_on_while_graphs_are_captured(capturing, passes, warm_up):
    """At least the warm-up passes asked for; more while the last one captured graphs, at most
    four; then the timed passes."""
    fake = TwoBatchPasses(capturing)
    seconds, outputs, made = gpu_benchmark.run_batches(
        torch.device("cpu"), fake.translate, [[1], [2], [3]], 2, fake.captures, passes
    )
    assert made == warm_up + passes[1] and fake.calls == 2 * made
    assert seconds >= 0 and outputs == [2 * made - 1, 2 * made - 1, 2 * made]  # the last pass's
