"""nmtdecode/models/formats/hf_spiece.py against transformers 5's T5, ByT5 and Pegasus tokenizers.

As in test_hf_tokenizers.py: tiny SentencePiece models trained here, in the id layout of each
family (T5's and Pegasus's: <pad> </s> <unk> = 0 1 2); transformers' tokenizer built from the same
pieces, scores and normalisation map (what it builds from spiece.model with protobuf, which is not
installed here) and saved with `save_pretrained`; ours read from that directory (tokenizer.json),
or from spiece.model and tokenizer_config.json alone, as older exports ship them. Expected ids and
texts come from transformers.
"""

from __future__ import annotations

import io
import os
import shutil

import pytest
import sentencepiece as spm
import transformers
from transformers.convert_slow_tokenizer import PegasusConverter, T5Converter

from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.formats.hf_spiece import load_tokenizer
from nmtdecode.models.transformer import TransformerConfig
from nmtdecode.options.config import ConfigError

from tests.models.formats.test_hf_tokenizers import PLAIN, SENTENCES, _compare, _save, _sentences, _spm_inputs

MADLAD_TAGS = ["<2de>", "<2fr>", "<2zh_Latn>"]
SPECIAL_TEXT = ["x </s> y <extra_id_0> z", "<extra_id_1>the cat<extra_id_0>", "<pad><unk>"]
# SentencePiece's own pipeline (spiece.model alone) and transformers' rebuilt one agree on plain text:
# no trailing or repeated whitespace (as for NLLB, test_hf_tokenizers.PLAIN); typed special tokens are
# cut out alike, but what is decoded around them may differ in a space
TEXTS = {"tokenizer.json": SENTENCES + SPECIAL_TEXT, "spiece.model": PLAIN}


def _train(path, user_defined=()) -> spm.SentencePieceProcessor:
    """T5's and Pegasus's layout: <pad> </s> <unk> = 0 1 2, no <s>; user-defined pieces after them."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_sentences(0)),
        model_writer=model,
        vocab_size=120,
        character_coverage=1.0,
        minloglevel=2,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        user_defined_symbols=list(user_defined),
    )
    path.write_bytes(model.getvalue())
    return spm.SentencePieceProcessor(model_file=str(path))


def _ours(path, model_type="t5", vocab_size=1000, **hf):
    cfg = TransformerConfig(src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=8, heads=1)
    return load_tokenizer(str(path), {"model_type": model_type, **hf}, cfg)


def _spiece_only(saved, root, model) -> str:
    """The saved directory as older exports ship it: spiece.model and tokenizer_config.json."""
    os.makedirs(root)
    shutil.copy(os.path.join(saved, "tokenizer_config.json"), root)
    shutil.copy(model, os.path.join(root, "spiece.model"))
    return str(root)


def _t5(tmp_path, extra_ids=5, user_defined=()):
    """transformers' T5 tokenizer of a fresh spiece.model, saved; returns (saved dir, spiece-only dir, it)."""
    model = tmp_path / "spiece.model"
    scores, _, charsmap = _spm_inputs(_train(model, user_defined), model)
    made = transformers.T5Tokenizer(
        **T5Converter.convert_from_spm(vocab=scores, extra_ids=extra_ids), _spm_precompiled_charsmap=charsmap
    )
    saved = _save(made, tmp_path / "saved")
    hf = transformers.AutoTokenizer.from_pretrained(saved)
    return saved, _spiece_only(saved, tmp_path / "spm", model), hf


@pytest.mark.parametrize("files", ["tokenizer.json", "spiece.model"])
def test_t5_matches_transformers(tmp_path, files):
    saved, spiece, hf = _t5(tmp_path)
    ours = _ours(saved if files == "tokenizer.json" else spiece, vocab_size=len(hf))
    _compare(ours, hf, TEXTS[files], {}, frame=(0, 1))
    assert [ours.encode(s) for s in SPECIAL_TEXT] == [hf(s).input_ids for s in SPECIAL_TEXT]
    assert (ours.unk_id, ours.eos_id) == (hf.unk_token_id, hf.eos_token_id) == (2, 1)
    sentinels = hf.convert_tokens_to_ids([f"<extra_id_{n}>" for n in range(5)])
    assert sentinels == [124, 123, 122, 121, 120]  # counted down from the end
    assert [ours.target_piece(i) for i in sentinels] == [f"<extra_id_{n}>" for n in range(5)]
    assert ours.decode([7, sentinels[0], 9, 1]) == hf.decode([7, sentinels[0], 9, 1], skip_special_tokens=True)
    assert ours.language_codes() == []
    with pytest.raises(ConfigError, match="tgt_lang: this model has no language tags"):
        ours.set_languages(None, "de")


def test_t5_sentinels_beyond_the_models_vocabulary_are_not_tokens(tmp_path):
    """mT5 and MADLAD say extra_ids 0; a vocabulary that ends before a sentinel's id has no such token."""
    _, spiece, _ = _t5(tmp_path)
    ours = _ours(spiece, vocab_size=122)
    assert ours.source.id("<extra_id_4>") == 120 and ours.source.id("<extra_id_0>") is None
    assert 124 not in ours.encode("a <extra_id_0> b")


