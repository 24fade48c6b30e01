"""Parity with OpenNMT-py 3.5.1 on tiny seeded models built by its own model builder.

Each model is saved by OpenNMT-py's ModelSaver (the `.pt` dict onmt_train writes),
loaded by our loader, and compared with OpenNMT-py's own model and Translator:
teacher-forced logits within 1e-4, greedy and beam search token for token with
scores within 1e-4, one sentence at a time (onmt_translate's step limit is per
batch: longest source x max_length_ratio + 5; ours per sentence, equal at batch size 1).
"""

import random
import re

import onmt  # noqa: F401  (installed by `make setup`: these tests never skip)
import pytest
import torch

from nmtdecode.api import Translator  # noqa: E402
from nmtdecode.options.config import ConfigError  # noqa: E402
from nmtdecode.models.checkpoint import ModelError  # noqa: E402
from nmtdecode.models.formats import opennmt  # noqa: E402

from tests import peer_opennmt as peer  # noqa: E402
from tests.helpers import assert_same_nbest, nbest_of  # noqa: E402

pytestmark = pytest.mark.parity  # against a peer library: in make test, not in make test-fast

# Architecture options our loader maps (onmt_train flags), each built and compared.
VARIANTS = {
    "defaults": {},
    "shared_embeddings_biases_gelu": {
        "share_vocab": True,
        "share_embeddings": True,
        "share_decoder_embeddings": True,
        "add_qkvbias": True,
        "add_ffnbias": True,
        "pos_ffn_activation_fn": "gelu",
    },
    "ffn_bias_only_concat_positions": {
        "add_ffnbias": True,
        "position_encoding_type": "SinusoidalConcat",
        "norm_eps": 1e-5,
    },
}


def sources(seed: int, count: int = 6) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(peer.WORDS) for _ in range(rng.randint(1, 8))] for _ in range(count)]


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory):
    """`plain_model(seed)`: peer.build's model of that seed with onmt_train's defaults, built once
    for the module (the tests read it, never change it), as `built` and `seed1` are."""
    models = {}

    def get(seed):
        if seed not in models:
            models[seed] = peer.build(tmp_path_factory.mktemp(f"seed{seed}") / "model", seed=seed)
        return models[seed]

    return get


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


@pytest.mark.parametrize("beam_size", [1, 5])
def test_greedy_and_beam_outputs_match_onmt_translate(built, beam_size):
    model, opt, vocab, checkpoint = built
    theirs = peer.translator(model, opt, vocab, beam_size=beam_size)
    ours = Translator.load(checkpoint)  # the model's defaults: onmt_translate's
    for tokens in sources(1):
        assert_same_nbest(peer.translate(theirs, tokens), nbest_of(ours, tokens, beam_size=beam_size))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_n_best_matches_onmt_translate(plain_model, seed):
    """n_best 1 and 3 of beam 5 (the onmt_translate defaults otherwise). Seed 3 generates
    <blank>: onmt_translate bans nothing and writes it, so do we. These models also exercise
    OpenNMT-py's beam conventions (tests/test_opennmt_beam.py): with our usual refilled slots,
    2 of these 48 n-best lists differ."""
    model, opt, vocab, checkpoint = plain_model(seed)
    ours = Translator.load(checkpoint)
    for n_best in (1, 3):
        theirs = peer.translator(model, opt, vocab, n_best=n_best)
        for tokens in sources(seed):
            assert_same_nbest(peer.translate(theirs, tokens), nbest_of(ours, tokens, n_best=n_best))


@pytest.mark.parametrize(
    "options, named",
    [
        (
            {"max_relative_positions": 16, "position_encoding": False},
            "max_relative_positions = 16 (relative position representations)",
        ),
        (
            {"max_relative_positions": -1, "position_encoding": False},
            "max_relative_positions = -1 (rotary position embeddings)",
        ),
        ({"layer_norm": "rms"}, "layer_norm = 'rms'"),
        ({"pos_ffn_activation_fn": "silu"}, "pos_ffn_activation_fn = 'silu'"),  # gated in OpenNMT-py 3.5
    ],
)
def test_options_the_transformer_cannot_compute_are_refused_by_name(tmp_path, options, named):
    _, _, _, checkpoint = peer.build(tmp_path / "model", **options)
    with pytest.raises(ModelError, match=re.escape(f"OpenNMT-py option {named} is not supported")):
        opennmt.load(checkpoint)


