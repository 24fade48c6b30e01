"""Beam search: per-sentence records (`Beam`) over batched arithmetic (`BeamSearch`).

The vocabulary follows OpenNMT-py's original `Beam` (Klein et al. 2017): each sentence keeps,
for every step t and beam slot j, the token chosen (`next_ys[t][j]`) and the slot of step t-1
it extends (`prev_ks[t][j]`); `get_hyp` walks these backpointers to rebuild a hypothesis, and
`finished` holds its best finished hypotheses, best first.

The arithmetic is batched as in fairseq / Hugging Face / CTranslate2, and the same as the
device search's (device/beam.py). A step is

1. `select_candidates`: the 2k best continuations of every sentence
   (candidates.py). This is the part another strategy (diverse groups) replaces.
2. `commit`: the k best candidates not ending in EOS stay alive (candidates.py); one small
   device->host copy; the end of the step for every sentence at once, on the host (endings.py:
   the top k candidates that end join the pools, the stop rule says who is done); each
   sentence's `Beam` reads its row; finished sentences leave.

Step 0 has one row per sentence (all k hypotheses would start alike), and its 2k best
continuations seed the k slots; from step 1 on a sentence has k rows. The stop rules are
stop_rules.py's; `opennmt=True` runs OpenNMT-py's own beam for its checkpoints
(onmt/translate/beam_search.py `advance`/`update_finished`): an ended slot stays empty for a
step instead of being refilled (candidates.py), and `top` stops only at a step whose top
candidate ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .base import Hypothesis, RowFacts, SentenceRecords, StepOutput, attached_by_sentence, path_hypothesis, to_host
from .candidates import Candidates, best_continuations, extended_rows, keep_alive, next_beam_rows
from .endings import BeamEndings
from .history import walk_back
from .penalties import LengthPenalty


@dataclass
class Finished:
    score: float  # after the length and coverage penalties: the ranking key
    total: float  # sum of log-probs
    step: int  # step at which the last token was chosen
    prev: int  # slot at step-1 that it extends
    token: int  # the last token (EOS unless cut at the step limit)
    attached: dict = field(default_factory=dict)  # what is attached to the last token (base.py:ATTACHED)


class Beam:
    """The records of one source sentence: what every step chose, and its finished hypotheses.
    The search decides, batched over its sentences; a Beam keeps its sentence's share."""

    def __init__(self, size: int, max_steps: int) -> None:
        self.size = size  # slots, and finished hypotheses kept
        self.max_steps = max_steps
        self.next_ys: list[list[int]] = []  # next_ys[t][j]: token of slot j at step t
        self.prev_ks: list[list[int]] = []  # prev_ks[t][j]: slot at step t-1 that slot j extends
        self.scores: list[list[float]] = []  # scores[t][j]: total log-prob of slot j after step t
        # attached[name][t][j]: what was recorded with next_ys[t][j], when asked: "alignment" (its
        # source position), "attention" (its weights over the source)
        self.attached: dict[str, list[list]] = {}
        self.finished: list[Finished] = []  # the best `size` finished hypotheses, best first
        self.ended: list[Finished] | None = None  # every hypothesis that ended, in order, when traced (--dump-beam)
        self.done = False

    def extend(
        self, tokens: list[int], prev: list[int], scores: list[float], attached: list[dict] | None = None
    ) -> None:
        """Record a step's slots. attached: per slot, {name: value} (base.py:attached_by_sentence), or None."""
        self.next_ys.append(tokens)
        self.prev_ks.append(prev)
        self.scores.append(scores)
        if attached:
            for name in attached[0]:
                self.attached.setdefault(name, []).append([slot[name] for slot in attached])

    def rank(self, order: list[int], new: list[Finished | None]) -> None:
        """A step's finished hypotheses (`new`: one per candidate, None where it is none) into the
        pool, in the order of the sentence's row of the batched pool (finished.py): `order` gives
        each of its entries as a position in [the pool's `size` entries, then `new`]."""
        entries = self.finished + [None] * (self.size - len(self.finished)) + new
        self.finished = [f for f in (entries[p] for p in order) if f is not None]
        if self.ended is not None:
            self.ended += [f for f in new if f is not None]

    def finish(
        self,
        step: int,
        valid: list[bool],
        score: list[float],
        totals: list[float],
        prev: list[int],
        tokens: list[int],
        attached: list[dict] | None,
        order: list[int],
    ) -> None:
        """The sentence's row of a step's end (endings.py: `Merged`): those of its candidates that
        became finished hypotheses (`valid`: their score, log-prob total, backpointer, token and
        attached facts), ranked into its pool by `order`."""
        along = attached or [{} for _ in valid]
        columns = zip(valid, score, totals, prev, tokens, along)
        self.rank(order, [Finished(s, t, step, p, y, a) if v else None for v, s, t, p, y, a in columns])

    def first(self, f: Finished) -> None:
        """The one hypothesis of a pool of one that the sentence fills once (greedy search)."""
        self.finished = [f]
        if self.ended is not None:
            self.ended.append(f)

    def get_hyp(self, step: int, slot: int, attached: bool = False) -> tuple:
        """Tokens of slot `slot` at step `step` back to the start and their running totals, and
        with `attached` what was recorded with each token ({name: list}: alignment, attention)."""
        path = list(enumerate(walk_back(step, slot, lambda t, j: self.prev_ks[t][j])))  # (step, slot) of each token
        tokens, totals = [self.next_ys[t][j] for t, j in path], [self.scores[t][j] for t, j in path]
        if not attached:
            return tokens, totals
        return tokens, totals, {name: [steps[t][j] for t, j in path] for name, steps in self.attached.items()}

    def hypothesis(self, f: Finished, eos_id: int) -> Hypothesis:
        """The finished hypothesis `f`: its parent's path, then its own last token."""
        tokens: list[int] = []
        totals: list[float] = []
        along: dict[str, list] = {name: [] for name in f.attached}
        if f.step > 0:
            tokens, totals, along = self.get_hyp(f.step - 1, f.prev, attached=True)
        along = {name: along[name] + [value] for name, value in f.attached.items()}
        return path_hypothesis(tokens + [f.token], totals + [f.total], along, f.score, eos_id)


