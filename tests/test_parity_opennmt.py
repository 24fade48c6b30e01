"""Parity with OpenNMT-py 3.5.1 on tiny seeded models built by its own model builder.

Each model is saved by OpenNMT-py's ModelSaver (the `.pt` dict onmt_train writes),
loaded by our loader, and compared with OpenNMT-py's own model and Translator:
teacher-forced logits within 1e-4, greedy and beam search token for token with
scores within 1e-4, one sentence at a time (onmt_translate's step limit is per
batch: longest source x max_length_ratio + 5; ours per sentence, equal at batch size 1).
"""

import random
import re

import pytest
import torch

import onmt  # noqa: F401  (installed by `make setup`: these tests never skip)

from nmtdecode.api import Translator  # noqa: E402
from nmtdecode.models.checkpoint import ModelError  # noqa: E402
from nmtdecode.models.formats import opennmt  # noqa: E402

from . import peer_opennmt as peer  # noqa: E402

# Architecture options our loader maps (onmt_train flags), each built and compared.
VARIANTS = {
    "defaults": {},
    "shared_embeddings_biases_gelu": {"share_vocab": True, "share_embeddings": True,
                                      "share_decoder_embeddings": True, "add_qkvbias": True, "add_ffnbias": True,
                                      "pos_ffn_activation_fn": "gelu"},
    "ffn_bias_only_concat_positions": {"add_ffnbias": True, "position_encoding_type": "SinusoidalConcat",
                                       "norm_eps": 1e-5},
}


def sources(seed: int, count: int = 6) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(peer.WORDS) for _ in range(rng.randint(1, 8))] for _ in range(count)]


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def built(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "model"
    return peer.build(path, seed=0, **VARIANTS[request.param])


def test_teacher_forced_logits_match_opennmt(built):
    model, opt, vocab, checkpoint = built
    ours = opennmt.load(checkpoint).model
    src = torch.tensor([[4, 9, 12, 5, 6], [7, 8, 10, 1, 1]])  # the second padded with <blank>
    lengths = torch.tensor([5, 3])
    tgt = torch.tensor([[2, 11, 13, 14, 3], [2, 15, 16, 3, 1]])
    with torch.no_grad():
        dec_out, _ = model(src[:, :, None], tgt[:, :, None], lengths)
        theirs = model.generator(dec_out)
        mine = ours(src, src != peer.VOCAB.index("<blank>"), tgt[:, :-1])
    assert mine.shape == theirs.shape
    torch.testing.assert_close(mine[0], theirs[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(mine[1, :3], theirs[1, :3], atol=1e-4, rtol=0)  # rows past the target's EOS differ


def translations(translator, tokens, **options):
    results = translator.translate([" ".join(tokens)], scores=True, format="jsonl", **options)[0]
    return [(r.text.split(), r.score) for r in results]


def assert_same(theirs, ours):
    assert [tokens for tokens, _ in ours] == [tokens for tokens, _ in theirs]
    assert [score for _, score in ours] == pytest.approx([score for _, score in theirs], abs=1e-4)


@pytest.mark.parametrize("beam_size", [1, 5])
def test_greedy_and_beam_outputs_match_onmt_translate(built, beam_size):
    model, opt, vocab, checkpoint = built
    theirs = peer.translator(model, opt, vocab, beam_size=beam_size)
    ours = Translator.load(checkpoint)  # the model's defaults: onmt_translate's
    for tokens in sources(1):
        assert_same(peer.translate(theirs, tokens), translations(ours, tokens, beam_size=beam_size))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_n_best_matches_onmt_translate(tmp_path, seed):
    """n_best 1 and 3 of beam 5 (the onmt_translate defaults otherwise). Seed 3 generates
    <blank>: onmt_translate bans nothing and writes it, so do we. These models also exercise
    OpenNMT-py's beam conventions (tests/test_opennmt_beam.py): with our usual refilled slots,
    2 of these 48 n-best lists differ."""
    model, opt, vocab, checkpoint = peer.build(tmp_path / "model", seed=seed)
    ours = Translator.load(checkpoint)
    for n_best in (1, 3):
        theirs = peer.translator(model, opt, vocab, n_best=n_best)
        for tokens in sources(seed):
            assert_same(peer.translate(theirs, tokens), translations(ours, tokens, n_best=n_best))


@pytest.mark.parametrize("options, named", [
    ({"max_relative_positions": 16, "position_encoding": False},
     "max_relative_positions = 16 (relative position representations)"),
    ({"max_relative_positions": -1, "position_encoding": False},
     "max_relative_positions = -1 (rotary position embeddings)"),
    ({"layer_norm": "rms"}, "layer_norm = 'rms'"),
    ({"pos_ffn_activation_fn": "silu"}, "pos_ffn_activation_fn = 'silu'"),  # gated in OpenNMT-py 3.5
])
def test_options_the_transformer_cannot_compute_are_refused_by_name(tmp_path, options, named):
    _, _, _, checkpoint = peer.build(tmp_path / "model", **options)
    with pytest.raises(ModelError, match=re.escape(f"OpenNMT-py option {named} is not supported")):
        opennmt.load(checkpoint)


@pytest.mark.parametrize("theirs, ours", [
    ({"min_length": 4}, {"min_length": 4}),
    ({"max_length": 3}, {"max_length": 3}),
    ({"max_length_ratio": 0.5}, {"max_len_a": 0.5}),
    ({"length_penalty": "wu", "alpha": 0.6}, {"length_penalty": "wu", "alpha": 0.6}),
    ({"length_penalty": "none"}, {"length_penalty": "none"}),
    ({"ban_unk_token": True, "n_best": 2}, {"ban_unk": True, "n_best": 2}),
], ids=["min_length", "max_length", "max_length_ratio", "wu", "no_penalty", "ban_unk"])
def test_onmt_translate_options_keep_their_meaning(tmp_path, theirs, ours):
    model, opt, vocab, checkpoint = peer.build(tmp_path / "model", seed=1)
    onmt_translator, translator = peer.translator(model, opt, vocab, **theirs), Translator.load(checkpoint)
    for tokens in sources(4):
        assert_same(peer.translate(onmt_translator, tokens), translations(translator, tokens, **ours))


def test_score_matches_onmt_translate_gold_scores(tmp_path):
    model, opt, vocab, checkpoint = peer.build(tmp_path / "model", seed=0)
    onmt_translator, translator = peer.translator(model, opt, vocab), Translator.load(checkpoint)
    pairs = list(zip(sources(5), sources(6)))
    theirs = [peer.gold_score(onmt_translator, src, tgt) for src, tgt in pairs]
    ours = translator.score([" ".join(src) for src, _ in pairs], [" ".join(tgt) for _, tgt in pairs])
    assert ours == pytest.approx(theirs, abs=1e-4)