@pytest.mark.parametrize(
    "theirs, ours",
    [
        ({"min_length": 4}, {"min_length": 4}),
        ({"max_length": 3}, {"max_length": 3}),
        ({"max_length_ratio": 0.5}, {"max_len_a": 0.5}),
        ({"length_penalty": "wu", "alpha": 0.6}, {"length_penalty": "wu", "alpha": 0.6}),
        ({"length_penalty": "none"}, {"length_penalty": "none"}),
    ],
    ids=["min_length", "max_length", "max_length_ratio", "wu", "no_penalty"],
)
def test_onmt_translate_options_keep_their_meaning(plain_model, theirs, ours):
    model, opt, vocab, checkpoint = plain_model(1)
    onmt_translator, translator = peer.translator(model, opt, vocab, **theirs), Translator.load(checkpoint)
    for tokens in sources(4):
        assert_same_nbest(peer.translate(onmt_translator, tokens), nbest_of(translator, tokens, **ours))


def test_score_matches_onmt_translate_gold_scores(plain_model):
    model, opt, vocab, checkpoint = plain_model(0)
    onmt_translator, translator = peer.translator(model, opt, vocab), Translator.load(checkpoint)
    pairs = list(zip(sources(5), sources(6)))
    theirs = [peer.gold_score(onmt_translator, src, tgt) for src, tgt in pairs]
    ours = translator.score([" ".join(src) for src, _ in pairs], [" ".join(tgt) for _, tgt in pairs])
    assert ours == pytest.approx(theirs, abs=1e-4)


# The options recently added under OpenNMT-py's names (docs/formats.md, "Coming from OpenNMT-py or eole"),
# each compared with onmt_translate on one model, and each shown to change some output of it (so
# that an option we ignored would fail the test).


@pytest.fixture(scope="module")
def seed1(tmp_path_factory):
    """Seed 1's model: its outputs repeat n-grams and (with <unk> made likely) contain <unk>."""
    model, opt, vocab, checkpoint = peer.build(tmp_path_factory.mktemp("seed1") / "model", seed=1, unk_bias=2.0)
    return model, opt, vocab, checkpoint, Translator.load(checkpoint)


_NBEST = {}


def ours_nbest(translator, tokens, **options):
    """`nbest_of` for seed 1's translator (shared by the module), each distinct call decoded once:
    the same options recur across the cases below (one case's options are another's `without`)."""
    key = (id(translator), tuple(tokens), tuple(sorted((k, repr(v)) for k, v in options.items())))
    if key not in _NBEST:  # the translator is kept with its results: its id stays its own
        _NBEST[key] = translator, nbest_of(translator, tokens, **options)
    return _NBEST[key][1]


def assert_options_keep_their_meaning(built, theirs, ours, without):
    """onmt_translate with `theirs` and nmtdecode with `ours` give the same n-best, and for some
    source nmtdecode's n-best (tokens and scores) differs from that with `without` instead."""
    model, opt, vocab, _, translator = built
    onmt_translator = peer.translator(model, opt, vocab, **theirs)
    changed = False
    for tokens in sources(4):
        result = ours_nbest(translator, tokens, **ours)
        assert_same_nbest(peer.translate(onmt_translator, tokens), result)
        changed |= result != ours_nbest(translator, tokens, **without)
    assert changed, f"{ours} changes nothing on these sources: the test could not fail"


@pytest.mark.parametrize("length_penalty", ["avg", "wu"])
@pytest.mark.parametrize("penalty, beta", [("wu", 0.2), ("wu", 1.0), ("summary", 0.2), ("summary", 1.0)])
def test_coverage_penalty_keeps_its_meaning(seed1, penalty, beta, length_penalty):
    """OpenNMT-py's coverage penalty reads its decoder's "std" attention (the last layer's first
    head, onmt/decoders/transformer.py), ours the model's alignment_layer/alignment_heads, by
    default the same; the penalty reorders the finished hypotheses (beam_search.py `advance`)."""
    options = {"length_penalty": length_penalty, "n_best": 3}
    assert_options_keep_their_meaning(
        seed1,
        {**options, "coverage_penalty": penalty, "beta": beta},
        {**options, "coverage_penalty": penalty, "beta": beta},
        options,
    )


