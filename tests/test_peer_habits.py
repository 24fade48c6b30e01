"""Habits users bring from other tools: their spellings, one-line usage errors, warnings for
options that do nothing, and `--dump-config`."""

import shutil

import pytest
import yaml


def dumped(run) -> dict:
    assert run.returncode == 0, run.stderr
    return yaml.safe_load(run.stdout)


@pytest.mark.parametrize(
    "args, names",
    [
        (["translate", "--bogus"], "--bogus"),
        (["translate", "--beam-size", "x"], "--beam-size"),
        (["translate", "--format", "xml"], "xml"),
        (["bogus"], "bogus"),
        (["score", "--src", "a"], "--model"),
    ],
)
def test_usage_errors_are_one_line(args, names, cli):
    run = cli(*args, text=True)
    assert run.returncode == 2
    assert run.stderr.startswith("nmtdecode: error: ") and run.stderr.count("\n") == 1, run.stderr
    assert names in run.stderr and "Usage:" not in run.stderr


@pytest.mark.parametrize(
    "args, ours",
    [
        (["--gpu", "0"], "--device cuda:N"),
        (["--cpu"], "--device cpu"),
        (["--max-tokens", "4000"], "--batch-type tokens"),
        (["--max-tokens=4000"], "--batch-type tokens"),
        (["--nbest", "3"], "--n-best"),
        (["--num-hypotheses", "3"], "--n-best"),
        (["--compute-type", "int8"], "--quantize int8"),
        (["--print-alignment"], "--report-align"),
        (["--num-beams", "4"], "--beam-size"),
        (["--alignment", "hard"], "--report-align"),
        (["--models", "a", "b"], "--model PATH (several models decode as an ensemble)"),
    ],
)
def test_other_tools_double_dash_flags_name_ours(args, ours, cli):
    run = cli("translate", "--model", "m", *args, text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert ours in run.stderr and args[0].split("=")[0] in run.stderr and "Did you mean" not in run.stderr


@pytest.mark.parametrize(
    "args, whose, ours",
    [
        (["--fp16"], "fairseq", "--dtype float16"),
        (["-fp16"], "fairseq", "--dtype float16"),
        (["-beam", "5"], "fairseq", "--beam-size K"),
        (["-nbest", "3"], "fairseq", "--n-best N"),
        (["-tgt", "ref.de"], "OpenNMT-py", "nmtdecode score --tgt FILE"),
        (["-verbose"], "OpenNMT-py", "--format nbest or jsonl"),
        (["--verbose"], "OpenNMT-py", "--format nbest or jsonl"),
        (["--beam_size", "5"], "OpenNMT-py", "--beam-size"),
        (["--n_best=2"], "OpenNMT-py", "--n-best"),
        (["--max_batch_size", "8"], "CTranslate2", "--batch-size N"),
        (["--word-scores"], "Marian", "--token-scores"),
        (["-b", "6"], "Marian", "--beam-size"),
    ],
)
def test_peer_spellings_are_one_line_naming_whose_and_ours(args, whose, ours, cli):
    """Each is read as something else by click (`-fp16` as -f p16, `-beam` as -b eam) or, for
    Marian's `-b` (its beam size), would once have set our batch size: one line saying whose it
    is and what ours is."""
    for command in (["translate", "--model", "m"], ["score", "--model", "m", "--src", "a", "--tgt", "b"]):
        if command[0] == "score" and args[0] in ("-tgt", "--word-scores", "--beam_size", "--n_best=2"):
            continue  # score has --tgt, and no search or output options
        run = cli(*command, *args, text=True)
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert f"{whose}'s" in run.stderr and ours in run.stderr and args[0].split("=")[0] in run.stderr


def test_score_takes_tgt_with_two_dashes(cli):
    run = cli("score", "--model", "m", "--src", "a", "-tgt", "b", text=True)
    assert run.returncode == 2 and "nmtdecode's is --tgt" in run.stderr


def test_every_foreign_key_of_a_yaml_file_is_named_in_one_error(tmp_path, cli):
    """An onmt_translate YAML with five keys that are not ours fails once, naming all five with
    their lines, not one per run."""
    config = tmp_path / "onmt.yaml"
    config.write_text(
        "beam_size: 5\ngpu: 0\nverbose: true\nreplace_unk: true\nrandom_sampling_topk: 10\n"
        "tgt: ref.de\nlog_file: x.log\n"
    )
    run = cli("translate", "-c", config, "--dump-config", text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(f"nmtdecode: error: config file {config}: 5 unknown options: (1) line 2: ")
    for n, (line, key, ours) in enumerate(
        [
            (2, "gpu", "device"),
            (3, "verbose", "no equivalent"),
            (5, "random_sampling_topk", "top_k"),
            (6, "tgt", "no equivalent"),
            (7, "log_file", "no equivalent"),
        ],
        1,
    ):
        assert f"({n}) line {line}: unknown option '{key}'" in run.stderr and ours in run.stderr


@pytest.mark.parametrize(
    "args, ours",
    [
        (["-beam_size", "5"], "--beam-size"),
        (["-src", "in.txt"], "--src"),
        (["-n_best", "2"], "--n-best"),
        (["-gpu", "0"], "--device cuda:N"),
        (["-replace_unk"], "--replace-unk"),
        (["-report_align"], "--report-align"),
    ],
)
def test_opennmt_single_dash_options_name_ours(args, ours, cli):
    run = cli("translate", "--model", "m", *args, text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert ours in run.stderr and args[0] in run.stderr


@pytest.mark.parametrize(
    "spelling, dtype",
    [
        ("fp16", "float16"),
        ("half", "float16"),
        ("bf16", "bfloat16"),
        ("BF16", "bfloat16"),
        ("fp32", "float32"),
        ("float", "float32"),
        ("bfloat16", "bfloat16"),
    ],
)
def test_dtype_spellings_of_other_tools(spelling, dtype, tmp_path, cli):
    assert dumped(cli("translate", "--dtype", spelling, "--dump-config", text=True))["dtype"] == dtype
    config = tmp_path / "job.yaml"
    config.write_text(f"dtype: {spelling}\n")
    assert dumped(cli("translate", "-c", config, "--dump-config", text=True))["dtype"] == dtype


def test_unknown_dtype_lists_the_spellings(cli):
    run = cli("translate", "--dtype", "fp8", "--dump-config", text=True)
    assert run.returncode == 2 and "dtype: 'fp8' is not one of float32 (fp32, float)" in run.stderr


def test_numeric_length_penalty_is_avg_with_that_alpha(model_dir, cli):
    values = dumped(cli("translate", "--length-penalty", "0.6", "--dump-config", text=True))
    assert (values["length_penalty"], values["alpha"]) == ("avg", 0.6)
    common = ["translate", "--model", model_dir, "--format", "nbest", "--n-best", "3", "--beam-size", "4", "-q"]
    stdin = "the house is red .\ngood morning\n"
    numeric = cli(*common, "--length-penalty", "0.6", stdin=stdin, text=True)
    named = cli(*common, "--length-penalty", "avg", "--alpha", "0.6", stdin=stdin, text=True)
    default = cli(*common, stdin=stdin, text=True)
    assert numeric.returncode == 0, numeric.stderr
    assert numeric.stdout == named.stdout != default.stdout


def test_numeric_length_penalty_layers(tmp_path, cli):
    """In YAML too; a flag overrides the file's alpha; a number and alpha in one layer conflict."""
    config = tmp_path / "job.yaml"
    config.write_text("length_penalty: 0.6\n")
    assert dumped(cli("translate", "-c", config, "--alpha", "2", "--dump-config", text=True))["alpha"] == 2.0
    config.write_text("alpha: 2\nlength_penalty: wu\n")
    values = dumped(cli("translate", "-c", config, "--length-penalty", "0.6", "--dump-config", text=True))
    assert (values["length_penalty"], values["alpha"]) == ("avg", 0.6)
    run = cli("translate", "--length-penalty", "0.6", "--alpha", "1", "--dump-config", text=True)
    assert run.returncode == 2 and "give it or alpha, not both" in run.stderr


@pytest.mark.parametrize(
    "args, warning",
    [
        (["--token-scores"], "token_scores: has no effect with --format text"),
        (["--token-scores", "--format", "nbest"], "token_scores: has no effect with --format nbest"),
        (["--max-length", "500"], "max_length: 500 is above the model's 128 target positions"),
        (["--diversity-penalty", "0.5"], "diversity_penalty: has no effect without --beam-groups above 1"),
        (["--ignore-when-blocking", "</s>"], "ignore_when_blocking: has no effect without --block-ngram-repeat"),
        (["--alignment"], "alignment: has no effect with --format text"),
        (["--beta", "0.5"], "beta: 0.5 has no effect without --coverage-penalty"),
        (["--coverage-penalty", "summary"], "coverage_penalty: summary with beta 0 changes nothing"),
    ],
)
def test_options_without_effect_are_warned_about(model_dir, args, warning, cli):
    run = cli("translate", "--model", model_dir, "-q", *args, stdin="good morning\n", text=True)
    assert run.returncode == 0, run.stderr
    assert f"nmtdecode: warning: {warning}" in run.stderr


def test_n_best_with_text_output_is_refused_naming_the_formats_that_hold_it(model_dir, tmp_path, cli):
    """onmt_translate -n_best 3 writes 3 lines per input; our text format writes one, so
    --n-best 3 with it is an error (exit 2, before the model loads) that names --format nbest,
    not a warning on stderr beside a 1-best output. With --dump-beam the n-best lists go there."""
    run = cli("translate", "--model", tmp_path / "not-loaded", "--n-best", "3", stdin="good morning\n", text=True)
    assert run.returncode == 2 and run.stdout == "" and run.stderr.count("\n") == 1, run.stderr
    assert "n_best: 3" in run.stderr and "--format nbest" in run.stderr and "jsonl" in run.stderr
    config = tmp_path / "job.yaml"
    config.write_text("n_best: 2\nbeam_size: 4\n")
    assert cli("translate", "-m", model_dir, "-c", config, stdin="hi\n").returncode == 2
    nbest = cli("translate", "-m", model_dir, "-c", config, "--format", "nbest", "-q", stdin="hi\nyes\n", text=True)
    assert [line.split(" ||| ")[0] for line in nbest.stdout.splitlines()] == ["0", "0", "1", "1"]
    dumped = cli(
        "translate",
        "-m",
        model_dir,
        "-c",
        config,
        "-q",
        "--dump-beam",
        tmp_path / "beams.jsonl",
        stdin="hi\n",
        text=True,
    )
    assert dumped.returncode == 0 and dumped.stdout.count("\n") == 1, dumped.stderr


def test_no_warning_when_options_take_effect(model_dir, cli):
    run = cli(
        "translate",
        "--model",
        model_dir,
        "-q",
        "--n-best",
        "2",
        "--beam-size",
        "2",
        "--format",
        "jsonl",
        "--token-scores",
        "--max-length",
        "128",
        stdin="good morning\n",
        text=True,
    )
    assert run.returncode == 0 and run.stderr == "", run.stderr


def test_dump_config_flags_over_file_over_model_defaults(model_dir, tmp_path, cli):
    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    card = yaml.safe_load((model / "config.yaml").read_text())
    card["decoding"] = {"beam_size": 3, "alpha": 0.7, "min_length": 2}
    (model / "config.yaml").write_text(yaml.safe_dump(card))
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({"model": str(model), "beam_size": 4, "min_length": 1}))
    run = cli("translate", "-c", config, "--min-length", "0", "--dump-config", stdin="not read\n", text=True)
    values = dumped(run)
    assert (values["min_length"], values["beam_size"], values["alpha"]) == (0, 4, 0.7)
    assert values["n_best"] == 1 and values["model"] == str(model) and run.stderr == ""
    again = tmp_path / "dumped.yaml"
    again.write_text(run.stdout)  # the dump is itself a valid config file
    assert dumped(cli("translate", "-c", again, "--dump-config", text=True)) == values
