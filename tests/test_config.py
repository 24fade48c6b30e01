"""Every option declared once (config.py) and layered by one rule.

The command line's flags of `translate` and `score` are checked against the declarations;
each declared range and choice list is enforced, and agrees with the module that
implements the choices; the layers (model defaults < config file < job item < command
line < API call) override each other in that order, a layer asking for a beam or for
sampling dropping the other strategy below it."""

import click
import pytest

from nmtdecode import cli
from nmtdecode.options.config import (
    COVERAGE_PENALTIES,
    FORMATS,
    GEMM_BACKENDS,
    KEY_SECTION,
    LENGTH_PENALTIES,
    OPTIONS,
    PER_JOB_KEYS,
    PLAN_OPTIONS,
    SCORE_FORMATS,
    SCORE_KEYS,
    Config,
    ConfigError,
    default_of,
)
from nmtdecode.options.plan import plan_jobs
from nmtdecode.options.option import in_range


def params(command: str) -> dict[str, click.Parameter]:
    return {p.name: p for p in cli.cli.commands[command].params}


def test_every_option_is_a_translate_flag_made_from_its_declaration():
    flags = params("translate")
    assert set(flags) == {*KEY_SECTION, *PLAN_OPTIONS, "config_file", "dump_config", "debug"}
    for key, declared in {**OPTIONS, **PLAN_OPTIONS}.items():
        flag = flags[key]
        assert f"--{key.replace('_', '-')}" in flag.opts
        assert (declared.short in flag.opts) if declared.short else len(flag.opts) == 1
        assert flag.help.startswith(declared.help)
        assert flag.multiple == declared.many and flag.default is None  # unset: the lower layers decide
        if isinstance(flag.type, click.Choice):
            assert tuple(flag.type.choices) == declared.choices and declared.aliases is None
        elif declared.choices is not None:  # other spellings are taken, then checked as ours
            assert declared.aliases is not None
        default = default_of(key) if key in KEY_SECTION else None
        assert ("[default:" in flag.help) == (default is not None or key == "output_dir")


def test_score_shares_translates_options_and_narrows_only_its_own():
    translate, score = params("translate"), params("score")
    own = {"src", "output", "format"}  # one file each; score's formats
    assert set(score) == {*SCORE_KEYS, *own, "tgt", "normalize", "config_file", "dump_config", "debug"}
    for key in SCORE_KEYS:
        assert score[key].opts == translate[key].opts and score[key].help == translate[key].help
        assert type(score[key].type) is type(translate[key].type)
    assert tuple(score["format"].type.choices) == SCORE_FORMATS and not score["src"].multiple


def test_choice_lists_are_what_their_modules_implement():
    from nmtdecode.engine.batching import Result
    from nmtdecode.models.gemm import faster_backend
    from nmtdecode.search import penalties
    from nmtdecode.search.base import Hypothesis
    from nmtdecode.jobs.writing import format_result

    assert set(LENGTH_PENALTIES) == set(penalties.LENGTH_PENALTIES)
    assert set(COVERAGE_PENALTIES) == set(penalties.COVERAGE_PENALTIES)
    measured = {faster_backend({"onednn": 1.0, "torch": 2.0}), faster_backend({"onednn": 2.0, "torch": 1.0})}
    assert set(GEMM_BACKENDS) == {"auto"} | measured
    result = Result(0, [Hypothesis([5], -1.0, -1.0, [-1.0])], ["x"])
    assert len({format_result(result, fmt) for fmt in FORMATS}) == len(FORMATS)


RANGED = sorted(key for key, declared in OPTIONS.items() if declared.range)


@pytest.mark.parametrize("key", RANGED)
def test_each_declared_range_is_enforced(key):
    """A value just outside the declared range is refused naming the key and the range; the
    nearest value inside is taken."""
    text = OPTIONS[key].range
    if text.startswith(">="):
        inside, outside = float(text[2:]), float(text[2:]) - 1
    elif text.startswith(">"):
        inside, outside = float(text[1:]) + 0.5, float(text[1:])
    else:  # an interval: the lower bound, closed or open
        low = float(text[1:].split(",")[0])
        inside, outside = (low, low - 1) if text[0] == "[" else (low + 0.5, low)
    kind = int if isinstance(default_of(key) or 0, int) and "." not in str(inside).rstrip("0").rstrip(".") else float
    values = {"beam_size": 8} if key in ("beam_groups", "n_best") else {}  # n_best and groups within the beam
    Config.from_values({**values, key: kind(inside)})
    with pytest.raises(ConfigError, match=f"^{key}: must be"):
        Config.from_values({**values, key: kind(outside)})


@pytest.mark.parametrize(
    "value, text, expected",
    [
        (0, "(0, 1]", False),
        (1, "(0, 1]", True),
        (0.5, "(0, 1]", True),
        (2**64 - 1, "[0, 2^64)", True),
        (2**64, "[0, 2^64)", False),
        (-1, ">= 0", False),
        (0, "> 0", False),
    ],
)
def test_ranges_read_as_in_mathematics(value, text, expected):
    assert in_range(value, text) is expected


def test_each_layer_overrides_the_ones_below():
    """model defaults < config file < item of jobs: < command line < API call, key by key."""
    file = {
        "beam_size": 2,
        "n_best": 2,
        "alpha": 0.5,
        "max_length": 30,
        "min_length": 1,
        "jobs": [{"src": "a.en", "output": "a.de", "beam_size": 3, "max_length": 40}],
    }
    flags = {"max_length": 50}
    [job] = plan_jobs(file, flags)
    defaults = {"beam_size": 4, "alpha": 0.7, "min_length": 3, "top_k": 9}
    effective = job.with_model_defaults(defaults)
    assert effective.decoding.beam_size == 3  # the item over the file (and the model)
    assert effective.decoding.alpha == 0.5  # the file over the model
    assert effective.decoding.max_length == 50  # the command line over the item
    assert effective.decoding.top_k == 9  # the model's, where no one else set it
    call = effective.over({"n_best": 1, "min_length": 0})  # an API call over all of them
    assert (call.decoding.n_best, call.decoding.min_length) == (1, 0)
    assert job.user_keys == {"beam_size", "n_best", "alpha", "max_length", "min_length", "src", "output"}


