"""OpenNMT-py `.pt` files that are not checkpoints we can load: one line naming the file and
the problem, exit code 1, and nothing in the file ever runs. Built with torch.save alone
(no OpenNMT-py needed): the loader reads the dict that onmt_train writes."""

import argparse
import os

import pytest
import torch

from nmtdecode.options.config import KEY_SECTION, Config
from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.formats import opennmt
from nmtdecode.models.transformer import Transformer
from nmtdecode.options.peers import OPENNMT

from tests.helpers import train_sentencepiece

VOCAB = ["<unk>", "<blank>", "<s>", "</s>", "a", "b"]


class RunsCode:
    """Pickles as a call of os.system: what a hostile checkpoint would hold."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def read_back(path):
    """A test's own checkpoint read back to be altered, as nmtdecode reads one (no code run)."""
    with torch.serialization.safe_globals(opennmt.SAFE_GLOBALS):
        return torch.load(path, weights_only=True)


def tiny_checkpoint(path, vocab=VOCAB, **options):
    """A real (random) 1+1-layer OpenNMT-py checkpoint dict, as model_saver writes it;
    `options` are set in its `opt`."""
    opt = argparse.Namespace(
        **{
            "hidden_size": 8,
            "heads": 2,
            "enc_layers": 1,
            "dec_layers": 1,
            "transformer_ff": 16,
            "share_embeddings": False,
            "share_decoder_embeddings": False,
            "position_encoding": True,
            "max_relative_positions": 0,
            "add_qkvbias": False,
            "add_ffnbias": True,
            "transforms": [],
            **options,
        }
    )
    ours = opennmt.model_config(opt, {"src": vocab, "tgt": vocab}, {"generator.bias": None}, str(path))
    linear, direct = opennmt.weight_map(ours)
    shapes = Transformer(ours).state_dict()
    model, generator = {}, {}
    for name, parts in linear.items():
        rows = shapes[f"{name}.weight"].size(0) // len(parts)
        for part in parts:
            model[f"{part}.weight"] = torch.randn(rows, shapes[f"{name}.weight"].size(1))
            if "feed_forward" in part:
                model[f"{part}.bias"] = torch.randn(rows)
    for name, theirs in direct.items():
        target = generator if theirs.startswith("generator.") else model
        target[theirs.removeprefix("generator.")] = torch.randn(shapes[name].shape)
    checkpoint = {
        "model": model,
        "generator": generator,
        "opt": opt,
        "vocab": {"src": vocab, "tgt": vocab, "data_task": "seq2seq", "decoder_start_token": "<s>"},
    }
    torch.save(checkpoint, path)
    return path


def test_a_tiny_checkpoint_translates(tmp_path, cli, lines_file):
    path = tiny_checkpoint(tmp_path / "model.pt")
    result = cli("translate", "--model", path, "--src", lines_file(["a b", "b"]), "--beam-size", "2", text=True)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2
    assert set(" ".join(result.stdout.split())) <= set("ab <unk><blank><s> ")


def test_a_truncated_checkpoint_is_one_line_exit_1(tmp_path, cli, lines_file):
    path = tiny_checkpoint(tmp_path / "model.pt")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    result = cli("translate", "--model", path, "--src", lines_file(["a"]), text=True)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and str(path) in result.stderr
    assert "not a readable PyTorch checkpoint (truncated or corrupt?)" in result.stderr


def test_a_foreign_pickle_is_one_line_exit_1(tmp_path, cli, lines_file):
    path = tmp_path / "weights.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "epoch": 3}, path)
    result = cli("translate", "--model", path, "--src", lines_file(["a"]), text=True)
    assert result.returncode == 1
    assert result.stderr == (
        f"nmtdecode: error: {path}: not an OpenNMT-py checkpoint: expected a dict with "
        "model, generator, vocab, opt; found ['epoch', 'state_dict']\n"
    )


def test_options_without_a_transformer_s_sizes_are_named(tmp_path, cli, lines_file):
    """Before: "'Namespace' object has no attribute 'heads'"."""
    path = tiny_checkpoint(tmp_path / "model.pt")
    checkpoint = read_back(path)
    checkpoint["opt"] = argparse.Namespace(share_embeddings=False)
    torch.save(checkpoint, path)
    result = cli("translate", "--model", path, "--src", lines_file(["a"]), text=True)
    assert result.returncode == 1
    assert result.stderr == (
        f"nmtdecode: error: {path}: its OpenNMT-py options (`opt`) have no hidden_size, heads, enc_layers, "
        "dec_layers, transformer_ff: they do not describe a Transformer\n"
    )


