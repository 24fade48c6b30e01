"""Marian's own checkpoints (models/formats/marian*.py), on random models written as Marian writes
them (marian_files.py): where each array lands, the layouts Marian trains, decoder.yml's decoding
defaults, the vocabularies, inspect, and every refusal, each in one line. Decoding against
CTranslate2 and transformers on the same weights is test_marian_parity.py's."""

import math
import os
import re
import shutil

import numpy as np
import pytest
import torch
import yaml

from nmtdecode.options.config import Config
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.detect import model_format
from nmtdecode.models.loading import load_model

from tests.models.formats.marian_files import (
    OPTIONS,
    random_hf_state,
    to_marian,
    train_spm,
    vocabulary,
    write_model,
    write_npz,
)
from tests.models.test_inspect import assert_inspect_matches_the_loaded_model
from tests.test_hostile_files import alias_bomb

D, FFN, LAYERS = 32, 64, (2, 2)


@pytest.fixture(scope="module")
def pieces(tmp_path_factory):
    """One SentencePiece model (source.spm = target.spm) and Marian's vocabulary of its pieces."""
    path = tmp_path_factory.mktemp("spm") / "source.spm"
    return path, vocabulary(train_spm(path, seed=0), tags=("fra", "deu"))


def build(root, pieces, *, options=None, edit=None, tokens=None, target_tokens=None, spm=True, layout=None, **decoder):
    """A random Marian model directory; `layout`: to_marian's switches; `edit(arrays)` changes the
    arrays before they are written."""
    spm_path, vocab = pieces
    tokens = tokens or vocab
    layout = {"shared": True, "tied_output": True, **(layout or {})}
    state = random_hf_state(0, len(tokens), d=D, ffn=FFN, layers=LAYERS, shared=layout["shared"])
    arrays = to_marian(state, len(tokens), LAYERS, **layout)
    if edit:
        edit(arrays)
    shared, tied = layout["shared"], layout["tied_output"]
    settings = {
        **OPTIONS,
        "tied-embeddings-all": shared and tied,
        "tied-embeddings-src": shared and not tied,
        "tied-embeddings": tied,
        **(options or {}),
    }
    write_model(root, arrays, settings, tokens, target_tokens, **decoder)
    if spm:
        for name in ("source.spm", "target.spm"):
            shutil.copy(spm_path, root / name)
    return root


def marian_positions(length: int, dim: int) -> torch.Tensor:
    """Marian's SinusoidalPositionEmbeddings (src/tensors/cpu/tensor_operators.cpp), as written there."""
    table = torch.empty(length, dim)
    half = dim / 2
    increment = math.log(10000.0) / (half - 1)
    for j in range(length):
        for i in range(dim):
            v = j * math.exp((i % int(half)) * -increment)
            table[j, i] = math.sin(v) if i < int(half) else math.cos(v)
    return table


def test_a_marian_directory_or_its_npz_is_recognised(tmp_path, pieces):
    root = build(tmp_path / "m", pieces)
    assert model_format(str(root)) == model_format(str(root / "model.npz")) == "marian"
    assert load_model(str(root / "model.npz")).format == "marian"


def test_marian_arrays_land_where_marian_computes_with_them(tmp_path, pieces):
    root = build(tmp_path / "m", pieces)
    loaded = load_model(str(root))
    model, cfg, vocab = loaded.model, loaded.model.cfg, len(pieces[1])
    with np.load(root / "model.npz") as stored:
        a = {name: torch.from_numpy(stored[name]) for name in stored.files if not name.startswith("special:")}
    layer = model.decoder_layers[1]
    assert torch.equal(
        model.encoder_layers[0].self_attn.qkv.weight, torch.cat([a[f"encoder_l1_self_W{x}"].T for x in "qkv"])
    )
    assert torch.equal(layer.cross_attn.kv.bias, torch.cat([a[f"decoder_l2_context_b{x}"][0] for x in "kv"]))
    assert torch.equal(layer.cross_attn.out.weight, a["decoder_l2_context_Wo"].T)
    assert torch.equal(layer.ffn.up.weight, a["decoder_l2_ffn_W1"].T)
    assert torch.equal(layer.cross_block.norm.weight, a["decoder_l2_context_Wo_ln_scale"][0])
    assert torch.equal(layer.ffn_block.norm.bias, a["decoder_l2_ffn_ffn_ln_bias"][0])
    tokens = model.src_embed.tokens.weight  # shared, and tied to the output
    assert model.tgt_embed.tokens.weight is tokens and model.output.weight is tokens
    assert torch.equal(tokens[:vocab], a["Wemb"]) and not tokens[vocab].any()  # the decoder's zero start row
    assert torch.equal(model.output.bias[:vocab], a["decoder_ff_logit_out_b"][0])
    assert model.output.bias[vocab] == -1e9  # no share of any softmax: Marian's distribution over its vocabulary
    assert (cfg.pad_id, cfg.decoder_start_id, cfg.eos_id, cfg.unk_id) == (vocab, vocab, 0, 1)
    assert (cfg.norm_eps, cfg.embed_scale, cfg.pre_norm, cfg.activation) == (1e-6, math.sqrt(D), False, "silu")
    torch.testing.assert_close(model.tgt_embed.sinusoids[:50], marian_positions(50, D), rtol=0, atol=2e-6)


