"""Hugging Face seq2seq directories (Marian, BART, mBART, M2M100/NLLB, Pegasus, T5) loaded onto our Transformer.

The torch half: hf_config.py reads the directory (architecture, decoding
defaults, which stored tensors make each of our parameters); here the tensors
are read (`model.safetensors`, also sharded, or `pytorch_model.bin` with
`weights_only=True`), joined and given to the model.
"""

from __future__ import annotations

from ..checkpoint import LoadedModel, ModelFacts, ModelRules
from ..placement import Placement, load_weights
from ..transformer import Transformer
from ..weights import Source, StoredSource, allocate, join, read_tensors
from .hf_config import FORMAT, describe, weight_sources

__all__ = ["FORMAT", "convert_weights", "load", "load_network"]


def convert_weights(sources: dict[str, list[str]], tensors: dict[str, StoredSource]) -> dict[str, Source]:
    """Our parameters from the stored tensors (hf_config.weight_sources: which, joined on dim 0),
    to be read as the model is filled (models/weights.py)."""
    ours = {name: join([tensors[s] for s in parts]) for name, parts in sources.items()}
    if "output.bias" in ours:  # one tensor (hf_config.weight_map), stored as a (1, vocabulary) row
        (stored,) = sources["output.bias"]
        ours["output.bias"] = tensors[stored].reshaped((tensors[stored].shape[-1],))
    return ours


def load_network(path: str, hf: dict, placement: Placement | None = None) -> tuple[Transformer, dict, ModelRules]:
    """The model with its weights, decoding defaults and rules; no tokenizer."""
    model, facts, _ = _network(path, hf, placement)
    return model, facts.defaults, facts.rules


def _network(
    path: str, hf: dict | None = None, placement: Placement | None = None
) -> tuple[Transformer, ModelFacts, Placement]:
    facts = describe(path, read_tensors, hf)
    model = allocate(facts.cfg, path)
    tensors = facts.stored.tensors
    sources = weight_sources(facts.cfg, tensors, path, facts.format.partition("/")[2])
    placed = load_weights(model, convert_weights(sources, tensors), path, placement)
    return model.eval(), facts, placed


def load(path: str, placement: Placement | None = None) -> LoadedModel:
    model, facts, placed = _network(path, placement=placement)  # architecture and weight errors before tokenizer ones
    return facts.loaded(model, path, placed.backend)
