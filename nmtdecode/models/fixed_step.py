"""A decoding step with fixed shapes, which a CUDA graph can capture and replay as one launch.

On a GPU the incremental step of `transformer.py` is bound by kernel launches and the host's
operator calls, not arithmetic (docs/speed.md#gpus). A CUDA graph records the kernels of one
step once and replays them with one launch, but only if every replay has the same shapes and
reads and writes the same memory. The step of `cache.py` has neither: its rows shrink as
sentences finish and its keys grow by one position every step. Here the same step runs over
preallocated buffers instead:

* sentences are rounded up to a power of two (`bucket`); the extra sentences are padding,
  computed and ignored; each sentence keeps `width` rows (the beam) from the first step on
  (the search's one row per sentence at step 0 sits in slot 0);
* the self-attention cache has its final capacity from the start; a step attends over the
  positions up to a power of two at least as large as the step's, the later ones masked;
* the source is padded to a power of two, masked as padding is;
* the step's position is a one-element tensor on the device, not a Python number.

So one graph serves every step whose (sentences, positions, source) buckets agree: a few
dozen graphs cover a whole job. What changes between steps (the tokens, the position, which
rows continue which: `follow`) is written into the buffers outside the graph, and the
logits are read out of it; the search's host copy comes after, as before.

The arithmetic is the eager step's (the same layers run over these buffers), so the tokens
are the same; on CPU this runs eagerly (nothing to replay there), which is how it is tested
without a GPU. Rows keep their ancestry as `cache.py` does (models/state.py), in a buffer
of the final capacity, rather than copying the cache on every reorder. `FixedShapeSteps` is
the step runner the engine chooses on a GPU (models/steps.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch

from .cache import SENTENCES, AttentionRecord, by_slot
from .state import ancestry_mask, own_slots
from .transformer import Transformer

if TYPE_CHECKING:
    from ..search.base import StepOutput

MIN_POSITIONS = 16  # the smallest positions bucket
MIN_SOURCE = 16  # the smallest source bucket


def bucket(n: int, smallest: int = 1) -> int:
    """The power of two at least n (and at least `smallest`): the sizes graphs are captured for."""
    return max(smallest, 1 << max(0, n - 1).bit_length())


class StepBuffers:
    """Everything a captured step reads or writes, allocated once for the largest sizes seen
    (reallocated, and the graphs dropped, when a batch needs more)."""

    def __init__(self, model: "Transformer", sentences: int, width: int, positions: int, source: int) -> None:
        cfg, weight = model.cfg, model.tgt_embed.tokens.weight  # (the output layer may be a packed oneDNN one)
        device, dtype = weight.device, weight.dtype
        layers, heads, hd = cfg.decoder_layers, cfg.heads, cfg.head_size
        self.sentences, self.width, self.positions, self.source = sentences, width, positions, source
        self.self_kv = torch.zeros((layers, 2, sentences, heads, positions, width, hd), device=device, dtype=dtype)
        self.cross_kv = torch.zeros((layers, 2, sentences, heads, source, hd), device=device, dtype=dtype)
        self.memory_mask = torch.zeros((sentences, 1, 1, source), device=device, dtype=torch.bool)
        self.ancestry = torch.zeros((sentences * width, positions, width), device=device, dtype=torch.bool)
        self.own_slot = own_slots(sentences * width, width, device)
        self.tokens = torch.full((sentences * width,), cfg.decoder_start_id, device=device, dtype=torch.long)
        self.position = torch.zeros(1, device=device, dtype=torch.long)
        self.attention = torch.zeros((sentences * width, source), device=device, dtype=torch.float32)

    def fits(self, sentences: int, width: int, positions: int, source: int) -> bool:
        return (
            sentences <= self.sentences
            and width == self.width
            and positions <= self.positions
            and source <= self.source
        )


class FixedShapeCache(AttentionRecord):
    """The decoder state of one batch over `StepBuffers`: a DecoderState and a LayerState
    (models/state.py), as `cache.DecoderCache` is. Sentence i of the search is sentence i of the buffers
    (finished ones are compacted away); its row j is buffer row i * width + j."""

    def __init__(self, buffers: StepBuffers, sentences: int, source: int, alignment: tuple[int, int]) -> None:
        super().__init__(buffers.cross_kv.size(0), buffers.cross_kv.size(3), alignment)
        self.buffers = buffers
        self.sentences, self.width = sentences, 1  # live sentences; rows per sentence as the search sees them
        self.source = source  # the batch's own source length
        self.source_bucket = bucket(source, MIN_SOURCE)
        self.length = 0
        self.positions_bucket = MIN_POSITIONS  # the positions the current step attends over

    @property
    def sentence_bucket(self) -> int:
        return bucket(self.sentences)

    @property
    def position(self) -> torch.Tensor:
        return self.buffers.position

    @property
    def memory_mask(self) -> torch.Tensor:
        return self.buffers.memory_mask[: self.sentence_bucket, :, :, : self.source_bucket]

    def cross(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        kv = self.buffers.cross_kv[layer, :, : self.sentence_bucket, :, : self.source_bucket]
        return kv[0], kv[1]

    def keep_attention(self, weights: torch.Tensor) -> None:
        """weights (B, H, width, S) of the alignment layer, into the attention buffer (the graph's
        output; decode_step reads the search's rows of it into `attention`)."""
        averaged = self.averaged(weights)
        self.buffers.attention[: averaged.size(0), : averaged.size(1)].copy_(averaged)

    def append_self(self, layer: int, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """kv (rows, 2, H, hd) written at the step's position; the keys and values of positions
        [0, positions_bucket) of every slot, and the mask of each row's ancestors."""
        b, sentences, positions = self.buffers, self.sentence_bucket, self.positions_bucket
        new = by_slot(kv, b.width).unsqueeze(3)  # (2, B, H, 1, width, hd)
        b.self_kv[layer, :, :sentences].index_copy_(3, b.position, new)
        past = b.self_kv[layer, :, :sentences, :, :positions].flatten(3, 4)  # (2, B, H, positions*width, hd)
        mask = ancestry_mask(b.ancestry[: sentences * b.width], positions)  # (B, 1, width, positions*width)
        return past[0], past[1], mask

    def mark_own_slots(self) -> None:
        """Each row attends to its own slot at the step's position (before the layers run)."""
        b, rows = self.buffers, self.sentence_bucket * self.buffers.width
        b.ancestry[:rows].index_copy_(1, b.position, b.own_slot[:rows])

    def advance(self) -> None:
        self.length += 1

    def rows(self, sentences: int, width: int) -> torch.Tensor:
        """Buffer rows of the search's rows, for `sentences` sentences of `width` rows."""
        b = self.buffers
        device = b.tokens.device
        return (
            torch.arange(sentences, device=device)[:, None] * b.width + torch.arange(width, device=device)[None, :]
        ).flatten()

    def follow(self, out: "StepOutput") -> None:
        """Compact the sentences out.keep to the front, then give each next row its parent's
        ancestry (its own slot at this step's position was marked by the step)."""
        b, before = self.buffers, self.rows(self.sentences, self.width)
        if out.keep is not None:
            kept, t = out.keep.numel(), self.length
            used = b.self_kv[:, :, : self.sentences, :, :t]
            b.self_kv[:, :, :kept, :, :t] = used.index_select(SENTENCES, out.keep)
            b.cross_kv[:, :, :kept] = b.cross_kv[:, :, : self.sentences].index_select(SENTENCES, out.keep)
            b.memory_mask[:kept] = b.memory_mask[: self.sentences].index_select(0, out.keep)
            self.sentences = kept
        parents = before if out.origin is None else before.index_select(0, out.origin)
        self.width = out.tokens.numel() // self.sentences
        b.ancestry.index_copy_(0, self.rows(self.sentences, self.width), b.ancestry.index_select(0, parents))


class FixedShapeSteps:
    """The fixed-shape step for one model: `init_cache` and `decode_step`, as the model has them
    (decoding.py calls these instead of the model's). With `graphs` (CUDA), each bucket's step is
    captured once as a CUDA graph and replayed; otherwise it runs eagerly."""

    shares_buffers = True  # every batch decodes in one set of buffers (models/steps.py)

    def __init__(self, model: Transformer, graphs: bool, warn: Callable[[str], None] | None = None) -> None:
        """warn(message): told once if a graph cannot be captured (then every step runs eagerly)."""
        self.model, self.graphs, self.warn = model, graphs, warn
        self.buffers: StepBuffers | None = None
        self.captured: dict[tuple, tuple] = {}  # bucket key -> (graph, logits it writes)
        self.pool: Any = None  # the graphs' memory pool (torch.cuda.graph_pool_handle)
        self.captures = 0  # graphs captured so far (again after the buffers grow): a job's one-off cost

    def init_cache(self, memory: torch.Tensor, src_mask: torch.Tensor, positions: int, width: int) -> FixedShapeCache:
        """The batch's encoder output projected into the buffers; positions: its step limit."""
        model, (sentences, source) = self.model, src_mask.shape
        need = (bucket(sentences), width, bucket(positions, MIN_POSITIONS), bucket(source, MIN_SOURCE))
        if self.buffers is None or not self.buffers.fits(*need):
            old = self.buffers
            grown = (
                need
                if old is None
                else (max(need[0], old.sentences), width, max(need[2], old.positions), max(need[3], old.source))
            )
            # The graphs read the old buffers' memory: drop them, and their memory pool with them. A
            # pool handle whose graphs are all gone cannot take another capture (the caching allocator
            # asserts `use_count > 0`, seen on an H100), so the next capture starts a new one.
            self.buffers, self.captured, self.pool = None, {}, None
            self.buffers = StepBuffers(model, *grown)
        b = self.buffers
        b.cross_kv[:, :, :sentences, :, :source] = model.cross_keys_values(memory)
        b.memory_mask[:sentences, 0, 0, :source] = src_mask
        b.memory_mask[:sentences, :, :, source:] = False
        b.memory_mask[sentences:, :, :, 0] = True  # padding sentences attend somewhere: finite, unused
        b.ancestry[: bucket(sentences) * b.width] = False
        b.tokens.fill_(model.cfg.decoder_start_id)
        return FixedShapeCache(b, sentences, source, (model.cfg.alignment_layer, model.cfg.alignment_heads))

    def decode_step(self, tokens: torch.Tensor, cache: FixedShapeCache) -> torch.Tensor:
        """tokens (rows,) -> logits (rows, V), as Transformer.decode_step; cache.attention (rows,
        source) when recorded."""
        b, t = self.buffers, cache.length
        sentences, width = cache.sentences, tokens.numel() // cache.sentences
        full = width == b.width  # the search's rows are the buffers' first rows, in order
        if full:
            b.tokens[: tokens.numel()].copy_(tokens)
        else:
            b.tokens.index_copy_(0, cache.rows(sentences, width), tokens)
        b.position.fill_(t)
        cache.positions_bucket = min(bucket(t + 1, MIN_POSITIONS), b.positions)
        key = (cache.sentence_bucket, cache.positions_bucket, cache.source_bucket, cache.record_attention)
        logits = self._replay(key, cache) if self.graphs else self._step(cache)
        cache.length = t + 1
        if full:
            picked = logits[: tokens.numel()]
        else:
            picked = logits.view(cache.sentence_bucket, b.width, -1)[:sentences, :width].reshape(tokens.numel(), -1)
        if cache.record_attention:
            rows = b.attention[: cache.sentence_bucket * b.width].view(cache.sentence_bucket, b.width, -1)
            # a copy: the buffer is the next step's, and the search may keep a step's attention
            cache.attention = rows[:sentences, :width, : cache.source].reshape(tokens.numel(), -1).clone()
        return picked

    def _step(self, cache: FixedShapeCache) -> torch.Tensor:
        cache.mark_own_slots()
        rows = self.buffers.tokens[: cache.sentence_bucket * self.buffers.width]
        return self.model.decode_step(rows, cache)

    def _replay(self, key: tuple, cache: FixedShapeCache) -> torch.Tensor:
        if key not in self.captured:
            try:
                self.captured[key] = self._capture(cache)
            except RuntimeError as error:
                if isinstance(error, torch.cuda.OutOfMemoryError):
                    raise  # the engine decodes the batch in halves
                self.graphs = False
                if self.warn:
                    self.warn(
                        f"CUDA graphs are off for this run: capturing a decoding step failed ({error}); "
                        "decoding without them (--cuda-graphs off silences this)"
                    )
                return self._step(cache)
        graph, logits = self.captured[key]
        graph.replay()
        return logits

    def _capture(self, cache: FixedShapeCache) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        """Run the step once on a side stream (first use of its kernels and workspaces), then
        record it. Both write what a replay writes, so running them changes nothing."""
        t = cache.length
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._step(cache)
        torch.cuda.current_stream().wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            logits = self._step(cache)
        self.captures += 1
        cache.length = t  # the Python side of the step ran twice; the caller sets it once
        return graph, logits
