"""Text <-> token ids for the native format: SentencePiece models whose ids are the model's ids.

One joint model, or separate source and target models. Source sequences end
with EOS, as the models were trained; special tokens (pad, bos, eos) are left
out of decoded text. Hugging Face checkpoints bring their own tokenizers
(models/formats/hf_tokenizers.py), with the same methods.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import sentencepiece as spm

from ..options.config import ConfigError


def spm_identity(processor: spm.SentencePieceProcessor) -> bytes:
    """What decides how a SentencePiece model splits text: its serialized proto without the
    trainer's record (field 2: paths and options of the training run) and self-test data (field 4),
    so that two copies of one model trained or saved apart compare equal."""
    fields = protobuf_fields(processor.serialized_model_proto())
    return b"".join(raw for number, _, raw in fields if number not in (2, 4))


# SentencePiece models are protobuf messages; their wire format is read here without a protobuf package.


def read_varint(data: bytes, i: int) -> tuple[int, int]:
    """The variable-length integer at data[i], and where the next field starts."""
    value = shift = 0
    while True:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if byte < 0x80:
            return value, i


def protobuf_fields(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(field number, wire type, raw bytes of the whole field) of each field of one message."""
    i = 0
    while i < len(data):
        start = i
        key, i = read_varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = read_varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            size, i = read_varint(data, i)
            i += size
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
        yield key >> 3, wire, data[start:i]


def _processor(model: str | spm.SentencePieceProcessor) -> spm.SentencePieceProcessor:
    return model if isinstance(model, spm.SentencePieceProcessor) else spm.SentencePieceProcessor(model_file=str(model))


class SentencePieceTokenizer:
    def __init__(
        self,
        source_model: str | spm.SentencePieceProcessor,
        target_model: str | spm.SentencePieceProcessor | None = None,
        *,
        eos_id: int,
        special_ids: Iterable[int] = (),
    ) -> None:
        """Each side's SentencePiece model: a file, or one already loaded; no target: the source's."""
        self.source = _processor(source_model)
        self.target = _processor(target_model) if target_model is not None else self.source
        self.eos_id = eos_id
        self.special_ids = frozenset(special_ids) | {eos_id}
        self.languages: dict[str, int] = {}  # no language tags

    def encode(self, text: str) -> list[int]:
        """Source text -> model ids, with EOS appended."""
        return self.source.encode(text) + [self.eos_id]

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        """Source pieces (text already cut as `encode` cuts it) -> model ids, with EOS appended;
        a piece the vocabulary lacks is <unk>."""
        return [self.source.piece_to_id(piece) for piece in pieces] + [self.eos_id]

    def decode(self, ids: list[int]) -> str:
        """Target model ids -> text, special tokens left out."""
        return self.target.decode([i for i in ids if i not in self.special_ids])

    def target_piece(self, token_id: int) -> str | None:
        """The target vocabulary's entry for an id (`\u2581Guten`), or None beyond the vocabulary."""
        return self.target.id_to_piece(token_id) if 0 <= token_id < self.target.get_piece_size() else None

    def encode_target(self, text: str) -> list[int]:
        """Target text -> model ids (no EOS), for forced decoding."""
        return self.target.encode(text)

    def source_piece(self, token_id: int) -> str | None:
        """The source vocabulary's entry for an id (`\u2581the`, `</s>`), or None beyond it."""
        return self.source.id_to_piece(token_id) if 0 <= token_id < self.source.get_piece_size() else None

    # Pieces (--replace-unk, --report-align): the source's as its text spells them, one per id of
    # `encode` (an unknown piece keeps its text), the target's as the vocabulary spells them (`target_piece`).
    word_marker = "\u2581"  # what starts a word in both vocabularies' pieces

    def source_pieces(self, text: str | list[str]) -> list[str]:
        """One piece per id of `encode` (of `encode_pieces` for a list of pieces), EOS included."""
        pieces = text if isinstance(text, list) else self.source.encode(text, out_type=str)
        return pieces + [self.source.id_to_piece(self.eos_id)]

    def piece_id(self, piece: str) -> int | None:
        """The id of a target vocabulary entry, spelt as the tokenizer spells it (`\u2581the`),
        or None when the vocabulary has no such piece."""
        found = self.target.piece_to_id(piece)
        return found if self.target.id_to_piece(found) == piece else None

    def source_identity(self) -> tuple:
        """Equal for two tokenizers exactly when they give every source line the same ids (an
        ensemble's models must: models/ensemble.py)."""
        return ("sentencepiece", spm_identity(self.source), self.eos_id)

    def set_languages(self, src_lang: str | None, tgt_lang: str | None) -> int | None:
        """Choose source/target languages; returns the token to force first on the target side.
        A model without language tags accepts neither."""
        if src_lang or tgt_lang:
            raise ConfigError("src_lang/tgt_lang: this model has no language tags")
        return None

    def language_codes(self) -> list[str]:
        return []
