"""Out of memory on CPU: recognised and split like CUDA's, foreseen where it is certain, and an
impossible request refused in one line before decoding, never left to the kernel's OOM killer.
Real allocation failures run in a subprocess under `ulimit -v` (marked `subprocess`)."""

import os
import random
import subprocess
import sys

import pytest

from nmtdecode.models import memory
from nmtdecode.options.config import Config
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.jobs.run import translate_job

from tests.helpers import REPO

DEMO = os.path.join(REPO, "data", "demo")
WORDS = "the house is red a dog and cat sleep in garden good morning thank you where station water".split()
# What a process of this test run prints at its end: its peak address space (kB), for `ulimit -v`.
PEAK = (
    "import runpy, sys\nsys.argv = ['nmtdecode'] + sys.argv[1:]\n"
    "from nmtdecode import cli\ncli.exit_now = sys.exit  # raises instead of ending: the peak is read after\n"
    "try:\n"
    "    runpy.run_module('nmtdecode', run_name='__main__')\nfinally:\n"
    "    print([l for l in open('/proc/self/status') if l.startswith('VmPeak')][0].split()[1], file=sys.stderr)\n"
)


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(n)]


OUT_OF_MEMORY_ERRORS = [  # CUDA's, then the CPU allocator's forms
    lambda: RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    lambda: RuntimeError(
        "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 25769803776 bytes. Error code 12 (Cannot allocate memory)"
    ),
    lambda: RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 123 bytes."),
    lambda: RuntimeError("std::bad_alloc"),
    lambda: MemoryError(),
]


@pytest.mark.parametrize("error", OUT_OF_MEMORY_ERRORS)
def test_out_of_memory_splits_the_batch(model_dir, tmp_path, lines_file, capsys, monkeypatch, error):
    src = lines_file(sentences(7))
    config = Config.from_values(
        {
            "model": str(model_dir),
            "src": str(src),
            "quiet": True,
            "max_length": 8,
            "output": str(tmp_path / "plain.txt"),
            "batch_size": 8,
        }
    )
    translate_job(config)
    original = BatchDecoder.decode

    def fragile(self, sources, *rest):
        if len(sources) > 2:
            raise error()
        return original(self, sources, *rest)

    monkeypatch.setattr(BatchDecoder, "decode", fragile)
    config.io.output = str(tmp_path / "split.txt")
    translate_job(config)
    assert (tmp_path / "split.txt").read_text() == (tmp_path / "plain.txt").read_text()
    assert "retrying it in halves" in capsys.readouterr().err


def test_a_batch_that_cannot_fit_is_split_before_it_is_tried(model_dir, tmp_path, lines_file, capsys, monkeypatch):
    src = lines_file(sentences(6))
    config = Config.from_values(
        {
            "model": str(model_dir),
            "src": str(src),
            "quiet": True,
            "beam_size": 3,
            "max_length": 8,
            "output": str(tmp_path / "plain.txt"),
            "batch_size": 6,
        }
    )
    translate_job(config)
    monkeypatch.setattr(memory, "available_bytes", lambda: 1)  # nothing left: every batch of two or more splits
    config.io.output = str(tmp_path / "split.txt")
    translate_job(config)
    assert (tmp_path / "split.txt").read_text() == (tmp_path / "plain.txt").read_text()
    assert "a batch of 6 sentences may need" in capsys.readouterr().err


def test_an_impossible_beam_is_refused_before_decoding(cli, monkeypatch):
    monkeypatch.setattr(memory, "total_bytes", lambda: 8 * 2**30)
    run = cli("translate", "--model", DEMO, "--beam-size", 20000, stdin="good morning\n", text=True)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith("nmtdecode: error: beam_size: 20000 needs at least ")
    assert "more than the 8.0 GiB this process can use" in run.stderr and len(run.stderr.splitlines()) == 1


@pytest.mark.subprocess
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_impossible_beam_under_ulimit_is_one_line_not_the_oom_killer():
    """`--beam-size 20000` on the demo model: one sentence's second step needs about 24 GiB."""
    shell = (
        f"ulimit -v 8000000; exec {sys.executable} -m nmtdecode translate --model {DEMO} "
        "--beam-size 20000 --src " + os.path.join(DEMO, "sample.en")
    )
    done = subprocess.run(["bash", "-c", shell], capture_output=True, timeout=300)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nmtdecode: error: beam_size: 20000 needs at least ")


@pytest.mark.subprocess
@pytest.mark.slow  # two processes decoding 16 sentences at beam 200: ~10 s
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_real_cpu_out_of_memory_under_ulimit_splits_the_batch(model_dir, tmp_path, lines_file):
    """A batch whose beams do not fit under `ulimit -v` is split until the pieces do: the
    output is that of sentence-by-sentence decoding."""
    src = lines_file(sentences(16))
    args = [
        "translate",
        "--model",
        model_dir,
        "--src",
        src,
        "--beam-size",
        200,
        "--max-length",
        12,
        "--early-stopping",
        "never",
        "--quiet",
    ]
    alone = subprocess.run(
        [sys.executable, "-c", PEAK, *map(str, args), "--batch-size", "1"], capture_output=True, timeout=300
    )
    assert alone.returncode == 0, alone.stderr
    peak_kb = int(alone.stderr.split()[-1])  # one sentence at a time; a batch of 16 needs ~250 MB more
    shell = f"ulimit -v {peak_kb + 80_000}; exec {sys.executable} -m nmtdecode " + " ".join(map(str, args))
    batched = subprocess.run(["bash", "-c", shell + " --batch-size 16"], capture_output=True, timeout=300)
    assert batched.returncode == 0, batched.stderr
    assert b"out of memory on a batch of 16 sentences; retrying it in halves" in batched.stderr
    assert b"Traceback" not in batched.stderr
    assert batched.stdout == alone.stdout and len(batched.stdout.splitlines()) == 16


def test_readable_size_uses_mib_below_a_tenth_of_a_gib():
    assert memory.readable_size(24 * 2**30) == "24.0 GiB"
    assert memory.readable_size(2**30 // 10 + 1) == "0.1 GiB"
    assert memory.readable_size(2**30 // 10) == "102.4 MiB"
    assert memory.readable_size(102656) == "0.1 MiB"


def test_a_failed_attempts_tensors_are_freed_before_its_halves_are_tried():
    """The out-of-memory split retries outside the `except`: the failed attempt's frames (its
    batch's cache, its logits) are garbage before the halves run, so a sentence that fits alone
    is not refused because the memory of the batch that did not fit is still held."""
    import weakref

    import torch

    from nmtdecode.engine.engine import in_halves_when_out_of_memory

    attempts: list = []

    def work(batch):
        for earlier in attempts:  # every tensor of an earlier attempt is gone by now
            assert earlier() is None, "a failed attempt's tensor is still alive"
        cache = torch.empty(len(batch), 1000)
        attempts.append(weakref.ref(cache))
        if len(batch) > 1:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes")
        return [len(cache)]

    assert in_halves_when_out_of_memory(list(range(4)), work) == [1, 1, 1, 1]
    assert len(attempts) == 7  # 4, then 2 and 2, then four of 1
