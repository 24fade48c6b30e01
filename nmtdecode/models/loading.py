"""load_model(path): find the format that recognises a model directory (or file) and let it load the model.

The dispatcher on top of the loading layer: it imports the formats
(`formats/*.py`, each with `detect(path)` and `load(path)`), which import only
`checkpoint.py` and `transformer.py`, so nothing here is imported back. The
safe readers and the `LoadedModel` record live in `checkpoint.py`; the names
re-exported below are for callers outside the package.
"""

from __future__ import annotations

import os

from ..config import ConfigError
from .checkpoint import LoadedModel, ModelError, read_json
from .formats import eole, huggingface, native, opennmt

__all__ = ["FORMATS", "LoadedModel", "ModelError", "load_model", "read_json"]

# Tried in order; the first whose detect() accepts the path loads it (native wins over config.json,
# eole's config.json has a `model:` section that Hugging Face's has not; an OpenNMT-py checkpoint is
# a `.pt` file, not a directory).
FORMATS = [native, eole, huggingface, opennmt]


def load_model(path: str) -> LoadedModel:
    if not os.path.exists(path):
        raise ConfigError(f"model: {path} does not exist")
    for fmt in FORMATS:
        if fmt.detect(path):
            return fmt.load(path)
    raise ConfigError(f"model: {path} is not a model directory (no config.yaml for the native format, "
                      "no config.json for Hugging Face) nor an OpenNMT-py .pt checkpoint")
