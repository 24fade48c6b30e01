"""eole model directories loaded onto our Transformer: eole_config.py reads the directory
without torch; here the weights are read, renamed (OpenNMT-py's `convert_weights`) and given
to the model.
"""

from __future__ import annotations

from ..checkpoint import LoadedModel
from ..weights import allocate, load_weights, read_tensors
from .eole_config import FORMAT, describe, weight_map
from .opennmt import convert_weights

__all__ = ["FORMAT", "load"]


def load(path: str) -> LoadedModel:
    facts = describe(path, read_tensors)
    model = allocate(facts.cfg, path)
    load_weights(model, convert_weights(model, facts.stored.tensors, *weight_map(facts.cfg)), path)
    return facts.loaded(model, path)