def test_options_of_fewer_layers_than_the_weights_are_refused(tmp_path):
    """Before: the checkpoint's second encoder layer was left out (exit 0, another network)."""
    path = tiny_checkpoint(tmp_path / "model.pt", enc_layers=2)
    checkpoint = read_back(path)
    checkpoint["opt"].enc_layers = 1
    torch.save(checkpoint, path)
    with pytest.raises(
        ModelError,
        match=r"encoder_layers: the config asks for 1 layers, the weights hold more \(encoder\.transformer\.1\.",
    ):
        opennmt.load(str(path))


def test_a_pickle_that_runs_code_is_refused_and_never_runs(tmp_path, cli, lines_file):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    torch.save({"model": RunsCode(f"touch {marker}"), "generator": {}, "vocab": {}, "opt": None}, path)
    result = cli("translate", "--model", path, "--src", lines_file(["a"]), text=True)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and str(path) in result.stderr
    assert "it holds pickled code, not only weights" in result.stderr and "system" in result.stderr
    assert not marker.exists()


def test_inspect_describes_a_checkpoint(tmp_path, cli):
    path = tiny_checkpoint(tmp_path / "model.pt")
    result = cli("inspect", path, text=True)
    assert result.returncode == 0, result.stderr
    assert "format:        opennmt-py" in result.stdout
    assert "Transformer 1+1 layers, d_model 8, 2 heads, ffn 16, relu, pre-norm, sinusoidal_interleaved" in result.stdout
    assert "dtype:         stored float32" in result.stdout
    assert "beam_size=5" in result.stdout and "max_len_a=1.25" in result.stdout


def test_a_yaml_written_for_onmt_translate_runs_after_renaming_gpu(tmp_path, cli, lines_file):
    """onmt_translate's -config keys that nmtdecode shares keep their meaning; gpu is renamed."""
    tiny_checkpoint(tmp_path / "model.pt")
    lines_file(["a b", "b a"], name="src.txt")
    onmt_yaml = (
        "model: model.pt\nsrc: src.txt\noutput: out.txt\nbeam_size: 3\nn_best: 1\nmin_length: 1\n"
        "max_length: 20\nlength_penalty: avg\nalpha: 1.0\nbatch_size: 30\nbatch_type: sents\n"
    )
    (tmp_path / "onmt.yaml").write_text(onmt_yaml + "gpu: -1\n")
    result = cli("translate", "-c", tmp_path / "onmt.yaml", text=True)
    assert result.returncode == 2
    assert (
        "unknown option 'gpu' (an OpenNMT-py/eole name): nmtdecode's is device: cuda:N for their GPU N "
        "(device: cpu for their -1)"
    ) in result.stderr
    (tmp_path / "onmt.yaml").write_text(onmt_yaml + "device: cpu\n")
    result = cli("translate", "-c", tmp_path / "onmt.yaml", "--quiet", text=True)
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 2


@pytest.mark.parametrize(
    "theirs, ours",
    [
        ("max_length_ratio", "max_len_a: R with max_len_b: 5"),
        ("random_sampling_topk", "top_k: K with sampling: true"),
        ("random_sampling_topp", "top_p: P with sampling: true"),
        ("random_sampling_temp", "temperature: T with sampling: true"),
        ("ban_unk_token", "ban_unk: true"),
    ],
)
def test_an_opennmt_option_name_names_its_nmtdecode_equivalent(tmp_path, cli, theirs, ours):
    (tmp_path / "c.yaml").write_text(f"{theirs}: 1\n")
    result = cli("translate", "-c", tmp_path / "c.yaml", "--model", tmp_path, text=True)
    assert result.returncode == 2
    assert f"unknown option '{theirs}' (an OpenNMT-py/eole name): nmtdecode's is {ours}" in result.stderr


