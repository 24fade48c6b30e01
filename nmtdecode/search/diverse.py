"""Diverse beam search: Hamming diversity between groups of beams, as Hugging Face defined it.

Vijayakumar et al. 2016, "Diverse Beam Search" (arXiv:1610.02424), in the form of transformers'
group beam search (`generation/utils.py:_group_beam_search`, `BeamSearchScorer` with
`num_beam_groups`, `HammingDiversityLogitsProcessor`; v4.55, the last release that had it in the
library). The k beams of a sentence form G groups of k/G. At each step the groups choose in
order, 0 first; for group g

    logprobs[token] -= D * (number of beams of groups 0..g-1 that chose `token` at this step)

and the group then takes an ordinary beam-search step over its own rows: 2k/G candidates, the
k/G best not ending in EOS stay alive, the EOS ones ranked within the top k/G finish. As in
transformers:

* each (sentence, group) has its own pool of k/G finished hypotheses and its own stop rule
  (`early_stopping`); a sentence is done when all its groups are. A done group's rows choose
  nothing that counts (transformers feeds them pad, which then lowers only pad's score);
* the penalties are part of the running scores, so a group ranks its candidates, finished
  hypotheses and stop rule by penalised totals. The stop rules `false`/`never` bound with the
  group's best candidate of the step, EOS ones included (`BeamSearchScorer.process`);
* the n-best of a sentence is the best of all its groups' pools, by penalised score.

Scores reported: `score` is what transformers returns as `sequences_scores`, the length-penalised
total with the diversity penalties in it (it is what the n-best is ranked by); `total` and
`token_scores` are the model's own log-probabilities, without them, so that `nmtdecode score`
of an output gives back its `total`.

Two differences from transformers, both documented here on purpose: the penalty is applied after
the other processors (transformers applies it first; they commute except with a forced token,
and the first step is left unpenalised when the model forces its first token, which is what
transformers' order amounts to there); and an empty slot (fewer than k/G live continuations, on
a tiny vocabulary) is -inf here where transformers keeps a row at -1e9.

Layout: group g of sentence i is unit i*G+g of an ordinary `BeamSearch` of beam k/G, whose rows
(i*G+g)*k/G + j are exactly where a beam of k puts group g's slots. So the Beams, the host copy
and dropping finished sentences are BeamSearch's, with "sentence" read as (sentence, group);
only the first step (the sentence's one row serves every group), the candidate selection (one
topk per group, in order) and the merged n-best differ.
"""

from __future__ import annotations

import torch

from .base import NEG_INF, RowFacts, StepOutput
from .beam import BeamSearch
from .candidates import Candidates, top_candidates
from .penalties import LengthPenalty