HOST = "cpu"  # where the host search keeps the end of its steps (endings.py): after its copy


class BeamSearch(SentenceRecords):
    """Beam search over a batch of sentences: one row per sentence at step 0, then k.

    Rows are sentence-major (rows i*k .. i*k+k-1 are sentence i's slots);
    `alive_scores` (rows,) holds each row's total log-prob.
    """

    kind, stop_rule = "beam", None
    ends: BeamEndings

    def __init__(
        self,
        *,
        batch_size: int,
        beam_size: int,
        max_steps: list[int],
        start_id: int,
        eos_id: int,
        penalty: LengthPenalty,
        early_stopping: str,
        device: torch.device | str,
        n_best: int = 1,
        opennmt: bool = False,
    ) -> None:
        self.k = beam_size
        self.width = 1  # rows per sentence in the current step
        self.eos_id = eos_id
        self.refill = not opennmt  # an EOS candidate's slot goes to the next best one (else stays empty)
        self.beams = [Beam(beam_size, m) for m in max_steps]
        self.ends = BeamEndings(
            rule=early_stopping,
            n_best=n_best,
            eos_id=eos_id,
            top_sticks=not opennmt,
            sentences=batch_size,
            size=beam_size,
            max_steps=max_steps,
            penalty=penalty,
            device=HOST,
        )
        self.active = list(range(batch_size))  # sentence index of each active sentence
        self.alive_scores = torch.zeros(batch_size, device=device)
        self.start_tokens = torch.full((batch_size,), start_id, dtype=torch.long, device=device)

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput:
        """logprobs (n*width, V) of this step; consumed (on a GPU, turned into totals in place)."""
        return self.commit(self.select_candidates(logprobs), step, facts)

    def select_candidates(self, logprobs: torch.Tensor) -> Candidates:
        """The 2k best continuations of every sentence over all its rows (candidates.py)."""
        return best_continuations(logprobs, self.alive_scores, len(self.active), self.k, self.eos_id)

    def commit(self, candidates: Candidates, step: int, facts: RowFacts | None = None) -> StepOutput:
        """Keep k alive, end the step (the pools, who is done), drop sentences that are done."""
        alive = self.keep_alive(candidates)
        self.record(candidates, alive, step, facts)
        return self._next_rows(alive)

    def keep_alive(self, candidates: Candidates) -> Candidates:
        return keep_alive(candidates, self.k, self.eos_id, self.refill)

    def record(self, candidates: Candidates, alive: Candidates, step: int, facts: RowFacts | None = None) -> None:
        """One device->host copy; the end of the step for every sentence (endings.py), on the
        host; each sentence's rows to its Beam."""
        top = candidates.first(self.k)
        tensors = dict(
            top_scores=top.scores,
            top_tokens=top.tokens,
            top_prev=top.prev,
            scores=alive.scores,
            tokens=alive.tokens,
            prev=alive.prev,
        )
        if top.totals is not None and alive.totals is not None:  # both or neither: alive is taken from candidates
            tensors.update(top_totals=top.totals, totals=alive.totals)
        host = to_host(**tensors, **self._facts_of(facts, top.prev, alive.prev))
        merged = self.ends.step(
            step + 1, host["top_scores"], host["top_tokens"], self.stop_bound(host), host.get("top_penalty")
        )
        rows = {name: value.tolist() for name, value in host.items() if name != "top_penalty"}
        k = self.k
        alive_slots = zip(
            rows["tokens"], rows["prev"], rows.get("totals", rows["scores"]), attached_by_sentence(rows, "", k)
        )
        ended = zip(
            merged.valid.tolist(),
            merged.score.tolist(),
            rows.get("top_totals", rows["top_scores"]),
            rows["top_prev"],
            rows["top_tokens"],
            attached_by_sentence(rows, "top_", k),
            merged.order.tolist(),
        )
        for sentence, slots, ends, done in zip(self.active, alive_slots, ended, self.ends.done.tolist()):
            beam = self.beams[sentence]
            if not beam.done:
                beam.extend(*slots)
                if True in ends[0]:  # some candidate became a finished hypothesis
                    beam.finish(step, *ends)
                beam.done = done

    def _facts_of(self, facts: RowFacts | None, top_prev: torch.Tensor, alive_prev: torch.Tensor) -> dict:
        """For the host copy: the row facts of the top candidates (coverage penalty, attached) and
        of the alive ones (attached), read from the row each candidate extends, (n, k * width)."""
        if facts is None:
            return {}

        def of(fact: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:  # fact (rows,) or (rows, S); prev (n, c)
            return fact[extended_rows(prev, self.width)].flatten(1)

        picked = {} if facts.penalty is None else {"top_penalty": of(facts.penalty, top_prev)}
        for name, fact in facts.attached().items():
            picked["top_" + name], picked[name] = of(fact, top_prev), of(fact, alive_prev)
        return picked

    def stop_bound(self, host: dict[str, torch.Tensor]) -> torch.Tensor:
        """(n,) the ranked total the stop rule bounds with: the best alive slot's."""
        return host["scores"].amax(dim=1)

    def _next_rows(self, alive: Candidates) -> StepOutput:
        """Rows of the next step: k per sentence still searched, each continuing the row it extends."""
        return next_beam_rows(self, alive)[0]
