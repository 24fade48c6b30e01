"""The fixed-shape step (models/fixed_step.py) gives the tokens of the model's own step: every
strategy, prefixes, alignment, attention and coverage, sentences finishing at different steps,
batches of other sizes reusing (or outgrowing) the buffers, and the model families' switches.
Eager here, as on CPU; tests/test_cuda.py replays it as CUDA graphs."""

import pytest

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.fixed_step import FixedShapeSteps, bucket

from tests.helpers import T5_LIKE, placed, random_sources, tiny_transformer

STRATEGIES = {
    "greedy": dict(beam_size=1),
    "beam": dict(beam_size=4, n_best=4),
    "beam_opennmt_rules": dict(beam_size=3, n_best=3, early_stopping="top"),
    "sampling": dict(sampling=True, n_best=4, temperature=0.8, top_k=10, top_p=0.9, seed=7),
    "diverse": dict(beam_size=4, n_best=4, beam_groups=2, diversity_penalty=0.5),
    "coverage_alignment_attention": dict(
        beam_size=4, n_best=2, coverage_penalty="wu", beta=0.3, alignment=True, attention=True
    ),
    "repetition_blocking_min_length": dict(beam_size=4, repetition_penalty=1.3, block_ngram_repeat=2, min_length=3),
}


def decode(model, cfg, sources, prefixes=None, fixed_steps=None):
    return BatchDecoder(model, cfg, steps=fixed_steps).decode(sources, prefixes=prefixes).nbests


def assert_same(eager, fixed):
    assert [[h.tokens for h in n] for n in fixed] == [[h.tokens for h in n] for n in eager]
    assert [[h.alignment for h in n] for n in fixed] == [[h.alignment for h in n] for n in eager]
    for a, b in zip(eager, fixed):
        assert [h.score for h in b] == pytest.approx([h.score for h in a], abs=1e-5)
        for x, y in zip(a, b):
            assert (y.attention is None) == (x.attention is None)
            for row_x, row_y in zip(x.attention or [], y.attention or []):
                assert row_y == pytest.approx(row_x, abs=1e-6)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("prefixed", [False, True])
def test_fixed_shape_step_gives_the_tokens_of_the_model_step(strategy, prefixed):
    """19 sentences (a bucket of 32, 13 of them padding) that end at different steps (EOS is
    favoured), so finished sentences are compacted out of the buffers and the bucket shrinks."""
    model = tiny_transformer(1, vocab=20, eos_bias=1.0)
    sources = random_sources(19, 20, seed=6)
    prefixes = [[5 + i % 4] * (i % 3) for i in range(19)] if prefixed else None
    cfg = DecodingConfig(max_length=30, **STRATEGIES[strategy])
    fixed = decode(model, cfg, sources, prefixes, FixedShapeSteps(model, graphs=False))
    assert_same(decode(model, cfg, sources, prefixes), fixed)


def test_buffers_serve_smaller_batches_and_grow_for_larger_ones():
    model = tiny_transformer(2, vocab=24, eos_bias=0.5)
    steps = FixedShapeSteps(model, graphs=False)
    cfg = DecodingConfig(beam_size=3, n_best=3, max_length=20)
    small, large = random_sources(5, 24, seed=1, max_len=4), random_sources(40, 24, seed=2, max_len=30)
    for sources in (small, large, small, large[:9]):
        assert_same(decode(model, cfg, sources), decode(model, cfg, sources, fixed_steps=steps))
    buffers = steps.buffers
    assert (buffers.sentences, buffers.width, buffers.source) == (64, 3, 32)  # grown to the large batch's buckets
    bigger_beam = DecodingConfig(beam_size=5, max_length=20)
    assert_same(decode(model, bigger_beam, small), decode(model, bigger_beam, small, fixed_steps=steps))
    assert steps.buffers.width == 5  # another width: new buffers


@pytest.mark.parametrize(
    "family",
    [
        dict(),  # pre-norm, sinusoidal
        dict(
            pre_norm=False,
            encoder_final_norm=False,
            decoder_final_norm=False,
            positions="learned",
            position_offset=2,
            layernorm_embedding=True,
            activation="gelu",
        ),  # BART-like
        dict(
            positions="sinusoidal_fairseq",
            position_offset=1,
            zero_pad_positions=True,
            embed_scale=32**0.5,
            activation="silu",
            alignment_layer=0,
            alignment_heads=0,
        ),  # M2M100-like, another alignment layer
        T5_LIKE,
    ],
)
def test_fixed_shape_step_follows_each_model_family(family):
    model = tiny_transformer(3, vocab=20, eos_bias=1.0, **family)
    sources = random_sources(11, 20, seed=4)
    cfg = DecodingConfig(beam_size=4, n_best=2, max_length=25, alignment=True)
    assert_same(decode(model, cfg, sources), decode(model, cfg, sources, fixed_steps=FixedShapeSteps(model, False)))


def test_buckets_are_powers_of_two_with_a_floor():
    assert [bucket(n) for n in (1, 2, 3, 5, 32, 33)] == [1, 2, 4, 8, 32, 64]
    assert [bucket(n, 16) for n in (1, 16, 17)] == [16, 16, 32]


def test_fixed_shape_step_with_onednn_packed_layers():
    """The CPU backend replaces the linear layers (the output one too) by packed oneDNN ones,
    which have no `weight`: the buffers take their device and dtype from the embeddings."""
    model = placed(tiny_transformer(1, vocab=20, eos_bias=1.0), "onednn")
    sources = random_sources(9, 20, seed=5)
    cfg = DecodingConfig(beam_size=3, n_best=3, max_length=20)
    assert_same(decode(model, cfg, sources), decode(model, cfg, sources, fixed_steps=FixedShapeSteps(model, False)))
