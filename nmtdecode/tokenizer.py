"""Text <-> token ids.

`SentencePieceTokenizer` covers the native format (one joint model whose ids
are the model's ids) and Hugging Face checkpoints that ship SentencePiece
models with a separate `vocab.json` (Marian: source.spm / target.spm) or with
ids shifted by special tokens (mBART, M2M100, NLLB): pieces are then mapped
through `vocab`. Source sequences end with EOS, as every supported family was
trained; a `src_prefix` (e.g. an NLLB/M2M100 source-language tag) goes first.
Special tokens (pad, bos, eos, unk, language tags) are left out of decoded text.
"""

from __future__ import annotations

import sentencepiece as spm

from .config import ConfigError


class SentencePieceTokenizer:
    def __init__(self, source_model: str, target_model: str | None = None, *, vocab: dict[str, int] | None = None,
                 unk_id: int, eos_id: int, special_ids=(), src_prefix: list[int] | None = None):
        self.source = spm.SentencePieceProcessor(model_file=str(source_model))
        self.target = spm.SentencePieceProcessor(model_file=str(target_model)) if target_model else self.source
        self.vocab = vocab  # piece -> model id, when the model's ids are not SentencePiece's
        self.pieces = {i: p for p, i in vocab.items()} if vocab else None
        self.unk_id, self.eos_id = unk_id, eos_id
        self.special_ids = frozenset(special_ids) | {eos_id}
        self.src_prefix = list(src_prefix or [])

    def encode(self, text: str) -> list[int]:
        """Source text -> model ids, with EOS appended."""
        if self.vocab is None:
            ids = self.source.encode(text)
        else:
            ids = [self.vocab.get(p, self.unk_id) for p in self.source.encode(text, out_type=str)]
        return self.src_prefix + ids + [self.eos_id]

    def decode(self, ids: list[int]) -> str:
        """Target model ids -> text, special tokens left out."""
        ids = [i for i in ids if i not in self.special_ids]
        if self.vocab is None:
            return self.target.decode(ids)
        return self.target.decode_pieces([self.pieces[i] for i in ids if i in self.pieces])

    def set_languages(self, src_lang: str | None, tgt_lang: str | None) -> int | None:
        """Choose source/target languages; returns the token to force first on the target side.
        A model without language tags accepts neither."""
        if src_lang or tgt_lang:
            raise ConfigError("src_lang/tgt_lang: this model has no language tags")
        return None

    def language_codes(self) -> list[str]:
        return []

    def encode_target(self, text: str) -> list[int]:
        """Target text -> model ids (no EOS), for forced decoding and training."""
        if self.vocab is None:
            return self.target.encode(text)
        return [self.vocab.get(p, self.unk_id) for p in self.target.encode(text, out_type=str)]
