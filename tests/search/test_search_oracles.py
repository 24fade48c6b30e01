"""Search on a real (tiny, random) Transformer against independent oracles."""

import pytest
import torch

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.search.beam import BeamSearch
from nmtdecode.search.penalties import LengthPenalty

from tests.helpers import BOS, EOS, brute_force, forced_total, random_sources, tiny_transformer

BAN_SPECIALS = ModelRules(banned_ids=(0, 1, BOS))


class BeamOfOne(BatchDecoder):
    """Runs the 2k-candidate beam search even for k=1 (the CLI uses greedy search there)."""

    def make_search(self, batch_size, max_steps, line_ids=None, prefixes=None):
        return BeamSearch(
            batch_size=batch_size,
            beam_size=1,
            max_steps=max_steps,
            start_id=self.start_id,
            eos_id=self.eos_id,
            penalty=self.penalty,
            early_stopping=self.cfg.early_stopping,
            device=self.device,
        )


@pytest.mark.parametrize("penalty, alpha", [("none", 1.0), ("avg", 1.0), ("wu", 0.6)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_large_beam_equals_brute_force(seed, penalty, alpha):
    """Tokens {eos, a, b}, 4 steps: 31 possible hypotheses, beam 32 keeps them all."""
    model = tiny_transformer(seed, vocab=6)
    source = random_sources(1, 6, seed=seed)[0]
    cfg = DecodingConfig(
        beam_size=32, n_best=1, max_length=4, length_penalty=penalty, alpha=alpha, early_stopping="never"
    )
    [[hyp]] = BatchDecoder(model, cfg, BAN_SPECIALS).decode([source]).nbests
    best_tokens, best_score = brute_force(model, source, [EOS, 4, 5], 4, LengthPenalty(penalty, alpha))
    assert hyp.tokens == best_tokens
    assert hyp.score == pytest.approx(best_score, abs=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_beam1_equals_greedy(seed):
    model = tiny_transformer(seed, vocab=20, eos_bias=1.0)
    sources = random_sources(8, 20, seed=seed)
    cfg = DecodingConfig(beam_size=1, max_length=12)
    greedy = BatchDecoder(model, cfg).decode(sources).nbests
    beam = BeamOfOne(model, cfg).decode(sources).nbests
    assert [g[0].tokens for g in greedy] == [b[0].tokens for b in beam]
    assert [g[0].total for g in greedy] == pytest.approx([b[0].total for b in beam], abs=1e-5)


def test_greedy_equals_argmax_of_full_passes():
    """Greedy with the KV cache picks what re-running the whole prefix (no cache) picks."""
    model = tiny_transformer(4, vocab=20, eos_bias=1.0)
    sources = random_sources(5, 20, seed=4)
    outputs = BatchDecoder(model, DecodingConfig(beam_size=1, max_length=10)).decode(sources).nbests
    for source, [hyp] in zip(sources, outputs):
        prefix = []
        src = torch.tensor([source])
        with torch.no_grad():
            for _ in range(10):
                tgt_in = torch.tensor([[BOS] + prefix])
                token = model(src, torch.ones_like(src, dtype=torch.bool), tgt_in)[0, -1].argmax().item()
                if token == EOS:
                    break
                prefix.append(token)
        assert hyp.tokens == prefix


@pytest.mark.parametrize("beam", [1, 4])
def test_reported_scores_equal_forced_decoding(beam):
    model = tiny_transformer(1, vocab=20, eos_bias=1.0)  # seed and bias: every hypothesis ends, at varied steps
    sources = random_sources(6, 20, seed=5)
    cfg = DecodingConfig(beam_size=beam, n_best=beam, max_length=30)
    results = BatchDecoder(model, cfg).decode(sources).nbests
    assert len({len(h.tokens) for hyps in results for h in hyps}) > 1  # hypotheses of several lengths
    for source, hyps in zip(sources, results):
        for hyp in hyps:
            assert hyp.ended
            forced = forced_total(model, source, hyp.tokens)
            assert hyp.token_scores + [hyp.eos_score] == pytest.approx(forced, abs=1e-5)
            assert len(hyp.token_scores) == len(hyp.tokens)
            assert hyp.total == pytest.approx(sum(forced), abs=1e-5)
            assert hyp.score == pytest.approx(sum(forced) / len(forced), abs=1e-5)  # avg, alpha 1


def test_nbest_is_sorted_distinct_and_complete():
    model = tiny_transformer(6, vocab=20, eos_bias=1.0)
    sources = random_sources(6, 20, seed=6)
    for n_best in (3, 5):
        cfg = DecodingConfig(beam_size=5, n_best=n_best, max_length=20)
        for hyps in BatchDecoder(model, cfg).decode(sources).nbests:
            assert len(hyps) == n_best
            assert len({tuple(h.tokens) for h in hyps}) == n_best
            scores = [h.score for h in hyps]
            assert scores == sorted(scores, reverse=True)


def test_nbest_top1_equals_1best_run():
    model = tiny_transformer(7, vocab=20, eos_bias=1.0)
    sources = random_sources(6, 20, seed=7)
    one = BatchDecoder(model, DecodingConfig(beam_size=5, n_best=1)).decode(sources).nbests
    five = BatchDecoder(model, DecodingConfig(beam_size=5, n_best=5)).decode(sources).nbests
    assert [h[0].tokens for h in one] == [h[0].tokens for h in five]


def test_relative_step_limit():
    """max_len_a * |src| + max_len_b bounds each sentence by its own source length."""
    model = tiny_transformer(8, vocab=20, eos_bias=-20.0)  # EOS never wins: every output hits its limit
    sources = [[5, EOS], [5, 6, 7, 8, 9, EOS]]
    cfg = DecodingConfig(beam_size=3, max_length=100, max_len_a=2.0, max_len_b=1)
    outputs = BatchDecoder(model, cfg).decode(sources).nbests
    assert [len(h[0].tokens) for h in outputs] == [2 * 2 + 1, 2 * 6 + 1]
    assert not any(h[0].ended for h in outputs)
