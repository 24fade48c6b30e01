"""The command line of --alignment, --coverage-penalty, --repetition-penalty: JSONL shape, refusals.
(Their warnings when they have no effect: test_peer_habits.py.)"""

import json

import pytest

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.loading import load_model

LINES = ["the house is red .", "a dog and a cat sleep in the garden . where is the station ?"]


def test_jsonl_alignment_and_token_scores_have_one_entry_per_token(model_dir, cli):
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--beam-size",
        3,
        "--n-best",
        2,
        "--format",
        "jsonl",
        "--alignment",
        "--token-scores",
        "--coverage-penalty",
        "wu",
        "--beta",
        0.2,
        "-q",
        stdin="".join(line + "\n" for line in LINES),
        text=True,
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr
    loaded = load_model(str(model_dir))
    cfg = DecodingConfig(beam_size=3, n_best=2, coverage_penalty="wu", beta=0.2, alignment=True)
    sources = [loaded.tokenizer.encode(line) for line in LINES]
    expected = BatchDecoder(loaded.model, cfg, loaded.rules).decode(sources).nbests
    for record, source, hyps in zip(map(json.loads, run.stdout.splitlines()), sources, expected):
        for entry, hyp in zip(record["hypotheses"], hyps):
            assert len(entry["tokens"]) == len(entry["token_scores"]) == len(entry["alignment"])
            assert entry["tokens"] == hyp.tokens and entry["alignment"] == hyp.alignment
            assert all(0 <= position < len(source) for position in entry["alignment"])
            assert entry["score"] == pytest.approx(hyp.score, abs=1e-5)


def test_alignment_of_a_cut_source_points_into_the_kept_tokens(model_dir, cli):
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--format",
        "jsonl",
        "--alignment",
        "--max-src-length",
        4,
        "--max-length",
        8,
        "-q",
        stdin=LINES[1] + "\n",
        text=True,
    )
    assert run.returncode == 0
    [hyp] = json.loads(run.stdout)["hypotheses"]
    assert "token_scores" not in hyp and len(hyp["alignment"]) == len(hyp["tokens"])
    assert all(0 <= position < 4 for position in hyp["alignment"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--repetition-penalty", "0"], "repetition_penalty: must be > 0"),
        (["--coverage-penalty", "gnmt"], "'gnmt' is not one of 'none', 'wu', 'summary'"),
        (["--beta", "-1", "--coverage-penalty", "wu"], "beta: must be >= 0"),
    ],
)
def test_invalid_values_are_refused(model_dir, args, message, cli):
    run = cli("translate", "--model", model_dir, *args, stdin="good morning\n", text=True)
    assert run.returncode == 2 and message in run.stderr, run.stderr


def test_repetition_penalty_from_yaml_changes_the_output(model_dir, tmp_path, cli):
    config = tmp_path / "job.yaml"
    config.write_text("repetition_penalty: 5.0\nbeam_size: 2\n")
    plain = cli("translate", "--model", model_dir, "--beam-size", 2, "-q", stdin=LINES[1] + "\n", text=True)
    penalised = cli("translate", "-c", config, "--model", model_dir, "-q", stdin=LINES[1] + "\n", text=True)
    assert plain.returncode == penalised.returncode == 0
    assert plain.stdout != penalised.stdout


def test_yaml_coverage_penalty_is_checked_by_name(model_dir, tmp_path, cli):
    config = tmp_path / "job.yaml"
    config.write_text("coverage_penalty: gnmt\n")
    run = cli("translate", "-c", config, "--model", model_dir, stdin="good morning\n", text=True)
    assert run.returncode == 2 and "coverage_penalty: 'gnmt' is not one of none, wu, summary" in run.stderr


def test_jsonl_attention_rows_span_each_source(model_dir, cli):
    """--attention: one row per token, each as long as that line's source tokens (EOS included),
    summing to 1; an empty line gets empty arrays like its empty hypotheses."""
    loaded = load_model(str(model_dir))
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--format",
        "jsonl",
        "--attention",
        "--alignment",
        "-q",
        "--max-length",
        8,
        stdin="".join(line + "\n" for line in [LINES[0], "", LINES[1]]),
        text=True,
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr
    records = [json.loads(line) for line in run.stdout.splitlines()]
    assert records[1]["hypotheses"][0]["attention"] == records[1]["hypotheses"][0]["alignment"] == []
    for record, line in zip([records[0], records[2]], [LINES[0], LINES[1]]):
        [hyp] = record["hypotheses"]
        source_length = len(loaded.tokenizer.encode(line))
        assert len(hyp["attention"]) == len(hyp["tokens"]) == len(hyp["alignment"])
        for row, position in zip(hyp["attention"], hyp["alignment"]):
            assert len(row) == source_length and sum(row) == pytest.approx(1.0, abs=1e-5)
            assert row.index(max(row)) == position