def test_coverage_penalty_with_beam_size_1_lowers_scores_only(seed1):
    """onmt_translate decodes beam size 1 with its BeamSearch (its GreedySearch only samples),
    where the penalty is subtracted from the final score; our greedy search does the same."""
    options = {"beam_size": 1, "coverage_penalty": "wu", "beta": 1.0}
    assert_options_keep_their_meaning(seed1, options, options, {"beam_size": 1})


@pytest.mark.parametrize("ignored", [[], ["w2"], ["w1", "w15"]], ids=["none_ignored", "w2", "w1_w15"])
@pytest.mark.parametrize("ngram", [2, 3])
@pytest.mark.parametrize("beam_size", [1, 5])
def test_block_ngram_repeat_keeps_its_meaning(seed1, beam_size, ngram, ignored):
    """block_ngram_repeat as onmt_translate's beam search applies it, the history starting with
    <s>; ignore_when_blocking names tokens of the checkpoint's target vocabulary. Compared with
    no blocking, or with blocking that ignores nothing."""
    search = {"beam_size": beam_size, "n_best": min(beam_size, 3)}
    options = {**search, "block_ngram_repeat": ngram}
    with_ignored = {**options, "ignore_when_blocking": ignored} if ignored else options
    without = options if ignored else search
    assert_options_keep_their_meaning(seed1, with_ignored, with_ignored, without)


def test_pieces_are_looked_up_in_the_checkpoint_vocabulary(seed1):
    """ignore_when_blocking and banned_tokens name entries of the checkpoint's target vocab."""
    *_, translator = seed1
    tokens = sources(4)[4]
    assert "w15" in ours_nbest(translator, tokens)[0][0]
    assert "w15" not in ours_nbest(translator, tokens, banned_tokens=["w15"])[0][0]
    with pytest.raises(ConfigError, match="ignore_when_blocking: 'w99' is not a piece of the target vocabulary"):
        nbest_of(translator, tokens, block_ngram_repeat=2, ignore_when_blocking=["w99"])


def test_ban_unk_token_keeps_its_meaning(seed1):
    for beam_size in (1, 5):
        options = {"beam_size": beam_size, "n_best": min(beam_size, 2)}
        assert_options_keep_their_meaning(
            seed1, {**options, "ban_unk_token": True}, {**options, "ban_unk": True}, options
        )


@pytest.mark.parametrize("ours", [{"beam_size": 1}, {"sampling": True, "top_k": 1}], ids=["greedy", "top_k_1"])
def test_random_sampling_topk_1_is_greedy_search(seed1, ours):
    """`random_sampling_topk: 1` sends onmt_translate through its sampler (GreedySearch), which
    takes the arg-max: our greedy search, or our sampling with top_k 1, scores included."""
    assert_options_keep_their_meaning(seed1, {"beam_size": 1, "random_sampling_topk": 1}, ours, {"n_best": 3})


@pytest.mark.parametrize("topk", [-1, 1])
def test_random_sampling_temp_scores_are_tempered_in_opennmt(seed1, topk):
    """At a temperature near 0 sampling is the arg-max in both (so the draws agree whatever the
    random streams), but onmt_translate's score is the tempered one, sum(log p / T) / length
    penalty (greedy_search.py `sample_with_temperature`), and ours the model's log-probs (as
    CTranslate2's): ours = theirs * T."""
    model, opt, vocab, _, translator = seed1
    temperature = 0.01
    onmt_translator = peer.translator(
        model, opt, vocab, beam_size=1, random_sampling_topk=topk, random_sampling_temp=temperature, seed=1
    )
    changed = False
    for tokens in sources(4):
        ours = ours_nbest(translator, tokens, sampling=True, temperature=temperature)
        [(their_tokens, their_score)] = peer.translate(onmt_translator, tokens)
        assert [t for t, _ in ours] == [their_tokens]
        assert ours[0][1] == pytest.approx(their_score * temperature, abs=1e-4)
        assert ours == ours_nbest(translator, tokens, beam_size=1)
        changed |= ours != ours_nbest(translator, tokens, sampling=True, temperature=1.0)
    assert changed


