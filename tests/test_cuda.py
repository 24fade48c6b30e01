"""The same code path on CUDA: results equal the CPU's; half precision agrees on tokens.
Marked `cuda`: skipped (and reported as skipped) without a GPU."""

import pytest
import torch

from nmtdecode.config import DecodingConfig
from nmtdecode.decoding import BatchDecoder

from tests.helpers import forced_total, random_sources, tiny_transformer

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("beam", [1, 4])
def test_cuda_matches_cpu(beam):
    model = tiny_transformer(1, vocab=20, eos_bias=1.0)
    sources = random_sources(16, 20, seed=3)
    cfg = DecodingConfig(beam_size=beam, n_best=beam, max_length=30)
    on_cpu = BatchDecoder(model, cfg).translate_batch(sources)
    on_gpu = BatchDecoder(model.to("cuda"), cfg).translate_batch(sources)
    assert [[h.tokens for h in n] for n in on_gpu] == [[h.tokens for h in n] for n in on_cpu]
    for a, b in zip(on_gpu, on_cpu):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_agrees_on_tokens(dtype):
    model = tiny_transformer(1, vocab=20, eos_bias=1.0)
    sources = random_sources(16, 20, seed=4)
    cfg = DecodingConfig(beam_size=4, max_length=30)
    reference = BatchDecoder(model, cfg).translate_batch(sources)
    half = BatchDecoder(model.to("cuda", dtype), cfg).translate_batch(sources)
    same = sum(a[0].tokens == b[0].tokens for a, b in zip(half, reference))
    assert same >= 14  # rounding may flip a near-tie, not the bulk


def test_cuda_scores_equal_forced_decoding():
    model = tiny_transformer(1, vocab=20, eos_bias=1.0)
    sources = random_sources(4, 20, seed=5)
    results = BatchDecoder(model.to("cuda"), DecodingConfig(beam_size=3, n_best=3, max_length=30)).translate_batch(sources)
    model.to("cpu")
    for source, hyps in zip(sources, results):
        for hyp in hyps:
            assert hyp.total == pytest.approx(sum(forced_total(model, source, hyp.tokens, hyp.ended)), abs=1e-4)


FEATURES = {
    "sampling": dict(sampling=True, n_best=4, temperature=0.8, top_k=10, top_p=0.9, seed=7),
    "diverse": dict(beam_size=4, n_best=4, beam_groups=2, diversity_penalty=0.5),
    "coverage_alignment": dict(beam_size=4, n_best=2, coverage_penalty="wu", beta=0.3, alignment=True),
    "repetition_blocking": dict(beam_size=4, repetition_penalty=1.3, block_ngram_repeat=2),
}


@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("prefixed", [False, True])
def test_cuda_matches_cpu_with_each_strategy_and_penalty(feature, prefixed):
    """Sampling (the hashed uniforms and the CUDA top-p path), diverse groups, coverage and
    alignment (attention recorded on the device), the logits-stage repetition penalty and
    n-gram blocking, with and without forced prefixes: the tokens the CPU gives."""
    model = tiny_transformer(1, vocab=20, eos_bias=1.0)
    sources = random_sources(16, 20, seed=6)
    prefixes = [[5 + i % 4] * (i % 3) for i in range(16)] if prefixed else None
    cfg = DecodingConfig(max_length=30, **FEATURES[feature])
    on_cpu = BatchDecoder(model, cfg).translate_batch(sources, prefixes=prefixes)
    on_gpu = BatchDecoder(model.to("cuda"), cfg).translate_batch(sources, prefixes=prefixes)
    assert [[h.tokens for h in n] for n in on_gpu] == [[h.tokens for h in n] for n in on_cpu]
    assert [[h.alignment for h in n] for n in on_gpu] == [[h.alignment for h in n] for n in on_cpu]
    for a, b in zip(on_gpu, on_cpu):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)
