"""nmtdecode/models/formats/hf_tokenizers.py against the transformers tokenizers of each family.

Everything is built here, offline: tiny SentencePiece models trained on generated sentences, the
vocab.json files the families ship, and each family's transformers tokenizer, saved with
`save_pretrained` into the directory we then load. Expected ids and texts come from transformers
(or, where said, from the fairseq id layout that transformers' converters spell out), never from
the code under test.

transformers 5 builds NLLB/mBART from a SentencePiece file only through protobuf, which is not
installed here; the tests hand the same pieces, scores and normalisation map (read with
`_proto_fields`) to the tokenizer classes directly, as `SentencePieceExtractor` would.
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import warnings

import pytest
import sentencepiece as spm

# The test extra pins transformers 5: its tokenizers are the reference.
import transformers
from transformers.convert_slow_tokenizer import MBart50Converter, MBartConverter, NllbConverter
from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES as NLLB_CODES
from transformers.tokenization_utils_base import generate_merges

from nmtdecode.options.config import ConfigError
from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.formats.hf_tokenizers import load_tokenizer
from nmtdecode.models.transformer import TransformerConfig

WORDS = (
    "the a house cat dog runs quickly über straße café naïve Zürich green blue red tree river mountain "
    "small large walks sees eats fish bread water 42 1999 hello world"
).split()
SENTENCES = [
    "Hello world.",
    "The small cat walks over the green river!",
    "Zürich café naïve straße",
    "unknown ☃ and ö and 漢字",
    "42 1999, the dog's fish?",
    "ﬁne ＡＢＣ",
    "a\ttab and\nnewline",
    "",
    "  leading and  double  spaces",
    "trailing ",
    " ",
    "x </s> y <unk> z",
    ">>fra<< the cat",
    "eng_Latn en_XX dog",
    "Is it red ? Yes , it's blue .",
]
# What SentencePiece (the fairseq side) and transformers 5's rebuilt pipelines agree on: no trailing or
# repeated whitespace, no special-token strings in the text (see the module docstring of hf_tokenizers).
PLAIN = [
    s
    for s in SENTENCES
    if " ".join(s.split()) == s.replace("\t", " ").replace("\n", " ") and "<" not in s and "_" not in s
]


def _sentences(seed: int) -> list[str]:
    r = random.Random(seed)
    return [
        " ".join(r.choice(WORDS) for _ in range(r.randint(3, 10))).capitalize() + r.choice(".!?,") for _ in range(300)
    ]


def _train(path, model_type: str, seed: int = 0) -> spm.SentencePieceProcessor:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_sentences(seed)),
        model_writer=model,
        vocab_size=120,
        model_type=model_type,
        character_coverage=1.0,
        minloglevel=2,
    )
    with open(path, "wb") as f:
        f.write(model.getvalue())
    return spm.SentencePieceProcessor(model_file=str(path))


def _proto_fields(buf: bytes):
    """(field number, value) pairs of a protobuf message: just enough to read a SentencePiece model."""

    def varint(i):
        value = shift = 0
        while True:
            value, shift, i = value | (buf[i] & 0x7F) << shift, shift + 7, i + 1
            if buf[i - 1] < 0x80:
                return value, i

    i = 0
    while i < len(buf):
        key, i = varint(i)
        if key & 7 == 0:
            value, i = varint(i)
        elif key & 7 == 2:
            n, i = varint(i)
            value, i = buf[i : i + n], i + n
        else:
            size = {1: 8, 5: 4}[key & 7]
            value, i = buf[i : i + size], i + size
        yield key >> 3, value


def _charsmap(model_path) -> bytes | None:
    """ModelProto.normalizer_spec (3) .precompiled_charsmap (2): the NFKC map transformers copies."""
    with open(model_path, "rb") as f:
        spec = dict(_proto_fields(f.read())).get(3, b"")
    return dict(_proto_fields(spec)).get(2)


def _ours(path, model_type: str, decoder_start: int = 2, vocab_size: int = 1000):
    cfg = TransformerConfig(
        src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=8, heads=1, decoder_start_id=decoder_start
    )
    return load_tokenizer(str(path), {"model_type": model_type}, cfg)


def _quiet(make):
    with warnings.catch_warnings():  # Marian asks for sacremoses
        warnings.simplefilter("ignore")
        return make()


def _compare(ours, hf, sentences, tags: dict[str, int], frame=(1, 1), tgt: str | None = None):
    """encode, encode_target and decode agree with transformers. `frame`: how many ids transformers puts
    before and after a target sentence; `tags`: its language-code ids (ours leave them out of decode)."""
    before, after = frame
    tag_ids = set(tags.values())
    for s in sentences:
        assert ours.encode(s) == hf(s).input_ids, repr(s)
        assert ours.encode_pieces(hf.tokenize(s)) == hf(s).input_ids, repr(s)  # the API's token input
        target = hf(text_target=s).input_ids
        assert ours.encode_target(s) == target[before : len(target) - after], repr(s)
        generated = [hf.pad_token_id, hf.unk_token_id] + target + [hf.eos_token_id, hf.pad_token_id]
        if tgt:
            generated = [tags[tgt]] + generated
        expected = hf.decode([i for i in generated if i not in tag_ids], skip_special_tokens=True)
        assert ours.decode(generated) == expected, repr(s)
        assert [ours.target_piece(i) for i in generated] == hf.convert_ids_to_tokens(generated), repr(s)
        pieces = hf.tokenize(s)  # --dump-beam's source pieces: the source vocabulary's entries
        known = [p if i != hf.unk_token_id else hf.unk_token for p, i in zip(pieces, hf.convert_tokens_to_ids(pieces))]
        assert [ours.source_piece(i) for i in hf.convert_tokens_to_ids(pieces)] == known, repr(s)
        # the pieces of --report-align: one per id, the vocabulary's spelling (the text's where it is <unk>)
        source_ids = hf(s).input_ids
        pieces = ours.source_pieces(s)
        assert len(pieces) == len(source_ids), repr(s)
        assert ours.source_pieces(ours.source.split_pieces(s)) == pieces, repr(s)  # the API's token input
        assert all(
            ours.source.id(piece) == i or ours.source_piece(i) == piece
            for piece, i in zip(pieces, source_ids)
            if i != hf.unk_token_id
        ), repr(s)  # the source vocabulary's


def _save(hf, path) -> str:
    _quiet(lambda: hf.save_pretrained(str(path)))
    return str(path)


# Marian ---------------------------------------------------------------------------------------------


def _marian_dir(root, separate: bool):
    """source.spm/target.spm and vocab.json as OPUS-MT ships them: </s> 0, <unk> 1, the pieces of both
    models, >>xx<< target tags, <pad> last; target_vocab.json when the vocabularies are separate."""
    src, tgt = _train(root / "source.spm", "unigram", 0), _train(root / "target.spm", "unigram", 1)

    def vocab(*models, tags=()):
        tokens = ["</s>", "<unk>"]
        for sp in models:
            tokens += [p for p in map(sp.id_to_piece, range(3, sp.get_piece_size())) if p not in tokens]
        return {t: i for i, t in enumerate(tokens + [f">>{t}<<" for t in tags] + ["<pad>"])}

    tables = (
        {"vocab": vocab(src, tags=("fra", "deu")), "target_vocab": vocab(tgt)}
        if separate
        else {"vocab": vocab(src, tgt, tags=("fra", "deu"))}
    )
    for name, table in tables.items():
        (root / f"{name}.json").write_text(json.dumps(table))
    hf = _quiet(
        lambda: transformers.MarianTokenizer(
            str(root / "source.spm"),
            str(root / "target.spm"),
            str(root / "vocab.json"),
            separate_vocabs=separate,
            target_vocab_file=str(root / "target_vocab.json") if separate else None,
        )
    )
    saved = _save(hf, root / "saved")
    return saved, _quiet(lambda: transformers.MarianTokenizer.from_pretrained(saved))


@pytest.mark.parametrize("separate", [False, True])
def test_marian_matches_transformers(tmp_path, separate):
    saved, hf = _marian_dir(tmp_path, separate)
    ours = _ours(saved, "marian")
    tags = {t: i for t, i in hf.get_vocab().items() if t.startswith(">>") and t.endswith("<<")}
    _compare(ours, hf, SENTENCES, tags, frame=(0, 1))
    assert (ours.unk_id, ours.eos_id) == (hf.unk_token_id, hf.eos_token_id)
    assert sorted(ours.language_codes()) == ["deu", "fra"]
    assert ours.set_languages(None, "fra") is None  # a source prefix, nothing forced on the target
    for s in SENTENCES:
        if not s.startswith((" ", ">>")):
            assert ours.encode(s) == hf(f">>fra<< {s}").input_ids, repr(s)
    assert ours.set_languages(None, ">>deu<<") is None and ours.encode("the cat") == hf(">>deu<< the cat").input_ids
    ours.set_languages(None, None)
    assert ours.encode("the cat") == hf("the cat").input_ids
    with pytest.raises(ConfigError, match="src_lang"):
        ours.set_languages("eng", None)
    with pytest.raises(ConfigError, match=r"tgt_lang: 'ita'.*fra"):
        ours.set_languages(None, "ita")


# M2M100 ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("codes, clean_up", [("m2m100", False), ("wmt21", True)])
def test_m2m100_matches_transformers(tmp_path, codes, clean_up):
    sp = _train(tmp_path / "sentencepiece.bpe.model", "bpe")
    pieces = sorted(sp.id_to_piece(i) for i in range(3, sp.get_piece_size()))  # not SentencePiece's order
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{p: 4 + i for i, p in enumerate(pieces)}}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    made = transformers.M2M100Tokenizer(
        str(tmp_path / "vocab.json"),
        str(tmp_path / "sentencepiece.bpe.model"),
        src_lang="de",
        language_codes=codes,
        clean_up_tokenization_spaces=clean_up,
    )
    hf = transformers.M2M100Tokenizer.from_pretrained(_save(made, tmp_path / "saved"))
    ours = _ours(tmp_path / "saved", "m2m_100")
    tags = {c: hf.get_lang_id(c) for c in hf.lang_code_to_id}
    assert ours.language_codes() == list(tags)
    hf.tgt_lang = "en"
    _compare(ours, hf, SENTENCES, tags, tgt="en")  # source: __de__ (tokenizer_config.json) X </s>
    assert ours.set_languages("ru", "ja") == tags["ja"]
    hf.src_lang = "ru"
    assert [ours.encode(s) for s in SENTENCES] == [hf(s).input_ids for s in SENTENCES]
    with pytest.raises(ConfigError, match=rf"src_lang: 'xx'.*{', '.join(list(tags)[:3])}"):
        ours.set_languages("xx", None)


# NLLB, mBART-50, mBART: tokenizer.json, or a SentencePiece model with fairseq ids ----------------------


def _spm_inputs(sp, model_path):
    return (
        [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())],
        {sp.id_to_piece(i): i for i in range(sp.get_piece_size())},
        _charsmap(model_path),
    )


def _without_tokenizer_json(saved, root) -> str:
    """The saved directory as an older export ships it: tokenizer_config.json + sentencepiece.bpe.model."""
    os.makedirs(root)
    shutil.copy(os.path.join(saved, "tokenizer_config.json"), root)
    return str(root)


def _tags(hf, codes) -> dict[str, int]:
    return dict(zip(codes, hf.convert_tokens_to_ids(list(codes))))


@pytest.mark.parametrize("legacy", [False, True])
def test_nllb_tokenizer_json(tmp_path, legacy):
    model = tmp_path / "sentencepiece.bpe.model"
    _, pieces, charsmap = _spm_inputs(_train(model, "bpe"), model)
    made = transformers.NllbTokenizer(
        **NllbConverter.convert_from_spm(vocab=pieces, merges=generate_merges(pieces)),
        _spm_precompiled_charsmap=charsmap,
        src_lang="fra_Latn",
        legacy_behaviour=legacy,
        clean_up_tokenization_spaces=legacy,
    )  # BPE: ignored
    saved = _save(made, tmp_path / "saved")
    hf, ours = transformers.AutoTokenizer.from_pretrained(saved), _ours(saved, "m2m_100")
    tags = _tags(hf, NLLB_CODES)
    hf.tgt_lang = "deu_Latn"
    _compare(ours, hf, SENTENCES, tags, frame=(0, 2) if legacy else (1, 1), tgt="deu_Latn")
    assert ours.language_codes() == list(tags)
    assert ours.set_languages("zul_Latn", "eng_Latn") == tags["eng_Latn"]
    hf.src_lang = "zul_Latn"
    assert [ours.encode(s) for s in SENTENCES] == [hf(s).input_ids for s in SENTENCES]
    with pytest.raises(ConfigError, match=r"tgt_lang: 'eng_latn'.*eng_Latn"):
        ours.set_languages(None, "eng_latn")


def test_nllb_sentencepiece_fairseq_ids(tmp_path):
    """Without tokenizer.json: fairseq ids, i.e. <s> <pad> </s> <unk>, the pieces shifted by one, then the
    language codes in transformers' order, then <mask> (the layout of NLLB's published tokenizer.json)."""
    model = tmp_path / "sentencepiece.bpe.model"
    sp = _train(model, "bpe")
    _, pieces, charsmap = _spm_inputs(sp, model)
    n = sp.get_piece_size()
    fairseq = {
        "<s>": 0,
        "<pad>": 1,
        "</s>": 2,
        "<unk>": 3,
        **{sp.id_to_piece(i): i + 1 for i in range(3, n)},
        **{c: n + 1 + i for i, c in enumerate(NLLB_CODES)},
        "<mask>": n + 1 + len(NLLB_CODES),
    }
    hf = transformers.NllbTokenizer(vocab=fairseq, merges=generate_merges(pieces), _spm_precompiled_charsmap=charsmap)
    path = _without_tokenizer_json(_save(hf, tmp_path / "saved"), tmp_path / "spm")
    shutil.copy(model, path)
    ours = _ours(path, "m2m_100")
    tags = _tags(hf, NLLB_CODES)
    hf.tgt_lang = "fra_Latn"
    _compare(ours, hf, PLAIN, tags, tgt="fra_Latn")
    assert ours.target_piece(-1) is None and ours.source_piece(fairseq["<mask>"] + 1) is None  # ids it does not know
    assert ours.set_languages("ces_Latn", "ukr_Cyrl") == tags["ukr_Cyrl"]
    hf.src_lang = "ces_Latn"
    assert [ours.encode(s) for s in PLAIN] == [hf(s).input_ids for s in PLAIN]


def _mbart(tmp_path, fifty: bool):
    model = tmp_path / "sentencepiece.bpe.model"
    scores, _, charsmap = _spm_inputs(_train(model, "unigram"), model)
    if fifty:
        made = transformers.MBart50Tokenizer(
            **MBart50Converter.convert_from_spm(vocab=scores),
            src_lang="ro_RO",
            _spm_precompiled_charsmap=charsmap,
            clean_up_tokenization_spaces=True,
        )
    else:
        made = transformers.MBartTokenizer(**MBartConverter.convert_from_spm(vocab=scores), src_lang="ro_RO")
    saved = _save(made, tmp_path / "saved")
    spm_only = _without_tokenizer_json(saved, tmp_path / "spm")
    shutil.copy(model, spm_only)
    return saved, spm_only, transformers.AutoTokenizer.from_pretrained(saved)


@pytest.mark.parametrize("route", ["tokenizer.json", "sentencepiece"])
def test_mbart50(tmp_path, route):
    saved, spm_only, hf = _mbart(tmp_path, fifty=True)
    ours = _ours(saved if route == "tokenizer.json" else spm_only, "mbart")
    tags = _tags(hf, transformers.models.mbart50.tokenization_mbart50.FAIRSEQ_LANGUAGE_CODES)
    hf.tgt_lang = "de_DE"
    _compare(ours, hf, SENTENCES if route == "tokenizer.json" else PLAIN, tags, tgt="de_DE")
    assert ours.language_codes() == list(tags)
    assert ours.set_languages("en_XX", "sl_SI") == tags["sl_SI"]
    hf.src_lang = "en_XX"
    assert ours.encode("the cat") == hf("the cat").input_ids


@pytest.mark.parametrize("route", ["tokenizer.json", "sentencepiece"])
def test_mbart_cc25(tmp_path, route):
    saved, spm_only, hf = _mbart(tmp_path, fifty=False)
    tags = _tags(hf, transformers.models.mbart.tokenization_mbart.FAIRSEQ_LANGUAGE_CODES)
    ours = _ours(saved if route == "tokenizer.json" else spm_only, "mbart", decoder_start=tags["de_DE"])
    hf.tgt_lang = "de_DE"
    # transformers 5 drops SentencePiece's NFKC map for mBART cc25; SentencePiece keeps it.
    sentences = SENTENCES if route == "tokenizer.json" else [s for s in PLAIN if "ﬁ" not in s]
    _compare(ours, hf, sentences, tags, frame=(0, 2))  # source: X </s> ro_RO (tokenizer_config.json)
    assert ours.language_codes() == list(tags)
    assert ours.set_languages("en_XX", "de_DE") is None  # decoder_start_token_id already is de_DE
    hf.src_lang = "en_XX"
    assert ours.encode("the cat") == hf("the cat").input_ids
    with pytest.raises(ConfigError, match="tgt_lang"):
        ours.set_languages(None, "fr_XX")


@pytest.mark.parametrize("fifty", [True, False])
def test_mbart_variant_without_tokenizer_class(tmp_path, fifty):
    """Without tokenizer_class, tokenizer.json's codes (or config.json's vocab_size: SentencePiece pieces + 1,
    the codes, <mask>) tell mBART-50 from mBART cc25."""
    saved, spm_only, hf = _mbart(tmp_path, fifty)
    codes = list(hf.lang_code_to_id)
    for path in saved, spm_only:
        config = json.loads((tmp_path / path / "tokenizer_config.json").read_text())
        del config["tokenizer_class"]
        (tmp_path / path / "tokenizer_config.json").write_text(json.dumps(config))
        ours = _ours(
            path,
            "mbart",
            vocab_size=spm.SentencePieceProcessor(model_file=str(tmp_path / "sentencepiece.bpe.model")).get_piece_size()
            + len(codes)
            + 2,
        )
        assert ours.language_codes() == codes
        assert ours.encode("the cat") == hf("the cat").input_ids


# BART -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["tokenizer.json", "vocab.json + merges.txt"])
def test_bart(tmp_path, route):
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        _sentences(0), vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], show_progress=False
    )
    bpe.add_special_tokens(["<mask>"])
    bpe.save_model(str(tmp_path))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BartTokenizer"}))
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    hf.backend_tokenizer.enable_truncation(max_length=4)  # saved in tokenizer.json; transformers ignores it by default
    path = _save(hf, tmp_path / "saved") if route == "tokenizer.json" else tmp_path
    ours = _ours(path, "bart")
    _compare(ours, hf, SENTENCES, {})
    assert ours.language_codes() == [] and ours.set_languages(None, None) is None
    with pytest.raises(ConfigError, match="tgt_lang: this model has no language tags"):
        ours.set_languages(None, "de")
    with pytest.raises(ConfigError, match="src_lang: this model has no language tags"):
        ours.set_languages("en", None)


# Failures -------------------------------------------------------------------------------------------


def test_missing_or_broken_files_name_the_file(tmp_path, monkeypatch):
    with pytest.raises(ModelError, match="tokenizer.json.*merges.txt"):
        _ours(tmp_path, "bart")
    with pytest.raises(ModelError, match="vocab.json"):
        _ours(tmp_path, "marian")
    (tmp_path / "vocab.json").write_text(json.dumps({"</s>": 0, "<unk>": 1}))
    with pytest.raises(ModelError, match="source.spm"):
        _ours(tmp_path, "marian")
    (tmp_path / "source.spm").write_text("not a model")
    with pytest.raises(ModelError, match="source.spm"):
        _ours(tmp_path, "marian")
    (tmp_path / "tokenizer.json").write_text("{broken")
    with pytest.raises(ModelError, match="tokenizer.json"):
        _ours(tmp_path, "mbart")
    monkeypatch.setitem(__import__("sys").modules, "tokenizers", None)  # as if not installed
    with pytest.raises(ModelError, match="pip install tokenizers"):
        _ours(tmp_path, "mbart")


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda vocab: {piece: 5 for piece in vocab},
            "pieces '</s>' and '<unk>' both have id 5; each piece needs its own",
        ),
        (
            lambda vocab: {**vocab, "<unk>": vocab["</s>"]},
            "pieces '</s>' and '<unk>' both have id 0; each piece needs its own",
        ),
        (lambda vocab: {**vocab, "<unk>": "1"}, "'<unk>': expected an id (an integer >= 0), got '1'"),
    ],
)
def test_a_vocab_json_that_does_not_number_each_piece_once_is_refused(tmp_path, change, message):
    """Before: every piece mapped to one id decoded (exit 0) to one piece for every text."""
    vocab = {"</s>": 0, "<unk>": 1, "▁a": 2, "<pad>": 3}
    (tmp_path / "vocab.json").write_text(json.dumps(change(vocab)))
    cfg = TransformerConfig(src_vocab_size=4, tgt_vocab_size=4, d_model=8, heads=1, pad_id=3)
    with pytest.raises(ModelError) as error:
        load_tokenizer(str(tmp_path), {"model_type": "marian"}, cfg)
    assert str(error.value) == f"{tmp_path / 'vocab.json'}: {message}"


@pytest.mark.parametrize("planted", ["fifo", "/dev/zero"])
def test_a_source_spm_that_is_not_a_file_is_named_not_called_missing(tmp_path, planted):
    """Before: "source.spm is missing" for a FIFO or a link to a device."""
    (tmp_path / "vocab.json").write_text(json.dumps({"</s>": 0, "<unk>": 1, "<pad>": 2}))
    if planted == "fifo":
        os.mkfifo(tmp_path / "source.spm")
    else:
        (tmp_path / "source.spm").symlink_to(planted)
    cfg = TransformerConfig(
        src_vocab_size=3, tgt_vocab_size=3, d_model=8, heads=1, pad_id=2, eos_id=0, unk_id=1, bos_id=2
    )
    with pytest.raises(ModelError) as error:
        load_tokenizer(str(tmp_path), {"model_type": "marian"}, cfg)
    assert str(error.value) == (
        f"{tmp_path / 'source.spm'} is not a regular file (a FIFO, device or folder): a model's files must be files"
    )


def test_a_vocab_json_larger_than_the_model_s_rows_need_is_refused_before_it_is_parsed(tmp_path):
    """A vocabulary may hold vocabulary_bytes(rows): before, a vocab.json of millions of entries
    was parsed whole, whatever the model."""
    (tmp_path / "vocab.json").write_text(json.dumps({"</s>": 0, "<unk>": 1, "▁" + "x" * (5 << 20): 2}))
    cfg = TransformerConfig(src_vocab_size=4, tgt_vocab_size=4, d_model=8, heads=1, eos_id=0, unk_id=1, pad_id=3)
    with pytest.raises(
        ModelError, match=r"vocab.json cannot be read: it holds [\d,]+ bytes; no such file needs more than 4,195,328"
    ):
        load_tokenizer(str(tmp_path), {"model_type": "marian"}, cfg)
