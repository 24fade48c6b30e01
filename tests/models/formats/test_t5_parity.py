"""Parity with `transformers` on small seeded T5 checkpoints of each configuration (t5_models.py:
v1.0, v1.1, mT5, ByT5, a MADLAD-like decoder start): the encoder output, every incremental step's
logits and the teacher-forced pass within 1e-4; greedy and beam search token for token with
their scores under each model's generation_config.json; `score` of the hypotheses `translate`
ended equal to their log-probabilities. Batches of mixed lengths with padding, sentences long
enough to reach the relative bias's logarithmic buckets."""

import pytest
import torch

from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.options.config import DecodingConfig

from tests.models.formats.t5_models import GREEDY_BATCH, VARIANTS, batch, build, config_of
from tests.models.formats.test_huggingface_parity import hf_generate, ours_generate

pytestmark = pytest.mark.parity  # against a peer library: in make test, not in make test-fast


@pytest.mark.parametrize("variant", VARIANTS)
def test_encoder_steps_and_teacher_forcing_match(variant, tmp_path):
    hf, ours, _, _ = build(variant, tmp_path)
    _, ids, mask = batch(variant)
    values = config_of(variant)
    tgt = torch.randint(3, values["vocab_size"], (ids.size(0), 18), generator=torch.Generator().manual_seed(1))
    tgt[:, 0] = values["decoder_start_token_id"]
    with torch.no_grad():
        expected_memory = hf.get_encoder()(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        expected = hf(input_ids=ids, attention_mask=mask.long(), decoder_input_ids=tgt).logits
        memory = ours.encode(ids, mask)
        cache = ours.init_cache(memory, mask)
        steps = torch.stack([ours.decode_step(tgt[:, t], cache) for t in range(tgt.size(1))], dim=1)
        forced = ours(ids, mask, tgt)
    torch.testing.assert_close(memory[mask], expected_memory[mask], rtol=0, atol=1e-4)
    torch.testing.assert_close(steps, expected, rtol=0, atol=1e-4)
    torch.testing.assert_close(forced, expected, rtol=0, atol=1e-4)


def test_each_variant_maps_onto_the_switches_it_has(tmp_path):
    """What the configs differ in reaches our config: the feed-forward, the output and its scale,
    the stacks' depths, the decoder start, the heads' width."""
    seen = {}
    for variant in ("t5", "t5-v1.1", "byt5", "madlad"):
        _, ours, _, _ = build(variant, tmp_path / variant)
        cfg = ours.cfg
        seen[variant] = (cfg.activation, cfg.gated_ffn, cfg.tie_output, round(cfg.output_scale, 4))
        assert (cfg.norm, cfg.positions, cfg.scale_queries, cfg.head_size, cfg.bias) == (
            "rmsnorm",
            "relative",
            False,
            12,
            False,
        )
    assert seen == {
        "t5": ("relu", False, True, round(32**-0.5, 4)),
        "t5-v1.1": ("gelu_tanh", True, False, 1.0),
        "byt5": ("gelu_tanh", True, False, 1.0),
        "madlad": ("gelu_tanh", True, False, 1.0),
    }
    assert (ours.cfg.decoder_start_id, ours.cfg.pad_id, ours.cfg.eos_id) == (0, 1, 2)  # MADLAD: not pad
    _, byt5, _, _ = build("byt5", tmp_path / "byt5-again")
    assert (byt5.cfg.encoder_layers, byt5.cfg.decoder_layers, byt5.cfg.src_vocab_size) == (4, 1, 384)


@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_matches(variant, tmp_path):
    hf, ours, defaults, rules = build(variant, tmp_path, num_beams=1, max_length=20)
    rows, ids, mask = batch(variant, GREEDY_BATCH.get(variant, 0))
    expected, _ = hf_generate(hf, ids, mask, config_of(variant)["eos_token_id"])
    got = ours_generate(ours, defaults, rules, rows)
    assert [n[0].tokens for n in got] == expected
    assert len({len(t) for t in expected}) > 1  # outputs of different lengths: EOS handling exercised


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("beams, early_stopping, length_penalty", [(4, False, 1.0), (5, "never", 0.6)])
def test_beam_nbest_matches(variant, beams, early_stopping, length_penalty, tmp_path):
    hf, ours, defaults, rules = build(
        variant, tmp_path, num_beams=beams, max_length=16, early_stopping=early_stopping, length_penalty=length_penalty
    )
    rows, ids, mask = batch(variant, 2)
    expected, expected_scores = hf_generate(
        hf, ids, mask, config_of(variant)["eos_token_id"], num_return_sequences=beams
    )
    got = ours_generate(ours, defaults, rules, rows, n_best=beams)
    assert [h.tokens for n in got for h in n] == expected
    assert any(h.ended for n in got for h in n)  # finished (EOS) hypotheses were part of the search
    assert [h.score for n in got for h in n] == pytest.approx(expected_scores.tolist(), rel=1e-5, abs=1e-4)


@pytest.mark.parametrize("variant", ["t5", "t5-v1.1", "madlad"])
def test_score_of_own_translations_is_their_log_prob(variant, tmp_path):
    hf, ours, defaults, rules = build(variant, tmp_path, num_beams=4, max_length=20)
    rows, _, _ = batch(variant, GREEDY_BATCH.get(variant, 0))
    nbest = ours_generate(ours, defaults, rules, rows, n_best=4)
    ended = [(row, hyp) for row, hyps in zip(rows, nbest) for hyp in hyps if hyp.ended and len(hyp.tokens) < 18]
    assert len(ended) >= 4 and len({len(hyp.tokens) for _, hyp in ended}) > 1
    sources, targets = [row for row, _ in ended], [hyp.tokens for _, hyp in ended]
    scores = BatchDecoder(ours, DecodingConfig(), rules).score(sources, targets)
    assert scores == pytest.approx([hyp.total for _, hyp in ended], abs=1e-4)
