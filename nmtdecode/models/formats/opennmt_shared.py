"""What OpenNMT-py checkpoints (opennmt.py) and eole directories (eole.py) share, read without
torch: the vocabularies and their tokenizer, the SentencePiece models of the `sentencepiece`
transform, the names of the attention weights, the shapes our parameters get from theirs, and
the way both tools search.
"""

from __future__ import annotations

import os
from typing import TypeVar

import sentencepiece as spm

from ...options.config import ConfigError
from ..tokenizer import spm_identity
from ..architecture import TransformerConfig
from ..checkpoint import ModelError, ModelRules, note_read

SPECIALS = {"unk": "<unk>", "pad": "<blank>", "bos": "<s>", "eos": "</s>"}
POSITION_TYPES = {"SinusoidalInterleaved": "sinusoidal_interleaved", "SinusoidalConcat": "sinusoidal_fairseq"}
# How onmt_translate (and eole predict) search: nothing banned but <unk> with ban_unk_token
# (onmt/translate/decode_strategy.py); the length penalty counts one token more than were
# generated, and the beam keeps a finished candidate's slot empty for a step (beam_search.py).
OPENNMT_RULES = ModelRules(banned_ids=(), length_offset=1, opennmt_beam=True)


def token_ids(tokens: list) -> dict:
    """A vocabulary's token -> id; a token listed twice keeps its first id."""
    return {token: i for i, token in reversed(list(enumerate(tokens)))}


def special_ids(tokens: list, side: str, path: str, specials: dict[str, str] = SPECIALS) -> dict[str, int]:
    """The ids of the special tokens (role -> token) in one vocabulary."""
    index = token_ids(tokens)
    missing = [token for token in specials.values() if token not in index]
    if missing:
        raise ModelError(f"{path}: the {side} vocabulary has no {missing[0]} token")
    return {role: index[token] for role, token in specials.items()}


def attention_projections(ours: str, theirs: str, fused: dict) -> dict:
    """Our fused projections are concatenations of theirs, rows in this order."""
    if ours.endswith("self_attn"):
        fused[f"{ours}.qkv"] = [f"{theirs}.linear_query", f"{theirs}.linear_keys", f"{theirs}.linear_values"]
    else:
        fused[f"{ours}.q"] = [f"{theirs}.linear_query"]
        fused[f"{ours}.kv"] = [f"{theirs}.linear_keys", f"{theirs}.linear_values"]
    fused[f"{ours}.out"] = [f"{theirs}.final_linear"]
    return fused


# A stored layer's weights (checkpoint.check_stored_layers): OpenNMT-py's encoder.transformer.N and
# decoder.transformer_layers.N, eole's {encoder,decoder}.transformer_layers.N.
LAYER_WEIGHT = r"(?P<stack>encoder|decoder)\.transformer(?:_layers)?\.(?P<number>\d+)\."


def mapped_shapes(
    cfg: TransformerConfig, theirs: dict[str, tuple[int, ...]], linear: dict[str, list[str]], direct: dict[str, str]
) -> dict[str, tuple[int, ...]]:
    """The shapes that `convert_weights` gives our parameters (theirs: name -> shape), without
    converting: for checkpoint.check_dimensions before the model is allocated, and for inspect."""
    shapes = {name: tuple(theirs[source]) for name, source in direct.items() if source in theirs}
    for name, parts in linear.items():
        found = [theirs[f"{p}.weight"] for p in parts if f"{p}.weight" in theirs]
        if found and len(found) == len(parts):
            shapes[f"{name}.weight"] = (sum(shape[0] for shape in found), *found[0][1:])
            if cfg.bias:  # a bias the checkpoint lacks is loaded as zeros
                shapes[f"{name}.bias"] = (shapes[f"{name}.weight"][0],)
    return untied(cfg, shapes)


_Value = TypeVar("_Value")  # what our parameter names map to: shapes, or weight sources


def untied(cfg: TransformerConfig, ours: dict[str, _Value]) -> dict[str, _Value]:
    """Our parameters without the ones tied to another (stored once, under the first name)."""
    if cfg.tie_output:
        ours.pop("output.weight", None)
    if cfg.share_embeddings:
        ours.pop("tgt_embed.tokens.weight", None)
    return ours


