"""bench/experiments/traced_step.py, the measurement behind docs/speed.md's traced-step lead: it must run, and
the traced step must give the eager step's logits bit for bit at every row count it measures."""

import sys

import pytest

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "bench" / "experiments"))
import traced_step  # noqa: E402

pytestmark = pytest.mark.slow  # 8-12 s each: the experiment traces steps many times


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # the trace keeps one shape's branches, as meant
def test_the_traced_step_gives_the_eager_logits(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["traced_step.py", "--rows", "1,5", "--steps", "2"])
    traced_step.main()
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith(("| 1 ", "| 5 "))]
    assert len(rows) == 2
    assert all(cells[5].strip() == "True" for cells in rows)  # same logits


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_a_trace_of_the_fixed_shape_step_serves_the_next_positions(monkeypatch, capsys):
    """Recorded at one position, run at the next four of its bucket: the eager logits each time."""
    monkeypatch.setattr(sys, "argv", ["traced_step.py", "--rows", "1,5", "--steps", "2", "--fixed-shape"])
    traced_step.main()
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines() if line.startswith(("| 1 ", "| 5 "))]
    assert len(rows) == 2
    assert all(cells[2].strip() == "10-13" and cells[3].strip() == "True" for cells in rows)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_first_replays_times_the_trace_with_and_without_optimizations(monkeypatch, capsys):
    """One row per setting, each a tracing time and three replay times; the thread's setting is
    left as it was."""
    import torch

    monkeypatch.setattr(sys, "argv", ["traced_step.py", "--rows", "1", "--first-replays"])
    traced_step.main()
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 ")]
    assert [cells[1].strip() for cells in rows] == ["on", "off"]
    assert all(float(ms) > 0 for cells in rows for ms in cells[2:])
    assert torch._C._get_graph_executor_optimize()
