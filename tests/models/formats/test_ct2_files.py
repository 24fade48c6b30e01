"""CTranslate2 model folders (models/formats/ct2*.py) on folders the tests write by hand from the
format's facts (ct2_files.py): the model read is the model written (every step's logits, float32;
int8 rows and scales kept as stored), the vocabularies and the tokenizer found beside the folder,
inspect without torch, and every refusal in one line. Against CTranslate2 itself on its own
converters' folders: tests/compat/test_ctranslate2_folders.py."""

import json
import re
import shutil

import pytest
import torch

from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.detect import model_format
from nmtdecode.models.formats import ct2_binary
from nmtdecode.models.formats.ct2_binary import read_model_bin
from nmtdecode.models.formats.ct2_vocab import read_vocabulary
from nmtdecode.models.loading import load_model
from nmtdecode.models.placement import Placement
from nmtdecode.models.quantize import Int8Embedding, Int8TiedOutput
from nmtdecode.options.config import ConfigError

from tests.helpers import EOS, REPO, T5_LIKE, random_sources, tiny_transformer, train_sentencepiece
from tests.models.formats.ct2_files import quantized, spec_variables, write_folder, write_model_bin
from tests.models.test_inspect import assert_inspect_matches_the_loaded_model

VOCAB = 48
DEMO = REPO / "data" / "demo"
SWITCHES = ("pre_norm", "share_embeddings", "tie_output", "layernorm_embedding", "embed_scale", "activation")
T5_SWITCHES = (
    "norm",
    "gated_ffn",
    "head_dim",
    "scale_queries",
    "output_scale",
    "relative_buckets",
    "relative_max_distance",
    "decoder_layers",
    "norm_eps",
)
# T5-like switches as a T5 converted by CTranslate2 has them: shared embeddings, RMS norms of
# epsilon 1e-6 (its default for a norm without a beta: config.json leaves it unset)
T5 = {**T5_LIKE, "share_embeddings": True, "norm_eps": 1e-6}
TOKENS = ["<blank>", "<unk>", "<s>", "</s>", *(f"w{i}" for i in range(4, VOCAB))]


def logits_of(model, source: list[int], target: list[int]) -> torch.Tensor:
    src = torch.tensor([source])
    with torch.no_grad():
        return model(src, torch.ones_like(src, dtype=torch.bool), torch.tensor([[model.cfg.decoder_start_id, *target]]))


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"pre_norm": False, "encoder_final_norm": False, "decoder_final_norm": False, "activation": "gelu"},
        {"share_embeddings": True, "tie_output": False, "layernorm_embedding": True, "embed_scale": 2.5},
        {**T5, "output_scale": 32**-0.5},
        {**T5, "tie_output": False, "gated_ffn": False, "activation": "relu"},
    ],
    ids=[
        "pre-norm, tied output",
        "post-norm, gelu",
        "shared embeddings, own output, embedding norm",
        "T5 v1.0-like: gated, tied and scaled output",
        "T5 v1.1-like: own output",
    ],
)
def test_the_model_read_is_the_model_written(tmp_path, overrides):
    ours = tiny_transformer(seed=1, vocab=VOCAB, eos_bias=1.5, **overrides)
    loaded = load_model(str(write_folder(tmp_path / "ct2", ours, TOKENS)))
    t5 = ours.cfg.positions == "relative"
    assert loaded.format == f"ctranslate2/{'t5' if t5 else 'transformer'}"
    assert model_format(str(tmp_path / "ct2")) == "ctranslate2"
    for field in (*SWITCHES, *(T5_SWITCHES if t5 else ())):
        expected = getattr(ours.cfg, field)  # a float as CTranslate2 stores it: float32
        assert getattr(loaded.model.cfg, field) == (pytest.approx(expected) if type(expected) is float else expected)
    for source in random_sources(4, VOCAB, seed=2):
        target = random_sources(1, VOCAB, seed=len(source))[0]
        torch.testing.assert_close(logits_of(loaded.model, source, target), logits_of(ours, source, target))


