"""eole model directories loaded onto our Transformer: eole_config.py reads the directory
without torch; here the weights are read, renamed (OpenNMT-py's `convert_weights`) and given
to the model.
"""

from __future__ import annotations

from ..checkpoint import LoadedModel
from ..placement import Placement, load_weights
from ..weights import allocate, read_tensors
from .eole_config import FORMAT, describe, weight_map
from .opennmt import convert_weights

__all__ = ["FORMAT", "load"]


def load(path: str, placement: Placement | None = None) -> LoadedModel:
    facts = describe(path, read_tensors)
    model = allocate(facts.cfg, path)
    placed = load_weights(model, convert_weights(model, facts.stored.tensors, *weight_map(facts.cfg)), path, placement)
    return facts.loaded(model, path, placed.backend)
