"""The command line, end to end: in this process (the `cli` fixture), and once as `python -m nmtdecode`."""

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.loading import load_model

LINES = [
    "the house is red .",
    "",
    "a dog and a cat sleep in the garden .",
    "   ",
    "good morning",
    "thank you",
    "where is the station ?",
    "water",
]


@pytest.fixture()
def src_file(lines_file):
    return lines_file(LINES, "input.txt")


@pytest.mark.parametrize("quiet", ["-q", "--quiet"])
def test_quiet_short_and_long_silence_the_summary(model_dir, src_file, cli, quiet):
    """The README's option table names -q; flags with a --no- form keep their short names."""
    loud = cli("translate", "--model", model_dir, "--src", src_file, "--max-length", 8, text=True)
    run = cli("translate", "--model", model_dir, "--src", src_file, "--max-length", 8, quiet, text=True)
    assert loud.returncode == run.returncode == 0, run.stderr
    assert "sentences" in loud.stderr and run.stderr == "" and run.stdout == loud.stdout


def test_text_output_one_line_per_input_line(model_dir, src_file, cli):
    run = cli("translate", "--model", model_dir, "--src", src_file, "--max-length", 8, "--quiet", text=True)
    assert run.returncode == 0, run.stderr
    out = run.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(LINES)
    assert out[1] == "" and out[3] == ""  # empty and blank lines stay empty, in place
    assert all(out[i] for i in (0, 2, 4, 5, 6, 7))  # the model (EOS-biased) still says something


def test_config_file_with_override_and_formats_agree(model_dir, src_file, tmp_path, cli):
    config = tmp_path / "job.yaml"
    config.write_text(
        yaml.safe_dump(
            {"model": str(model_dir), "beam-size": 4, "n_best": 3, "format": "jsonl", "max_length": 8, "quiet": True}
        )
    )
    outputs = {}
    for fmt in ("text", "nbest", "jsonl"):  # text keeps the 1-best of the 3 (the 3 go to the dump)
        dump = ["--dump-beam", tmp_path / "beams.jsonl"] if fmt == "text" else []
        run = cli("translate", "-c", config, "--src", src_file, "--format", fmt, *dump, text=True)
        assert run.returncode == 0, run.stderr
        outputs[fmt] = run.stdout.splitlines()
    text, nbest, jsonl = outputs["text"], outputs["nbest"], [json.loads(line) for line in outputs["jsonl"]]
    assert len(text) == len(jsonl) == len(LINES)
    assert [r["index"] for r in jsonl] == list(range(len(LINES)))
    parsed = [line.split(" ||| ") for line in nbest]
    assert all(len(p) == 3 for p in parsed)
    decoded = [i for i, line in enumerate(LINES) if line.strip()]
    assert sorted({int(p[0]) for p in parsed}) == list(range(len(LINES)))
    for i in decoded:
        entries = [p for p in parsed if int(p[0]) == i]
        assert len(entries) == 3 == len(jsonl[i]["hypotheses"])  # n_best from the file
        assert [e[1] for e in entries] == [h["text"] for h in jsonl[i]["hypotheses"]]
        assert [float(e[2]) for e in entries] == pytest.approx([h["score"] for h in jsonl[i]["hypotheses"]], abs=1e-5)
        assert text[i] == entries[0][1]


def test_cli_matches_library(model_dir, src_file, cli):
    loaded = load_model(str(model_dir))
    cfg = DecodingConfig(beam_size=3)
    expected = BatchDecoder(loaded.model, cfg, loaded.rules).decode([loaded.tokenizer.encode(LINES[0])]).nbests
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--beam-size",
        3,
        "--format",
        "jsonl",
        "--token-scores",
        "--quiet",
        stdin=LINES[0] + "\n",
        text=True,
    )
    assert run.returncode == 0, run.stderr
    [record] = [json.loads(line) for line in run.stdout.splitlines()]
    assert record["hypotheses"][0]["tokens"] == expected[0][0].tokens
    best = record["hypotheses"][0]
    assert len(best["token_scores"]) == len(best["tokens"])  # EOS's log-prob is eos_score (null if cut)
    assert sum(best["token_scores"]) + (best["eos_score"] or 0.0) == pytest.approx(best["log_prob"])
    assert best["eos_score"] == (pytest.approx(expected[0][0].eos_score) if best["ended"] else None)


