"""Tokenizers of T5 (t5, flan-T5, mT5, MADLAD-400), ByT5 and Pegasus checkpoints, read without
importing `transformers`; the protocol of hf_tokenizers.HFTokenizer, following transformers 5
(`models/{t5,byt5,pegasus}/tokenization_*.py` and their SentencePiece converters):

  family   files                            ids
  T5       tokenizer.json | spiece.model    SentencePiece's; <extra_id_N>: pieces + extra_ids - 1 - N
  MADLAD   spiece.model | tokenizer.json    as T5; --tgt-lang de puts `<2de> ` before the source text
  ByT5     (none: tokenizer_class)          UTF-8 bytes + 3 (<pad> </s> <unk> = 0 1 2); <extra_id_N>: 259 + N
  Pegasus  tokenizer.json | spiece.model    <pad> </s> <mask_1> <mask_2> <unk_2> .. <unk_102> = 0 .. 104,
                                            then SentencePiece's pieces from its id 2 on, each id + 103

Every source ends with </s>. Strings of special tokens in the text (`<extra_id_0>`, `</s>`) are
cut out and become their ids, as transformers does; decoding leaves them out. MADLAD's target tag
is text, put before the source as its users write it ("<2de> The house"), so that it is split
with the text exactly as transformers splits that string.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterator

from ...options.config import ConfigError
from ..architecture import TransformerConfig
from ..checkpoint import ModelError, read_json
from .hf_tokenizers import (
    HFTokenizer,
    _added_tokens,
    _Backend,
    _load_spm,
    _Pieces,
    _read_tokenizer_json,
    _specials,
    _TokenizerJson,
)

MODEL_TYPES = ("t5", "mt5", "pegasus")  # config.json's model_type
TAG = re.compile(r"<2(.+)>")  # MADLAD-400's target-language pieces: <2de>, <2zh_Latn>, ...
PEGASUS_OFFSET = 103  # ids before SentencePiece's (tokenizer_config.json's `offset`)
BYTE_OFFSET = 3  # ByT5: <pad> </s> <unk>, then the 256 byte values


class _Bytes:
    """ByT5's: every UTF-8 byte of the text + 3; `added` (special tokens and <extra_id_N>) cut
    out of the text first, the spaces before those of `lstrip` and after those of `rstrip` with them
    (ByT5's <pad> </s> <unk>). Invalid UTF-8 in decoded bytes is left out, as transformers does."""

    marks_words = False  # no piece starts a word (hf_tokenizers.HFTokenizer.word_marker)

    def __init__(self, added: dict[str, int], lstrip: frozenset[str], rstrip: frozenset[str]) -> None:
        self.added, self.lstrip, self.rstrip = added, lstrip, rstrip
        self.added_pieces = {i: t for t, i in added.items()}
        alternatives = "|".join(re.escape(t) for t in sorted(added, key=len, reverse=True))
        self.splitter = re.compile(f"({alternatives})") if added else None

    def _pieces_and_ids(self, text: str) -> Iterator[tuple[str, int]]:
        parts = self.splitter.split(text) if self.splitter else [text]  # text, token, text, ...
        for k in range(1, len(parts), 2):
            if parts[k] in self.lstrip:
                parts[k - 1] = parts[k - 1].rstrip()
            if parts[k] in self.rstrip:
                parts[k + 1] = parts[k + 1].lstrip()
        for part in parts:
            if part in self.added:
                yield part, self.added[part]
            else:
                yield from ((chr(b), b + BYTE_OFFSET) for b in part.encode("utf-8"))

    def ids(self, text: str) -> list[int]:
        return [i for _, i in self._pieces_and_ids(text)]

    def split_pieces(self, text: str) -> list[str]:
        return [p for p, _ in self._pieces_and_ids(text)]

    def id(self, piece: str) -> int | None:
        if piece in self.added:
            return self.added[piece]
        return ord(piece) + BYTE_OFFSET if len(piece) == 1 and ord(piece) < 256 else None

    def piece(self, i: int) -> str | None:
        if i in self.added_pieces:
            return self.added_pieces[i]
        return chr(i - BYTE_OFFSET) if BYTE_OFFSET <= i < 256 + BYTE_OFFSET else None

    def identity(self) -> tuple:
        return ("bytes", tuple(sorted(self.added.items())))

    def text(self, ids: list[int]) -> str:
        data = bytes(i - BYTE_OFFSET for i in ids if BYTE_OFFSET <= i < 256 + BYTE_OFFSET)
        return data.decode("utf-8", errors="ignore")


class _T5Tokenizer(HFTokenizer):
    """T5's: the text, then </s>. MADLAD-400's target language (`tgt_lang`) is its `<2xx>` tag,
    written before the source text; nothing is forced on the target side."""

    tag_text = ""

    def set_languages(self, src_lang: str | None, tgt_lang: str | None) -> None:
        if src_lang:
            raise ConfigError("src_lang: T5 models have no source-language tag (MADLAD-400: --tgt-lang)")
        if tgt_lang:
            self._tag("tgt_lang", tgt_lang)  # one of the vocabulary's <2xx>, or an error naming them
        self.tag_text = f"<2{tgt_lang}> " if tgt_lang else ""
        self.before, self.after = self.source.ids(self.tag_text), [self.eos_id]  # before: for given pieces
        return None

    def encode(self, text: str) -> list[int]:
        """Source text -> ids: the tag and the text split together, then </s>."""
        return self.source.ids(self.tag_text + text) + self.after

    def source_pieces(self, text: str | list[str]) -> list[str]:
        if isinstance(text, list):
            return super().source_pieces(text)
        return self.source.split_pieces(self.tag_text + text) + [self.source_piece(i) or "" for i in self.after]


def load_tokenizer(path: str, hf: dict, cfg: TransformerConfig) -> HFTokenizer:
    """The tokenizer of the T5, ByT5 or Pegasus checkpoint in `path` (`hf`: its config.json)."""
    config = read_json(os.path.join(path, "tokenizer_config.json"), required=False)
    kind = str(config.get("tokenizer_class") or hf.get("tokenizer_class") or "").removesuffix("Fast")
    pegasus = hf.get("model_type") == "pegasus"
    tok_file, spm_file = os.path.join(path, "tokenizer.json"), os.path.join(path, "spiece.model")
    backend: _Backend
    if kind == "ByT5Tokenizer":
        backend = _Bytes(*_byt5_added(config))
    elif os.path.isfile(tok_file):
        backend = _read_tokenizer_json(tok_file)
    elif os.path.isfile(spm_file):
        backend = _pegasus_pieces(spm_file, config) if pegasus else _t5_pieces(spm_file, config, cfg)
    else:
        raise ModelError(
            f"{path}: no tokenizer.json or spiece.model (a ByT5 model says tokenizer_class ByT5Tokenizer "
            "in its config.json or tokenizer_config.json)"
        )
    names = _specials(config)
    ids = {role: backend.id(names[role]) for role in ("pad", "eos", "unk")}
    if ids["eos"] is None or ids["unk"] is None:
        raise ModelError(f"{path}: the tokenizer has no {names['eos']} or {names['unk']} token")
    special = {i for i in ids.values() if i is not None} | _special_ids(backend)
    kw: dict[str, Any] = dict(unk_id=ids["unk"], eos_id=ids["eos"], special_ids=special)
    if pegasus:
        return HFTokenizer(backend, **kw)
    return _T5Tokenizer(backend, languages=_tags(backend), **kw)


def _special_ids(backend: _Backend) -> set[int]:
    """The ids of the special tokens beyond pad, eos and unk: <extra_id_N>, Pegasus's masks."""
    if isinstance(backend, _TokenizerJson):
        return {i for i, token in backend.tok.get_added_tokens_decoder().items() if token.special}
    if isinstance(backend, (_Pieces, _Bytes)):
        return set(backend.added.values())
    return set()


def _tags(backend: _Backend) -> dict[str, int]:
    """MADLAD-400's target languages: code -> the id of its <2code> piece (none in T5's vocabularies)."""
    if isinstance(backend, _TokenizerJson):
        pieces = backend.tok.get_vocab().items()
    elif isinstance(backend, _Pieces):
        pieces = backend.vocab.items()
    else:
        return {}
    tags = {m.group(1): i for piece, i in pieces if (m := TAG.fullmatch(piece))}
    return dict(sorted(tags.items(), key=lambda tag: tag[1]))  # in the vocabulary's order


def _t5_pieces(model: str, config: dict, cfg: TransformerConfig) -> _Pieces:
    """spiece.model's ids, then <extra_id_N> (tokenizer_config.json's extra_ids of them, 100 by
    default; mT5 and MADLAD say 0) counted down from the end: the last is <extra_id_0>."""
    sp = _load_spm(model)
    size = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(size)}
    extra = config.get("extra_ids", 100)
    if not isinstance(extra, int) or isinstance(extra, bool) or extra < 0:
        raise ModelError(f"{model}: tokenizer_config.json's extra_ids must be a count, got {extra!r}")
    sentinels = {f"<extra_id_{n}>": size + extra - 1 - n for n in range(extra)}
    # the model's vocabulary may end before them (a sentinel it has no embedding for is never produced)
    defaults = {p: i for p, i in sentinels.items() if i < cfg.src_vocab_size}
    added = _added_tokens(config, vocab, ["<pad>", "</s>", "<unk>"]) if config.get("added_tokens_decoder") else {}
    added = added or {**{t: vocab[t] for t in ("<pad>", "</s>", "<unk>") if t in vocab}, **defaults}
    return _Pieces(sp, vocab, sp.unk_id(), added, strip=False)


