"""The Python API: load a model once, then translate lists, streams and files, or score pairs.

    import nmtdecode
    translator = nmtdecode.Translator.load("data/demo", beam_size=4)
    translator.translate(["good morning", "thank you"])        # ['Guten Morgen', 'Danke']

Each method returns one type, whatever the options: `translate` strings,
`translate_batch` the n-best `Translation`s of each source, `translate_iterable`
strings as they are ready, `generate_tokens` a `GeneratedToken` per target token,
`score` numbers, `score_batch` `Scored` records with per-token log-probs.
Sources, target prefixes and targets to score are strings or lists of pieces (text already
tokenized, as CTranslate2 takes it).

Options are the keys of the YAML config (`beam_size`, `n_best`, `device`, `dtype`, ...):
given to `load` they hold for every call; given to a call they hold for that call (a layer
over `load`'s), and may be any option that needs no other model load (decoding, batching,
format). A `Translator` is the public face of an `engine.Engine`, the one the command line
loads too; each call is resolved (resolve.py) and runs through the job pipeline (pipeline.py)
with its sources in memory, and `translate_file` runs the command line's job
(`run.translate_job`): a file translated here and by `nmtdecode translate` with the same
options is the same.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, Generator, Iterable, Iterator, NoReturn, cast, overload

from .engine.batching import chunk_size, chunks
from .options.config import Config
from .jobs.pipeline import ListSink, ListSource, run
from .engine.resolve import ResolvedJob, resolve
from .options.entries import check_given

if TYPE_CHECKING:
    from .engine.batching import Example, Result
    from .engine.engine import Engine
    from .jobs.summary import Summary
    from .engine.decoding import BatchDecoder
    from .search.base import Hypothesis, Search

_END = object()  # what next() gives for an exhausted iterator, where None is a value


@dataclass
class Translation:
    """One hypothesis, as `translate_batch` returns them (the n-best of a source, best first)."""

    text: str
    score: float  # the ranking score: total log-probability after the length penalty
    log_prob: float  # sum of the token log-probabilities, EOS included
    tokens: list[int] = field(default_factory=list)  # target token ids, without EOS
    token_scores: list[float] = field(default_factory=list)  # log-probability of each of `tokens` (natural log)
    ended: bool = True  # False when the step limit cut it before EOS
    eos_score: float | None = None  # log-probability of the final EOS; None when cut before EOS
    alignment: list[int] | None = None  # per token: the source position attended most (with alignment=True)
    attention: list[list[float]] | None = None  # per token: its weights over the source tokens (attention=True)


@dataclass
class GeneratedToken:
    """One target token of `generate_tokens`, yielded as soon as the search has chosen it."""

    step: int  # its position in the output, from 0
    token_id: int
    piece: str | None  # its entry in the target vocabulary (`\u2581Guten`); None for an id the tokenizer lacks
    log_prob: float  # its log-probability (natural log), as `Translation.token_scores` has it
    text: str  # the output so far (this token included), detokenized
    is_last: bool = False  # the step limit ends the hypothesis with this token (one that ends with EOS ends
    #                        with the generator, whose return value is the hypothesis: `generate_tokens`)


@dataclass
class Scored:
    """One (source, target) pair as `score_batch` scores it (`nmtdecode score --format jsonl`)."""

    tokens: list[int]  # target token ids, any forced first token included, EOS not
    token_scores: list[float]  # log-probability of each of `tokens` (a forced token: 0)
    eos_score: float  # log-probability of the EOS that ends the target
    log_prob: float  # their sum, EOS included: what `score` returns (up to float32 rounding)
    mean_log_prob: float  # log_prob per scored token (EOS counted, a forced token not), as `score`'s summary


def translation(hyp: Hypothesis, text: str) -> Translation:
    """A search's hypothesis and its text as the API returns it."""
    return Translation(
        text, hyp.score, hyp.total, hyp.tokens, hyp.token_scores, hyp.ended, hyp.eos_score, hyp.alignment, hyp.attention
    )


class IneffectiveOptionWarning(UserWarning):
    """An option given to the Python API changes nothing in that call (`warnings` can filter it)."""


def _loaded(method: str, path: object, options: dict) -> Engine:
    """The engine of the model at `path` (paths: an ensemble) with `options`, as `method` loads it."""
    from .engine.importing import import_engine  # torch is imported here, not by `import nmtdecode`

    check_given(method, options)
    return import_engine().load(Config.from_layers([{"quiet": True}, {**options, "model": path}]))