def test_the_recorded_sentencepiece_model_is_found_next_to_the_checkpoint(tmp_path, cli, lines_file):
    """onmt_train recorded the SentencePiece model at a path of its machine; the file of that name
    next to the checkpoint tokenizes the source and detokenizes the output."""
    import sentencepiece as spm

    spm_file = train_sentencepiece(tmp_path, vocab_size=40)
    pieces = spm.SentencePieceProcessor(model_file=spm_file)
    vocab = VOCAB[:4] + [pieces.id_to_piece(i) for i in range(3, 30)]  # onmt's vocab: pieces, not ids
    recorded = "/home/someone/run/spm.model"
    path = tiny_checkpoint(
        tmp_path / "model.pt",
        vocab=vocab,
        transforms=["sentencepiece", "filtertoolong"],
        src_subword_model=recorded,
        tgt_subword_model=recorded,
    )
    tokenizer = opennmt.load(str(path)).tokenizer
    text = "the quick brown fox"
    expected = [vocab.index(p) if p in vocab else 0 for p in pieces.encode(text, out_type=str)]
    assert tokenizer.encode(text) == expected  # no </s>: onmt_translate feeds none
    assert tokenizer.decode(expected + [vocab.index("</s>")]) == pieces.decode_pieces([vocab[i] for i in expected])
    result = cli("translate", "--model", path, "--src", lines_file([text]), "--quiet", text=True)
    assert result.returncode == 0, result.stderr
    assert "▁" not in result.stdout  # detokenized


def test_a_missing_sentencepiece_model_is_named(tmp_path):
    path = tiny_checkpoint(
        tmp_path / "model.pt",
        transforms=["sentencepiece"],
        src_subword_model="/elsewhere/src.model",
        tgt_subword_model="/elsewhere/tgt.model",
    )
    with pytest.raises(
        ModelError,
        match=r"src_subword_model /elsewhere/src.model is missing "
        r"\(put src.model next to the checkpoint\)",
    ):
        opennmt.load(str(path))


def test_another_tokenizer_transform_is_refused_by_name(tmp_path):
    path = tiny_checkpoint(tmp_path / "model.pt", transforms=["onmt_tokenize"])
    with pytest.raises(ModelError, match="the onmt_tokenize transform is not supported"):
        opennmt.load(str(path))


@pytest.mark.parametrize("content, reason", [(b"", "EOFError"), (b"hello world\n", "KeyError")])
def test_an_empty_or_text_file_is_one_line_exit_1(tmp_path, cli, lines_file, content, reason):
    path = tmp_path / "model.pt"
    path.write_bytes(content)
    result = cli("translate", "--model", path, "--src", lines_file(["a"]), text=True)
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"nmtdecode: error: {path}: not a readable PyTorch checkpoint (truncated or corrupt?): {reason}"
    )
    assert result.stderr.count("\n") == 1


def test_a_float16_checkpoint_loads_as_float32(tmp_path, cli):
    """onmt_train -model_dtype fp16 stores half-precision tensors; inspect says so, the
    model computes in float32 unless --dtype says otherwise."""
    path = tiny_checkpoint(tmp_path / "model.pt")
    full = opennmt.load(str(path)).model
    checkpoint = opennmt.read_checkpoint(str(path))
    for part in ("model", "generator"):
        checkpoint[part] = {name: tensor.half() for name, tensor in checkpoint[part].items()}
    torch.save(checkpoint, path)
    half = opennmt.load(str(path)).model
    assert {p.dtype for p in half.parameters()} == {torch.float32}
    for (name, ours), theirs in zip(half.state_dict().items(), full.state_dict().values()):
        assert torch.equal(ours, theirs.half().float()), name
    result = cli("inspect", path, text=True)
    assert "dtype:         stored float16; loaded as float32" in result.stdout


# onmt_translate's options that nmtdecode spells the same way, with the same meaning (docs/formats.md,
# "Coming from OpenNMT-py or eole" lists them).
PEER_SAME_NAMES = (
    "model",
    "src",
    "output",
    "beam_size",
    "n_best",
    "min_length",
    "max_length",
    "length_penalty",
    "alpha",
    "coverage_penalty",
    "beta",
    "block_ngram_repeat",
    "ignore_when_blocking",
    "seed",
    "batch_size",
    "batch_type",
)


def test_opennmt_names_nmtdecode_spells_alike_are_options():
    """Keys such as beta, seed or block_ngram_repeat keep OpenNMT-py's names: each is an option."""
    assert set(PEER_SAME_NAMES) <= set(KEY_SECTION)
    Config.from_values({"coverage_penalty": "wu", "beta": 0.2, "block_ngram_repeat": 3, "seed": 7})


def test_renamed_keys_are_not_options():
    """Every rename in the table names a key nmtdecode does not read (else the YAML would run)."""
    assert not set(OPENNMT.ours) & set(KEY_SECTION)
    assert not set(OPENNMT.without) & set(KEY_SECTION)
