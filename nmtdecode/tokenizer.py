"""Text <-> token ids for the native format: SentencePiece models whose ids are the model's ids.

One joint model, or separate source and target models. Source sequences end
with EOS, as the models were trained; special tokens (pad, bos, eos) are left
out of decoded text. Hugging Face checkpoints bring their own tokenizers
(models/formats/hf_tokenizers.py), with the same methods.
"""

from __future__ import annotations

import sentencepiece as spm

from .config import ConfigError


class SentencePieceTokenizer:
    def __init__(self, source_model: str, target_model: str | None = None, *, eos_id: int, special_ids=()):
        self.source = spm.SentencePieceProcessor(model_file=str(source_model))
        self.target = spm.SentencePieceProcessor(model_file=str(target_model)) if target_model else self.source
        self.eos_id = eos_id
        self.special_ids = frozenset(special_ids) | {eos_id}

    def encode(self, text: str) -> list[int]:
        """Source text -> model ids, with EOS appended."""
        return self.source.encode(text) + [self.eos_id]

    def decode(self, ids: list[int]) -> str:
        """Target model ids -> text, special tokens left out."""
        return self.target.decode([i for i in ids if i not in self.special_ids])

    def encode_target(self, text: str) -> list[int]:
        """Target text -> model ids (no EOS), for forced decoding."""
        return self.target.encode(text)

    # Pieces (--replace-unk, --report-align): the source's as its text spells them, one per id of
    # `encode` (an unknown piece keeps its text), the target's as the vocabulary spells them.
    word_marker = "\u2581"  # what starts a word in both vocabularies' pieces

    def source_pieces(self, text: str) -> list[str]:
        return self.source.encode(text, out_type=str) + [self.source.id_to_piece(self.eos_id)]

    def target_pieces(self, ids: list[int]) -> list[str]:
        return [self.target.id_to_piece(i) for i in ids]

    def piece_id(self, piece: str) -> int | None:
        """The id of a target vocabulary entry, spelt as the tokenizer spells it (`\u2581the`),
        or None when the vocabulary has no such piece."""
        found = self.target.piece_to_id(piece)
        return found if self.target.id_to_piece(found) == piece else None

    def set_languages(self, src_lang: str | None, tgt_lang: str | None) -> int | None:
        """Choose source/target languages; returns the token to force first on the target side.
        A model without language tags accepts neither."""
        if src_lang or tgt_lang:
            raise ConfigError("src_lang/tgt_lang: this model has no language tags")
        return None

    def language_codes(self) -> list[str]:
        return []
