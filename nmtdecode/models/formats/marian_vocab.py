"""Marian's vocabularies, read without torch, and the tokenizer they make.

decoder.yml names two vocabularies, source then target (the same file when they are shared):

  .yml/.yaml/.json  piece -> id, as Marian's DefaultVocab writes them (`</s>: 0`, `<unk>: 1`, ...);
                    the text is cut into those pieces by OPUS-MT's source.spm and target.spm,
                    which lie beside them (Marian itself reads pre-cut text): the pieces and
                    `>>xx<<` target-language tags work as in the Hugging Face copies of these
                    models (hf_tokenizers.marian_tokenizer)
  .spm              a SentencePiece model whose ids are the model's (Marian's SentencePieceVocab)

A factored vocabulary (.fsv) is refused by name. Every key of a YAML vocabulary is read as the
text it spells (`yes`, `null` or `1` stay strings, as yaml-cpp reads them for Marian), whatever
characters it holds (marian_yaml.py reads the file line by line), and the ids must be those of
the model's embedding rows.
"""

from __future__ import annotations

import os

import sentencepiece as spm

from ...options.bounded import shown
from ..tokenizer import SentencePieceTokenizer
from ..checkpoint import ModelError, note_read
from .hf_tokenizers import SPECIALS, HFTokenizer, marian_tokenizer
from .marian_yaml import read_entries

YAML_VOCABULARY = (".yml", ".yaml", ".json")
EOS, UNK = "</s>", "<unk>"
# Pieces of a SentencePiece byte fallback that Marian never writes unless --allow-special: the
# control characters <0x00> .. <0x1F> (DefaultVocab::addSpecialWords).
CONTROL_PIECES = tuple(f"<0x{i:02X}>" for i in range(32))


class Vocabulary:
    """One side's vocabulary: its file, piece -> id (a YAML vocabulary) or its SentencePiece
    model, and the ids Marian needs."""

    def __init__(self, path: str, rows: int, side: str) -> None:
        self.path = path
        kind = os.path.splitext(path)[1]
        if kind == ".fsv":
            raise ModelError(f"{path}: factored vocabularies (.fsv) are not supported")
        if kind == ".spm":  # SentencePiece's own </s> and <unk> ids, whatever their pieces
            self.pieces, self.sp = None, _sentencepiece(path)
            size = self.sp.get_piece_size()
            controls = {p: self.sp.piece_to_id(p) for p in CONTROL_PIECES}
            self.ids = {p: i for p, i in controls.items() if i != self.sp.unk_id()}
            self.ids.update({p: i for p, i in ((EOS, self.sp.eos_id()), (UNK, self.sp.unk_id())) if i >= 0})
        elif kind in YAML_VOCABULARY:
            self.sp, self.pieces = None, read_vocabulary(path)
            self.ids, size = self.pieces, max(self.pieces.values(), default=-1) + 1
        else:
            raise ModelError(
                f"{path}: a Marian vocabulary is a .yml (or .json) or a .spm file; "
                f"{kind or 'a file without extension'} is not read"
            )
        missing = [p for p in (EOS, UNK) if p not in self.ids]
        if missing:
            raise ModelError(f"{path}: no {missing[0]} entry (Marian's vocabularies have {EOS} and {UNK})")
        if size > rows:
            raise ModelError(
                f"{path}: the {side} vocabulary has {size:,} entries, the model's embeddings {rows:,} rows"
            )

    @property
    def eos_id(self) -> int:
        return self.ids[EOS]

    @property
    def unk_id(self) -> int:
        return self.ids[UNK]

    def control_ids(self) -> list[int]:
        return [self.ids[p] for p in CONTROL_PIECES if p in self.ids]


def _sentencepiece(path: str) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_file=note_read(path))
    except (OSError, RuntimeError) as e:
        raise ModelError(f"{path} cannot be read as a SentencePiece model: {e}") from None


def read_vocabulary(path: str) -> dict[str, int]:
    """A YAML (or JSON) vocabulary: piece -> id, every id a distinct integer >= 0."""
    vocabulary: dict[str, int] = {}
    for piece, index in read_entries(path):
        if piece in vocabulary:
            raise ModelError(f"{path}: {shown(piece)} is listed twice")
        vocabulary[piece] = index
    if len(set(vocabulary.values())) != len(vocabulary):
        raise ModelError(f"{path}: two pieces have the same id")
    return vocabulary


def make_tokenizer(
    directory: str, source: Vocabulary, target: Vocabulary, start_id: int
) -> SentencePieceTokenizer | HFTokenizer:
    """The tokenizer of a Marian model: OPUS-MT's pieces over YAML vocabularies, or the .spm
    vocabularies themselves; `target` is `source` when they are one file; `start_id` is the
    decoder's start row, never text."""
    if (source.sp is None) != (target.sp is None):
        raise ModelError(f"{source.path}, {target.path}: one .spm and one YAML vocabulary are not supported")
    if source.sp is not None:
        return SentencePieceTokenizer(  # the processors Vocabulary loaded, not the files again
            source.sp,
            None if target is source else target.sp,
            eos_id=source.eos_id,
            special_ids={start_id, *target.control_ids()},
        )
    missing = [name for name in ("source.spm", "target.spm") if not os.path.isfile(os.path.join(directory, name))]
    if missing:
        raise ModelError(
            f"{directory}: {missing[0]} is missing: with a YAML vocabulary the text is cut into "
            "pieces by OPUS-MT's source.spm and target.spm, beside decoder.yml"
        )
    names = {**SPECIALS, "eos": EOS, "unk": UNK}
    added = {t: source.pieces[t] for t in (EOS, UNK)}  # cut out of the text whole, as transformers does
    return marian_tokenizer(directory, source.pieces, target.pieces, names, added, special_ids={start_id})