def smaller_target(arrays):
    arrays["decoder_Wemb"] = np.ascontiguousarray(arrays["decoder_Wemb"][:-20])
    arrays["decoder_ff_logit_out_b"] = np.ascontiguousarray(arrays["decoder_ff_logit_out_b"][:, :-20])


LAYOUTS = {  # name -> (to_marian's switches, options, a change of the arrays, target vocabulary: fewer pieces)
    "separate vocabularies": ({"shared": False}, {}, None, False),
    "separate, the target smaller": ({"shared": False}, {}, smaller_target, True),
    "untied output (Wt)": ({"tied_output": False}, {}, None, False),
    "untied output (legacy W)": ({"tied_output": False, "legacy_output": True}, {}, None, False),
    "no output bias": ({}, {"output-omit-bias": True}, lambda a: a.pop("decoder_ff_logit_out_b"), False),
    "pre-norm": ({"pre_norm": True}, {"transformer-preprocess": "n", "transformer-postprocess": "da"}, None, False),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_each_marian_layout_loads_and_decodes(tmp_path, pieces, name):
    layout, options, edit, smaller = LAYOUTS[name]
    target = pieces[1][:-20] if smaller else None
    root = build(tmp_path / "m", pieces, layout=layout, options=options, edit=edit, target_tokens=target)
    loaded = load_model(str(root))
    cfg, vocab = loaded.model.cfg, len(target or pieces[1])
    assert cfg.tgt_vocab_size == vocab + 1 and cfg.decoder_start_id == vocab
    assert cfg.src_vocab_size == max(len(pieces[1]), vocab + 1)  # the padding id is a row of both tables
    bias = loaded.model.output.bias
    assert bias[vocab] == -1e9 and (bias[:vocab].any() != (name == "no output bias"))
    if "untied" in name:
        assert not loaded.model.output.weight[vocab].any()
    config = Config.from_values({"beam_size": 3, "max_length": 8}).with_model_defaults(loaded.defaults)
    found = BatchDecoder(loaded.model, config.decoding, loaded.rules).decode([[5, 9, 0], [7, 0]]).nbests
    assert all(1 <= len(n[0].tokens) <= 8 and max(n[0].tokens, default=0) < vocab for n in found)


def test_decoder_yml_gives_marian_s_decoding_defaults(tmp_path, pieces):
    root = build(tmp_path / "m", pieces, **{"beam-size": 6, "normalize": 0.6, "max-length-factor": 2.5})
    loaded = load_model(str(root))
    assert loaded.defaults == {
        "beam_size": 6,
        "length_penalty": "avg",
        "alpha": 0.6,
        "early_stopping": "true",
        "max_len_a": 2.5,
        "max_len_b": 0,
        "max_length": 1024,
    }
    config = Config.from_values({}).with_model_defaults(loaded.defaults)
    assert BatchDecoder(loaded.model, config.decoding, loaded.rules).max_steps([4, 9]) == [10, 22]  # 2.5 x |src|
    bare = tmp_path / "bare"
    build(bare, pieces)
    settings = yaml.safe_load((bare / "decoder.yml").read_text())
    for key in ("beam-size", "normalize"):
        del settings[key]
    (bare / "decoder.yml").write_text(yaml.safe_dump(settings))
    defaults = load_model(str(bare)).defaults  # Marian's own: beam 12, no normalisation, 3 x the source
    assert (defaults["beam_size"], defaults["alpha"], defaults["max_len_a"]) == (12, 0.0, 3.0)


def test_unk_and_byte_fallback_controls_are_banned_as_marian_bans_them(tmp_path, pieces):
    tokens = pieces[1] + ["<0x0A>", "<0x41>"]  # a newline byte (a control character) and "A"
    start, newline = len(tokens), len(tokens) - 2
    assert load_model(str(build(tmp_path / "a", pieces, tokens=tokens))).rules.banned_ids == (start, 1, newline)
    allowed = build(tmp_path / "b", pieces, tokens=tokens, **{"allow-unk": True, "allow-special": True})
    assert load_model(str(allowed)).rules.banned_ids == (start,)


def test_text_goes_through_opus_mt_pieces_and_target_language_tags(tmp_path, pieces):
    loaded = load_model(str(build(tmp_path / "m", pieces)))
    tokenizer, vocab = loaded.tokenizer, {t: i for i, t in enumerate(pieces[1])}
    ids = tokenizer.encode("the cat walks")
    assert ids[-1] == 0 and all(i < len(vocab) for i in ids)
    assert tokenizer.decode(ids) == "the cat walks"
    assert sorted(tokenizer.language_codes()) == ["deu", "fra"]
    loaded.rules_for(None, "fra")
    assert tokenizer.encode("the cat")[0] == vocab[">>fra<<"]


def test_a_sentencepiece_vocabulary_numbers_the_pieces_itself(tmp_path, pieces):
    """Marian's .spm vocabularies: the SentencePiece model's ids are the model's."""
    spm_path, _ = pieces
    root = tmp_path / "m"
    root.mkdir()
    shutil.copy(spm_path, root / "vocab.spm")
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_path))
    build(root, pieces, tokens=[sp.id_to_piece(i) for i in range(sp.get_piece_size())], spm=False)
    settings = yaml.safe_load((root / "decoder.yml").read_text())
    (root / "decoder.yml").write_text(yaml.safe_dump({**settings, "vocabs": ["vocab.spm", "vocab.spm"]}))
    loaded = load_model(str(root))
    assert loaded.model.cfg.eos_id == sp.eos_id() and loaded.model.cfg.unk_id == sp.unk_id()
    assert loaded.tokenizer.encode("the cat") == sp.encode("the cat") + [sp.eos_id()]