def test_output_file_and_summary(model_dir, src_file, tmp_path, cli):
    out = tmp_path / "out.txt"
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        src_file,
        "--output",
        out,
        "--beam-size",
        2,
        "--max-length",
        8,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert len(out.read_text(encoding="utf-8").splitlines()) == len(LINES)
    assert not (tmp_path / "out.txt.tmp").exists()
    assert f"{len(LINES)} sentences" in run.stderr and "tokens/s" in run.stderr


@pytest.mark.parametrize(
    "content, message",
    [
        ({"beam_sise": 4}, "unknown option 'beam_sise'"),
        ({"debug": True}, "unknown option 'debug'"),  # --debug is for the command line only
        ({"beam_size": 0}, "beam_size: must be >= 1"),
        ({"beam_size": "five"}, "beam_size: expected int"),
        ({"length_penalty": "log"}, "length_penalty: 'log' is not one of none, avg, wu"),
        ({"n_best": 6, "beam_size": 5}, "n_best: 6 is greater than beam_size (5)"),
    ],
)
def test_bad_config_exits_2_before_loading(content, message, tmp_path, cli):
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump({"model": str(tmp_path / "does-not-exist"), **content}))
    run = cli("translate", "-c", config, stdin="", text=True)
    assert run.returncode == 2
    assert message in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "content, where, message",
    [
        ("beam_size: [1\n", ":2:1: not valid YAML: expected ',' or ']'", None),
        ("model: x\n  foo: [\n", ":2:6: not valid YAML: mapping values are not allowed here", None),
        ("beam_size: 4\nbeam_sise: 4\n", ":2: unknown option 'beam_sise' (did you mean beam_size", None),
        (
            "beam_size: 4\njobs:\n  - src: a\n    output: b\n  - src: c\n    outptu: d\n",
            ":6: jobs: item 2: unknown option 'outptu' (did you mean output",
            "cannot differ",
        ),
    ],
)
def test_config_file_mistakes_are_one_line_naming_file_and_line(content, where, message, tmp_path, cli):
    config = tmp_path / "job.yaml"
    config.write_text(content)
    run = cli("translate", "-c", config, stdin="", text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert f"config file {config}{where}" in run.stderr and len(run.stderr) < 200, run.stderr
    assert message is None or message not in run.stderr


def test_invalid_yaml_and_missing_model_exit_2(tmp_path, cli):
    config = tmp_path / "broken.yaml"
    config.write_text("beam_size: [1\n")
    run = cli("translate", "-c", config, stdin="", text=True)
    assert run.returncode == 2 and "not valid YAML" in run.stderr
    run = cli("translate", "--model", tmp_path / "nope", stdin="hello\n", text=True)
    assert run.returncode == 2 and "does not exist" in run.stderr


def test_bad_flag_value_exits_2(model_dir, cli):
    run = cli("translate", "--model", model_dir, "--early-stopping", "maybe", stdin="", text=True)
    assert run.returncode == 2 and "maybe" in run.stderr


def test_inspect(model_dir, cli):
    run = cli("inspect", model_dir, text=True)
    assert run.returncode == 0, run.stderr
    assert "format:        native" in run.stdout
    assert "vocabulary:    source 48, target 48" in run.stdout


def test_score_matches_library(model_dir, tmp_path, cli):
    src, tgt = tmp_path / "s.txt", tmp_path / "t.txt"
    src.write_text("the house is red .\ngood morning\n")
    tgt.write_text("a dog .\nthank you\n")
    run = cli("score", "--model", model_dir, "--src", src, "--tgt", tgt, text=True)
    assert run.returncode == 0, run.stderr
    loaded = load_model(str(model_dir))
    translator = BatchDecoder(loaded.model, DecodingConfig())
    expected = translator.score(
        [loaded.tokenizer.encode(s) for s in ("the house is red .", "good morning")],
        [loaded.tokenizer.encode_target(t) for t in ("a dog .", "thank you")],
    )
    assert [float(x) for x in run.stdout.split()] == pytest.approx(expected, abs=1e-5)


@pytest.mark.subprocess
def test_python_m_nmtdecode_gives_what_the_in_process_run_gives(model_dir, cli):
    """Smoke test of the program itself: `python -m nmtdecode translate` as a real process."""
    args = ["translate", "--model", str(model_dir), "--beam-size", "2", "--quiet"]
    stdin = "\n".join(LINES) + "\n"
    process = subprocess.run(
        [sys.executable, "-m", "nmtdecode", *args], input=stdin, capture_output=True, text=True, timeout=300
    )
    assert process.returncode == 0, process.stderr
    assert len(process.stdout.splitlines()) == len(LINES)
    assert process.stdout == cli(*args, stdin=stdin, text=True).stdout


@pytest.mark.parametrize("fmt", ["nbest", "jsonl"])
@pytest.mark.parametrize("beam, n_best, max_length", [(4, 3, 20), (48, 48, 1)])
def test_n_best_entries_for_every_line_blank_ones_included(model_dir, src_file, cli, fmt, beam, n_best, max_length):
    """n_best entries per input line: blank lines give empty hypotheses (score 0); a sentence with
    fewer reachable hypotheses (beam = vocabulary, banned tokens) is filled with impossible ones."""
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        src_file,
        "--format",
        fmt,
        "--quiet",
        "--beam-size",
        beam,
        "--n-best",
        n_best,
        "--max-length",
        max_length,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    if fmt == "nbest":
        indices = [int(line.split(" ||| ")[0]) for line in run.stdout.splitlines()]
        assert indices == [i for i in range(len(LINES)) for _ in range(n_best)]
        blank = [line for line in run.stdout.splitlines() if line.startswith("1 ||| ")]
        assert blank == ["1 |||  ||| 0.000000"] * n_best
    else:
        records = [json.loads(line) for line in run.stdout.splitlines()]
        assert [len(r["hypotheses"]) for r in records] == [n_best] * len(LINES)
        assert records[3]["hypotheses"] == [{"text": "", "score": 0.0, "log_prob": 0.0, "ended": True}] * n_best


def test_nbest_marian_fields_are_log_prob_and_ranking_score(model_dir, src_file, cli):
    """Marian's 4-field n-best: INDEX ||| TEXT ||| F0= TOTAL_LOG_PROB ||| RANKING_SCORE."""
    common = [
        "translate",
        "--model",
        model_dir,
        "--src",
        src_file,
        "--quiet",
        "--beam-size",
        3,
        "--n-best",
        2,
        "--max-length",
        8,
    ]
    marian = cli(*common, "--format", "nbest-marian", text=True)
    jsonl = cli(*common, "--format", "jsonl", text=True)
    assert marian.returncode == 0, marian.stderr
    records = [json.loads(line) for line in jsonl.stdout.splitlines()]
    rows = [line.split(" ||| ") for line in marian.stdout.splitlines()]
    assert len(rows) == 2 * len(LINES) and all(len(row) == 4 for row in rows)
    hyps = [h for r in records for h in r["hypotheses"]]
    assert [int(row[0]) for row in rows] == [r["index"] for r in records for _ in r["hypotheses"]]
    assert [row[1] for row in rows] == [h["text"] for h in hyps]
    assert all(row[2].startswith("F0= ") for row in rows)
    assert [float(row[2][4:]) for row in rows] == pytest.approx([h["log_prob"] for h in hyps], abs=1e-5)
    assert [float(row[3]) for row in rows] == pytest.approx([h["score"] for h in hyps], abs=1e-5)
    assert rows[2] == ["1", "", "F0= 0.000000", "0.000000"]  # the empty line


def test_nbest_marian_word_scores_are_each_tokens_log_prob_then_eos(model_dir, src_file, cli):
    """--token-scores in Marian's n-best (its --word-scores): a WordScores field after the
    hypothesis, one log-prob per target token and the final EOS's (5 decimals, as Marian), which
    add up to F0; JSONL has the same numbers as token_scores and eos_score."""
    common = [
        "translate",
        "--model",
        model_dir,
        "--src",
        src_file,
        "--quiet",
        "--beam-size",
        3,
        "--n-best",
        2,
        "--max-length",
        8,
        "--token-scores",
    ]
    marian = cli(*common, "--format", "nbest-marian", text=True)
    jsonl = cli(*common, "--format", "jsonl", text=True)
    assert marian.returncode == 0 and marian.stderr == "", marian.stderr
    hyps = [h for line in jsonl.stdout.splitlines() for h in json.loads(line)["hypotheses"]]
    rows = [line.split(" ||| ") for line in marian.stdout.splitlines()]
    assert len(rows) == len(hyps) and all(len(row) == 5 and row[2].startswith("WordScores=") for row in rows)
    for row, hyp in zip(rows, hyps):
        words = [float(x) for x in row[2].split()[1:]]
        expected = hyp["token_scores"] + ([hyp["eos_score"]] if hyp["ended"] and hyp["eos_score"] is not None else [])
        assert words == pytest.approx(expected, abs=6e-6)
        assert all(len(x.split(".")[1]) == 5 for x in row[2].split()[1:])
        assert sum(words) == pytest.approx(float(row[3][4:]), abs=1e-4)


@pytest.mark.subprocess
def test_path_errors_fail_before_torch_is_imported(tmp_path, model_dir):
    """A wrong model path, a model whose config or weight file's header is broken, an input that
    cannot be read or an output that cannot be created fails before torch loads (which takes 1-2.5 s
    of every process): seen by what the process imported."""
    lines = tmp_path / "in.txt"
    lines.write_text("hello\n", encoding="utf-8")
    broken_config, broken_header = tmp_path / "broken-config", tmp_path / "broken-header"
    for broken in (broken_config, broken_header):
        shutil.copytree(model_dir, broken)
    (broken_config / "config.yaml").write_text("model: [\n", encoding="utf-8")
    weights = (broken_header / "model.safetensors").read_bytes()
    (broken_header / "model.safetensors").write_bytes(weights[:8] + b"{not json" + weights[17:])
    cases = [
        ["translate", "--model", str(broken_config), "--src", str(lines)],
        ["translate", "--model", str(broken_header), "--src", str(lines)],
        ["translate", "--model", str(tmp_path / "missing"), "--src", str(lines)],
        ["translate", "--model", str(lines), "--src", str(lines)],  # a file, not a model
        ["translate", "--model", str(model_dir), "--src", str(tmp_path / "missing.en")],
        ["translate", "--model", str(model_dir), "--src", str(lines), "--output", str(tmp_path / "no" / "o.de")],
        ["score", "--model", str(tmp_path / "missing"), "--src", str(lines), "--tgt", str(lines)],
        ["score", "--model", str(model_dir), "--src", str(lines), "--tgt", str(tmp_path / "missing.de")],
    ]
    code = (
        "import json, sys\nfrom nmtdecode.cli import run\n"
        "codes = [run(args) for args in json.loads(sys.argv[1])]\n"
        "print(json.dumps([codes, 'torch' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code, json.dumps(cases)], capture_output=True, text=True, timeout=60)
    codes, torch_loaded = json.loads(done.stdout.splitlines()[-1])
    assert 0 not in codes and done.stderr.count("nmtdecode: error:") == len(cases), done.stderr
    assert not torch_loaded


def test_help_texts_say_what_the_options_take(cli):
    """score's --src is required, so shows no default; --prefix and the score files take a FILE."""
    score = cli("score", "--help", text=True).stdout
    src = score[score.index("--src") : score.index("--output")]
    assert "FILE" in src and "[required]" in src and "default" not in src
    assert "-t, --tgt FILE" in score and "-o, --output FILE" in score
    assert "--prefix FILE" in cli("translate", "--help", text=True).stdout
    show = cli("show", "--help", text=True).stdout
    assert "required" not in show and "DUMP with .html" in " ".join(show.split())


def test_the_device_search_refusal_is_told_with_the_jobs_notes(cli, model_dir):
    """--search-on device with an option the device search does not hold: one warning, told after
    the job's notes about options without effect (the resolved job's decoder adds it to them),
    and the host search's output."""
    args = ["translate", "--model", model_dir, "--max-length", 6, "--beam-size", 4, "--beam-groups", 2]
    args += ["--diversity-penalty", 0.5, "--beta", 0.5, "-q"]
    run = cli(*args, "--search-on", "device", stdin="the house\n", text=True)
    warnings = run.stderr.splitlines()
    assert run.returncode == 0 and len(warnings) == 2, run.stderr
    assert warnings[0].startswith("nmtdecode: warning: beta: 0.5 has no effect")
    assert warnings[1].startswith("nmtdecode: warning: the search runs on the host") and "--beam-groups" in warnings[1]
    assert run.stdout == cli(*args, stdin="the house\n", text=True).stdout
