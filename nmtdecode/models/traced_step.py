"""The model's decoding step recorded once by `torch.jit.trace` and replayed on the CPU.

On a CPU a small model's step is bound by its ~100 operator calls and the Python between them,
not by arithmetic; TorchScript (part of torch: no compiler needed) records the calls of one step
and replays them without the Python, with the eager step's logits bit for bit
(docs/speed.md#the-traced-step-on-the-cpu has the measurements).

A trace keeps as constants the Python numbers it saw, so the recorded step reads everything that
changes from its inputs (`StepInputs`): the tokens, the position as a tensor, the encoder's keys
and values, the masks, and per layer a view of the self-attention cache that ends at this step's
position. So one trace serves every row count, position and source length; one is recorded per
kind of step (beam width; whether rows need an ancestry mask; the form of a plain output
projection's product, gemm.PackedLinear.swaps), once that kind has run
`EAGER_STEPS` times eagerly, so that a job of a few lines does not pay for the recording. Steps
that record attention, and every step after a failed trace, run eagerly. Replays run without
TorchScript's graph optimizations, which cost once per kind of step on the CPU and save nothing;
the switch is per thread (`torch.jit.optimized_execution`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, NamedTuple

import torch

from .cache import SENTENCES, DecoderCache, by_slot
from .gemm import PackedLinear

if TYPE_CHECKING:
    from .transformer import Transformer

EAGER_STEPS = 64  # steps of a kind run eagerly before it is traced


class StepInputs(NamedTuple):
    """What a recorded step reads, in the order it takes them."""

    tokens: torch.Tensor  # (N,)
    position: torch.Tensor  # (1,): the position of the tokens
    cross_kv: torch.Tensor  # (L, 2, B, H, S, hd)
    memory_mask: torch.Tensor  # (B, 1, 1, S) bool
    self_mask: torch.Tensor | None  # which slots each row attends to; None with one row per sentence
    pasts: list  # per layer, the cache's keys and values up to this position: (2, B, H, (t+1)*width, hd)

    def flat(self) -> list:
        return [
            self.tokens,
            self.position,
            self.cross_kv,
            self.memory_mask,
            *([] if self.self_mask is None else [self.self_mask]),
            *self.pasts,
        ]


class TraceInputs:
    """StepInputs as the layers see a cache: a LayerState (models/state.py) over the recorded inputs."""

    def __init__(self, inputs: StepInputs, width: int) -> None:
        self.position, self.cross_kv, self.memory_mask = inputs.position, inputs.cross_kv, inputs.memory_mask
        self.mask, self.pasts, self.width = inputs.self_mask, inputs.pasts, width

    def cross(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cross_kv[layer, 0], self.cross_kv[layer, 1]

    def attention_probe(self, layer: int) -> None:
        return None

    def append_self(self, layer: int, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """kv (N, 2, H, hd) into the last `width` slots of the layer's view, which end at this
        step's position; returns the view's keys, values and the ancestry mask, as the cache does."""
        past = self.pasts[layer]
        past[:, :, :, -self.width :] = by_slot(kv, self.width)
        return past[0], past[1], self.mask

    def advance(self) -> None:
        pass  # the caller's cache counts the step


class TracedSteps:
    """The step runner of one model on the CPU (models/steps.py): the model's own cache, and its
    step, each kind traced after `eager_steps` eager ones, then replayed."""

    shares_buffers = False

    def __init__(
        self, model: Transformer, warn: Callable[[str], None] | None = None, eager_steps: int = EAGER_STEPS
    ) -> None:
        self.model, self.warn, self.eager_steps = model, warn, eager_steps
        self.traced: dict[tuple, Callable[..., torch.Tensor]] = {}  # (width, masked[, swapped]) -> the recorded step
        self.seen: dict[tuple, int] = {}  # (width, masked[, swapped]) -> steps run eagerly so far
        self.failed = False
        self.lock = threading.Lock()  # --inter-threads: batches decoded at once share the traces
        self.packed = [m for m in model.modules() if isinstance(m, PackedLinear) and m.packed]
        output = model.output
        self.plain_output = output if isinstance(output, PackedLinear) and not output.packed else None

    def init_cache(
        self, memory: torch.Tensor, src_mask: torch.Tensor, positions: int = 0, width: int = 1
    ) -> DecoderCache:
        return self.model.init_cache(memory, src_mask)

    def decode_step(self, tokens: torch.Tensor, cache: DecoderCache) -> torch.Tensor:
        if self.failed or cache.record_attention:
            return self.model.decode_step(tokens, cache)
        key: tuple = (tokens.numel() // cache.cross_kv.size(SENTENCES), cache.self_mask() is not None)
        if self.plain_output is not None:  # and the form of its product
            key += (self.plain_output.swaps(tokens.numel()),)
        step = self.traced.get(key)
        if step is None:
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] <= self.eager_steps:
                return self.model.decode_step(tokens, cache)
        inputs = self._inputs(tokens, cache)
        step = step or self._trace(key, inputs)
        if step is None:
            return self.model.decode_step(tokens, cache)
        with torch.jit.optimized_execution(False):  # the same ops, without a one-off cost (see above)
            logits = step(*inputs.flat())
        cache.advance()
        return logits

    def _inputs(self, tokens: torch.Tensor, cache: DecoderCache) -> StepInputs:
        cache.make_room()
        memory_mask = cache.memory_mask
        if memory_mask is None:  # no source padded: a mask of all True attends the same
            sentences, source = cache.cross_kv.size(SENTENCES), cache.cross_kv.size(-2)
            memory_mask = torch.ones((sentences, 1, 1, source), dtype=torch.bool)
        return StepInputs(
            tokens,
            torch.tensor([cache.length]),
            cache.cross_kv,
            memory_mask,
            cache.self_mask(),
            [cache.past(layer) for layer in range(self.model.cfg.decoder_layers)],
        )

    def _trace(self, key: tuple, example: StepInputs) -> Callable[..., torch.Tensor] | None:
        """The step of this key recorded on `example` (None, after one warning, if it cannot be)."""
        width, masked = key[:2]
        model, weights = self.model, [layer.packed_weight for layer in self.packed]

        # StepInputs.flat(), then the packed weights (inputs: the tracer cannot hold them as constants)
        def step(*flat: torch.Tensor) -> torch.Tensor:
            tokens, position, cross_kv, memory_mask, *rest = flat[: len(flat) - len(weights)]
            mask, pasts = (rest[0], rest[1:]) if masked else (None, rest)
            inputs = StepInputs(tokens, position, cross_kv, memory_mask, mask, pasts)
            return model.decode_step(tokens, TraceInputs(inputs, width))

        with self.lock:
            if key in self.traced or self.failed:  # another thread traced it, or failed to, meanwhile
                return self.traced.get(key)
            try:
                for parameter in model.parameters():
                    parameter.requires_grad_(False)  # a trace holds them as constants
                traced = torch.jit.trace(step, (*example.flat(), *weights), check_trace=False)
            except Exception as error:  # noqa: BLE001 - any failure: decode eagerly, as before
                self.failed = True
                if self.warn:
                    self.warn(
                        f"the traced decoding step is off for this run ({type(error).__name__}: "
                        f"{str(error).splitlines()[0] if str(error) else ''}); decoding without it"
                    )
                return None
            self.traced[key] = lambda *args: traced(*args, *weights)
            return self.traced[key]
