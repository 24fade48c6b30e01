"""search/beam.py:top_k, the topk of long rows through block maxima, against torch.topk."""

import pytest
import torch

from nmtdecode.search.candidates import BLOCK, top_k


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