@pytest.mark.parametrize("which", ["directory", "npz"])
def test_inspect_reads_a_marian_model_as_the_load_does(tmp_path, pieces, monkeypatch, which):
    root = build(tmp_path / "m", pieces, layout={"shared": False, "tied_output": False})
    summary = assert_inspect_matches_the_loaded_model(
        str(root if which == "directory" else root / "model.npz"), monkeypatch
    )
    assert summary.format == "marian" and summary.defaults["beam_size"] == 4


def test_a_load_names_every_file_it_read(tmp_path, pieces):
    """What the resume signature hashes (signature.py): decoder.yml, the weights, the vocabularies,
    the SentencePiece models."""
    root = build(tmp_path / "m", pieces, target_tokens=pieces[1])
    names = sorted(p.rsplit("/", 1)[-1] for p in load_model(str(root)).files)
    assert names == ["decoder.yml", "model.npz", "source.spm", "source.vocab.yml", "target.spm", "target.vocab.yml"]


def test_an_npz_finds_marian_s_own_decoder_yml_beside_it(tmp_path, pieces):
    root = build(tmp_path / "m", pieces)
    (root / "decoder.yml").rename(root / "model.npz.decoder.yml")  # what Marian's training writes
    assert load_model(str(root / "model.npz")).format == "marian"


def edit_yaml(name):
    def change(root, **values):
        settings = yaml.safe_load((root / name).read_text())
        (root / name).write_text(yaml.safe_dump({**settings, **values}))

    return change


def write(name, text):
    return lambda root: (root / name).write_text(text)


