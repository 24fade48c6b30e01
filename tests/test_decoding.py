"""Results do not depend on batching, input order, or dropping finished sentences."""

import random

import pytest

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder

from tests.helpers import random_sources, tiny_transformer


def decode(translator, sources, batch_size):
    results = []
    for start in range(0, len(sources), batch_size):
        results += translator.decode(sources[start : start + batch_size]).nbests
    return results


def assert_same(a, b):
    assert [[h.tokens for h in n] for n in a] == [[h.tokens for h in n] for n in b]
    for na, nb in zip(a, b):
        assert [h.score for h in na] == pytest.approx([h.score for h in nb], abs=1e-4)


@pytest.fixture(scope="module")
def setup():
    model = tiny_transformer(11, vocab=24, eos_bias=0.8)
    return model, random_sources(64, 24, seed=11, max_len=14)


@pytest.mark.parametrize("beam", [1, 4])
def test_batch_size_does_not_change_results(setup, beam):
    model, sources = setup
    translator = BatchDecoder(model, DecodingConfig(beam_size=beam, n_best=beam, max_length=25))
    reference = decode(translator, sources, 1)
    for batch_size in (7, 64):
        assert_same(decode(translator, sources, batch_size), reference)


@pytest.mark.parametrize("beam", [1, 4])
def test_input_order_does_not_change_results(setup, beam):
    model, sources = setup
    translator = BatchDecoder(model, DecodingConfig(beam_size=beam, n_best=beam, max_length=25))
    order = list(range(len(sources)))
    random.Random(3).shuffle(order)
    shuffled = decode(translator, [sources[i] for i in order], 16)
    reference = decode(translator, sources, 16)
    assert_same([shuffled[order.index(i)] for i in range(len(sources))], reference)


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("early_stopping", ["true", "false", "never"])
def test_dropping_finished_sentences_changes_nothing(setup, beam, early_stopping):
    model, sources = setup
    cfg = DecodingConfig(beam_size=beam, n_best=beam, max_length=25, early_stopping=early_stopping)
    shrinking = BatchDecoder(model, cfg).decode(sources).nbests
    fixed = BatchDecoder(model, cfg, shrink=False).decode(sources).nbests
    assert_same(shrinking, fixed)


@pytest.mark.parametrize("shape", [(3, 7), (64, 50_000), (2, 5, 11)])
def test_log_softmax_in_place_gives_the_bits_of_torchs_own(shape):
    """decoding.log_softmax writes the log-probabilities over the logits: the same values as
    torch.log_softmax's new tensor, bit for bit (a kernel that wrote before reading would not)."""
    import torch

    from nmtdecode.engine.decoding import log_softmax

    torch.manual_seed(0)
    logits = torch.randn(shape) * 4
    expected = torch.log_softmax(logits, dim=-1)
    result = log_softmax(logits)
    assert result.data_ptr() == logits.data_ptr() and torch.equal(result, expected)
