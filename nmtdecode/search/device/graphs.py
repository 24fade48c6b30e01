"""The device search's step replayed as a CUDA graph, beside the model's (models/fixed_step.py).

The device search (device/beam.py, greedy.py) reads nothing on the host within a step, yet
Python launches its kernels one by one: on a GPU its step took longer than the graphed model
step it follows (docs/speed.md#gpus). Here the part of a step from the model's logits to the
chosen slots,

    scores   = the logits, as float32, in a buffer of the job's
    logprobs = processors(log_softmax(scores))     those that act alike at every step from here
    chosen   = search.choose(logprobs)             candidates, pools, done flags, history

is captured once per shape and replayed with one launch; the step's host part (the count of
steps, the check of the done flags, the batch's compaction: `search.next_rows`) runs after it
as before.

A graph replays fixed memory, while the search rebinds some of its tensors every step (its
pools, its running scores) and a new batch comes with new ones. So each graph holds its own
copy of the step's state (`GraphedStep.state()`: the search's, device/records.py, and the
row state its processors read, processors.py): the captured step ends by copying what it
rebound into that copy, and a step whose tensors are not the graph's writes their values into
the graph's and takes them up (`Captured.adopt`) before the replay. A batch adopts a graph
when it starts and each time its sentences shrink, and the same graph serves every batch of
that shape in the job.

A shape is captured the second time it is seen (the first ran its kernels eagerly), and only
where every processor does the same work at every later step (`Processors.steady_from`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

import torch

from ..base import StepOutput, named, part

Score = Callable[[torch.Tensor], torch.Tensor]  # float32 logits (rows, V) -> log-probs, in place


class Stateful(Protocol):
    """Tensors by name that outlive a step, and a way to put others in their places."""

    def state(self) -> dict[str, torch.Tensor]: ...

    def bind(self, state: dict[str, torch.Tensor]) -> None: ...


class GraphedSearch(Stateful, Protocol):
    """What a captured step needs of a device search (device/beam.py, device/greedy.py)."""

    def choose(self, logprobs: torch.Tensor) -> Any: ...

    def next_rows(self, chosen: Any) -> StepOutput: ...


@dataclass
class GraphedStep:
    """One step's search and processors, as a capture sees them: one state for both."""

    search: GraphedSearch
    processors: Stateful

    def state(self) -> dict[str, torch.Tensor]:
        return named("search.", self.search.state()) | named("processors.", self.processors.state())

    def bind(self, state: dict[str, torch.Tensor]) -> None:
        self.search.bind(part("search.", state))
        self.processors.bind(part("processors.", state))


class NotCapturable(RuntimeError):
    """The step changed the shape of some state tensor: a graph cannot hold it in place."""


@dataclass
class Captured:
    """One captured step: the graph, the state it holds in place, and what `choose` returned
    (tensors the graph writes at every replay)."""

    graph: torch.cuda.CUDAGraph
    state: dict[str, torch.Tensor]
    chosen: Any

    def adopt(self, step: Stateful, state: dict[str, torch.Tensor]) -> None:
        """The step's state (`state`, as step.state() gives it) written into the graph's, and the
        graph's bound to the step, where they are not already the same tensors (a new batch, or a
        new running score)."""
        moved = False
        for name, value in state.items():
            mine = self.state[name]
            if value is not mine:
                mine.copy_(value)
                moved = True
        if moved:
            step.bind(self.state)


class SearchGraphs:
    """The captured search steps of one job, by shape (`key`)."""

    def __init__(self, warn: Callable[[str], None] | None = None) -> None:
        self.warn = warn  # told once if a capture fails (the steps then run eagerly)
        self.on = True
        self.captured: dict[tuple, Captured] = {}
        self.seen: set[tuple] = set()  # shapes run once eagerly: their kernels have been used
        self.scores: torch.Tensor | None = None  # (rows, V) float32: every graph's input
        self.pool: Any = None  # the graphs' memory pool
        self.captures = self.replays = 0

    def choose(self, step: GraphedStep, logits: torch.Tensor, score: Score) -> Any:
        """step.search.choose(score(logits as float32)), by a graph's replay once its shape is
        captured; `score` applies the step's processors."""
        scores = self._input(logits)
        state = step.state()
        # the state's shapes name the batch's sentences and rows (the options are the job's, one for all)
        key = (*scores.shape, *((name, value.shape, value.dtype) for name, value in state.items()))
        captured = self.captured.get(key)
        if captured is None and self.on and key in self.seen:
            captured = self._capture(key, step, scores, score)
        if captured is None:
            self.seen.add(key)
            return step.search.choose(score(scores))
        captured.adopt(step, state)
        captured.graph.replay()
        self.replays += 1
        return captured.chosen

    def _input(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits copied as float32 into the first rows of the one input buffer (made larger,
        and the graphs that read the old one dropped, when a step has more rows)."""
        rows, vocab = logits.shape
        buffer = self.scores
        if buffer is None or buffer.size(0) < rows or buffer.size(1) != vocab:
            grown = rows if buffer is None or buffer.size(1) != vocab else max(rows, buffer.size(0))
            buffer = self.scores = torch.empty((grown, vocab), dtype=torch.float32, device=logits.device)
            self.captured, self.pool = {}, None  # a dropped pool's handle takes no new capture (fixed_step.py)
        scores = buffer[:rows]
        scores.copy_(logits)
        return scores

    def _capture(self, key: tuple, step: GraphedStep, scores: torch.Tensor, score: Score) -> Captured | None:
        """Record the step bound to a copy of its state, which the step's end overwrites in
        place of every tensor it rebinds; None if it cannot be captured (then no graph is tried
        again in this job, and the caller runs the step eagerly)."""
        state = {name: value.clone() for name, value in step.state().items()}
        step.bind(state)
        try:
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                chosen = step.search.choose(score(scores))
                for name, value in step.state().items():
                    if name not in state or value.shape != state[name].shape:
                        raise NotCapturable(f"the step changed the shape of {name}")
                    if value is not state[name]:
                        state[name].copy_(value)
        except RuntimeError as error:  # an operation that reads the host, NotCapturable, no CUDA
            step.bind(state)  # nothing ran: the copy holds the state before the step
            self.on = False
            if self.warn:
                self.warn(
                    f"the device search runs without CUDA graphs for this job: capturing its step failed ({error})"
                )
            return None
        step.bind(state)
        self.captures += 1
        self.captured[key] = captured = Captured(graph, state, chosen)
        return captured
