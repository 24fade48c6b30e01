"""Marian's own checkpoints loaded onto our Transformer: marian_config.py reads the files without
torch (options, vocabularies, which arrays make each parameter); here the parameters are made of
the .npz's arrays, each read from the file as the model is filled (models/weights.py).
"""

from __future__ import annotations

import math
from typing import Mapping

import torch

from ..checkpoint import LoadedModel
from ..placement import Placement, load_weights
from ..weights import InMemoryTensor, Source, StoredSource, Transposed, allocate, join, read_tensors
from .marian_config import FORMAT, describe
from .marian_weights import Piece

__all__ = ["FORMAT", "convert_weights", "load"]


def convert_weights(
    recipes: dict[str, tuple[Piece, ...]], tensors: Mapping[str, StoredSource], where: str
) -> dict[str, Source]:
    """Our parameters from the stored arrays (marian_weights.mapping: which, in what form, and the
    constant rows after them), to be read as the model is filled."""
    ours: dict[str, Source] = {}
    for name, pieces in recipes.items():
        arrays = [_formed(p, tensors[p.array]) for p in pieces if p.array is not None]
        width = tuple(arrays[0].shape[1:]) if arrays else ()
        parts = iter(arrays)
        ours[name] = join(
            [
                next(parts)
                if p.array is not None
                else InMemoryTensor(torch.full((p.rows, *width), p.value), name, where)
                for p in pieces
            ]
        )
    return ours


def _formed(piece: Piece, stored: StoredSource) -> Source:
    if piece.form == "transposed":
        return Transposed(stored)
    if piece.form == "vector":
        return stored.reshaped((math.prod(stored.shape),))
    return stored


def load(path: str, placement: Placement | None = None) -> LoadedModel:
    facts = describe(path, read_tensors)
    model = allocate(facts.cfg, path)
    placed = load_weights(model, convert_weights(facts.recipes, facts.stored.tensors, path), path, placement)
    return facts.loaded(model, path, placed.backend)
