"""What a decoding step launches, the model's step and the search apart, counted by torch.profiler:
kernels on a GPU; on a CPU the operators that compute (those the loop's own code calls, an
operator called from another running inside it; views and other metadata changes launch no
kernel). The GPU check's step profile (gpu_benchmark.py) and bench/experiments/step_operators.py
count with it.
"""

from __future__ import annotations

import collections
from contextlib import contextmanager

import torch

MODEL, SEARCH = "model step", "search"  # the labels of the parts counted
# Operators that change only a tensor's metadata: no kernel on a GPU.
METADATA = {
    "aten::view",
    "aten::_unsafe_view",
    "aten::reshape",
    "aten::transpose",
    "aten::t",
    "aten::permute",
    "aten::expand",
    "aten::expand_as",
    "aten::slice",
    "aten::select",
    "aten::narrow",
    "aten::as_strided",
    "aten::unsqueeze",
    "aten::squeeze",
    "aten::flatten",
    "aten::unflatten",
    "aten::chunk",
    "aten::split",
    "aten::unbind",
    "aten::alias",
    "aten::detach",
    "aten::movedim",
    "aten::view_as",
    "aten::lift_fresh",
    "aten::empty",
    "aten::empty_strided",
    "aten::unfold",
    "aten::result_type",
    "aten::to",
    "aten::is_nonzero",
    "aten::resolve_conj",
    "aten::resolve_neg",
    "aten::size",
    "aten::stride",
}


def labelled_call(function, label: str):
    """`function`, run inside torch.profiler.record_function(label)."""

    def wrapped(*args, **kwargs):
        with torch.profiler.record_function(label):
            return function(*args, **kwargs)

    return wrapped


@contextmanager
def labelled_parts(decoder):
    """While active, the decoder's model steps run under the label MODEL and its searches' steps
    (host or device) under SEARCH."""
    runner, saved = decoder.steps, dict(vars(decoder.steps))
    runner.decode_step = labelled_call(runner.decode_step, MODEL)
    makers = {name: getattr(decoder, name) for name in ("make_search", "make_device_search")}

    def labelling(make):
        def made(*args, **kwargs):
            search = make(*args, **kwargs)
            search.advance = labelled_call(search.advance, SEARCH)
            return search

        return made

    for name, make in makers.items():
        setattr(decoder, name, labelling(make))
    try:
        yield
    finally:
        vars(runner).clear()
        vars(runner).update(saved)
        for name in makers:
            delattr(decoder, name)


def part_counts(prof) -> dict[str, tuple[int, int]]:
    """Per part (MODEL, SEARCH): (its top-level operator calls, its launches: kernels when the
    profile holds any, else its computing top-level operators)."""
    calls, computing, kernels = collections.Counter(), collections.Counter(), collections.Counter()
    for event in prof.events():
        part = labelled_ancestor(event)
        if part is None:
            continue
        kernels[part] += len(getattr(event, "kernels", ()) or ())
        if event.name.startswith("aten::") and event.cpu_parent is not None and event.cpu_parent.name == part:
            calls[part] += 1
            computing[part] += event.name not in METADATA or copies(event)
    launches = kernels if sum(kernels.values()) else computing
    return {part: (calls[part], launches[part]) for part in (MODEL, SEARCH)}


def copies(event) -> bool:
    """Whether an operator copies data (a reshape of a tensor that is not contiguous, a `to` of
    another dtype), which a GPU launches a kernel for."""
    return any(child.name == "aten::copy_" or copies(child) for child in event.cpu_children)


def labelled_ancestor(event) -> str | None:
    while event is not None:
        if event.name in (MODEL, SEARCH):
            return event.name
        event = event.cpu_parent
    return None