@pytest.mark.parametrize(
    "lower, upper, strategy",
    [
        ({"beam_size": 5, "beam_groups": 5, "diversity_penalty": 1.0}, {"sampling": True}, "sampling"),
        ({"sampling": True, "top_k": 5}, {"beam_size": 4}, "beam"),
        ({"sampling": True}, {"beam_groups": 2, "beam_size": 4, "diversity_penalty": 0.5}, "beam"),
        ({"sampling": True}, {"beam_size": 1}, "sampling"),  # one beam asks for no beam: sampling stays
        ({"beam_size": 4}, {"n_best": 2}, "beam"),
    ],
)
def test_a_layer_choosing_a_strategy_drops_the_other_from_the_layers_below(lower, upper, strategy):
    for layers, defaults in (([lower, upper], None), ([upper], lower)):  # between two user layers, over the model
        config = Config.from_layers(layers).with_model_defaults(defaults) if defaults else Config.from_layers(layers)
        decoding = config.decoding
        assert decoding.sampling == (strategy == "sampling")
        if strategy == "sampling":
            assert decoding.beam_groups == 1 and decoding.diversity_penalty == 0.0
        assert decoding.top_k == lower.get("top_k", 0)  # what is not about the strategy stays


@pytest.mark.parametrize(
    "layer, message",
    [
        ({"sampling": True, "beam_size": 4}, "beam_size: 4 with sampling"),
        ({"sampling": True, "beam_groups": 2}, "beam_groups: 2 with sampling"),
    ],
)
def test_one_layer_asking_for_both_strategies_is_refused(layer, message):
    with pytest.raises(ConfigError, match=message):
        Config.from_layers([{"n_best": 1}, layer])


def test_other_spellings_are_made_ours_in_every_layer():
    config = Config.from_layers([{"dtype": "fp16", "length_penalty": 0.6}, {"dtype": "bf16"}])
    assert config.runtime.dtype == "bfloat16"
    assert (config.decoding.length_penalty, config.decoding.alpha) == ("avg", 0.6)
    with pytest.raises(ConfigError, match="give it or alpha, not both"):
        Config.from_values({"length_penalty": 0.6, "alpha": 1.0})


def test_per_job_options_are_what_an_item_and_a_call_may_set():
    assert {"beam_size", "batch_type", "format", "prefix"} <= PER_JOB_KEYS
    assert not {"model", "device", "dtype", "quantize", "gemm", "threads"} & PER_JOB_KEYS
    with pytest.raises(ConfigError, match="item 1 sets 'device'"):
        plan_jobs({"jobs": [{"src": "a", "output": "b", "device": "cpu"}]}, {})


def test_score_reads_a_files_token_budget_as_tokens():
    """`batch_size: 4096` with `batch_type: tokens` in a shared config file is a token budget for
    score too; the file's translate-only options are checked, not used."""
    config = cli.score_config(
        {"batch_size": 4096, "batch_type": "tokens", "beam_size": 4, "format": "nbest"}, {"model": "m"}
    )
    assert (config.batching.batch_size, config.batching.batch_type) == (4096, "tokens")
    assert config.io.format == "text" and config.decoding.beam_size == 5
    with pytest.raises(ConfigError, match="unknown option 'beam'"):
        cli.score_config({"beam": 4}, {})


def test_yaml_booleans_and_numbers_are_coerced():
    config = Config.from_values({"early_stopping": True, "alpha": 1, "beam_size": 3})
    assert config.decoding.early_stopping == "true"
    assert config.decoding.alpha == 1.0 and isinstance(config.decoding.alpha, float)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"min_length": 11, "max_length": 10}, "min_length: 11 is greater than max_length"),
        ({"batch_type": "words"}, "batch_type: 'words' is not one of sents, tokens"),
        ({"device": "tpu"}, "device: 'tpu' is not one of"),
        ({"alpha": "high"}, "alpha: expected float"),
        ({"beam_size": True}, "beam_size: expected int"),
    ],
)
def test_invalid_values_name_the_key(values, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        Config.from_values(values)


def test_model_defaults_fill_only_what_the_user_left_unset():
    config = Config.from_values({"beam_size": 2})
    merged = config.with_model_defaults({"beam_size": 6, "max_length": 40, "early_stopping": True})
    assert merged.decoding.beam_size == 2  # the user's value wins
    assert merged.decoding.max_length == 40
    assert merged.decoding.early_stopping == "true"


@pytest.mark.parametrize(
    "text, message",
    [
        ("beam_size: 4\nalpha: 1\nbeam_size: 5\n", "job.yaml:3: 'beam_size' is given twice"),
        ("beam-size: 4\nbeam_size: 5\n", "'beam_size' is given twice (spelt with - and with _)"),
        ("jobs:\n  - {src: a, output: b, n_best: 1, n-best: 2}\n", "item 1: 'n_best' is given twice"),
    ],
)
def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path, cli, text, message):
    """As on the command line, a repeated option is an error, not the last one winning."""
    path = tmp_path / "job.yaml"
    path.write_text(text)
    run = cli("translate", "-c", path, text=True)
    assert run.returncode == 2 and message in run.stderr and run.stderr.count("\n") == 1
