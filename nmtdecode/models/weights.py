"""The torch half of loading a checkpoint: reading tensors, building the model, giving it its weights.

What a format reads without torch (its configuration, the record it returns, the
errors) is checkpoint.py's; this module holds what needs torch. Weights are read
from safetensors, or with `torch.load(weights_only=True)`, never by unpickling
code; a weight that is missing, unexpected or of the wrong shape fails by name.
"""

from __future__ import annotations

import pickle

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from .. import memory
from .architecture import TransformerConfig
from .checkpoint import ModelError, first_line, largest_demand, note_read, parameter_count, unpickling_reason
from .stored import Tensors
from .transformer import Transformer


def read_tensors(files: list[str]) -> Tensors:
    """The tensors of a model's weight files (safetensors, or a pytorch_model.bin), as the view a
    format's `describe` reads (stored.py)."""
    tensors = {}
    for name in files:
        tensors.update(read_safetensors(name) if name.endswith(".safetensors") else read_torch_weights(name))
    return Tensors(tensors)


def read_safetensors(path: str) -> dict[str, torch.Tensor]:
    try:
        return load_file(note_read(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise ModelError(f"cannot read weights {path}: {e}") from None


def read_torch_weights(path: str) -> dict[str, torch.Tensor]:
    """A `pytorch_model.bin`-style file: tensors and plain containers only, never pickled code."""
    try:
        return torch.load(note_read(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise ModelError(f"cannot read weights {path}: refused: {unpickling_reason(str(e))}") from None
    except Exception as e:  # the unpickler raises many types; all mean "not readable as weights"
        raise ModelError(f"cannot read weights {path}: {type(e).__name__}: {first_line(str(e))}") from None


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


def load_weights(model: Transformer, tensors: dict[str, torch.Tensor], source: str):
    """Give `model` the `tensors` (our parameter names), strictly checked.

    The tensors become the parameters (no copy: a model built uninitialised never touches its own
    memory, so the weights are held once, not twice, while loading); ones of another dtype are
    converted, and tied parameters are tied again to the tensor their first name gets."""
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
    model.load_state_dict({n: tensors[n].to(t.dtype).contiguous() for n, t in expected.items()}, strict=False,
                          assign=True)
    for alias, first in aliases.items():
        module, _, name = alias.rpartition(".")
        setattr(model.get_submodule(module), name, model.get_parameter(first))


def allocate(cfg: TransformerConfig, source: str) -> Transformer:
    """The model's memory (Transformer.uninitialised), once `check_dimensions` passed; running out
    of memory is one line naming the config's largest demand, not the allocator's message."""
    try:
        return Transformer.uninitialised(cfg)
    except (MemoryError, RuntimeError) as e:
        if not memory.is_out_of_memory(e):
            raise
        what, size = largest_demand(cfg)
        whole, largest = (memory.readable_size(n * 4) for n in (parameter_count(cfg), size))
        raise ModelError(f"{source}: out of memory allocating the model ({whole} in float32); "
                         f"most of it for {what} ({largest})") from None