class VocabTokenizer:
    """Text -> pieces (a SentencePiece model, or a whitespace split of pre-tokenized text) ->
    ids in the checkpoint's own vocabularies; unknown pieces become <unk>. The source gets
    no EOS, as OpenNMT-py feeds its encoder (onmt/inputters/text_utils.py numericalize)."""

    def __init__(
        self,
        src_vocab: list,
        tgt_vocab: list,
        src_spm: str | None,
        tgt_spm: str | None,
        specials: dict[str, str] = SPECIALS,
    ) -> None:
        self.src_ids, self.tgt_ids = token_ids(src_vocab), token_ids(tgt_vocab)
        self.languages: dict[str, int] = {}  # no language tags
        self.src_tokens, self.tgt_tokens = list(src_vocab), list(tgt_vocab)
        self.src_spm = spm.SentencePieceProcessor(model_file=note_read(src_spm)) if src_spm else None
        self.tgt_spm = spm.SentencePieceProcessor(model_file=note_read(tgt_spm)) if tgt_spm else None
        self.specials = dict(specials)
        self.src_unk, self.tgt_unk = self.src_ids[specials["unk"]], self.tgt_ids[specials["unk"]]
        # onmt_translate writes every token before EOS, <blank> and <unk> included
        self.eos_id = self.tgt_ids[specials["eos"]]

    @staticmethod
    def _pieces(text: str, model: spm.SentencePieceProcessor | None) -> list[str]:
        return model.encode(text, out_type=str) if model is not None else text.split()

    def encode(self, text: str) -> list[int]:
        return self.encode_pieces(self._pieces(text, self.src_spm))

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        """Source pieces (text already cut as `encode` cuts it) -> ids; unknown ones are <unk>."""
        return [self.src_ids.get(p, self.src_unk) for p in pieces]

    def encode_target(self, text: str) -> list[int]:
        return [self.tgt_ids.get(p, self.tgt_unk) for p in self._pieces(text, self.tgt_spm)]

    @property
    def word_marker(self) -> str:
        """What starts a word in the pieces: SentencePiece's mark, or a space between whitespace tokens."""
        return "\u2581" if self.tgt_spm is not None else " "

    def source_pieces(self, text: str | list[str]) -> list[str]:
        """One piece per id of `encode` (of `encode_pieces` for a list of pieces), as the text
        spells it (an unknown piece too)."""
        return list(text) if isinstance(text, list) else self._pieces(text, self.src_spm)

    def decode(self, ids: list[int]) -> str:
        pieces = [self.tgt_tokens[i] for i in ids if i != self.eos_id]
        return self.tgt_spm.decode_pieces(pieces) if self.tgt_spm is not None else " ".join(pieces)

    def target_piece(self, token_id: int) -> str | None:
        """The target vocabulary's entry for an id, or None beyond the vocabulary."""
        return self.tgt_tokens[token_id] if 0 <= token_id < len(self.tgt_tokens) else None

    def source_piece(self, token_id: int) -> str | None:
        """The source vocabulary's entry for an id, or None beyond the vocabulary."""
        return self.src_tokens[token_id] if 0 <= token_id < len(self.src_tokens) else None

    def piece_id(self, piece: str) -> int | None:
        """The id of a target vocabulary entry (as `ignore_when_blocking` and `banned_tokens` name
        them), or None when the vocabulary has no such entry."""
        return self.tgt_ids.get(piece)

    def source_identity(self) -> tuple:
        """Equal for two tokenizers exactly when they give every source line the same ids."""
        proto = spm_identity(self.src_spm) if self.src_spm is not None else None
        return ("vocab", proto, tuple(sorted(self.src_ids.items())), self.src_unk)

    def set_languages(self, src_lang: str | None, tgt_lang: str | None) -> int | None:
        if src_lang or tgt_lang:
            raise ConfigError("src_lang/tgt_lang: this model has no language tags")
        return None

    def language_codes(self) -> list[str]:
        return []


def subword_models(
    transforms: list | None, recorded: dict[str, str | None], path: str, beside: str
) -> tuple[str | None, str | None]:
    """The SentencePiece models of the `sentencepiece` transform recorded with the model
    (recorded: side -> path): the recorded path, else the file of that name in the directory
    `beside`. Without the transform the input is taken as pre-tokenized (split on whitespace)."""
    tokenizers = [t for t in transforms or [] if t in ("sentencepiece", "onmt_tokenize", "bpe")]
    if not tokenizers:
        return None, None
    if tokenizers != ["sentencepiece"]:
        raise ModelError(f"{path}: the {tokenizers[0]} transform is not supported (only sentencepiece)")
    found = []
    for side in ("src", "tgt"):
        name = recorded.get(side)
        if not name:
            raise ModelError(f"{path}: the sentencepiece transform names no {side}_subword_model")
        chosen = next((p for p in (name, os.path.join(beside, os.path.basename(name))) if os.path.isfile(p)), None)
        if chosen is None:
            raise ModelError(
                f"{path}: {side}_subword_model {name} is missing (put {os.path.basename(name)} next to the checkpoint)"
            )
        found.append(chosen)
    return found[0], found[1]