class DiverseBeamSearch(BeamSearch):
    kind = "diverse"

    def __init__(
        self,
        *,
        batch_size: int,
        beam_size: int,
        groups: int,
        diversity_penalty: float,
        max_steps: list[int],
        start_id: int,
        eos_id: int,
        penalty: LengthPenalty,
        early_stopping: str,
        device: torch.device | str,
        n_best: int = 1,
        forced_steps: list[int] | None = None,
    ) -> None:
        group_size = beam_size // groups
        super().__init__(
            batch_size=batch_size * groups,
            beam_size=group_size,
            max_steps=[m for m in max_steps for _ in range(groups)],
            start_id=start_id,
            eos_id=eos_id,
            penalty=penalty,
            early_stopping=early_stopping,
            device=device,
            n_best=min(n_best, group_size),
        )
        self.groups, self.diversity = groups, diversity_penalty
        # per sentence, its leading steps whose token is forced (the model's first token, a --prefix):
        # every group takes the same token there, and a penalty would only lower the later groups' scores
        self.forced_steps = forced_steps if forced_steps and any(forced_steps) else None
        self.start_tokens = self.start_tokens[::groups]  # step 0: one row per sentence
        self.alive_totals = torch.zeros_like(self.alive_scores)
        self.first = True  # step 0 to come (a width of 1 does not say it: groups may have one beam)

    def advance(self, logprobs: torch.Tensor, step: int, facts: RowFacts | None = None) -> StepOutput:
        """logprobs (rows, V), facts (rows, ...); rows are one per sentence at step 0, then k per sentence."""
        first, self.first = self.first, False
        if first:  # every group starts from its sentence's one row
            logprobs = logprobs.repeat_interleave(self.groups, dim=0)
            facts = None if facts is None else self._widen(facts)
        candidates, alive = self.select_in_groups(logprobs, penalise=self._free_to_choose(step))
        self.record(candidates, alive, step, facts)
        out = self._next_rows(alive)
        self._silence_done_groups()
        if not first and out.keep is None:
            return out
        keep = None if out.keep is None else out.keep[:: self.groups] // self.groups
        origin = out.origin // self.groups if first else out.origin  # units of step 0 -> their sentence's row
        return StepOutput(tokens=out.tokens, origin=origin, keep=keep)

    def _free_to_choose(self, step: int) -> bool | torch.Tensor:
        """Whether each active sentence chooses its token at this step (True: all of them), else
        a (n, 1, 1) mask: a sentence still in its forced steps is not penalised."""
        if self.forced_steps is None or step >= max(self.forced_steps):
            return True
        sentences = [unit // self.groups for unit in self.active[:: self.groups]]
        free = [self.forced_steps[s] <= step for s in sentences]
        return torch.tensor(free, device=self.alive_scores.device)[:, None, None]

    def _widen(self, facts: RowFacts) -> RowFacts:
        """Step 0's facts, one row per sentence -> one per (sentence, group)."""

        def widen(fact: torch.Tensor | None) -> torch.Tensor | None:
            return None if fact is None else fact.repeat_interleave(self.groups, dim=0)

        return RowFacts(
            penalty=widen(facts.penalty), alignment=widen(facts.alignment), attention=widen(facts.attention)
        )

    def select_in_groups(self, logprobs: torch.Tensor, penalise: bool | torch.Tensor) -> tuple[Candidates, Candidates]:
        """Candidates (2k/G) and alive slots (k/G) of every unit, the groups chosen in order, each
        penalised by the tokens the groups before it keep alive at this step (where `penalise`,
        True or a (n, 1, 1) mask of the sentences, says so)."""
        groups, vocab = self.groups, logprobs.size(1)
        width = logprobs.size(0) // len(self.active)
        n = len(self.active) // groups
        logprobs = logprobs.view(n, groups, width, vocab)
        ranked = self.alive_scores.view(n, groups, width, 1)
        totals = self.alive_totals.view(n, groups, width, 1)
        chosen = logprobs.new_zeros(n, vocab)  # beams of the groups so far that chose each token
        candidates_of, alive_of = [], []  # per group
        for g in range(groups):
            group = logprobs[:, g]
            penalty = self.diversity * chosen[:, None, :]
            penalised = group if g == 0 or penalise is False else group - penalty * penalise
            candidates = top_candidates((penalised + ranked[:, g]).view(n, -1), 2 * self.k, vocab, self.eos_id)
            flat = candidates.prev * vocab + candidates.tokens
            candidates.totals = (group + totals[:, g]).view(n, -1).gather(1, flat)
            candidates.totals.masked_fill_(candidates.scores == NEG_INF, NEG_INF)  # padding, empty slots
            alive = self.keep_alive(candidates)
            chosen.scatter_add_(1, alive.tokens, (alive.scores > NEG_INF).to(chosen.dtype))
            candidates_of.append(candidates)
            alive_of.append(alive)
        return self._interleave(candidates_of), self._interleave(alive_of)

    @staticmethod
    def _interleave(parts: list[Candidates]) -> Candidates:
        """G Candidates (n, c) -> one (n*G, c), unit i*G+g from parts[g] row i."""

        def stack(field: str) -> torch.Tensor:
            values = [getattr(p, field) for p in parts]
            return torch.stack(values, dim=1).flatten(0, 1)

        return Candidates(stack("scores"), stack("tokens"), stack("prev"), stack("totals"))

    def survivors(self) -> list[int]:
        """Units stay as long as any group of their sentence is searching."""
        if not self.shrink:
            return list(range(len(self.active)))
        groups, still = self.groups, list[int]()
        for start in range(0, len(self.active), groups):
            if not all(self.beams[u].done for u in self.active[start : start + groups]):
                still += range(start, start + groups)
        return still

    def _silence_done_groups(self) -> None:
        """A done group of a sentence still searched keeps its rows, at -inf: it chooses nothing."""
        done = [i for i, unit in enumerate(self.active) if self.beams[unit].done]
        if done:
            index = torch.tensor(done, device=self.alive_scores.device)
            for values in (self.alive_scores, self.alive_totals):
                values.view(len(self.active), self.k)[index] = NEG_INF

    def stop_bound(self, host: dict[str, torch.Tensor]) -> torch.Tensor:
        """transformers' group search bounds with the best candidate of the step, EOS included."""
        return host["top_scores"][:, 0]

    @property
    def sentences(self) -> int:
        return len(self.beams) // self.groups

    def beams_of(self, sentence: int) -> list:
        return self.beams[sentence * self.groups : (sentence + 1) * self.groups]

    def chosen(self, sentence: int, n_best: int) -> list[tuple[int, object]]:
        """The n best over the sentence's groups, as (group, Finished). Ties go as in transformers:
        it sorts ascending and pops, so the later group's comes first."""
        pooled = [(g, f) for g, beam in enumerate(self.beams_of(sentence)) for f in beam.finished]
        return sorted(pooled, key=lambda gf: gf[1].score)[::-1][:n_best]
