"""Step runners: how a batch's decoding steps run, chosen once, when the model loads.

The decoding loop (decoding.py) asks its runner for a batch's decoder state (`init_cache`)
and for each step's logits (`decode_step`), and never asks which runner it has. Three exist:

* `EagerSteps`: the model's own step, operator by operator (transformer.py, ensemble.py);
* `TracedSteps` (CPU): the same step recorded by TorchScript and replayed without the Python
  between its operators; each kind of step runs eagerly a few times first, so that a short
  job does not pay for recording it (traced_step.py);
* `FixedShapeSteps` (CUDA): the step over fixed-shape buffers, each bucket captured once as a
  CUDA graph and replayed (fixed_step.py).

All three give the same tokens. `step_runner_for` is the one place that chooses among them;
docs/speed.md has the measurements behind each choice.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import torch

from .fixed_step import FixedShapeSteps
from .state import DecoderState
from .traced_step import TracedSteps
from .transformer import Transformer


class StepRunner(Protocol):
    """Runs a model's decoding steps over a batch's decoder state."""

    shares_buffers: bool  # every batch decodes in the runner's buffers: a paused batch may not use it

    def init_cache(
        self, memory: torch.Tensor, src_mask: torch.Tensor, positions: int, width: int
    ) -> DecoderState: ...  # positions: the batch's step limit; width: rows a sentence

    def decode_step(self, tokens: torch.Tensor, state: Any) -> torch.Tensor: ...  # (rows, V); state: its init_cache's


class EagerSteps:
    """The model's own step, operator by operator: what every model can run, everywhere."""

    shares_buffers = False

    def __init__(self, model: Any) -> None:  # a Transformer, an Ensemble, any Seq2SeqModel (decoding.py)
        self.model = model

    def init_cache(
        self, memory: torch.Tensor, src_mask: torch.Tensor, positions: int = 0, width: int = 1
    ) -> DecoderState:
        return self.model.init_cache(memory, src_mask)

    def decode_step(self, tokens: torch.Tensor, state: DecoderState) -> torch.Tensor:
        return self.model.decode_step(tokens, state)


def step_runner_for(
    model: Any,
    device: torch.device,
    cuda_graphs: str = "auto",
    traced_step: str = "auto",
    quantize: str = "none",
    warn: Callable[[str], None] | None = None,
) -> StepRunner:
    """The runner for this model on this device: CUDA graphs on a GPU (--cuda-graphs auto), the
    traced step on a CPU (--traced-step auto, float weights: int8's quantized products step
    eagerly, a model stored in int8 too), for one Transformer (an ensemble steps eagerly); else the
    eager step. `warn` is
    told once if a graph or trace cannot be made (that runner then steps eagerly)."""
    if isinstance(model, Transformer):
        if device.type == "cuda" and cuda_graphs == "auto":
            return FixedShapeSteps(model, graphs=True, warn=warn)
        if device.type == "cpu" and traced_step == "auto" and quantize == "none" and model.backend != "int8":
            return TracedSteps(model, warn=warn)
    return EagerSteps(model)
