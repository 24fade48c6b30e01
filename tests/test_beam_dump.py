"""translate --dump-beam: one record per input line, in input order, whose trees lead to the output.

The oracle is the output itself (written by the Beams' `nbest`/`get_hyp`) and the search's shape
for each strategy; the paths are followed from the dump alone (show/tree.py), as `show` draws them.
"""

import json

import pytest

from nmtdecode.options.config import Config, ConfigError, DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.loading import load_model
from nmtdecode.show.tree import layout, path_tokens

# unsorted lengths (batches are sorted longest first) and lines with nothing to decode
LINES = ["a dog and a cat sleep in the garden .", "", "the house is red .", "   ", "where is the station ?", "good"]
STRATEGIES = {
    "beam": ["--beam-size", 4, "--n-best", 3],
    "greedy": ["--beam-size", 1],
    "sampling": ["--sampling", "--n-best", 3, "--seed", 7],
    "diverse": ["--beam-size", 4, "--beam-groups", 2, "--diversity-penalty", 1.5, "--n-best", 2],
}


def dump_run(cli, model_dir, tmp_path, lines_file, *args):
    src = lines_file(LINES)
    out, dump = tmp_path / "out.jsonl", tmp_path / "beams.jsonl"
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        src,
        "--output",
        out,
        "--format",
        "jsonl",
        "--token-scores",
        "--max-length",
        12,
        "--batch-size",
        2,
        "--dump-beam",
        dump,
        "-q",
        *args,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    records = [json.loads(line) for line in dump.read_text(encoding="utf-8").splitlines()]
    outputs = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    return records, outputs


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_nbest_path_of_the_dump_is_the_output(strategy, cli, model_dir, tmp_path, lines_file):
    records, outputs = dump_run(cli, model_dir, tmp_path, lines_file, *STRATEGIES[strategy])
    assert [r["index"] for r in records] == list(range(len(LINES)))
    assert [r["source"] for r in records] == LINES
    for record, output in zip(records, outputs):
        assert len(record["nbest"]) == len(output["hypotheses"])
        if not LINES[record["index"]].strip():
            assert record["search"] == "none" and record["beams"] == [] and record["nbest"][0]["tokens"] == []
            continue
        assert record["search"] == strategy and record["source_pieces"][-1] == "</s>"
        tree = layout(record)
        for entry, hyp, path in zip(record["nbest"], output["hypotheses"], tree.paths):
            tokens = path_tokens(tree, path)
            ended = tokens[-1] == record["eos_id"]
            assert entry["ended"] == hyp["ended"] == ended
            assert tokens[: len(tokens) - ended] == entry["tokens"] == hyp["tokens"]
            assert entry["text"] == hyp["text"]
            assert entry["score"] == pytest.approx(hyp["score"]) and entry["log_prob"] == pytest.approx(hyp["log_prob"])
            finished = record["beams"][entry["beam"]]["finished"][entry["finished"]]
            assert finished["score"] == pytest.approx(hyp["score"])


def test_each_strategy_dumps_its_own_shape(cli, model_dir, tmp_path, lines_file):
    shapes = {}
    for strategy, args in STRATEGIES.items():
        records, _ = dump_run(cli, model_dir, tmp_path, lines_file, *args)
        record = records[0]
        shapes[strategy] = (
            record["groups"],
            len(record["beams"]),
            {len(s) for b in record["beams"] for s in b["predicted_ids"]},
        )
        for beam in record["beams"]:
            assert (
                [len(s) for s in beam["beam_parent_ids"]]
                == [len(s) for s in beam["predicted_ids"]]
                == [len(s) for s in beam["scores"]]
            )
            if strategy == "sampling":  # n chains: each sample extends itself
                assert beam["beam_parent_ids"][0] == [0, 0, 0]
                assert all(parents == [0, 1, 2] for parents in beam["beam_parent_ids"][1:])
        if strategy == "greedy":  # one chain, ended once
            assert len(record["beams"][0]["finished"]) == 1
    assert shapes == {"beam": (1, 1, {4}), "greedy": (1, 1, {1}), "sampling": (1, 1, {3}), "diverse": (2, 2, {2})}


def test_the_dump_names_what_a_reader_needs(cli, model_dir, tmp_path, lines_file):
    records, _ = dump_run(
        cli,
        model_dir,
        tmp_path,
        lines_file,
        "--beam-size",
        3,
        "--length-penalty",
        "wu",
        "--alpha",
        0.6,
        "--early-stopping",
        "never",
        "--attention",
        "--alignment",
    )
    record = records[0]
    assert record["stop_rule"] == "never" and record["length_penalty"] == {"name": "wu", "alpha": 0.6, "offset": 0}
    assert record["max_steps"] == 12 and record["beam_size"] == 3
    ids = {i for b in record["beams"] for step in b["predicted_ids"] for i in step}
    assert ids <= {int(i) for i in record["pieces"]}
    loaded = load_model(str(model_dir))
    assert record["pieces"][str(record["eos_id"])] == loaded.tokenizer.target.id_to_piece(record["eos_id"])
    best = record["nbest"][0]
    assert len(best["attention"]) == len(best["alignment"]) == len(best["tokens"])
    assert all(len(row) == len(record["source_pieces"]) for row in best["attention"])
    assert [len(s) for s in record["beams"][0]["alignments"]] == [3] * len(record["beams"][0]["predicted_ids"])


