"""Batching: chunks sorted longest first, every line in one batch, token budgets counting padding."""

from nmtdecode.engine.batching import Example, cut


def examples(lengths):
    return [Example(i, "x", None if n == 0 else [7] * n) for i, n in enumerate(lengths)]


def test_batches_are_sorted_longest_first_and_cover_every_line():
    got = list(cut(examples([3, 0, 9, 1, 5, 5, 0, 2]), batch_size=3, batch_type="sents"))
    assert sorted(e.index for b in got for e in b) == list(range(8))
    decoded = [b for b in got if b[0].ids is not None]
    assert [[len(e.ids) for e in b] for b in decoded] == [[9, 5, 5], [3, 2, 1]]
    assert [e.index for e in decoded[0]] == [2, 4, 5]  # equal lengths keep input order


def test_token_batches_count_padding():
    got = list(cut(examples([10, 4, 4, 4, 4, 3]), batch_size=12, batch_type="tokens"))
    # 10 alone (a second row would make 2 x 10); then 3 rows x 4 = 12; then 4 and 3 (2 x 4 = 8)
    assert [[len(e.ids) for e in b] for b in got] == [[10], [4, 4, 4], [4, 3]]
