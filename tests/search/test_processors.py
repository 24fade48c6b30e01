"""Logit processors against their definitions and Hugging Face's implementations."""

import math

import pytest
import torch
from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

from nmtdecode.search.processors import (
    BanTokens,
    ForceEosAtLimit,
    ForceFirstToken,
    MinLength,
    NoRepeatNgram,
    RowHistory,
)

NEG_INF = -math.inf


def rows(history=None, last_step=None, n=3, step=0):
    state = RowHistory(torch.zeros(n, dtype=torch.long), torch.tensor(last_step or [9] * n), history is not None)
    state.history = history
    state.step.fill_(step)  # as `follow` counts it
    return state


@pytest.mark.parametrize("ngram", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", range(5))
def test_no_repeat_ngram_matches_transformers(ngram, seed):
    g = torch.Generator().manual_seed(seed)
    history = torch.randint(0, 5, (6, 12), generator=g)  # small vocabulary: many repeats
    logprobs = torch.log_softmax(torch.randn(6, 8, generator=g), dim=-1)
    expected = NoRepeatNGramLogitsProcessor(ngram)(history, logprobs.clone())
    got = NoRepeatNgram(ngram)(logprobs.clone(), step=11, rows=rows(history, n=6))
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    torch.testing.assert_close(got[~torch.isinf(got)], expected[~torch.isinf(expected)])


def test_no_repeat_ngram_worked_example():
    """history [s a b a]: `a` was followed by `b`, so bigram blocking bans `b` only."""
    s, a, b = 0, 1, 2
    got = NoRepeatNgram(2)(torch.zeros(1, 4), step=3, rows=rows(torch.tensor([[s, a, b, a]]), n=1))
    assert got.tolist() == [[0.0, 0.0, NEG_INF, 0.0]]


def test_min_length_bans_eos_before_the_limit_only():
    proc = MinLength(2, eos_id=3)
    assert proc(torch.zeros(2, 5), step=1, rows=None)[:, 3].tolist() == [NEG_INF, NEG_INF]
    assert proc(torch.zeros(2, 5), step=2, rows=None)[:, 3].tolist() == [0.0, 0.0]


def test_ban_tokens():
    got = BanTokens([0, 4, 4])(torch.zeros(2, 5), step=0, rows=None)
    assert got.tolist() == [[NEG_INF, 0, 0, 0, NEG_INF]] * 2


def test_force_first_token():
    proc = ForceFirstToken(2)
    first = proc(torch.full((2, 4), -1.0), step=0, rows=None)
    assert first.tolist() == [[NEG_INF, NEG_INF, 0.0, NEG_INF]] * 2
    assert proc(torch.full((2, 4), -1.0), step=1, rows=None).tolist() == [[-1.0] * 4] * 2


def test_force_eos_only_on_rows_at_their_limit():
    got = ForceEosAtLimit(eos_id=1)(torch.full((3, 3), -1.0), step=4, rows=rows(last_step=[4, 7, 4], step=4))
    assert got.tolist() == [[NEG_INF, 0.0, NEG_INF], [-1.0, -1.0, -1.0], [NEG_INF, 0.0, NEG_INF]]
    assert (
        ForceEosAtLimit(eos_id=1)(torch.full((3, 3), -1.0), step=4, rows=rows(last_step=[4, 7, 4], step=3))
        .eq(-1.0)
        .all()
    )  # the rows' own count of the steps decides


@pytest.mark.parametrize("beam", [1, 4])
def test_no_repeat_ngram_in_decoding(beam):
    """End to end: no output of a repetitive model repeats a bigram."""
    from nmtdecode.options.config import DecodingConfig
    from nmtdecode.engine.decoding import BatchDecoder

    from tests.helpers import BOS, random_sources, tiny_transformer

    model = tiny_transformer(3, vocab=8, eos_bias=-3.0)  # long outputs over 4 content tokens: repeats likely
    cfg = DecodingConfig(beam_size=beam, n_best=beam, max_length=12)
    plain = BatchDecoder(model, cfg).decode(random_sources(6, 8, seed=3)).nbests

    def bigrams(tokens):
        seq = [BOS] + tokens
        return list(zip(seq, seq[1:]))

    assert any(len(set(bigrams(h.tokens))) < len(bigrams(h.tokens)) for n in plain for h in n)
    cfg.no_repeat_ngram_size = 2
    blocked = BatchDecoder(model, cfg).decode(random_sources(6, 8, seed=3)).nbests
    for hyps in blocked:
        for h in hyps:
            assert len(set(bigrams(h.tokens))) == len(bigrams(h.tokens))


class SentenceBias:
    """A logits-stage processor with row state of its own: each row knows its sentence and raises
    the logit of that sentence's favourite token, so a row that forgot whose it is (its state not
    following the search) favours another sentence's token or fails on the row count."""

    stage = "logits"

    def __init__(self, favourites: list[int]):
        self.favourite = torch.tensor(favourites)  # one row per sentence at step 0

    def __call__(self, logits, step, rows):
        return logits.scatter_add_(1, self.favourite[:, None], torch.full((logits.size(0), 1), 4.0))

    def follow(self, out):
        if out.origin is not None:
            self.favourite = self.favourite.index_select(0, out.origin)


@pytest.mark.parametrize("beam", [1, 4])
def test_a_stateful_logits_processor_follows_the_search(beam):
    """Each sentence decoded in a batch (rows reordered, widened after step 0, finished sentences
    dropped) gets what it gets alone, with its own favourite token in its output."""
    from nmtdecode.options.config import DecodingConfig
    from nmtdecode.engine.decoding import BatchDecoder
    from nmtdecode.search.processors import Processor, Processors

    from tests.helpers import random_sources, tiny_transformer

    assert isinstance(SentenceBias([4]), Processor)
    favourites = [4, 7, 9, 5, 11]

    class Biased(BatchDecoder):
        def make_processors(self, search, max_steps, prefixes=None):
            processors = super().make_processors(search, max_steps, prefixes)
            return Processors(
                [SentenceBias(self.favourites), *processors.processors], search.start_tokens, processors.rows.last_step
            )

    model = tiny_transformer(1, vocab=12, eos_bias=1.0)
    sources = random_sources(len(favourites), 12, seed=5)
    decoder = Biased(model, DecodingConfig(beam_size=beam, n_best=beam, max_length=10))
    decoder.favourites = favourites
    together = decoder.decode(sources).nbests
    alone = []
    for source, favourite in zip(sources, favourites):
        decoder.favourites = [favourite]
        alone += decoder.decode([source]).nbests
    assert [[h.tokens for h in n] for n in together] == [[h.tokens for h in n] for n in alone]
    assert all(favourite in n[0].tokens for favourite, n in zip(favourites, together))
    assert len({len(n[0].tokens) for n in together}) > 1  # sentences end at different steps: rows are dropped