REFUSED = {  # case -> (build's keywords, a change of the written directory, what the one line says)
    "RNN model": (
        dict(options={"type": "s2s"}),
        None,
        "Marian model type 's2s' (an RNN encoder-decoder) is not supported; only type: transformer",
    ),
    "SSRU decoder": (
        dict(options={"transformer-decoder-autoreg": "rnn"}),
        None,
        "Marian option transformer-decoder-autoreg: 'rnn' (an average-attention (AAN) or RNN (SSRU) "
        "decoder) is not supported",
    ),
    "average attention": (
        dict(options={"transformer-decoder-autoreg": "average-attention"}),
        None,
        "transformer-decoder-autoreg: 'average-attention'",
    ),
    "gelu": (
        dict(options={"transformer-ffn-activation": "gelu"}),
        None,
        "transformer-ffn-activation: 'gelu' is not supported (swish, relu)",
    ),
    "deep filters": (dict(options={"transformer-ffn-depth": 3}), None, "transformer-ffn-depth: 3"),
    "tied layers": (dict(options={"transformer-tied-layers": [1, 1]}), None, "transformer-tied-layers: [1, 1]"),
    "highway": (
        dict(options={"transformer-postprocess": "dhn"}),
        None,
        "transformer-preprocess '' with transformer-postprocess 'dhn' are not supported",
    ),
    "two norms": (
        dict(options={"transformer-preprocess": "n"}),
        None,
        "transformer-preprocess 'n' with transformer-postprocess 'dan'",
    ),
    "skip on top": (dict(options={"transformer-postprocess-top": "a"}), None, "transformer-postprocess-top: 'a'"),
    "factored outputs": (dict(options={"lemma-dim-emb": 16}), None, "lemma-dim-emb: 16 (factored outputs)"),
    "factored embeddings": (dict(options={"factors-combine": "concat"}), None, "factors-combine: 'concat'"),
    "right to left": (dict(options={"right-left": True}), None, "right-left: True (a right-to-left model)"),
    "decoder ffn": (
        dict(options={"transformer-decoder-dim-ffn": 128}),
        None,
        "transformer-decoder-dim-ffn: 128 differs from transformer-dim-ffn (64)",
    ),
    "alignment layer": (
        dict(options={"transformer-guided-alignment-layer": "7"}),
        None,
        "transformer-guided-alignment-layer: '7' is not a layer of the 2-layer decoder",
    ),
    "trained positions": (
        dict(edit=lambda a: a.update(Wpos=np.zeros((8, D), np.float32))),
        None,
        "array Wpos (trained position embeddings, not supported) is not one of the Transformer",
    ),
    "multi-source": (
        dict(edit=lambda a: a.update(decoder_l1_context_enc2_Wq=np.zeros((D, D), np.float32))),
        None,
        "decoder_l1_context_enc2_Wq (a second encoder (multi-source), not supported)",
    ),
    "missing array": (dict(edit=lambda a: a.pop("decoder_l2_ffn_W2")), None, "array decoder_l2_ffn_W2 is missing"),
    "more layers": (dict(options={"enc-depth": 3}), None, "array encoder_l3_self_Wq is missing"),
    "fewer layers": (dict(options={"dec-depth": 1}), None, "array decoder_l2_context_Wk is not one of"),
    "wrong shape": (
        dict(edit=lambda a: a.update(encoder_l1_ffn_W1=np.zeros((D, 65), np.float32))),
        None,
        "array encoder_l1_ffn_W1 has shape (32, 65), the model's options (dim-emb 32, transformer-dim-ffn 64",
    ),
    "integer weights": (
        dict(edit=lambda a: a.update(Wemb=a["Wemb"].astype(np.int32))),
        None,
        "array Wemb holds I32; weights must be floating-point",
    ),
    "word penalty": ({"word-penalty": 0.5}, None, "word-penalty is not supported (nmtdecode has no word penalty)"),
    "sampling": ({"output-sampling": True}, None, "output-sampling is not read from decoder.yml"),
    "ensemble": ({"models": ["model.npz", "other.npz"]}, None, "models: 2 models (a Marian ensemble)"),
    "binary model": ({"models": ["model.bin"]}, None, "only Marian's .npz models are read"),
    "three vocabularies": ({"vocabs": ["vocab.yml"] * 3}, None, "vocabs: expected the source and target"),
    "missing vocabulary": ({"vocabs": ["vocab.yml", "gone.yml"]}, None, "gone.yml is missing"),
    "factored vocabulary": (
        {"vocabs": ["vocab.fsv", "vocab.fsv"]},
        write("vocab.fsv", "x"),
        "factored vocabularies (.fsv) are not supported",
    ),
    "vocabulary too large": (dict(options={"dim-vocabs": [40, 40]}), None, "array Wemb has shape"),
    "vocabulary beyond the rows": (
        {},
        write("vocab.yml", "</s>: 0\n<unk>: 1\nx: 500\n"),
        "the source vocabulary has 501 entries, the model's embeddings",
    ),
    "no eos": ({}, write("vocab.yml", "<unk>: 1\nx: 2\n"), "no </s> entry"),
    "id not a number": (
        {},
        write("vocab.yml", "</s>: 0\n<unk>: one\n"),
        "line 2: not a `piece: id` entry: '<unk>: one'",
    ),
    "no options": ({}, "no-options", "no special:model.yml"),
    "no source.spm": (dict(spm=False), None, "source.spm is missing: with a YAML vocabulary"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_nmtdecode_does_not_compute_is_refused_by_name(tmp_path, pieces, case):
    keywords, change, message = REFUSED[case]
    build_keywords = {k: v for k, v in keywords.items() if k in ("options", "edit", "spm")}
    decoder = {k: v for k, v in keywords.items() if k not in build_keywords}
    root = build(tmp_path / "m", pieces, **build_keywords, **decoder)
    if change == "no-options":
        with np.load(root / "model.npz") as stored:
            arrays = {n: stored[n] for n in stored.files if not n.startswith("special:")}
        np.savez(root / "model.npz", **arrays)
    elif change:
        change(root)
    with pytest.raises(ModelError, match=re.escape(message)) as error:
        load_model(str(root))
    assert "\n" not in str(error.value)


def test_an_npz_without_decoder_yml_says_what_is_missing(tmp_path, pieces):
    root = build(tmp_path / "m", pieces)
    (root / "decoder.yml").unlink()
    with pytest.raises(ModelError, match=r"no decoder.yml beside it \(nor model.npz.decoder.yml\)"):
        load_model(str(root / "model.npz"))


def bomb_in_decoder_yml(root):
    settings = yaml.safe_load((root / "decoder.yml").read_text())
    text = alias_bomb("bomb") + yaml.safe_dump({k: v for k, v in settings.items() if k != "vocabs"})
    (root / "decoder.yml").write_text(text + "vocabs: *a8\n")


def bomb_in_model_options(root):
    with np.load(root / "model.npz") as stored:
        arrays = {n: stored[n] for n in stored.files if not n.startswith("special:")}
        options = bytes(stored["special:model.yml"]).rstrip(b"\0").decode()
    text = alias_bomb("bomb") + options + "transformer-tied-layers: *a8\n"
    write_npz(root / "model.npz", arrays, yaml.safe_load(text))  # PyYAML writes the aliases back


HOSTILE = {  # case -> (a change of the written directory, what the one line says)
    "alias bomb in decoder.yml": (
        bomb_in_decoder_yml,
        "decoder.yml cannot be read: it expands to more than 1,000,000 values",
    ),
    "alias bomb in the model's options": (
        bomb_in_model_options,
        "special:model.yml cannot be read: it expands to more than 1,000,000 values",
    ),
    "a FIFO for the vocabulary": (
        lambda root: (root / "vocab.yml").unlink() or os.mkfifo(root / "vocab.yml"),
        "vocab.yml is not a regular file (a FIFO, device or folder)",
    ),
    "a vocabulary nested deep": (
        write("vocab.yml", "</s>: 0\n<unk>: 1\nx: " + "[" * 20000 + "]" * 20000 + "\n"),
        "vocab.yml cannot be read: line 3: not a `piece: id` entry",
    ),
    "a JSON vocabulary nested deep": (
        write("vocab.yml", "{" + '"a": [' * 20000 + "]" * 20000 + "}"),
        "vocab.yml cannot be read: not a JSON object of pieces and ids",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_file_ends_in_one_line(tmp_path, pieces, case):
    change, message = HOSTILE[case]
    root = build(tmp_path / "m", pieces)
    change(root)
    with pytest.raises(ModelError, match=re.escape(message)) as error:
        load_model(str(root))
    assert "\n" not in str(error.value) and len(str(error.value)) < 400


def test_a_refused_model_is_one_line_and_exit_1(tmp_path, pieces, lines_file, cli):
    root = build(tmp_path / "m", pieces, options={"type": "amun"})
    out = cli("translate", "--model", root, "--src", lines_file(["a b"]), text=True)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and "Marian model type 'amun' (an RNN" in out.stderr


def test_translate_a_marian_directory_with_marian_s_nbest_output(tmp_path, pieces, lines_file, cli):
    root = build(tmp_path / "m", pieces)
    out = cli(
        "translate",
        "--model",
        root,
        "--src",
        lines_file(["the cat", "", "a dog walks"]),
        "--n-best",
        "2",
        "--format",
        "nbest-marian",
        "--max-length",
        "6",
        "--quiet",
        text=True,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split(" ||| ")[0] for line in lines] == ["0", "0", "1", "1", "2", "2"]
    assert all(line.split(" ||| ")[2].startswith("F0= ") for line in lines)