@pytest.mark.parametrize("files", ["tokenizer.json", "spiece.model"])
def test_madlad_target_tag_is_put_before_the_source_text(tmp_path, files):
    saved, spiece, hf = _t5(tmp_path, extra_ids=0, user_defined=MADLAD_TAGS)
    ours = _ours(saved if files == "tokenizer.json" else spiece, vocab_size=len(hf))
    assert ours.language_codes() == ["de", "fr", "zh_Latn"]
    assert ours.set_languages(None, "zh_Latn") is None  # nothing forced on the target side
    for s in TEXTS[files]:
        assert ours.encode(s) == hf(f"<2zh_Latn> {s}").input_ids, repr(s)
        assert len(ours.source_pieces(s)) == len(ours.encode(s)), repr(s)
    pieces = hf.tokenize("The small cat")
    assert ours.encode_pieces(pieces) == hf("<2zh_Latn> The small cat").input_ids  # the API's token input
    tag = hf.convert_tokens_to_ids("<2de>")
    assert ours.decode([tag] + hf("The cat").input_ids) == hf.decode(hf("The cat").input_ids, skip_special_tokens=True)
    ours.set_languages(None, None)
    assert ours.encode("The cat") == hf("The cat").input_ids
    with pytest.raises(ConfigError, match=r"tgt_lang: 'ita'.*de, fr, zh_Latn"):
        ours.set_languages(None, "ita")
    with pytest.raises(ConfigError, match="src_lang: T5 models have no source-language tag"):
        ours.set_languages("en", "de")


@pytest.mark.parametrize("saved", [True, False])
def test_byt5_matches_transformers(tmp_path, saved):
    """ByT5 ships no tokenizer file: config.json (or tokenizer_config.json) names ByT5Tokenizer."""
    hf = transformers.ByT5Tokenizer()
    if saved:
        path = _save(hf, tmp_path / "saved")
        ours = _ours(path, vocab_size=384)
    else:
        ours = _ours(tmp_path, vocab_size=384, tokenizer_class="ByT5Tokenizer")
    for s in SENTENCES + SPECIAL_TEXT + [" a </s>  b<pad> c "]:  # <pad> </s> <unk> take the spaces around them
        assert ours.encode(s) == hf(s).input_ids, repr(s)
        assert len(ours.source_pieces(s)) == len(ours.encode(s)), repr(s)
    generated = [104, 195, 169, 259, 1, 255, 258, 107, 3 + ord("!")]  # a broken UTF-8 sequence among them
    assert ours.decode(generated) == hf.decode(generated, skip_special_tokens=True) == "eh!"
    text = "Zürich café 漢字"
    assert ours.decode(hf(text).input_ids) == text
    assert [ours.target_piece(i) for i in (104, 259, 1)] == hf.convert_ids_to_tokens([104, 259, 1])
    assert ours.word_marker is None  # bytes mark no word starts


def test_a_t5_directory_without_a_tokenizer_fails_by_name(tmp_path):
    with pytest.raises(ModelError, match="no tokenizer.json or spiece.model .*ByT5Tokenizer"):
        _ours(tmp_path)


def _pegasus(tmp_path):
    model = tmp_path / "spiece.model"
    scores, _, charsmap = _spm_inputs(_train(model), model)
    made = transformers.PegasusTokenizer(
        **PegasusConverter.convert_from_spm(vocab=scores), _spm_precompiled_charsmap=charsmap
    )
    saved = _save(made, tmp_path / "saved")
    return saved, _spiece_only(saved, tmp_path / "spm", model), transformers.AutoTokenizer.from_pretrained(saved)


@pytest.mark.parametrize("files", ["tokenizer.json", "spiece.model"])
def test_pegasus_matches_transformers(tmp_path, files):
    """Pegasus's 103 reserved ids before SentencePiece's pieces (from its id 2: <unk> is 105). Special
    tokens typed in the text are left out: transformers' Pegasus strips the spaces around them."""
    saved, spiece, hf = _pegasus(tmp_path)
    ours = _ours(saved if files == "tokenizer.json" else spiece, "pegasus")
    _compare(ours, hf, [s for s in TEXTS[files] if "<" not in s], {}, frame=(0, 1))
    assert (ours.unk_id, ours.eos_id) == (hf.unk_token_id, hf.eos_token_id) == (105, 1)
    reserved = ["<pad>", "</s>", "<unk_2>", "<unk_102>"]
    assert [ours.source.id(t) for t in reserved] == hf.convert_tokens_to_ids(reserved) == [0, 1, 4, 104]
    masks = hf.convert_tokens_to_ids(["<mask_1>", "<mask_2>"])
    assert sorted(masks) == [2, 3] and ours.decode([masks[0], 110, masks[1]]) == hf.decode([110])
