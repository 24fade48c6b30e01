"""--inter-threads: several batches decoded at once, each by a thread of its own, the results
written in input order (batch_threads.py:in_order, through the job pipeline)."""

import threading

import pytest

from nmtdecode.options.config import Config
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.engine.engine import Engine
from nmtdecode.jobs.ranks import Ranks, threads_for
from nmtdecode.engine.resolve import ineffective
from nmtdecode.jobs.run import translate_job

LINES = ["a b", "the cat", "", "x y z w", "b a", "cat the a", "z", "y x", "w w w", "a"]


def run_job(model_dir, tmp_path, name, **options):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / f"{name}.jsonl"
    values = {
        "model": str(model_dir),
        "src": str(src),
        "output": str(out),
        "format": "jsonl",
        "token_scores": True,
        "n_best": 2,
        "beam_size": 3,
        "batch_size": 2,
        "max_length": 6,
        "quiet": True,
        **options,
    }
    translate_job(Config.from_values(values), Engine.load(Config.from_values(values)))
    return out.read_text(encoding="utf-8")


@pytest.mark.parametrize("inter_threads", [2, 3])
def test_the_output_is_the_one_batch_at_a_time_output(model_dir, tmp_path, inter_threads):
    """Same bytes, scores included, in input order: five batches, some finishing before earlier ones."""
    one = run_job(model_dir, tmp_path, "one")
    assert len(one.splitlines()) == len(LINES)
    assert run_job(model_dir, tmp_path, "several", inter_threads=inter_threads) == one


def first_two_batches_meet(monkeypatch) -> list:
    """The first two batches wait for each other before decoding: decoded one at a time, the
    barrier times out (BrokenBarrierError). Returns the list of decode calls."""
    meeting, calls, lock = threading.Barrier(2, timeout=10), [], threading.Lock()
    decode = BatchDecoder.decode

    def meet_then_decode(self, *args, **kwargs):
        with lock:
            calls.append(1)
            first_two = len(calls) <= 2
        if first_two:
            meeting.wait()
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(BatchDecoder, "decode", meet_then_decode)
    return calls


def test_batches_are_decoded_at_the_same_time(model_dir, tmp_path, monkeypatch):
    calls = first_two_batches_meet(monkeypatch)
    assert len(run_job(model_dir, tmp_path, "met", inter_threads=2).splitlines()) == len(LINES)
    assert len(calls) == 5


def test_a_failing_batch_fails_the_job_as_it_does_alone(model_dir, tmp_path, monkeypatch):
    decode, calls = BatchDecoder.decode, []

    def fail_third(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected failure")
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(BatchDecoder, "decode", fail_third)
    with pytest.raises(RuntimeError, match="injected failure"):
        run_job(model_dir, tmp_path, "failed", inter_threads=2)


def test_each_operation_gets_its_share_of_the_cpus():
    cpus = len(__import__("os").sched_getaffinity(0))
    assert Config.from_values({}).runtime.operation_threads() is None  # torch's default
    assert Config.from_values({"inter_threads": 2}).runtime.operation_threads() == max(1, cpus // 2)
    assert Config.from_values({"inter_threads": 2, "threads": 3}).runtime.operation_threads() == 3
    assert threads_for(Config.from_values({"inter_threads": 2}), Ranks(0, 4, 0, 2)) == max(1, cpus // 4)


def test_it_is_said_to_change_nothing_where_one_batch_is_decoded_at_a_time():
    note = "inter_threads: has no effect"
    assert not any(note in n for n in ineffective(Config.from_values({"inter_threads": 2}), 64, "cpu"))
    assert any(note in n for n in ineffective(Config.from_values({"inter_threads": 2}), 64, "cuda"))
    assert any(note in n for n in ineffective(Config.from_values({"inter_threads": 2, "stream": True}), 64, "cpu"))


def test_the_python_api_decodes_several_batches_at_once_with_the_same_translations(model_dir, monkeypatch):
    from nmtdecode.api import Translator

    one = Translator.load(str(model_dir)).translate_batch(LINES, batch_size=2, beam_size=2, n_best=2, max_length=6)
    first_two_batches_meet(monkeypatch)
    several = Translator.load(str(model_dir), inter_threads=2)
    assert several.translate_batch(LINES, batch_size=2, beam_size=2, n_best=2, max_length=6) == one
