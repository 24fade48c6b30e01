"""Hugging Face seq2seq directories (Marian, BART, mBART, M2M100/NLLB) loaded onto our Transformer.

The torch half: hf_config.py reads the directory (architecture, decoding
defaults, which stored tensors make each of our parameters); here the tensors
are read (`model.safetensors`, also sharded, or `pytorch_model.bin` with
`weights_only=True`), joined and given to the model.
"""

from __future__ import annotations

import torch

from ..checkpoint import LoadedModel, ModelRules
from ..transformer import Transformer
from ..weights import allocate, load_weights, read_tensors
from .hf_config import FORMAT, describe, weight_sources

__all__ = ["FORMAT", "convert_weights", "load", "load_network"]


def convert_weights(sources: dict[str, list[str]], tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our parameters from the stored tensors (hf_config.weight_sources: which, joined on dim 0)."""
    ours = {name: torch.cat([tensors[s] for s in parts], dim=0) if len(parts) > 1 else tensors[parts[0]]
            for name, parts in sources.items()}
    if "output.bias" in ours:  # stored as a (1, vocabulary) row
        ours["output.bias"] = ours["output.bias"].reshape(-1)
    return ours


def load_network(path: str, hf: dict) -> tuple[Transformer, dict, ModelRules]:
    """The model with its weights, decoding defaults and rules; no tokenizer."""
    model, facts = _network(path, hf)
    return model, facts.defaults, facts.rules


def _network(path: str, hf: dict | None = None):
    facts = describe(path, read_tensors, hf)
    model = allocate(facts.cfg, path)
    tensors = facts.stored.tensors
    load_weights(model, convert_weights(weight_sources(facts.cfg, tensors, path), tensors), path)
    return model.eval(), facts


def load(path: str) -> LoadedModel:
    model, facts = _network(path)  # architecture and weight errors come before tokenizer ones
    return facts.loaded(model, path)
