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
from .formats import ct2, eole, huggingface, marian, native, opennmt
from ..options.config import ConfigError
from .placement import Placement

__all__ = ["FORMATS", "LoadedModel", "ModelError", "load_model", "read_json"]

# Each format by its name; which one a path is, detect.py tells from its files.
FORMATS = {fmt.FORMAT: fmt for fmt in (native, ct2, eole, huggingface, marian, opennmt)}
# The formats that keep a vocabulary but not the tool that cuts text into it: --tokenizer names one.
TAKE_A_TOKENIZER = (ct2.FORMAT,)


def load_model(
    path: str | list[str] | None,
    ensemble_rule: str | None = None,
    ensemble_weights: list[float] | None = None,
    placement: Placement | None = None,
    tokenizer: str | None = None,
) -> LoadedModel:
    """The model at `path`, its weights read into the form `placement` gives them (models/placement.py:
    device, dtype, how the CPU multiplies; default float32 on the CPU), with the files its format
    read to build it (`LoadedModel.files`); a list of paths is an ensemble, decoded as one model
    (ensemble.py). `tokenizer`: the SentencePiece model of a CTranslate2 folder (--tokenizer)."""
    if isinstance(path, list):
        members = [load_model(p, placement=placement, tokenizer=tokenizer) for p in path]
        return ensemble_of(members, ensemble_rule, ensemble_weights)
    name = model_format(path)
    if tokenizer is not None and name not in TAKE_A_TOKENIZER:
        raise ConfigError(
            f"tokenizer: {path} is a {name} model, which brings its own tokenizer "
            "(--tokenizer is for a CTranslate2 folder)"
        )
    with recording_reads() as files:
        loaded = FORMATS[name].load(path, placement, tokenizer) if tokenizer else FORMATS[name].load(path, placement)
    loaded.files = tuple(dict.fromkeys(files.values()))
    return loaded
