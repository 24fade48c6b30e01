"""Where an option is checked: the rules between options (options/rules.py) and what each way in
refuses (options/entries.py), all checked by `Config.validate(entry)` before any model loads.

Each message itself is pinned where its behaviour is tested (test_config.py, test_api.py,
test_bad_requests.py, test_peer_habits.py, test_beam_dump.py, test_ranks.py); these tests pin
that the data is whole and that the one step runs first, whoever calls."""

import inspect

import pytest

import nmtdecode
from nmtdecode.jobs.scoring import score_job
from nmtdecode.options.config import OPTIONS, Config, ConfigError, DecodingConfig
from nmtdecode.options.entries import ENTRIES, check_given
from nmtdecode.options.rules import RULES


def all_rules():
    return [*RULES, *(rule for entry in ENTRIES.values() for rule in entry.rules)]


def test_every_rule_is_about_a_declared_option():
    assert [rule.key for rule in all_rules() if rule.key not in OPTIONS] == []


def test_every_entry_names_only_declared_options():
    for name, entry in ENTRIES.items():
        assert entry.takes is None or entry.takes <= set(OPTIONS), name
        assert set(entry.refused) <= set(OPTIONS), name


def test_every_api_method_taking_options_is_an_entry():
    """A method of the Python API given **options checks them as its entry says (api.py)."""
    methods = [
        f"{name}()"
        for name, method in inspect.getmembers(nmtdecode.Translator, inspect.isfunction)
        if not name.startswith("_")
        and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in inspect.signature(method).parameters.values())
    ]
    assert len(methods) >= 7  # translate, translate_batch, translate_iterable, generate_tokens, ...
    assert [m for m in methods if m not in ENTRIES] == []
    assert "load()" in ENTRIES  # a classmethod


def test_a_rule_runs_with_the_section_of_the_option_it_names():
    """DecodingConfig(...).validate() checks the decoding rules alone; a whole config checks all."""
    with pytest.raises(ConfigError, match="^n_best: 3 is greater than beam_size"):
        DecodingConfig(n_best=3, beam_size=2).validate()
    Config.from_values({"n_best": 3, "beam_size": 3}).validate()  # no entry: text may hold it (--dump-config)
    with pytest.raises(ConfigError, match="^n_best: 3 hypotheses do not fit --format text"):
        Config.from_values({"n_best": 3, "beam_size": 3}).validate("translate")


@pytest.mark.parametrize(
    "entry, given, message",
    [
        # the entry's refusal comes first: not "prefix: expected str", what the value alone would say
        ("translate()", {"prefix": ["a"]}, r"^prefix: translate\(\) takes its prefixes as a list"),
        ("score()", {"device": "tpu"}, r"^device: is fixed when the model loads: give it to Translator.load\(\)$"),
        ("score()", {"beem_size": 2}, "^beem_size: is not an option$"),
        ("load()", {"output": "o", "model": "m"}, r"^model: not an option of load\(\)"),
        ("jobs: item", {"src": "a", "gemm": "torch"}, "^jobs: item 4 sets 'gemm', which cannot differ"),
    ],
)
def test_an_entry_refuses_keys_of_its_own_layer_saying_why(entry, given, message):
    with pytest.raises(ConfigError, match=message):
        check_given(entry, given, item=4)


def test_each_entry_takes_what_it_does_not_refuse():
    check_given("translate_file()", {"prefix": "p.txt", "beam_size": 2})  # a file: translate_file's own
    check_given("load()", {"device": "cpu", "beam_size": 2})
    check_given("jobs: item", {"src": "a", "output": "b", "beam_size": 2}, item=1)


def test_score_checks_its_options_before_any_file_or_model(tmp_path):
    """The input and the model do not exist: the option error is told first (exit code 2)."""
    config = Config.from_values(
        {"model": str(tmp_path / "none"), "src": str(tmp_path / "none.en"), "format": "nbest", "output": "-"}
    )
    with pytest.raises(ConfigError, match="^format: score writes text or jsonl, not nbest$"):
        score_job(config, str(tmp_path / "none.de"))