def test_the_output_is_the_same_with_and_without_the_dump(cli, model_dir, tmp_path, lines_file):
    src = lines_file(LINES)
    plain = cli("translate", "--model", model_dir, "--src", src, "--beam-size", 3, "--max-length", 12, "-q")
    dumped = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        src,
        "--beam-size",
        3,
        "--max-length",
        12,
        "-q",
        "--dump-beam",
        tmp_path / "d.jsonl",
    )
    assert plain.returncode == dumped.returncode == 0 and plain.stdout == dumped.stdout


def test_attention_has_an_effect_with_the_dump(cli, model_dir, tmp_path):
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--attention",
        "--max-length",
        6,
        "--dump-beam",
        tmp_path / "d",
        stdin="the house\n",
        text=True,
    )
    assert run.returncode == 0 and "has no effect" not in run.stderr
    assert "attention" in json.loads((tmp_path / "d").read_text())["nbest"][0]


def test_nothing_more_is_kept_without_the_option(model_dir):
    loaded = load_model(str(model_dir))
    for trace in (False, True):
        decoder = BatchDecoder(loaded.model, DecodingConfig(beam_size=3, max_length=6), loaded.rules, trace=trace)
        *_, search = decoder.stepwise([loaded.tokenizer.encode("the house")])
        assert (search.beams[0].ended is None) == (not trace)
        assert (decoder.decode([loaded.tokenizer.encode("the house")]).search is None) == (not trace)
        if trace:  # every ended hypothesis, the pool's best among them
            assert len(search.beams[0].ended) >= len(search.beams[0].finished) > 0


def test_a_failed_job_leaves_no_dump(cli, model_dir, tmp_path, lines_file, monkeypatch):
    calls = []

    def failing(self, *args, **kwargs):
        calls.append(1)
        raise RuntimeError("decoding failed")

    monkeypatch.setattr(BatchDecoder, "decode", failing)
    dump = tmp_path / "d.jsonl"
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        lines_file(LINES),
        "--output",
        tmp_path / "o.txt",
        "--dump-beam",
        dump,
        "-q",
        text=True,
    )
    assert run.returncode == 1 and "decoding failed" in run.stderr and calls
    assert not dump.exists() and not (tmp_path / "d.jsonl.tmp").exists() and not (tmp_path / "d.jsonl.lock").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--resume", "--output", "{tmp}/o.txt"], "dump_beam: cannot be combined with resume"),
        (["--output", "{tmp}/o.txt", "--dump-beam", "{tmp}/o.txt"], "is the job's --output"),
        (["--dump-beam", "-"], "dump_beam: needs a file name"),
        (["{tmp}/in.txt", "--output", "{tmp}/a", "{tmp}/b"], "a beam dump goes with one input"),
    ],
)
def test_what_the_dump_cannot_do_is_refused_in_one_line(args, message, cli, model_dir, tmp_path, lines_file):
    src = lines_file(LINES)
    args = [str(a).format(tmp=tmp_path) for a in args]
    dump = [] if "--dump-beam" in args else ["--dump-beam", tmp_path / "d.jsonl"]
    run = cli("translate", "--model", model_dir, "--src", src, *args, *dump, text=True)
    assert run.returncode == 2 and message in run.stderr and len(run.stderr.splitlines()) == 1, run.stderr


def test_torchrun_refuses_the_dump(tmp_path, lines_file):
    config = Config.from_values(
        {"src": str(lines_file(LINES)), "output": str(tmp_path / "o"), "dump_beam": str(tmp_path / "d")}
    )
    with pytest.raises(ConfigError, match="under torchrun leave it out"):
        config.validate("torchrun")


def test_the_dump_names_the_pieces_of_every_tokenizer():
    """OpenNMT-py/eole vocabularies (and Hugging Face ones, through target_piece/source_piece,
    checked against transformers in test_hf_tokenizers) give their entries; an id beyond the
    vocabulary is written <id>."""
    from nmtdecode.engine.beam_dump import source_pieces, target_pieces
    from nmtdecode.models.formats.opennmt import VocabTokenizer

    src = ["<unk>", "<blank>", "<s>", "</s>", "Haus", "rot"]
    tgt = ["<unk>", "<blank>", "<s>", "</s>", "house", "red", "is"]
    tokenizer = VocabTokenizer(src, tgt, None, None)
    assert source_pieces(tokenizer, [4, 5, 3]) == ["Haus", "rot", "</s>"]
    assert target_pieces(tokenizer, [6, 4, 9]) == {"4": "house", "6": "is", "9": "<9>"}
    # --report-align's pieces of a line given as text and as pieces (the API's token input)
    assert (
        tokenizer.source_pieces("Haus Dach rot")
        == tokenizer.source_pieces(["Haus", "Dach", "rot"])
        == ["Haus", "Dach", "rot"]
    )


def test_a_config_files_dump_beam_is_relative_to_the_file(cli, model_dir, tmp_path, lines_file):
    """As its src and output: a relative dump_beam in a config file names a file beside the config."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "elsewhere").mkdir()
    config = tmp_path / "sub" / "job.yaml"
    config.write_text(
        f"model: {model_dir}\nsrc: {lines_file(LINES)}\noutput: o.txt\ndump_beam: d.jsonl\n"
        "max_length: 4\nquiet: true\n",
        encoding="utf-8",
    )
    run = cli("translate", "-c", config, cwd=tmp_path / "elsewhere", text=True)
    assert run.returncode == 0, run.stderr
    dump = tmp_path / "sub" / "d.jsonl"
    assert len(dump.read_text(encoding="utf-8").splitlines()) == len(LINES)
    assert not (tmp_path / "elsewhere" / "d.jsonl").exists()
