"""CTranslate2's rule resolved to one of the stop rules, as its src/decoding.cc decides: the top
beam only without a length or coverage penalty, beam_size ended hypotheses with one, and
ended slots refilled whatever trained the model."""

import pytest

from nmtdecode.search.stop_rules import STOP_RULES, beam_rule


@pytest.mark.parametrize(
    "early_stopping, opennmt, penalised, expected",
    [
        ("ctranslate2", False, False, ("top", False)),
        ("ctranslate2", True, False, ("top", False)),
        ("ctranslate2", False, True, ("true", False)),
        ("ctranslate2", True, True, ("true", False)),
        ("top", True, True, ("top", True)),
        ("false", False, True, ("false", False)),
        ("never", True, False, ("never", True)),
    ],
)
def test_ctranslate2_is_top_unpenalised_and_true_penalised(early_stopping, opennmt, penalised, expected):
    assert beam_rule(early_stopping, opennmt, penalised) == expected
    assert expected[0] in STOP_RULES
