"""The model's decoding step recorded once by `torch.jit.trace` and replayed on the CPU.

On a CPU a small model's step is bound by its ~100 operator calls and the Python between them,
not by arithmetic (docs/speed.md, "Where the time goes"). TorchScript (part of torch: no
compiler needed) records the calls of one step and replays them without the Python: on the demo
model a step took 0.50 of its eager time at 1 row and 0.77 at 32 (`bench/traced_step.py`).

A trace keeps as constants the Python numbers it saw, so the recorded step must read everything
that changes from its inputs (`TraceInputs`): the tokens, the position as a tensor, the encoder's
keys and values, the source mask, and per layer a view of the self-attention cache up to and
including this step's position (the step writes its keys and values into the view's last slots,
which are the cache's). The sizes of all of those are read inside the trace, so one trace serves
every row count, position and source length; it is recorded once per kind of step (beam width;
whether the rows need an ancestry mask). The layers run unchanged: `TraceInputs` gives them the
cache interface (`cache.py`). The logits are the eager step's, bit for bit
(tests/models/test_traced_step.py runs every strategy both ways).

A step that records attention (coverage, alignment, --attention) runs eagerly: the recording is
Python. So does everything when tracing fails, after one warning.
"""

from __future__ import annotations

import threading

import torch

from .cache import POSITIONS, DecoderCache
from .gemm import PackedLinear

# The tracer cannot record torch.ops.mkldnn._linear_pointwise called from Python (its Scalar?[]
# argument); a TorchScript function making the same call can be recorded.
_SCRIPTED = torch.jit.CompilationUnit("""
def packed_linear(x: Tensor, w: Tensor, b: Optional[Tensor], post_op: str, algorithm: str):
    scalars: List[Optional[number]] = []
    return torch.ops.mkldnn._linear_pointwise(x, w, b, post_op, scalars, algorithm)
""")


def packed_linear(x: torch.Tensor, layer: PackedLinear) -> torch.Tensor:
    """PackedLinear's product in the form the tracer records (used only while tracing)."""
    return _SCRIPTED.packed_linear(x, layer.packed_weight, layer.bias, layer.post_op, layer.algorithm)


class TraceInputs:
    """What a recorded step reads, with the part of DecoderCache's interface the layers call."""

    record_attention = False

    def __init__(self, position, cross_kv, memory_mask, self_mask, pasts, width: int):
        self.position, self.cross_kv, self.memory_mask = position, cross_kv, memory_mask
        self.mask, self.pasts, self.width = self_mask, pasts, width

    def cross(self, layer: int):
        return self.cross_kv[layer, 0], self.cross_kv[layer, 1]

    def attention_probe(self, layer: int):
        return None

    def append_self(self, layer: int, kv: torch.Tensor):
        """kv (N, 2, H, hd) into the last `width` slots of the layer's view, which end at this
        step's position; returns the view's keys, values and the ancestry mask, as the cache does."""
        _, _, heads, hd = kv.shape
        past = self.pasts[layer]  # (2, B, H, (t+1)*width, hd)
        past[:, :, :, -self.width:] = kv.view(-1, self.width, 2, heads, hd).permute(2, 0, 3, 1, 4)
        return past[0], past[1], self.mask

    def advance(self):
        pass  # the caller's cache counts the step


class TracedSteps:
    """`decode_step` for one model on the CPU, as the model has it: each kind of step traced on
    first use, then replayed (decoding.py calls this instead of the model's own)."""

    def __init__(self, model, warn=None):
        self.model, self.warn = model, warn
        self.traced: dict[tuple, object] = {}  # (width, masked) -> the recorded step
        self.failed = False
        self.lock = threading.Lock()  # --inter-threads: batches decoded at once share the traces
        self.packed = [m for m in model.modules() if isinstance(m, PackedLinear)]

    def decode_step(self, tokens: torch.Tensor, cache: DecoderCache) -> torch.Tensor:
        if self.failed or cache.record_attention:
            return self.model.decode_step(tokens, cache)
        width = tokens.numel() // cache.cross_kv.size(2)
        inputs = self._inputs(tokens, cache, width)
        key = (width, inputs[4] is not None)
        step = self.traced.get(key)
        if step is None:
            step = self._trace(key, inputs)
            if step is None:
                return self.model.decode_step(tokens, cache)
        logits = step(*self._flat(inputs))
        cache.advance()
        return logits

    def _inputs(self, tokens, cache: DecoderCache, width: int):
        t = cache.length
        if cache.self_kv is None or t == cache.self_kv.size(POSITIONS):
            cfg = self.model.cfg
            cache._grow(cache.cross_kv.new_empty((tokens.numel(), 2, cfg.heads, cfg.d_model // cfg.heads)))
        pasts = [cache.self_kv[layer, :, :, :, : t + 1].flatten(3, 4) for layer in range(cache.self_kv.size(0))]
        memory_mask = cache.memory_mask
        if memory_mask is None:  # no source padded: a mask of all True attends the same
            memory_mask = torch.ones((cache.cross_kv.size(2), 1, 1, cache.cross_kv.size(4)), dtype=torch.bool)
        return tokens, torch.tensor([t]), cache.cross_kv, memory_mask, cache.self_mask(), pasts

    @staticmethod
    def _flat(inputs) -> list:
        tokens, position, cross_kv, memory_mask, mask, pasts = inputs
        return [tokens, position, cross_kv, memory_mask, *([] if mask is None else [mask]), *pasts]

    def _trace(self, key: tuple, inputs):
        width, masked = key
        layers = len(inputs[5])
        model, packed = self.model, self.packed

        def step(tokens, position, cross_kv, memory_mask, *rest):
            mask, pasts = (rest[0], rest[1:]) if masked else (None, rest)
            return model.decode_step(tokens, TraceInputs(position, cross_kv, memory_mask, mask, pasts[:layers], width))
        with self.lock:
            if key in self.traced:
                return self.traced[key]
            saved = PackedLinear.forward
            try:
                PackedLinear.forward = lambda layer, x: packed_linear(x, layer)
                for parameter in model.parameters():
                    parameter.requires_grad_(False)  # a trace holds them as constants
                weights = [layer.packed_weight for layer in packed]  # inputs: the tracer cannot hold them
                traced = torch.jit.trace(lambda *args: step(*args[: len(args) - len(weights)]),
                                         (*self._flat(inputs), *weights), check_trace=False)
            except Exception as error:  # noqa: BLE001 - any failure: decode eagerly, as before
                self.failed = True
                if self.warn:
                    self.warn(f"the traced decoding step is off for this run ({type(error).__name__}: "
                              f"{str(error).splitlines()[0] if str(error) else ''}); decoding without it")
                return None
            finally:
                PackedLinear.forward = saved
            self.traced[key] = lambda *args: traced(*args, *weights)
            return self.traced[key]
