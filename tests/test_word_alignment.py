"""--replace-unk and --report-align: what a hypothesis's alignment makes of its <unk>s and words.

The expected values are computed here, independently: the attention by a teacher-forced pass
(test_alignment's), the pieces by SentencePiece itself, the words by counting word-start marks."""

import json

import pytest
import sentencepiece as spm

from nmtdecode.engine.batching import Result
from nmtdecode.models.loading import load_model
from nmtdecode.engine.alignment import pharaoh, unknown_replacements, word_indexes
from nmtdecode.search.base import Hypothesis
from nmtdecode.jobs.writing import format_result

from tests.helpers import UNK, build_native_model
from tests.test_alignment import attention_by_teacher_forcing

LINES = ["the house is red .", "where is the station ?", "a dog and a cat sleep"]
MARK = "\u2581"


@pytest.fixture(scope="module")
def unk_model(tmp_path_factory):
    """A tiny model whose <unk> logit is raised: its hypotheses are <unk>s after the prefix."""
    return build_native_model(tmp_path_factory.mktemp("unk") / "model", seed=3, unk_bias=1.8)


def decoded(unk_model, tmp_path, cli, *options):
    """(JSONL records with tokens and alignments, output lines of `options`) for LINES, prefix 'the'."""
    source, prefix = tmp_path / "in.txt", tmp_path / "prefix.txt"
    source.write_text("".join(line + "\n" for line in LINES))
    prefix.write_text("the house\n" * len(LINES))
    common = [
        "translate",
        "--model",
        unk_model,
        "--src",
        source,
        "--prefix",
        prefix,
        "--beam-size",
        3,
        "--n-best",
        2,
        "--min-length",
        5,
        "--max-length",
        7,
        "-q",
    ]
    plain = cli(*common, "--format", "jsonl", "--alignment", text=True)
    run = cli(*common, *options, text=True)
    assert plain.returncode == 0 and run.returncode == 0, plain.stderr + run.stderr
    return [json.loads(line) for line in plain.stdout.splitlines()], run.stdout.splitlines()


def attended(model, source_ids, tokens):
    """The source position each token's step attends most, by a teacher-forced pass."""
    weights = attention_by_teacher_forcing(model, source_ids, tokens, -1, 1)
    return weights[: len(tokens)].argmax(dim=1).tolist()


def test_replace_unk_puts_the_most_attended_source_piece(unk_model, tmp_path, cli):
    records, lines = decoded(unk_model, tmp_path, cli, "--replace-unk", "--format", "nbest")
    loaded = load_model(str(unk_model))
    sp = spm.SentencePieceProcessor(model_file=str(unk_model / "spm.model"))
    expected, unknowns = [], 0
    for line, record in zip(LINES, records):
        source_pieces = sp.encode(line, out_type=str)
        source_ids = sp.encode(line) + [loaded.model.cfg.eos_id]
        for hyp in record["hypotheses"]:
            positions = attended(loaded.model, source_ids, hyp["tokens"])
            pieces = [
                source_pieces[p] if token == UNK else sp.id_to_piece(token)
                for token, p in zip(hyp["tokens"], positions)
            ]
            assert all(p < len(source_pieces) for t, p in zip(hyp["tokens"], positions) if t == UNK)
            unknowns += hyp["tokens"].count(UNK)
            text = "".join(pieces).replace(MARK, " ").lstrip(" ")
            expected.append(f"{record['index']} ||| {text} ||| {hyp['score']:.6f}")
    assert unknowns >= 10 and len({p for r in records for h in r["hypotheses"] for p in h["alignment"]}) > 2
    assert lines == expected


