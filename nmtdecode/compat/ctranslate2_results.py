"""CTranslate2's result types, as its Python API gives them: what nmtdecode.compat.ctranslate2
returns (TranslationResult, ScoringResult, GenerationStepResult, ExecutionStats) and the futures
of its asynchronous calls."""

from __future__ import annotations

import dataclasses
import warnings
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any


@dataclass
class TranslationResult:
    """One source's hypotheses (target pieces), best first; scores and attention when asked."""

    hypotheses: list[list[str]]
    scores: list[float]
    attention: list[list[list[float]]]
    logits: list = dataclasses.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.hypotheses)

    def __getitem__(self, i: int) -> dict:
        """CTranslate2's old form, deprecated there too: result[i] = {"tokens", "score", "attention"}."""
        warnings.warn(
            "Reading the TranslationResult object as a list of dictionaries is deprecated: use its attributes",
            DeprecationWarning,
            stacklevel=2,
        )
        entry: dict[str, Any] = {"tokens": self.hypotheses[i]}
        if self.scores:
            entry["score"] = self.scores[i]
        if self.attention:
            entry["attention"] = self.attention[i]
        return entry


@dataclass
class ScoringResult:
    """A target's pieces (its EOS last) and the log-probability of each."""

    tokens: list[str]
    log_probs: list[float]


@dataclass
class GenerationStepResult:
    """One token as generate_tokens yields it (and a callback receives it)."""

    step: int
    batch_id: int
    token_id: int
    hypothesis_id: int
    token: str
    log_prob: float | None
    logits: None
    is_last: bool


@dataclass
class ExecutionStats:
    """What translate_file did."""

    num_tokens: int
    num_examples: int
    total_time_in_ms: float


class AsyncTranslationResult:
    """One result of an asynchronous call: `result()` waits for it, `done()` says whether it is there."""

    def __init__(self, future: Future, index: int) -> None:
        self._future, self._index = future, index

    def result(self) -> Any:
        return self._future.result()[self._index]

    def done(self) -> bool:
        return self._future.done()


class AsyncScoringResult(AsyncTranslationResult):
    """One scoring result of an asynchronous score_batch."""
