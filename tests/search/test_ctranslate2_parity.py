"""The stop rule `top` against CTranslate2's own implementation of it, on the demo model.

CTranslate2 stops a sentence once its top-ranked candidate has ended and enough hypotheses
are finished, but only without a length penalty (`length_penalty=0`); nmtdecode's `top`
with `--length-penalty none` is the same search. Both decode the same held-out lines with
the same weights (converted by bench/convert.py); the 1-best outputs must agree.
"""

import os
import sys

import pytest

from nmtdecode.options.config import Config
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.loading import load_model

from tests.helpers import REPO

pytestmark = pytest.mark.parity  # against a peer library: in make test, not in make test-fast

ROOT = str(REPO)
DEMO = os.path.join(ROOT, "data", "demo")
ctranslate2 = pytest.importorskip("ctranslate2")  # in the test extra: never skipped by `make test`


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from convert import to_ctranslate2

    loaded = load_model(DEMO)
    sp = loaded.tokenizer.target
    tokens = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    path = to_ctranslate2(loaded.model, tokens, str(tmp_path_factory.mktemp("ct2") / "demo"))
    return loaded, tokens, ctranslate2.Translator(path, device="cpu", intra_threads=1)


@pytest.mark.parametrize("beam, n_best", [(1, 1), (4, 1), (4, 3)])
def test_top_rule_agrees_with_ctranslate2(converted, beam, n_best):
    loaded, tokens, ct2 = converted
    with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f][:200]
    sources = [loaded.tokenizer.encode(line) for line in lines]
    config = Config.from_values(
        {"beam_size": beam, "n_best": n_best, "early_stopping": "top", "length_penalty": "none", "max_length": 48}
    )
    translator = BatchDecoder(loaded.model, config.decoding, loaded.rules)
    ours = [
        [h.tokens for h in n]
        for start in range(0, len(sources), 25)
        for n in translator.decode(sources[start : start + 25]).nbests
    ]
    banned = [[tokens[t]] for t in loaded.rules.banned_ids]
    results = ct2.translate_batch(
        [[tokens[i] for i in s] for s in sources],
        beam_size=beam,
        length_penalty=0.0,
        max_decoding_length=48,
        suppress_sequences=banned,
        max_batch_size=25,
        num_hypotheses=n_best,
    )
    index = {t: i for i, t in enumerate(tokens)}
    theirs = [[[index[t] for t in h] for h in r.hypotheses] for r in results]
    same = sum(a == b for a, b in zip(ours, theirs)) / len(ours)
    assert same >= 0.99, f"{100 * same:.1f}% of the n-best lists agree"


@pytest.mark.parametrize("beam, n_best, alpha", [(2, 1, 1.0), (4, 1, 1.0), (4, 3, 1.0), (5, 2, 0.6), (4, 2, 0.0)])
def test_ctranslate2_rule_gives_ctranslate2s_nbest_at_its_defaults(converted, beam, n_best, alpha):
    """`--early-stopping ctranslate2` with the average length penalty of exponent alpha is
    CTranslate2's own search at length_penalty=alpha (its default 1; 0 is its early exit): the
    same n-best lists, ranked alike, and the same scores (total / length**alpha, EOS counted), on
    the demo's held-out lines. CTranslate2 is not told the model's own bans (pad, the start
    token): a converted model has none, and scores them; nmtdecode bans them after the softmax,
    which leaves every other token's log-prob as CTranslate2 computes it. (Told to suppress them,
    CTranslate2 masks the logits and renormalises: its scores then differ by up to 2e-3.)"""
    loaded, tokens, ct2 = converted
    with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f][:200]
    sources = [loaded.tokenizer.encode(line) for line in lines]
    config = Config.from_values(
        {
            "beam_size": beam,
            "n_best": n_best,
            "early_stopping": "ctranslate2",
            "length_penalty": "avg",
            "alpha": alpha,
            "max_length": 48,
            "min_length": 1,
        }
    )  # CTranslate2's default min_decoding_length
    translator = BatchDecoder(loaded.model, config.decoding, loaded.rules)
    ours = [n for start in range(0, len(sources), 25) for n in translator.decode(sources[start : start + 25]).nbests]
    results = ct2.translate_batch(
        [[tokens[i] for i in s] for s in sources],
        beam_size=beam,
        length_penalty=alpha,
        max_decoding_length=48,
        max_batch_size=25,
        num_hypotheses=n_best,
        return_scores=True,
    )
    index = {t: i for i, t in enumerate(tokens)}
    same = 0
    for hyps, result in zip(ours, results):
        theirs = [[index[t] for t in h] for h in result.hypotheses]
        if [h.tokens for h in hyps] == theirs:
            same += 1
            assert [h.score for h in hyps] == pytest.approx(result.scores, abs=1e-4)
    assert same / len(ours) >= 0.99, f"{100 * same / len(ours):.1f}% of the n-best lists agree"