def _pegasus_pieces(model: str, config: dict) -> _Pieces:
    """spiece.model's pieces from its id 2 on at id + offset (103), after Pegasus's reserved ids."""
    sp = _load_spm(model)
    offset = config.get("offset", PEGASUS_OFFSET)
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 4:
        raise ModelError(f"{model}: tokenizer_config.json's offset must be an id count >= 4, got {offset!r}")
    vocab = {sp.id_to_piece(i): i + offset for i in range(2, sp.get_piece_size())}
    reserved = ["<pad>", "</s>", "<mask_1>", "<mask_2>", *(f"<unk_{i}>" for i in range(2, offset))]
    added = {token: i for i, token in enumerate(reserved)}
    return _Pieces(sp, vocab, sp.unk_id() + offset, added, strip=False)


def _byt5_added(config: dict) -> tuple[dict[str, int], frozenset[str], frozenset[str]]:
    """ByT5's special tokens, and those that take the spaces before and after them: <pad> </s> <unk>
    at 0 1 2, taking both, and its 125 sentinels after the bytes; or as transformers saved them."""
    saved = [t for t in (config.get("added_tokens_decoder") or {}).values() if isinstance(t, dict)]
    if saved:
        lstrip, rstrip = ({str(t.get("content")) for t in saved if t.get(side)} for side in ("lstrip", "rstrip"))
        return _added_tokens(config, {}, []), frozenset(lstrip), frozenset(rstrip)
    specials = frozenset(("<pad>", "</s>", "<unk>"))
    sentinels = {f"<extra_id_{n}>": 256 + BYTE_OFFSET + n for n in range(125)}
    return {"<pad>": 0, "</s>": 1, "<unk>": 2, **sentinels}, specials, specials