@pytest.mark.parametrize("overrides", [{}, T5], ids=["transformer", "T5-like"])
def test_int8_rows_are_decoded_as_stored(tmp_path, overrides):
    """An int8 folder on a CPU keeps CTranslate2's rows: the int8 layers hold the very bytes, with
    the reciprocal of its scales; where the placement names float products they are dequantized."""
    ours = tiny_transformer(seed=1, vocab=VOCAB, eos_bias=1.5, **overrides)
    path = write_folder(tmp_path / "ct2", ours, TOKENS, int8=True)
    loaded = load_model(str(path), placement=Placement(backend="auto"))
    assert loaded.gemm == "int8"
    table, scale = quantized(ours.tgt_embed.tokens.weight.detach())
    embedding = loaded.model.tgt_embed.tokens
    assert isinstance(embedding, Int8Embedding) and torch.equal(embedding.values, table)
    torch.testing.assert_close(embedding.scales, scale.reciprocal())
    assert isinstance(loaded.model.output, Int8TiedOutput) and loaded.model.output.embedding is embedding
    first = "gate_up" if ours.cfg.gated_ffn else "up"  # a gated layer's: linear_0 and linear_0_noact, joined
    up = getattr(loaded.model.encoder_layers[0].ffn, first)
    values, scales = quantized(getattr(ours.encoder_layers[0].ffn, first).weight.detach())
    assert torch.equal(up.embedding.values, values) and torch.allclose(up.embedding.scales, scales.reciprocal())
    dequantized = load_model(str(path), placement=Placement(backend="torch")).model
    torch.testing.assert_close(getattr(dequantized.encoder_layers[0].ffn, first).weight, values / scales[:, None])
    source, target = [5, 9, 12, EOS], [7, 8]
    torch.testing.assert_close(
        logits_of(loaded.model, source, target), logits_of(ours, source, target), atol=0.15, rtol=0
    )


def test_a_header_is_read_as_written_in_every_binary_version(tmp_path):
    for version in (3, 4, 5, 6):
        values = {
            "a/weight": torch.arange(6, dtype=torch.float32).view(2, 3),
            "a/n": torch.tensor(4, dtype=torch.int16),
        }
        write_model_bin(tmp_path / "model.bin", {**values, "a/flag": True}, {"b/weight": "a/weight"}, version=version)
        read = read_model_bin(str(tmp_path / "model.bin"))
        assert (read.binary_version, read.spec, read.revision) == (version, "TransformerSpec", 7)
        assert read.find("b/weight") is read.variables["a/weight"] and read.scalar("a/n") == 4
        assert read.variables["a/weight"].shape == (2, 3) and read.scalar("a/flag") == 1


HEADERS = {  # case -> (a change of a good model.bin's bytes, what the one line says)
    "not CTranslate2's": (lambda d: b"\x07\x00\x00\x00" + d[4:], "binary version 7 is not one CTranslate2 has written"),
    "truncated": (lambda d: d[: len(d) // 2], "is incomplete"),
    "a wrong payload size": (
        lambda d: d.replace(b"\x40\x00\x00\x00", b"\x41\x00\x00\x00", 1),
        "an invalid payload size",
    ),
    "empty": (lambda d: b"", "is incomplete: it ends inside the binary version"),
}


@pytest.mark.parametrize("case", list(HEADERS))
def test_a_damaged_model_bin_is_one_line(tmp_path, case):
    change, message = HEADERS[case]
    path = write_folder(tmp_path / "ct2", tiny_transformer(vocab=VOCAB), TOKENS)
    (path / "model.bin").write_bytes(change((path / "model.bin").read_bytes()))
    with pytest.raises(ModelError, match=re.escape(message)) as error:
        load_model(str(path))
    assert "\n" not in str(error.value)


def with_variable(name, value, *more):
    """A change of a folder: model.bin with the variable `name` (and more name, value pairs) set."""

    def change(path):
        variables, aliases = spec_variables(tiny_transformer(vocab=VOCAB))
        write_model_bin(path / "model.bin", {**variables, name: value, **dict(zip(more[::2], more[1::2]))}, aliases)

    return change


def without(name):
    """A change of a folder: model.bin without the variable `name`."""

    def change(path):
        variables, aliases = spec_variables(tiny_transformer(vocab=VOCAB))
        del variables[name]
        write_model_bin(path / "model.bin", variables, aliases)

    return change


def with_config(**values):
    def change(path):
        config = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**config, **values}))

    return change