class Translator:
    """A loaded model with its options: `Translator(path, **options)`, or `Translator.load`."""

    def __init__(self, model: str | os.PathLike | list | Engine, **options: Any) -> None:
        """`Translator(path, **options)` loads as `Translator.load(path, **options)` does (a
        path, as CTranslate2's constructor takes it); an `Engine` already loaded (compat/'s)
        is taken as it is."""
        from .engine.importing import import_engine  # torch is imported here, not by `import nmtdecode`

        if not isinstance(model, import_engine()):
            self.engine = _loaded("Translator()", model, options)  # a wrong path: the load's own message
        elif options:
            raise TypeError(f"Translator(): options go with a model path, not a loaded engine: {sorted(options)}")
        else:
            self.engine = model

    @property
    def config(self) -> Config:
        """The options of `load` as every call starts from them: the model's own decoding defaults
        (a native config.yaml's `decoding:`, generation_config.json) under the options given, as
        resolve.py applies them (every step limit is also capped by the model's positions)."""
        return self.engine.config.with_model_defaults(self.engine.loaded.defaults)

    @classmethod
    def load(cls, path: str | os.PathLike | list, **options) -> "Translator":
        """Load the model at `path` (a native, Hugging Face or eole directory, or an OpenNMT-py
        `.pt` checkpoint; a list of them: an ensemble, with `ensemble_rule` and `ensemble_weights`)
        with `options`, the config file's keys; `quiet` defaults to True (no summary on stderr)."""
        return cls(_loaded("load()", path, options))

    def translate(
        self, sources: list, prefixes: list | None = None, scores: bool | None = None, **options
    ) -> list[str]:
        """The best translation of each source, a string each, in input order (sorted by length
        and batched inside). A source is a string or a list of pieces. An empty or blank source
        gives "", or its prefix. `prefixes`: one target prefix per source (may be "" or None), as
        --prefix: text, or a list of target pieces (as CTranslate2's target_prefix). With
        `sampling=True`, source i draws as line i of a file would. Options whose results a
        string cannot show (`n_best`, `alignment`, ...) are warned about:
        `translate_batch` returns them. `scores=True` is deprecated: it returns
        `translate_batch`'s result."""
        if scores is not None:
            warnings.warn(
                "translate(scores=...) is deprecated: translate() returns strings; translate_batch() "
                "returns the n-best Translations with their scores",
                DeprecationWarning,
                stacklevel=2,
            )
            if scores:
                return self.translate_batch(sources, prefixes, **options)  # type: ignore[return-value]
        sources, prefixes = self._checked(sources, prefixes, "translate()")
        job = self._resolved(options, "translate()")
        return [result.texts[0] for result in self._results(sources, prefixes, job)]

    def translate_batch(self, sources: list, prefixes: list | None = None, **options) -> list[list[Translation]]:
        """As `translate`, but for each source its n-best hypotheses (`n_best`, default 1), best
        first, as `Translation`s: text, scores, tokens, per-token log-probs, and with
        `alignment=True` / `attention=True` the cross-attention's alignment and weights."""
        sources, prefixes = self._checked(sources, prefixes, "translate_batch()")
        job = self._resolved(options, "translate_batch()")
        return [
            [translation(hyp, text) for hyp, text in zip(result.hypotheses, result.texts)]
            for result in self._results(sources, prefixes, job)
        ]

    def translate_iterable(self, sources: Iterable, prefixes: Iterable | None = None, **options) -> Iterator[str]:
        """`translate`, lazily: yields the best translation of each source in input order, reading
        the sources (and prefixes) a window at a time, sorted and batched inside the window as
        the command line reads a file; memory is bounded by the window, so a generator (even an
        endless one) is never read whole. Options are checked at once; decoding starts with the
        first item asked for."""
        if isinstance(sources, str) or isinstance(prefixes, str):
            raise TypeError("translate_iterable() takes an iterable of sources (and of prefixes), not one string")
        job = self._resolved(options, "translate_iterable()")
        window = chunk_size(job.config.batching.batch_size, job.config.batching.batch_type)
        return self._texts_of_windows(iter(sources), None if prefixes is None else iter(prefixes), window, job)

    def generate_tokens(
        self, source: str | list[str], prefix: str | list[str] | None = None, **options: Any
    ) -> Generator[GeneratedToken, None, Translation]:
        """The translation of one source, a token at a time as the search chooses it (greedy by
        default, or `sampling=True`): a beam's best hypothesis is known only when the beam ends,
        so as in CTranslate2's `generate_tokens` there is no beam here. The tokens and log-probs
        are those of `translate_batch([source], [prefix], beam_size=1, **options)[0][0]`, EOS
        left out; the last one's `text` is `translate`'s string. A sample draws as source 0 of
        `translate` does. Once exhausted, the generator returns that Translation (`result =
        yield from translator.generate_tokens(...)`): whether it ended with EOS, and EOS's score."""
        [source], [prefix] = self._checked([source], [prefix], "generate_tokens()")
        job = self._resolved(options, "generate_tokens()", greedy=True)  # its decoder: host search, own step state
        example = self.engine.make_example(0, source, job.config.batching.max_src_length, prefix)
        return self._tokens(example, job.decoder)

    def translate_file(self, src: str, output: str, resume: bool = False, **options: Any) -> Summary:
        """Translate the file `src` into `output` as `nmtdecode translate` does: locked,
        written through OUTPUT.tmp, resumable with `resume=True` (and skipped when complete).
        Returns the job's `summary.Summary` (sentences, target tokens, seconds)."""
        from .jobs.run import translate_job

        job = self._call_config(options, "translate_file()", {"src": src, "output": output, "resume": resume})
        return translate_job(job, engine=self.engine)

    def score(self, sources: list, targets: list, **options) -> list[float]:
        """The total log-probability of each target (EOS included) given its source, as
        `nmtdecode score` prints it; a target is a string or a list of target pieces."""
        from .jobs.scoring import score_pairs

        sources, targets = self._pairs(sources, targets, "score()")
        return [
            score.total for score in score_pairs(self.engine, self._call_config(options, "score()"), sources, targets)
        ]

    def score_batch(self, sources: list, targets: list, **options) -> list[Scored]:
        """Each target's log-probability given its source, per token and in all (`Scored`), as
        `nmtdecode score --format jsonl` gives them; batched as `score` batches. A target is a
        string or a list of target pieces (as CTranslate2 takes them; an unknown one is <unk>)."""
        from .jobs.scoring import score_pairs

        sources, targets = self._pairs(sources, targets, "score_batch()")
        scores = score_pairs(self.engine, self._call_config(options, "score_batch()"), sources, targets, by_token=True)
        return [Scored(*s.by_token(), s.total, s.total / s.length) for s in scores]

    def _pairs(self, sources: Iterable, targets: Iterable, method: str) -> tuple[list, list]:
        sources, _ = self._checked(sources, None, method)
        if isinstance(targets, str):
            raise TypeError(f"{method} takes a list of targets, not one string")
        targets = list(targets)
        self._check_types(targets, "target", (str, list), method)
        if len(sources) != len(targets):
            raise ValueError(f"{method} got {len(sources)} sources but {len(targets)} targets")
        return sources, targets

    @overload
    def _checked(self, sources: Iterable, prefixes: Iterable, method: str) -> tuple[list, list]: ...
    @overload
    def _checked(self, sources: Iterable, prefixes: Iterable | None, method: str) -> tuple[list, list | None]: ...
    def _checked(self, sources: Iterable, prefixes: Iterable | None, method: str) -> tuple[list, list | None]:
        """The sources and prefixes of a call as lists, their lengths and types checked."""
        if isinstance(sources, str):
            raise TypeError(f"{method} takes a list of sources, not one string")
        sources = list(sources)
        self._check_types(sources, "source", (str, list), method)
        if prefixes is not None:
            prefixes = list(prefixes)
            self._check_types(prefixes, "prefix", (str, list, type(None)), method)
            if len(prefixes) != len(sources):
                raise ValueError(f"{method} got {len(sources)} sources but {len(prefixes)} prefixes")
        return sources, prefixes

    @staticmethod
    def _check_types(values: list, name: str, allowed: tuple, method: str, first: int = 0):
        """A TypeError naming the first value (numbered from `first`) of a wrong type: a source, a
        prefix or a target is a string or a list of string pieces."""
        for i, value in enumerate(values, start=first):
            if not isinstance(value, allowed):
                what = "a string or a list of pieces" if list in allowed else "a string"
                raise TypeError(f"{method}: {name} {i} is {type(value).__name__}, not {what}")
            if isinstance(value, list):
                wrong = next((j for j, piece in enumerate(value) if not isinstance(piece, str)), None)
                if wrong is not None:
                    raise TypeError(
                        f"{method}: {name} {i} has a {type(value[wrong]).__name__} at position "
                        f"{wrong}; a list {name} holds its pieces as strings"
                    )

    def _resolved(self, options: dict, method: str, greedy: bool = False) -> ResolvedJob:
        """This call's resolved job (with its decoder); options that change nothing in `method` are
        warned about in the API's terms (IneffectiveOptionWarning)."""
        base = {"beam_size": 1, "n_best": 1} if greedy else {}
        job = resolve(
            self._call_config(options, method, base=base), self.engine, api_method=method, call_options=options
        )
        for note in job.notes:
            warnings.warn(note, IneffectiveOptionWarning, stacklevel=3)  # at the caller of the public method
        return job

    def _results(self, sources: list, prefixes: list | None, job: ResolvedJob, first: int = 0) -> list[Result]:
        """The engine's results of these sources (indexes from `first`), in their order: through the
        pipeline, sorted by length and cut into batches together, as one chunk of a file's lines."""
        engine, batching = self.engine, job.config.batching
        examples = [
            engine.make_example(first + i, text, batching.max_src_length, None if prefixes is None else prefixes[i])
            for i, text in enumerate(sources)
        ]
        sink = ListSink(len(examples), first)
        run(
            ListSource(examples, batching),
            lambda batch: engine.decode_batch(batch, job.decoder),
            sink.put,
            job.batches_at_once,
        )
        return sink.results

    def _texts_of_windows(
        self, sources: Iterator, prefixes: Iterator | None, window: int, job: ResolvedJob
    ) -> Iterator[str]:
        """translate_iterable's work: a window of sources (and as many prefixes) at a time; one
        prefix more is read at the sources' end, to tell prefixes that outlast them."""

        def prefixes_end(which: str, at: int) -> NoReturn:
            raise ValueError(f"translate_iterable(): the prefixes end {which} the sources, at source {at}")

        first = 0
        for chunk in chunks(sources, window):
            given = None if prefixes is None else list(islice(prefixes, len(chunk)))
            if given is not None and len(given) < len(chunk):
                prefixes_end("before", first + len(given))
            self._check_types(chunk, "source", (str, list), "translate_iterable()", first)
            if given is not None:
                self._check_types(given, "prefix", (str, list, type(None)), "translate_iterable()", first)
            for result in self._results(chunk, given, job, first):
                yield result.texts[0]
            first += len(chunk)
        if prefixes is not None and next(prefixes, _END) is not _END:  # a prefix may be None
            prefixes_end("after", first)

    def _tokens(self, example: Example, decoder: BatchDecoder) -> Generator[GeneratedToken, None, Translation]:
        """The tokens of one example's single hypothesis, each yielded after the step that chose
        it (all at once for an empty source: its prefix, if any); returns the hypothesis."""
        tokenizer, chosen = self.engine.loaded.tokenizer, []

        def emit(tokens: list[int], log_probs: list[float], cut: bool = False) -> Iterator[GeneratedToken]:
            for i, (token, log_prob) in enumerate(zip(tokens, log_probs), start=1):
                chosen.append(token)
                yield GeneratedToken(
                    len(chosen) - 1,
                    token,
                    tokenizer.target_piece(token),
                    log_prob,
                    tokenizer.decode(chosen),
                    is_last=cut and i == len(tokens),
                )

        if example.ids is None:
            [hyp] = self.engine.decode_batch([example], decoder)[0].hypotheses
            yield from emit(hyp.tokens, hyp.token_scores)
            return translation(hyp, tokenizer.decode(hyp.tokens))
        total, prefixes = 0.0, [example.prefix] if example.prefix else None
        for step in decoder.stepwise([example.ids], [example.index], prefixes):
            search = cast("Search", step)  # generate_tokens' decoder searches on the host (resolve.py)
            record = search.beams[0]  # its one slot: greedy and a single sample never reorder
            if record.done:  # this step ended it (EOS, which is not yielded, or the step limit)
                [hyp] = search.results(1)[0]
                yield from emit(hyp.tokens[len(chosen) :], hyp.token_scores[len(chosen) :], cut=not hyp.ended)
                return translation(hyp, tokenizer.decode(hyp.tokens))
            [token], [now] = record.next_ys[-1], record.scores[-1]
            yield from emit([token], [now - total])
            total = now
        raise RuntimeError("the search ended without a done step")  # stepwise ends with every sentence done

    def _call_config(self, options: dict, method: str, files: dict | None = None, base: dict | None = None) -> Config:
        """This translator's config with the options of one call of `method` over it (over `base`,
        the call's own defaults), checked as that method takes them (options/entries.py)."""
        check_given(method, options)
        config = self.engine.config.over(base or {}, options, files or {})
        config.validate(method)
        return config
