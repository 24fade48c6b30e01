"""The benchmark's choice of rows (bench/run.py): a row asked for brings the rows it is compared
with, down the chain, so that every ratio it prints has its reference measured."""

import sys

from tests.helpers import REPO

sys.path.insert(0, str(REPO / "bench"))
import run  # noqa: E402


def test_a_row_brings_the_rows_it_is_compared_with_down_the_chain():
    chosen = [row[0] for row in run.only(run.BIG_ROWS, "ctranslate2 int8")]
    # ctranslate2 int8 -> nmtdecode int8 (converted) -> nmtdecode int8 -> nmtdecode
    assert chosen == ["nmtdecode", "nmtdecode int8", "nmtdecode int8 (converted)", "ctranslate2 int8"]
    labels = {row[0] for row in run.BIG_ROWS}
    for rows in (run.COMPARED, run.BIG_ROWS, run.OPENNMT_ROWS):
        for label, _, _, _ in rows:
            picked = run.only(rows, label)
            references = {reference for _, _, _, reference in picked if reference}
            assert references <= {row[0] for row in picked}, label
    assert run.only(run.BIG_ROWS, "") == run.BIG_ROWS and "nmtdecode int8 (converted)" in labels
