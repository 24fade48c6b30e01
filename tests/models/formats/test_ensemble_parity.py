"""Ensembles against references: OpenNMT-py 3.5.1's own ensemble translator on two of its
checkpoints (its rule, the default for them), and a reference written on `transformers` for
fairseq's `prob` rule: two seeded random Marians sharing a vocabulary, the second model's
log-probs mixed into the first one's `generate` by a logits processor, one sentence at a time."""

import math

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from nmtdecode.api import Translator
from nmtdecode.options.config import Config
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.ensemble import Ensemble

from tests import peer_opennmt as peer
from tests.helpers import assert_same_nbest, nbest_of
from tests.models.formats.test_huggingface_parity import EOS, batch, build, hf_generate
from tests.models.formats.test_opennmt_parity import sources

pytestmark = pytest.mark.parity  # against a peer library: in make test, not in make test-fast


@pytest.fixture(scope="module")
def onmt_pair(tmp_path_factory):
    """Two OpenNMT-py checkpoints of one vocabulary (seeds 0 and 2), as its ModelSaver writes them."""
    built = [peer.build(tmp_path_factory.mktemp(f"seed{seed}") / "model", seed=seed) for seed in (0, 2)]
    return built, Translator.load([checkpoint for *_, checkpoint in built])


@pytest.mark.parametrize("beam_size, n_best", [(1, 1), (5, 1), (5, 3)])
def test_ensemble_matches_onmt_translate_with_two_models(onmt_pair, beam_size, n_best):
    from onmt.decoders.ensemble import EnsembleModel

    built, ours = onmt_pair
    (first, opt, vocab, _), (second, *_) = built
    theirs = peer.translator(EnsembleModel([first, second]), opt, vocab, beam_size=beam_size, n_best=n_best)
    alone = peer.translator(first, opt, vocab, beam_size=beam_size, n_best=n_best)
    differs = False
    for tokens in sources(5):
        expected = peer.translate(theirs, tokens)
        assert_same_nbest(expected, nbest_of(ours, tokens, beam_size=beam_size, n_best=n_best))
        differs |= expected != peer.translate(alone, tokens)
    assert differs, "the second model changes nothing on these sources: the test could not fail"


class MixInSecondModel(LogitsProcessor):
    """fairseq's rule as a reference on transformers: the step's log-probs of the model `generate`
    runs become ln((p_first + p_second) / 2), the second model fed the same prefix from scratch."""

    def __init__(self, second, src, mask):
        self.second, self.src, self.mask = second, src, mask

    def __call__(self, input_ids, scores):
        rows = input_ids.size(0)
        with torch.no_grad():
            logits = self.second(
                input_ids=self.src.expand(rows, -1),
                attention_mask=self.mask.expand(rows, -1),
                decoder_input_ids=input_ids,
            ).logits[:, -1]
        both = torch.stack([torch.log_softmax(scores.float(), -1), torch.log_softmax(logits.float(), -1)])
        return torch.logsumexp(both, dim=0) - math.log(2)


@pytest.mark.parametrize("beams", [1, 4])
def test_prob_rule_matches_a_transformers_reference(tmp_path, beams):
    generation = dict(num_beams=beams, max_length=14, **({"early_stopping": True} if beams > 1 else {}))
    hf_a, ours_a, defaults, rules = build("marian", tmp_path / "a", seed=0, **generation)
    hf_b, ours_b, _, _ = build("marian", tmp_path / "b", seed=1, **generation)
    rows, ids, mask = batch(3)
    config = Config.from_values({"n_best": beams}).with_model_defaults(defaults)
    ensemble = BatchDecoder(Ensemble([ours_a, ours_b], "prob", None), config.decoding, rules)
    alone = BatchDecoder(ours_a, config.decoding, rules)
    differs = False
    for row, src, src_mask in zip(rows, ids, mask):
        src, src_mask = src[None, : len(row)], src_mask[None, : len(row)]
        mix = LogitsProcessorList([MixInSecondModel(hf_b, src, src_mask.long())])
        expected, expected_scores = hf_generate(hf_a, src, src_mask, num_return_sequences=beams, logits_processor=mix)
        got = ensemble.decode([row]).nbests[0]
        assert [h.tokens for h in got] == expected
        if beams > 1:
            assert [h.score for h in got] == pytest.approx(expected_scores.tolist(), rel=1e-5, abs=1e-4)
        differs |= [h.tokens for h in alone.decode([row]).nbests[0]] != expected
    assert differs, "the second model changes nothing on these sources: the test could not fail"
    assert EOS not in [t for h in got for t in h.tokens]
