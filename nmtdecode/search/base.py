"""The step contract between the decoding loop, the search strategies and every piece of row state.

Rows are hypotheses, sentence-major. At step 0 there is one row per sentence
(every hypothesis of a sentence starts from the same decoder start token, so
the first step is computed once); a strategy may then widen each sentence to
`width` rows (beam search: k). The loop is

    tokens = search.start_tokens                      # (B,) one row per sentence
    for step in range(limit):
        logprobs = ...model.decode_step(tokens, cache)   # (rows, V)
        out = search.advance(logprobs, step, facts)   # StepOutput; facts: RowFacts or None
        if search.done: break
        cache.follow(out); processors.follow(out)     # every piece of row state, one call
        tokens = out.tokens

`StepOutput` says how the rows of the next step come from the rows of this
one: `origin` for per-row state (the self-attention cache, token histories,
coverage), `keep` for per-sentence state (the encoder memory and its mask).
Only the search knows about beams; state that follows it needs nothing else.
`RowFacts` go the other way, when asked: per-row values of this step (coverage
penalty, alignment, attention) that the search records with the chosen tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

NEG_INF = float("-inf")  # the one "impossible" score: banned tokens, empty slots, unreachable hypotheses


@dataclass
class Hypothesis:
    tokens: list[int]  # output token ids, without the final EOS
    score: float  # ranking score (total log-prob after the length and coverage penalties)
    total: float  # sum of the token log-probabilities (natural log), EOS included
    token_scores: list[float] = field(default_factory=list)  # log-prob of each of `tokens` (EOS not included)
    ended: bool = True  # False when the step limit cut the hypothesis before EOS
    eos_score: float | None = None  # log-prob of the final EOS; None when cut before EOS
    alignment: list[int] | None = None  # per token of `tokens`: the source position attended most (when asked)
    attention: list[list[float]] | None = None  # per token of `tokens`: its attention over the source (when asked)


@dataclass
class StepOutput:
    """What one search step decided, for everything indexed by row or sentence.

    tokens: (next_rows,) long, the token each row of the next step is fed.
    origin: (next_rows,) long, the row of this step that each next row continues
        (a beam reorder, the first step's widening to k rows, dropped
        sentences); None when every row simply continues itself.
    keep:   (next_sentences,) long, positions in this step's batch of the
        sentences still searched; None when none left the batch.
    """

    tokens: torch.Tensor
    origin: torch.Tensor | None = None
    keep: torch.Tensor | None = None


@dataclass
class RowFacts:
    """What the search records about each row of a step beside its token, when asked.

    penalty:   (rows,) float, the coverage penalty of the row's hypothesis with this step
        counted; subtracted from the score of a hypothesis that finishes at this step.
    alignment: (rows,) long, the source position the row attended most at this step: the
        alignment of the token it chooses.
    attention: (rows, S) float, the row's attention weights over the source at this step.

    alignment and attention are attached to the chosen token (ATTACHED): the Beams keep them
    per step and slot, and get_hyp walks them back with the tokens.
    """

    penalty: torch.Tensor | None = None
    alignment: torch.Tensor | None = None
    attention: torch.Tensor | None = None

    def attached(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in ATTACHED if getattr(self, name) is not None}


ATTACHED = ("alignment", "attention")


def facts_by_sentence(facts: RowFacts | None, sentences: int, rows: torch.Tensor | None = None) -> dict:
    """For the host copy, when rows never mix (greedy, sampling): each row's coverage penalty
    ("penalty") and attached facts, taken at `rows` (default: every row), grouped by sentence as
    (sentences, slots) or (sentences, slots * S)."""
    if facts is None:
        return {}
    picked = dict(facts.attached())
    if facts.penalty is not None:
        picked["penalty"] = facts.penalty
    return {name: (value if rows is None else value[rows]).reshape(sentences, -1) for name, value in picked.items()}


def attached_by_sentence(host: dict[str, list], prefix: str, slots: int) -> list[list[dict] | None]:
    """The attached facts of the host copy, as lists -> for each sentence, for each of its
    `slots` candidates, what is attached to it: {"alignment": int, "attention": [float] * S},
    the names present only; None for every sentence when nothing is attached (the default: no
    work per sentence). host[prefix + name][i] is sentence i's flat list (slots values, or
    slots * S weights)."""
    names = [name for name in ATTACHED if prefix + name in host]
    sentences = len(next(iter(host.values())))
    if not names:
        return [None] * sentences
    by_sentence: list[list[dict] | None] = []
    for i in range(sentences):
        per_slot: list[dict] = [{} for _ in range(slots)]
        for name in names:
            values = host[prefix + name][i]
            size = len(values) // slots
            for j, slot in enumerate(per_slot):
                slot[name] = values[j * size : (j + 1) * size] if name == "attention" else values[j]
        by_sentence.append(per_slot)
    return by_sentence


class RowState(Protocol):
    """Anything indexed by row or sentence that must track the search (decoder cache, processor history)."""

    def follow(self, out: StepOutput) -> None: ...


class Strategy(Protocol):
    """A decoding strategy (greedy, beam search, sampling), on the host or the device: chooses tokens.

    start_tokens: (B,) the first decoder input, one row per sentence.
    advance(logprobs, step, facts=None): logprobs (rows, V) of this step's rows
        (may be modified in place), facts (RowFacts) per row; records the step
        and says how rows continue.
    done: every sentence has finished (a device search knows it every few steps).
    results(n_best): one list of n_best hypotheses per sentence, best first.
    """

    start_tokens: torch.Tensor

    @property
    def done(self) -> bool: ...

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput: ...

    def results(self, n_best: int) -> list[list[Hypothesis]]: ...


class Search(Strategy, Protocol):
    """A strategy on the host, which keeps per-sentence records a caller may read after each step."""

    beams: list  # one record per sentence (search/beam.py: Beam), what the step chose so far


# The batch sizes a shrinking batch passes through: powers of two and the halfway points.
BATCH_SIZES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]


def kept_batch_size(searching: int) -> int:
    """The smallest of BATCH_SIZES that holds `searching` sentences (0 when none is left)."""
    if searching == 0:
        return 0
    return next((size for size in BATCH_SIZES if size >= searching), searching)


def survivors(done: list[bool], shrink: bool = True) -> list[int]:
    """Positions of the sentences that stay in the batch, given whether each is done (see
    `SentenceRecords.survivors`): every one without `shrink`."""
    if not shrink:
        return list(range(len(done)))
    searching = [i for i, d in enumerate(done) if not d]
    size = kept_batch_size(len(searching))
    if size >= len(done):
        return list(range(len(done)))
    finished = [i for i, d in enumerate(done) if d]
    return sorted(searching + finished[: size - len(searching)])


def path_hypothesis(
    tokens: list[int], totals: list[float], along: dict[str, list], score: float, eos_id: int
) -> Hypothesis:
    """A finished hypothesis from its path: every token chosen, the last one included, the running
    total after each, and what is attached to each ({name: list}). The final EOS is not one of
    its tokens, its log-prob is `eos_score` (so token_scores, alignment and attention have one
    entry per token). Both searches build their hypotheses here (beam.py; history.py for the device's)."""
    token_scores = [b - a for a, b in zip([0.0] + totals[:-1], totals)]
    ended = tokens[-1] == eos_id
    kept = len(tokens) - ended
    return Hypothesis(
        tokens[:kept],
        score,
        totals[-1],
        token_scores[:kept],
        ended,
        eos_score=token_scores[-1] if ended else None,
        **{name: values[:kept] for name, values in along.items()},
    )


def unreachable(n: int) -> list[Hypothesis]:
    """n impossible empty hypotheses (score -inf): they keep n_best entries a line when fewer
    were reachable (the other continuations masked)."""
    return [Hypothesis([], NEG_INF, NEG_INF, [], False) for _ in range(n)]


class Compacting(Protocol):
    """State kept for the sentences in the batch alone (endings.py), compacted when some leave."""

    def compact(self, keep: torch.Tensor) -> None: ...


class SentenceRecords:
    """Shared by the host strategies: one record per input sentence (search/beam.py:Beam), the
    sentence index of each sentence still in the batch, and the end of their steps as tensors
    on the host (`ends`, endings.py), one row per sentence in the batch."""

    beams: list
    ends: Compacting
    active: list[int]
    eos_id: int
    start_tokens: torch.Tensor  # (batch,) on the search's device
    kind: str  # the strategy's name in --dump-beam: greedy, sampling, beam, diverse
    stop_rule: str | None = "eos"  # a sentence ends at its first EOS; None: by its Beams' early_stopping
    shrink: bool = True  # finished sentences leave the batch (off only to test that it changes nothing)

    @property
    def done(self) -> bool:
        return all(self.beams[s].done for s in self.active)

    def survivors(self) -> list[int]:
        """Positions in `active` of the sentences that stay in the batch after this step: those
        still searching, topped up with finished ones to the next of BATCH_SIZES. The batch
        shrinks only when it falls to a smaller size of that list, so a batch meets a handful
        of row counts, not one per finished sentence: every new row count costs oneDNN a kernel
        compilation per matrix shape and every shrink a copy of the cache
        (docs/speed.md#measurements-behind-design-choices)."""
        return survivors([self.beams[s].done for s in self.active], self.shrink)

    def leaving(self) -> torch.Tensor | None:
        """After this step: the positions (kept,) in the batch of the sentences that stay
        (`survivors`), `active` following them; None when the batch stays as it is. The device
        search's records answer the same (device/records.py), so a strategy's next rows are one
        function for both."""
        still = self.survivors()
        if len(still) == len(self.active):
            return None
        self.active = [self.active[i] for i in still]
        self.ends.compact(torch.tensor(still, dtype=torch.long))
        return torch.tensor(still, dtype=torch.long, device=self.start_tokens.device)

    @property
    def sentences(self) -> int:
        """How many input sentences the search holds (one Beam each; its groups' with diverse.py)."""
        return len(self.beams)

    def results(self, n_best: int) -> list[list[Hypothesis]]:
        """The n best finished hypotheses of every sentence (`chosen`), best first. Always n a
        sentence: when fewer were reachable (the other continuations masked), impossible empty
        ones (score -inf) keep n entries a line."""
        results = []
        for sentence in range(self.sentences):
            beams = self.beams_of(sentence)
            best = [beams[b].hypothesis(f, self.eos_id) for b, f in self.chosen(sentence, n_best)]
            results.append(best + unreachable(n_best - len(best)))
        return results

    def trace(self) -> None:
        """From now on every Beam keeps each hypothesis that ends (`Beam.ended`), not only its
        best: what --dump-beam writes. Off by default, so that nothing more is kept."""
        for beam in self.beams:
            beam.ended = []

    def beams_of(self, sentence: int) -> list:
        """The Beams that searched sentence `sentence`: one (its groups' with diverse.py)."""
        return [self.beams[sentence]]

    def chosen(self, sentence: int, n_best: int) -> list[tuple[int, object]]:
        """The finished hypotheses `results` gives for a sentence, as (its Beam in `beams_of`,
        its Finished record), best first; fewer than n_best when fewer were reachable."""
        return [(0, f) for f in self.beams[sentence].finished[:n_best]]


def to_host(**tensors: torch.Tensor) -> dict[str, torch.Tensor]:
    """One device->host copy of several (n, m_i) tensors; returns each, by name, on the host:
    floating ones as float64, which holds every float32 value exactly, the others in their dtype.
    Tensors on the CPU (a search's are on one device) are there already, and come back as they are."""
    if next(iter(tensors.values())).device.type == "cpu":
        return tensors
    widths = [t.size(1) for t in tensors.values()]
    packed = torch.cat([t.double() for t in tensors.values()], dim=1).cpu()
    parts = packed.split(widths, dim=1)
    return {
        name: part if t.is_floating_point() else part.to(t.dtype) for (name, t), part in zip(tensors.items(), parts)
    }


def named(prefix: str, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A part's tensors by `prefix` + name, inside its owner's state (the tensors a step replayed
    as a CUDA graph holds in place: search/device/graphs.py)."""
    return {prefix + name: value for name, value in tensors.items()}


def part(prefix: str, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The entries of `state` under `prefix`, by the part's own names (`named` undone)."""
    return {name.removeprefix(prefix): value for name, value in state.items() if name.startswith(prefix)}
