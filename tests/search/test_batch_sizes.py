"""A shrinking batch passes through a few sizes only (search/base.py:BATCH_SIZES): finished
sentences leave when the searching ones fit a smaller size, topped up with finished ones."""

import pytest

from nmtdecode.options.config import Config
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.search.base import BATCH_SIZES, SentenceRecords, kept_batch_size
from tests.helpers import random_sources, tiny_transformer


class Record:
    def __init__(self, done: bool):
        self.done = done


def records(done: list[bool]) -> SentenceRecords:
    search = SentenceRecords()
    search.beams = [Record(d) for d in done]
    search.active = list(range(len(done)))
    return search


@pytest.mark.parametrize(
    "searching, size", [(0, 0), (1, 1), (3, 3), (5, 6), (9, 12), (17, 24), (24, 24), (25, 32), (600, 600)]
)
def test_the_kept_size_is_the_next_size_up(searching, size):
    assert kept_batch_size(searching) == size


def test_no_sentence_leaves_while_the_searching_ones_need_the_same_size():
    assert records([True] * 7 + [False] * 25).survivors() == list(range(32))


def test_finished_sentences_top_up_the_searching_ones_to_the_smaller_size():
    done = [i % 3 == 0 for i in range(32)]  # 11 finished, 21 searching: 24 stay
    kept = records(done).survivors()
    assert len(kept) == 24 and kept == sorted(kept)
    assert {i for i in range(32) if not done[i]} <= set(kept)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_the_decoder_only_meets_those_sizes_and_the_outputs_do_not_change(beam_size):
    model = tiny_transformer(seed=0, vocab=16)
    sources = random_sources(20, 16, seed=5)  # 1 to 9 tokens: each sentence stops at its own step limit
    cfg = Config.from_values({"beam_size": beam_size, "max_len_a": 1.0, "max_len_b": 1, "n_best": beam_size}).decoding
    rows, step = [], model.decode_step

    def counting(tokens, cache):
        rows.append(tokens.numel())
        return step(tokens, cache)

    model.decode_step = counting
    shrinking = BatchDecoder(model, cfg).decode(sources).nbests
    sizes = {n // beam_size for n in rows[1:]} | {rows[0]}  # step 0: one row per sentence
    assert sizes <= set(BATCH_SIZES) | {20}
    assert len(sizes) > 2  # it did shrink
    model.decode_step = step
    kept = BatchDecoder(model, cfg, shrink=False).decode(sources).nbests
    assert [[(h.tokens, h.score) for h in n] for n in shrinking] == [[(h.tokens, h.score) for h in n] for n in kept]