@pytest.mark.slow  # ~6 s on 2 cores
def test_report_align_writes_word_pairs_of_the_attention(unk_model, tmp_path, cli):
    records, lines = decoded(
        unk_model,
        tmp_path,
        cli,
        "--report-align",
        "--replace-unk",  # text: the 1-best
        "--dump-beam",
        tmp_path / "beams.jsonl",
    )  # where the n-best lists go
    loaded = load_model(str(unk_model))
    sp = spm.SentencePieceProcessor(model_file=str(unk_model / "spm.model"))

    def words(pieces):  # the word of each piece: how many pieces after the first start with the mark
        return [sum(p.startswith(MARK) for p in pieces[1 : i + 1]) for i in range(len(pieces))]

    for line, record, output in zip(LINES, records, lines):
        source_pieces = sp.encode(line, out_type=str)
        hyp = record["hypotheses"][0]
        positions = attended(loaded.model, sp.encode(line) + [loaded.model.cfg.eos_id], hyp["tokens"])
        target_pieces = [source_pieces[p] if t == UNK else sp.id_to_piece(t) for t, p in zip(hyp["tokens"], positions)]
        source_word, target_word = words(source_pieces), words(target_pieces)
        pairs = sorted({(source_word[p], target_word[t]) for t, p in enumerate(positions) if p < len(source_pieces)})
        text = "".join(target_pieces).replace(MARK, " ").lstrip(" ")
        assert output == f"{text} ||| " + " ".join(f"{s}-{t}" for s, t in pairs)
        assert len(pairs) > 1


def test_report_align_in_jsonl_adds_pieces_and_pairs_only(unk_model, tmp_path, cli):
    records, lines = decoded(unk_model, tmp_path, cli, "--report-align", "--format", "jsonl")
    sp = spm.SentencePieceProcessor(model_file=str(unk_model / "spm.model"))
    for line, record, output in zip(LINES, records, map(json.loads, lines)):
        assert output["source_pieces"] == sp.encode(line, out_type=str) + ["</s>"]
        for plain, entry in zip(record["hypotheses"], output["hypotheses"]):
            assert entry["pieces"] == [sp.id_to_piece(t) for t in plain["tokens"]]
            assert {k: v for k, v in entry.items() if k not in ("pieces", "pharaoh")} == {
                k: v for k, v in plain.items() if k not in ("tokens", "alignment")
            }
            assert entry["pharaoh"]


def test_word_indexes_follow_the_word_start_mark():
    assert word_indexes(["\u2581the", "\u2581hou", "se", "\u2581is"], MARK) == [0, 1, 1, 2]
    assert word_indexes(["hou", "se", "\u2581is"], MARK) == [0, 0, 1]  # no mark first: still word 0
    assert word_indexes(["a", "b"], " ") == [0, 1]  # whitespace-split tokens are words


def test_pharaoh_pairs_by_hand():
    source = ["\u2581the", "\u2581hou", "se", "</s>"]
    target = ["<2de>", "\u2581das", "\u2581Ha", "us"]
    # the tag (position 0) is no word; "us" aligned to EOS has no pair; two links of word 1-1 are one
    assert pharaoh([3, 0, 2, 3], [0, 1, 2], [1, 2, 3], source, target, MARK) == "0-0 1-1"
    assert pharaoh([None, 2, 1, 0], [0, 1, 2], [1, 2, 3], source, target, None) == "0-2 1-1 2-0"
    assert pharaoh([None, 2, 1, 0], [0, 1, 2], [1, 2, 3], source, target, MARK) == "0-1 1-0 1-1"


def test_unk_aligned_to_eos_stays():
    assert unknown_replacements([UNK, 7, UNK], [3, 0, 1], UNK, ["\u2581a", "b", "c", "</s>"], {0, 1, 2}) == {2: "b"}


def test_formats_put_the_pairs_where_the_peers_do():
    hyps = [Hypothesis([5], -0.5, -1.0), Hypothesis([6], -0.7, -1.4)]
    result = Result(3, hyps, ["a b", "c"], source_pieces=["x"], pieces=[["p"], ["q"]], pharaoh=["0-0 0-1", ""])
    assert format_result(result, "text") == "a b ||| 0-0 0-1\n"  # OpenNMT-py's -report_align
    assert format_result(result, "nbest") == "3 ||| a b ||| -0.500000 ||| 0-0 0-1\n3 ||| c ||| -0.700000 ||| \n"
    assert (
        format_result(result, "nbest-marian").splitlines()[0] == "3 ||| a b ||| 0-0 0-1 ||| F0= -1.000000 ||| -0.500000"
    )  # Marian's: after the text
