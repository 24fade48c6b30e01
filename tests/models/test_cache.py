"""The cache's reused memory (models/cache.py, Scratch): copies never land on the data they copy,
a batch's cache gives its Scratch back for the next batch, and what a previous batch left in it
is never read: decoding over buffers poisoned with NaN gives the tokens and scores of a first run."""

import gc
import math

import pytest
import torch

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.cache import Scratch

from tests.helpers import random_sources, tiny_transformer


def test_each_copy_goes_into_the_buffer_that_does_not_hold_the_last_one():
    scratch = Scratch()
    like = torch.zeros(1)
    first = scratch.next("self", like, (2, 3))
    second = scratch.next("self", like, (4, 3))
    third = scratch.next("self", like, (2, 5))  # larger than the first: its buffer grows
    assert first.data_ptr() != second.data_ptr()
    assert third.data_ptr() != second.data_ptr()
    assert third.shape == (2, 5) and third.is_contiguous()
    fourth = scratch.next("self", like, (1, 3))  # smaller: a view of the second's buffer
    assert fourth.data_ptr() == second.data_ptr()
    other_kind = scratch.next("cross", like, (4, 3))
    assert other_kind.data_ptr() not in (third.data_ptr(), fourth.data_ptr())
    halves = scratch.next("self", like.half(), (2, 5))  # another dtype: a buffer of its own
    assert halves.dtype == torch.float16 and halves.data_ptr() != third.data_ptr()


def test_a_cache_gives_its_scratch_back_when_it_is_garbage():
    owner = type("Owner", (), {})()
    lent = Scratch.borrow(owner)
    del owner
    gc.collect()
    again = Scratch.borrow(type("Owner", (), {})())
    assert again is lent


def poison_free_scratches():
    """Every buffer a cache could borrow next, filled with NaN."""
    gc.collect()
    for scratch in Scratch._free:
        for first, second, _ in scratch.pairs.values():
            for buffer in (first, second):
                if buffer is not None:
                    buffer.fill_(math.nan)


@pytest.mark.parametrize(
    "config",
    [
        dict(beam_size=4, n_best=4),
        dict(beam_size=1),
        dict(beam_size=3, n_best=2, coverage_penalty="wu", beta=0.2, alignment=True),
    ],
)
def test_what_an_earlier_batch_left_in_the_scratch_is_never_read(config):
    """Sentences that end at different steps (compaction), a beam that widens after the first
    step and more than 16 steps (growth): each copy reads only what this batch wrote."""
    model = tiny_transformer(3, vocab=16, eos_bias=-0.5)
    decoder = BatchDecoder(model, DecodingConfig(max_length=40, **config))
    sources = random_sources(11, 16, seed=3, max_len=12)
    with torch.inference_mode():
        first = decoder.decode(sources).nbests
        poison_free_scratches()
        again = decoder.decode(sources).nbests
    assert [[h.tokens for h in n] for n in again] == [[h.tokens for h in n] for n in first]
    assert [[h.score for h in n] for n in again] == [[h.score for h in n] for n in first]
    assert [[h.alignment for h in n] for n in again] == [[h.alignment for h in n] for n in first]
    assert max(len(n[0].tokens) for n in first) > 16  # the cache grew past its first capacity


def test_a_copy_too_large_to_keep_gets_memory_of_its_own(monkeypatch):
    """Above KEPT_BYTES the scratch keeps nothing (a second copy of a real-size model's cache would
    be hundreds of MB) and decoding gives the same results: growth, widening and compaction all
    copy into new memory, and the copies replaced go back to the system (memory.give_back_freed)."""
    from nmtdecode.models import memory

    model = tiny_transformer(3, vocab=16, eos_bias=-0.5)
    decoder = BatchDecoder(model, DecodingConfig(max_length=40, beam_size=4, n_best=4))
    sources = random_sources(11, 16, seed=3, max_len=12)
    with torch.inference_mode():
        kept = decoder.decode(sources).nbests
    given_back = []
    monkeypatch.setattr(Scratch, "KEPT_BYTES", 0)
    monkeypatch.setattr(memory, "give_back_freed", lambda: given_back.append(1))
    scratch = Scratch()
    assert scratch.next("self", torch.zeros(1), (2, 3)).shape == (2, 3) and not scratch.pairs
    with torch.inference_mode():
        own = decoder.decode(sources).nbests
    assert [[(h.tokens, h.score) for h in n] for n in own] == [[(h.tokens, h.score) for h in n] for n in kept]
    assert len(given_back) >= 3  # the widening, the growth past 16 positions, the finished sentences leaving


def test_the_allocator_is_tuned_where_the_c_library_is_glibc():
    import platform

    from nmtdecode.models import memory

    expected = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert memory.tune_allocator() is expected
    memory.give_back_freed()  # a no-op where there is nothing to give back, and where it is not glibc
