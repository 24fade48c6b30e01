"""load_model(path): the format that the path is (detect.py) loads the model.

The dispatcher on top of the loading layer: it imports the formats
(`formats/*.py`, each with its `FORMAT` name and `load(path)`), which import only
`checkpoint.py`, `weights.py` and `transformer.py` (and their torch-free halves,
`formats/*_config.py`), so nothing here is imported back. The `LoadedModel`
record lives in `checkpoint.py`, the safe readers of tensors in `weights.py`;
the names re-exported below are for callers outside the package.
"""

from __future__ import annotations

from .checkpoint import LoadedModel, ModelError, read_json, recording_reads
from .detect import model_format
from .ensemble import ensemble_of
from .formats import eole, huggingface, marian, native, native_config, opennmt
from .placement import Placement

__all__ = ["FORMATS", "LoadedModel", "ModelError", "load_model", "read_json", "stored_precision"]

# Each format by its name; which one a path is, detect.py tells from its files.
FORMATS = {fmt.FORMAT: fmt for fmt in (native, eole, huggingface, marian, opennmt)}


def load_model(
    path: str | list[str] | None,
    ensemble_rule: str | None = None,
    ensemble_weights: list[float] | None = None,
    placement: Placement | None = None,
) -> LoadedModel:
    """The model at `path`, its weights read into the form `placement` gives them (models/placement.py:
    device, dtype, how the CPU multiplies; default float32 on the CPU), with the files its format
    read to build it (`LoadedModel.files`); a list of paths is an ensemble, decoded as one model
    (ensemble.py)."""
    if isinstance(path, list):
        return ensemble_of([load_model(p, placement=placement) for p in path], ensemble_rule, ensemble_weights)
    fmt = FORMATS[model_format(path)]
    with recording_reads() as files:
        loaded = fmt.load(path, placement)
    loaded.files = tuple(dict.fromkeys(files))
    return loaded


def stored_precision(path: str | list[str] | None) -> str:
    """The precision a model's weights were stored in by `nmtdecode convert` (a native model's
    config.yaml says), float32 for every other model and for an ensemble."""
    if isinstance(path, str) and model_format(path) == native.FORMAT:
        return native_config.stored_precision(path)
    return "float32"
