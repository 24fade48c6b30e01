"""load_model(path): detect the checkpoint format, build the Transformer, load weights safely.

Weights are read from safetensors, or with `torch.load(weights_only=True)`,
never by unpickling code. Every format maps onto the same `Transformer`;
a weight that is missing, unexpected or of the wrong shape fails by name.
"""

from __future__ import annotations

import os

from ..config import ConfigError
from .checkpoint import LoadedModel, ModelError, load_weights, read_json, read_safetensors, shared_names  # noqa: F401


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
