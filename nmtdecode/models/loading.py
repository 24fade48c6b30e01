"""load_model(path): detect the checkpoint format, build the Transformer, load weights safely.

Weights are read from safetensors, or with `torch.load(weights_only=True)`,
never by unpickling code. Every format maps onto the same `Transformer`;
a weight that is missing, unexpected or of the wrong shape fails by name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..config import ConfigError
from ..translator import ModelRules
from .transformer import Transformer


class ModelError(RuntimeError):
    """The model cannot be loaded (runtime error, exit code 1)."""


@dataclass
class LoadedModel:
    model: Transformer
    tokenizer: object  # tokenizer.SentencePieceTokenizer or compatible
    format: str  # "native", "huggingface/marian", ...
    path: str
    rules: ModelRules = field(default_factory=ModelRules)
    defaults: dict = field(default_factory=dict)  # decoding defaults shipped with the model

    def rules_for(self, src_lang: str | None, tgt_lang: str | None) -> ModelRules:
        """Set the languages on the tokenizer; the model's rules, with the target-language
        tag forced first where the family does that."""
        forced = self.tokenizer.set_languages(src_lang, tgt_lang)
        if forced is None:
            return self.rules
        return ModelRules(self.rules.banned_ids, forced, self.rules.forced_eos)


def shared_names(model: torch.nn.Module) -> dict[str, str]:
    """Parameter names that alias an earlier one (tied embeddings): alias -> first name."""
    first, aliases = {}, {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key in first:
            aliases[name] = first[key]
        else:
            first[key] = name
    return aliases


def read_safetensors(path: str) -> dict[str, torch.Tensor]:
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as e:
        raise ModelError(f"cannot read weights {path}: {e}") from None


def read_json(path: str, required: bool = True) -> dict:
    """A JSON object from a model directory; a missing optional file is {}."""
    if not os.path.isfile(path):
        if required:
            raise ModelError(f"{path} is missing")
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"{path} cannot be read: {e}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path} cannot be read: expected a JSON object")
    return data


def load_weights(model: Transformer, tensors: dict[str, torch.Tensor], source: str):
    """Copy `tensors` (our parameter names) into `model`, strictly."""
    aliases = shared_names(model)
    expected = {n: t for n, t in model.state_dict().items() if n not in aliases}
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected) - set(aliases))
    if missing or unexpected:
        raise ModelError(f"{source}: weights do not match the architecture; "
                         f"missing: {missing[:5]}, unexpected: {unexpected[:5]}")
    for name, tensor in expected.items():
        if tuple(tensors[name].shape) != tuple(tensor.shape):
            raise ModelError(f"{source}: {name} has shape {tuple(tensors[name].shape)}, "
                             f"the config implies {tuple(tensor.shape)}")
    model.load_state_dict({n: tensors[n] for n in expected}, strict=False)


def load_model(path: str) -> LoadedModel:
    from .formats import huggingface, native

    if not os.path.exists(path):
        raise ConfigError(f"model: {path} does not exist")
    if os.path.isfile(os.path.join(path, "config.yaml")):
        return native.load(path)
    if os.path.isfile(os.path.join(path, "config.json")):
        return huggingface.load(path)
    raise ConfigError(f"model: {path} is not a model directory (no config.yaml for the native format, "
                      "no config.json for Hugging Face)")
