"""load_model(path): the format that the path is (detect.py) loads the model.

The dispatcher on top of the loading layer: it imports the formats
(`formats/*.py`, each with its `FORMAT` name and `load(path)`), which import only
`checkpoint.py` and `transformer.py`, so nothing here is imported back. The
safe readers and the `LoadedModel` record live in `checkpoint.py`; the names
re-exported below are for callers outside the package.
"""

from __future__ import annotations

from .checkpoint import LoadedModel, ModelError, read_json
from .detect import model_format
from .formats import eole, huggingface, native, opennmt

__all__ = ["FORMATS", "LoadedModel", "ModelError", "load_model", "read_json"]

# Each format by its name; which one a path is, detect.py tells from its files.
FORMATS = {fmt.FORMAT: fmt for fmt in (native, eole, huggingface, opennmt)}


def load_model(path: str | None) -> LoadedModel:
    return FORMATS[model_format(path)].load(path)