def test_block_ngram_repeat_is_ignored_by_opennmt_sampler(seed1):
    """A difference on purpose: onmt_translate's sampler (GreedySearch.advance, v3.5.1) never
    records the n-grams it generates (no maybe_update_forbidden_tokens), so block_ngram_repeat
    blocks nothing with random_sampling_topk/topp; ours blocks in every search."""
    model, opt, vocab, _, translator = seed1
    onmt_translator = peer.translator(model, opt, vocab, beam_size=1, random_sampling_topk=1, block_ngram_repeat=2)
    blocked = False
    for tokens in sources(4):
        assert_same_nbest(peer.translate(onmt_translator, tokens), ours_nbest(translator, tokens, beam_size=1))
        ours = ours_nbest(translator, tokens, sampling=True, top_k=1, block_ngram_repeat=2)
        blocked |= ours != ours_nbest(translator, tokens, sampling=True, top_k=1)
    assert blocked


def test_coverage_penalty_ignores_padded_source_positions(seed1):
    """A difference on purpose: in a padded batch onmt_translate's `wu` penalty takes -log 0 at
    the padding (its attention there is 0), so a shorter source's hypotheses all score -inf;
    ours counts padded positions as covered, so a sentence scores as it does alone."""
    model, opt, vocab, _, translator = seed1
    options = {"coverage_penalty": "wu", "beta": 0.2}
    long, short = ["w1", "w2", "w3", "w4", "w5"], ["w7", "w8"]
    ids = torch.full((2, len(long)), peer.VOCAB.index("<blank>"))
    for row, tokens in enumerate([long, short]):
        ids[row, : len(tokens)] = torch.tensor([peer.VOCAB.index(t) for t in tokens])
    batch = {"src": ids[:, :, None], "srclen": torch.tensor([len(long), len(short)]), "indices": torch.tensor([0, 1])}
    with torch.no_grad():
        theirs = peer.translator(model, opt, vocab, **options).translate_batch(batch, attn_debug=False)
    assert float(theirs["scores"][1][0]) == float("-inf")
    ours = translator.translate_batch([" ".join(long), " ".join(short)], batch_size=2, **options)
    alone = ours_nbest(translator, short, **options)
    assert_same_nbest(alone, [(r.text.split(), r.score) for r in ours[1]])
    assert_same_nbest(peer.translate(peer.translator(model, opt, vocab, **options), short), alone)


@pytest.mark.parametrize("beam_size", [1, 5])
def test_replace_unk_matches_onmt_translate(seed1, beam_size):
    """onmt_translate's -replace_unk (onmt/translate/translation.py, TranslationBuilder
    _build_target_tokens: each <unk> becomes the source token of the step's highest "std" attention)
    on seed 1's model, whose outputs hold <unk>; every source token is in its vocabulary, so its copy
    of the vocabulary entry and ours of the source text agree."""
    from onmt.inputters.inputter import dict_to_vocabs
    from onmt.translate.translation import TranslationBuilder

    model, opt, vocab, _, translator = seed1
    n_best = min(beam_size, 2)
    onmt_translator = peer.translator(model, opt, vocab, beam_size=beam_size, n_best=n_best, replace_unk=True)
    builder = TranslationBuilder(dict_to_vocabs(vocab), n_best=n_best, replace_unk=True)
    replaced = 0
    for tokens in sources(4):
        ids = torch.tensor([[peer.VOCAB.index(t) for t in tokens]])
        batch = {
            "src": ids[:, :, None],
            "srclen": torch.tensor([len(tokens)]),
            "indices": torch.tensor([0]),
            "ind_in_bucket": [0],
        }
        with torch.no_grad():
            [theirs] = builder.from_batch(onmt_translator.translate_batch(batch, attn_debug=False))
        ours = translator.translate(
            [" ".join(tokens)], scores=True, beam_size=beam_size, n_best=n_best, replace_unk=True
        )[0]
        plain = translator.translate([" ".join(tokens)], scores=True, beam_size=beam_size, n_best=n_best)[0]
        assert [h.text for h in ours] == [" ".join(sent) for sent in theirs.pred_sents]
        replaced += sum(h.text.split().count("<unk>") for h in plain) - sum(h.text.split().count("<unk>") for h in ours)
    assert replaced > 0  # the test could fail: <unk>s were generated and replaced