REFUSED = {  # case -> (a change of a good folder, what the one line says)
    "relative positions": (
        with_variable("encoder/layer_0/self_attention/relative_position_keys", torch.zeros(3, 8)),
        "relative_position_keys (relative position representations (OpenNMT-py's max_relative_positions)) "
        "is not supported",
    ),
    "a relative attention bias in one layer": (
        with_variable("encoder/layer_0/self_attention/relative_attention_bias", torch.zeros(32, 4)),
        "only some of the encoder's layers have a relative attention bias",
    ),
    "UMT5's relative attention bias in every layer": (
        with_variable(
            "encoder/layer_0/self_attention/relative_attention_bias",
            torch.zeros(32, 4),
            "encoder/layer_1/self_attention/relative_attention_bias",
            torch.ones(32, 4),
        ),
        "the encoder's layers have relative attention biases of their own (UMT5's)",
    ),
    "some feed-forward layers gated": (
        with_variable("decoder/layer_1/ffn/linear_0_noact/weight", torch.zeros(64, 32)),
        "1 of the 4 feed-forward layers are gated",
    ),
    "a query scale of its own": (
        with_variable("encoder/layer_0/self_attention/queries_scale", 0.5),
        "queries_scale ['0.5']: only 1 (T5's) or 1/sqrt(head width)",
    ),
    "a norm without its beta": (without("encoder/layer_1/ffn/layer_norm/beta"), "has no beta where others have one"),
    "an unknown variable": (
        with_variable("decoder/something_new", torch.zeros(3)),
        "variable decoder/something_new is not one this reader computes with",
    ),
    "multi-query attention": (with_variable("encoder/multi_query_attention", True), "multi_query_attention = 1"),
    "Marian's gelu": (
        with_variable(
            "encoder/activation",
            torch.tensor(4, dtype=torch.int8),
            "decoder/activation",
            torch.tensor(4, dtype=torch.int8),
        ),
        "activation 4 (Marian's gelu, ...) is not supported",
    ),
    "a decoder-only model": (
        lambda p: write_model_bin(p / "model.bin", {}, spec="TransformerDecoderSpec", revision=8),
        "spec 'TransformerDecoderSpec' (a decoder-only model) is not supported",
    ),
    "an old revision": (
        lambda p: write_model_bin(p / "model.bin", {}, revision=2),
        "TransformerSpec revision 2 is not read (revisions 3 to 7)",
    ),
    "a start left to the user, without language tags": (
        with_config(decoder_start_token=None),
        "decoder_start_token null (each target prefix's first token starts the decoder) and no language tags",
    ),
    "a start token not in the vocabulary": (
        with_config(decoder_start_token="<lang>"),
        "decoder_start_token '<lang>' is not in the vocabulary",
    ),
    "a vocabulary of other size": (
        lambda p: (p / "shared_vocabulary.json").write_text(json.dumps(TOKENS[:-1])),
        "the source vocabulary has 47 pieces (<unk> appended when missing), the embeddings 48 rows",
    ),
    "no vocabulary": (lambda p: (p / "shared_vocabulary.json").unlink(), "no shared_vocabulary.json/.txt"),
    "source features": (
        lambda p: [(p / "shared_vocabulary.json").rename(p / "source_1_vocabulary.json")],
        "source features (source_1_vocabulary, ...) are not supported",
    ),
    "a vocabulary that is no list": (
        lambda p: (p / "shared_vocabulary.json").write_text('{"a": 1}'),
        "shared_vocabulary.json cannot be read: expected a JSON list of pieces",
    ),
    "an int8 weight without its scale": (
        with_variable("decoder/layer_0/ffn/linear_0/weight", torch.zeros(64, 32, dtype=torch.int8)),
        "decoder/layer_0/ffn/linear_0/weight is I8 without its float32 scale",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_what_nmtdecode_does_not_compute_is_refused_by_name(tmp_path, case):
    change, message = REFUSED[case]
    path = write_folder(tmp_path / "ct2", tiny_transformer(vocab=VOCAB), TOKENS)
    change(path)
    with pytest.raises(ModelError, match=re.escape(message)) as error:
        load_model(str(path))
    assert "\n" not in str(error.value)


def test_a_model_bin_bounds_its_counts(tmp_path, monkeypatch):
    write_model_bin(tmp_path / "model.bin", {f"v{i}": 1.0 for i in range(5)})
    monkeypatch.setattr(ct2_binary, "MAX_VARIABLES", 4)
    with pytest.raises(ModelError, match="5 variables, more than any model holds"):
        read_model_bin(str(tmp_path / "model.bin"))


@pytest.mark.parametrize(
    "text, pieces",
    [
        ("a\nb\n", ["a", "b"]),
        ("a\r\nb\r\n", ["a", "b"]),  # every line ends with \r: dropped, as CTranslate2 drops it
        ("a\r\nb\n", ["a\r", "b"]),  # not every line: a piece may end with \r
        ("a\u2028b\n\x85\n", ["a\u2028b", "\x85"]),  # only \n ends a line
    ],
)
def test_a_text_vocabulary_is_read_as_ctranslate2_reads_it(tmp_path, text, pieces):
    (tmp_path / "shared_vocabulary.txt").write_bytes(text.encode("utf-8"))
    assert read_vocabulary(str(tmp_path), "shared_vocabulary") == pieces


@pytest.fixture(scope="module")
def argos(tmp_path_factory):
    """An Argos Translate package: the CTranslate2 folder in model/, sentencepiece.model beside it,
    the vocabulary of that SentencePiece model's pieces (an OpenNMT-py model's: no EOS on sources)."""
    import sentencepiece as spm

    root = tmp_path_factory.mktemp("argos")
    spm_path = train_sentencepiece(root, vocab_size=VOCAB)
    shutil.move(spm_path, root / "sentencepiece.model")
    sp = spm.SentencePieceProcessor(model_file=str(root / "sentencepiece.model"))
    tokens = [sp.id_to_piece(i) for i in range(VOCAB)]
    tokens[:4] = ["<blank>", "<unk>", "<s>", "</s>"]
    write_folder(root / "model", tiny_transformer(seed=4, vocab=VOCAB, eos_bias=0.5), tokens)
    return root, sp, tokens


def test_an_argos_package_finds_its_sentencepiece_model(argos):
    root, sp, tokens = argos
    loaded = load_model(str(root / "model"))
    text = "the house is red ."
    pieces = sp.encode(text, out_type=str)
    assert loaded.tokenizer.encode(text) == [tokens.index(p) for p in pieces]  # no EOS: the config's flags
    assert loaded.tokenizer.encode_pieces(pieces) == loaded.tokenizer.encode(text)
    assert loaded.tokenizer.decode(loaded.tokenizer.encode(text)) == text
    assert [p.rsplit("/", 1)[-1] for p in loaded.files][-1] == "sentencepiece.model"


def test_translate_text_through_the_sentencepiece_model_beside_it(argos, lines_file, cli):
    """The command on text: the pieces of sentencepiece.model in, each hypothesis's pieces decoded
    by it out, the search CTranslate2's defaults (beam 2, its stop rule, length penalty 1)."""
    from nmtdecode.compat import ctranslate2 as compat

    root, sp, _ = argos
    lines = ["the house is red .", "good morning", "where is the station ?"]
    out = cli("translate", "--model", root / "model", "--src", lines_file(lines), "--quiet", text=True)
    assert out.returncode == 0, out.stderr
    translator = compat.Translator(str(root / "model"))
    results = translator.translate_batch([sp.encode(t, out_type=str) for t in lines])
    assert out.stdout.splitlines() == [sp.decode(r.hypotheses[0]) for r in results]
    assert len({len(r.hypotheses[0]) for r in results}) > 1  # outputs of different lengths


def test_tokenizer_names_the_sentencepiece_model(argos, tmp_path):
    """--tokenizer: a SentencePiece model, or a folder holding one; without one anywhere, a line is
    its pieces separated by spaces (CTranslate2's translate_file)."""
    root, _, tokens = argos
    bare = shutil.copytree(root / "model", tmp_path / "bare")
    assert load_model(str(bare)).tokenizer.encode(f"{tokens[10]} {tokens[11]} nope") == [10, 11, 1]
    expected = load_model(str(root / "model")).tokenizer.encode("good morning")
    for given in (root / "sentencepiece.model", root):
        assert load_model(str(bare), tokenizer=str(given)).tokenizer.encode("good morning") == expected
    with pytest.raises(
        ConfigError, match="tokenizer: .* is not a SentencePiece model or tokenizer.json, nor a folder holding one"
    ):
        load_model(str(bare), tokenizer=str(tmp_path / "nothing"))
    with pytest.raises(ConfigError, match="a native model, which brings its own tokenizer"):
        load_model(str(DEMO), tokenizer=str(root / "sentencepiece.model"))


@pytest.mark.parametrize("int8, overrides", [(False, {}), (True, {}), (False, T5), (True, T5)])
def test_inspect_reads_a_folder_as_the_load_does(tmp_path, monkeypatch, int8, overrides):
    model = tiny_transformer(vocab=VOCAB, eos_bias=1.0, **overrides)
    path = write_folder(tmp_path / "ct2", model, TOKENS, int8=int8)
    summary = assert_inspect_matches_the_loaded_model(str(path), monkeypatch)
    assert summary.format == f"ctranslate2/{'t5' if overrides else 'transformer'}"
    assert summary.defaults["early_stopping"] == "ctranslate2"


@pytest.mark.parametrize(
    "family, tags, found",
    [
        ("fairseq", ["__en__", "__de__"], ({"en": 6, "de": 7}, "__{}__")),  # M2M100
        ("fairseq", ["eng_Latn", "deu_Latn"], ({"eng_Latn": 6, "deu_Latn": 7}, "{}")),  # NLLB
        ("fairseq", ["en_XX", "de_DE"], ({"en_XX": 6, "de_DE": 7}, "{}")),  # mBART-50
        ("marian", [">>fra<<", ">>deu<<"], ({"fra": 6, "deu": 7}, ">>{}<<")),
        ("transformer", ["__en__", "eng_Latn"], ({}, "{}")),
    ],
)
def test_the_language_tags_of_each_family(family, tags, found):
    from nmtdecode.models.formats.ct2_vocab import Vocabulary, languages

    vocabulary = Vocabulary(["<s>", "<pad>", "</s>", "<unk>", "\u2581a", "b_c", *tags], "<unk>")
    assert languages(family, vocabulary) == found
