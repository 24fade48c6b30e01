"""search/candidates.py: top_k, the topk of long rows through block maxima, against torch.topk;
best_continuations, with each row's best first or not, against a full stable sort."""

import pytest
import torch

from nmtdecode.search import candidates
from nmtdecode.search.candidates import BLOCK, best_continuations, top_k


@pytest.mark.parametrize(
    "rows, columns, k", [(32, 30000, 10), (3, 6000, 8), (7, 12345, 10), (5, 4 * 2 * BLOCK, 2), (2, 40, 4)]
)
def test_it_is_torch_topk(rows, columns, k):
    values = torch.randn(rows, columns, generator=torch.Generator().manual_seed(columns))
    expected = values.topk(k, dim=1)
    found = top_k(values, k)
    assert torch.equal(found[0], expected.values) and torch.equal(found[1], expected.indices)


def test_the_largest_values_all_in_one_block_or_in_the_partial_last_one():
    values = torch.zeros(2, 100 * BLOCK + 7)
    values[0, 5 * BLOCK : 5 * BLOCK + 10] = torch.arange(10.0) + 1  # ten winners in one block
    values[1, -7:] = torch.arange(7.0) + 1  # the partial block holds seven of them
    values[1, 3] = 100.0
    best, columns = top_k(values, 10)
    assert columns[0].tolist() == list(range(5 * BLOCK + 9, 5 * BLOCK - 1, -1))
    assert columns[1, :8].tolist() == [3, *range(values.size(1) - 1, values.size(1) - 8, -1)]
    assert best[1, :8].tolist() == [100.0, 7, 6, 5, 4, 3, 2, 1]
    assert torch.equal(best, values.gather(1, columns))


def test_ties_give_the_same_values_and_columns_holding_them():
    values = torch.full((4, 64 * BLOCK), float("-inf"))
    values[:, ::97] = torch.randint(0, 3, values[:, ::97].shape).float()  # few distinct finite values
    best, columns = top_k(values, 10)
    assert torch.equal(best, values.topk(10, dim=1).values)
    assert torch.equal(values.gather(1, columns), best) and all(len(set(row)) == 10 for row in columns.tolist())


def test_a_view_of_longer_rows():
    values = torch.randn(6, 9000, generator=torch.Generator().manual_seed(2))[:, 1000:8000]
    assert torch.equal(top_k(values, 10)[1], values.topk(10, dim=1).indices)


def full_stable_top(logprobs, alive, n, wanted):
    """The reference best_continuations is held to: the running scores added to every log-prob,
    then a stable descending sort of each sentence's (width*V): equal totals by row, then token."""
    vocab = logprobs.size(1)
    totals, ids = (logprobs + alive[:, None]).view(n, -1).sort(dim=1, descending=True, stable=True)
    return totals[:, :wanted], ids[:, :wanted] % vocab, ids[:, :wanted] // vocab


def assert_as_the_full_sort(logprobs, alive, n, k):
    found = best_continuations(logprobs.clone(), alive, n, k, eos_id=2)
    scores, tokens, prev = full_stable_top(logprobs, alive, n, 2 * k)
    assert torch.equal(found.scores, scores)
    assert torch.equal(found.tokens, tokens) and torch.equal(found.prev, prev)


@pytest.mark.parametrize("row_first", [True, False])
@pytest.mark.parametrize("vocab", [3, 24, 300, 20 * BLOCK + 5])
@pytest.mark.parametrize("offset", [0.0, -3e7])  # -3e7: a float32 sum rounds distinct log-probs to one total
def test_best_continuations_equal_a_full_sort_ties_included(vocab, offset, row_first, monkeypatch):
    """Each row's 2k best taken before its running score is added (a large vocabulary), or the
    score added to every log-prob first: the candidates, in the order, of the full stable sort,
    when many totals are equal (few distinct values, -inf entries and rows, ties cut by a row's
    2k-th place, sums that round together)."""
    monkeypatch.setattr(candidates, "ROW_FIRST_VOCAB", 0 if row_first else vocab + 1)
    n, k = 3, 4
    generator = torch.Generator().manual_seed(vocab)
    for _ in range(20):
        logprobs = torch.randint(0, 6, (n * k, vocab), generator=generator).float() * -0.5
        logprobs[torch.rand(n * k, vocab, generator=generator) < 0.3] = float("-inf")
        alive = torch.randint(0, 3, (n * k,), generator=generator).float() * -0.5 + offset
        alive[torch.rand(n * k, generator=generator) < 0.2] = float("-inf")
        assert_as_the_full_sort(logprobs, alive, n, k)


@pytest.mark.parametrize("row_first", [True, False])
def test_distinct_scores_as_the_full_sort_gives_them(row_first, monkeypatch):
    """No ties (float32 log-probs, mostly): top_k's order is kept as it found it."""
    monkeypatch.setattr(candidates, "ROW_FIRST_VOCAB", 0 if row_first else 10**9)
    n, k, vocab = 4, 3, 40 * BLOCK
    generator = torch.Generator().manual_seed(1)
    logprobs = torch.log_softmax(torch.randn(n * k, vocab, generator=generator) * 3, dim=-1)
    alive = -torch.rand(n * k, generator=generator) * 5
    assert_as_the_full_sort(logprobs, alive, n, k)


@pytest.mark.parametrize("row_first", [True, False])
def test_a_sentence_with_fewer_candidates_than_2k_is_padded_with_impossible_eos(row_first, monkeypatch):
    monkeypatch.setattr(candidates, "ROW_FIRST_VOCAB", 0 if row_first else 4)
    logprobs = torch.log_softmax(torch.randn(2, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
    found = best_continuations(logprobs.clone(), torch.zeros(2), n=2, k=2, eos_id=1)  # width 1, V 3 < 2k
    scores, tokens, _ = full_stable_top(logprobs, torch.zeros(2), 2, 3)
    assert torch.equal(found.scores[:, :3], scores) and torch.equal(found.tokens[:, :3], tokens)
    assert found.scores[:, 3].eq(float("-inf")).all() and found.tokens[:, 3].eq(1).all()


def test_a_beam_decoding_is_the_same_with_each_rows_best_first_or_not(monkeypatch):
    """The row-first path is a speed change only: whole beam decodings (n-best lists, scores)
    are the same bit for bit whichever path chooses the candidates."""
    from nmtdecode.engine.decoding import BatchDecoder
    from nmtdecode.options.config import DecodingConfig

    from tests.helpers import random_sources, tiny_transformer

    model = tiny_transformer(3, vocab=40, eos_bias=-1.0)
    cfg = DecodingConfig(beam_size=4, n_best=4, max_length=12)
    sources = random_sources(6, 40, seed=4)
    found = {}
    for row_first in (True, False):
        monkeypatch.setattr(candidates, "ROW_FIRST_VOCAB", 0 if row_first else 10**9)
        nbests = BatchDecoder(model, cfg).decode(sources).nbests
        found[row_first] = [[(h.tokens, h.score) for h in nbest] for nbest in nbests]
    assert found[True] == found[False]
