"""The Python API: load a model once, then translate lists of strings, files, or score pairs.

    import nmtdecode
    translator = nmtdecode.Translator.load("data/demo", beam_size=4)
    translator.translate(["good morning", "thank you"])        # ['Guten Morgen', 'Danke']

Options are the keys of the YAML config (`beam_size`, `n_best`, `device`, `dtype`, ...):
given to `load` they hold for every call; given to a call they hold for that call (a layer
over `load`'s), and may be any option that needs no other model load (decoding, batching,
format). A `Translator` is the public face of an `engine.Engine`, the one the command line
loads too, and `translate_file` runs the command line's job loop (`run.translate_job`):
a file translated here and by `nmtdecode translate` with the same options is the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import KEY_SECTION, PER_JOB_KEYS, Config, ConfigError

# Options a call may change; the others (model, device, dtype, ...) are fixed by `load`.
CALL_KEYS = PER_JOB_KEYS - {"src", "output"}


@dataclass
class Translation:
    """One hypothesis, as `translate` returns them when asked for scores or an n-best list."""

    text: str
    score: float  # the ranking score: total log-probability after the length penalty
    log_prob: float  # sum of the token log-probabilities, EOS included
    tokens: list[int] = field(default_factory=list)  # target token ids, without EOS
    token_scores: list[float] = field(default_factory=list)  # log-probability of each of `tokens` (natural log)
    ended: bool = True  # False when the step limit cut it before EOS
    eos_score: float | None = None  # log-probability of the final EOS; None when cut before EOS
    alignment: list[int] | None = None  # per token: the source position attended most (with alignment=True)
    attention: list[list[float]] | None = None  # per token: its weights over the source tokens (attention=True)


class Translator:
    """A loaded model with its options. Build it with `Translator.load(path, **options)`."""

    def __init__(self, engine):
        self.engine = engine

    @property
    def config(self) -> Config:
        return self.engine.config

    @classmethod
    def load(cls, path: str | list[str], **options) -> "Translator":
        """Load the model at `path` (a native, Hugging Face or eole directory, or an OpenNMT-py
        `.pt` checkpoint; a list of them: an ensemble, with `ensemble_rule` and `ensemble_weights`)
        with `options`, the config file's keys; `quiet` defaults to True (no summary on stderr)."""
        from .engine import Engine  # torch is imported here, not by `import nmtdecode`

        files = sorted(k for k in options if k in ("model", "src", "output"))
        if files:
            raise ConfigError(f"{files[0]}: not an option of load(); give the model as `path` and files "
                              "to translate_file()")
        return cls(Engine.load(Config.from_layers([{"quiet": True}, {**options, "model": path}])))

    def translate(self, sources: list[str], scores: bool = False, prefixes: list[str] | None = None,
                  **options) -> list:
        """Translate a list of sentences (sorted by length and batched inside).

        Returns a list of strings, one per source, the best translation of each; with
        `scores=True` or `n_best` > 1, a list of lists of `Translation`, the n-best
        hypotheses of each source, best first. An empty or blank source gives "" (score 0),
        or its prefix. `prefixes`: one target prefix per source (may be ""), as --prefix.
        With `sampling=True`, source i draws as line i of a file would."""
        from .batching import cut

        if isinstance(sources, str):
            raise TypeError("translate() takes a list of strings, not one string")
        sources = list(sources)
        for name, values, allowed in (("source", sources, (str,)), ("prefix", prefixes or [], (str, type(None)))):
            wrong = next((i for i, value in enumerate(values) if not isinstance(value, allowed)), None)
            if wrong is not None:
                raise TypeError(f"translate(): {name} {wrong} is {type(values[wrong]).__name__}, not a string")
        if "prefix" in options:  # a file, for translate_file
            raise ConfigError("prefix: translate() takes its prefixes as a list, prefixes=[...]")
        if prefixes is not None and len(prefixes) != len(sources):
            raise ValueError(f"translate() got {len(sources)} sources but {len(prefixes)} prefixes")
        engine = self.engine
        config, decoder = engine.decoder(self._call_config(options))
        batching = config.batching
        examples = [engine.make_example(i, text, batching.max_src_length, None if prefixes is None else prefixes[i])
                    for i, text in enumerate(sources)]
        results = [None] * len(examples)
        for batch in cut(examples, batching.batch_size, batching.batch_type):
            for result in engine.decode_batch(batch, decoder):
                results[result.index] = result
        if not scores and config.decoding.n_best == 1:
            return [result.texts[0] for result in results]
        return [[Translation(text, hyp.score, hyp.total, hyp.tokens, hyp.token_scores, hyp.ended,
                             hyp.eos_score, hyp.alignment, hyp.attention)
                 for hyp, text in zip(result.hypotheses, result.texts)] for result in results]

    def translate_file(self, src: str, output: str, resume: bool = False, **options):
        """Translate the file `src` into `output` as `nmtdecode translate` does: locked,
        written through OUTPUT.tmp, resumable with `resume=True` (and skipped when complete).
        Returns the job's `summary.Summary` (sentences, target tokens, seconds)."""
        from .run import translate_job

        job = self._call_config(options, {"src": src, "output": output, "resume": resume})
        return translate_job(job, engine=self.engine)

    def score(self, sources: list[str], targets: list[str], **options) -> list[float]:
        """The total log-probability of each target (EOS included) given its source."""
        from .scoring import score_pairs

        if len(sources) != len(targets):
            raise ValueError(f"score() got {len(sources)} sources but {len(targets)} targets")
        return score_pairs(self.engine, self._call_config(options), list(sources), list(targets))

    def _call_config(self, options: dict, files: dict | None = None) -> Config:
        """This translator's config with one call's options over it."""
        fixed = sorted(k for k in options if k not in CALL_KEYS)
        if fixed:
            what = "is fixed when the model loads: give it to Translator.load()" if fixed[0] in KEY_SECTION else \
                "is not an option"
            raise ConfigError(f"{fixed[0]}: {what}")
        return self.config.over(options, files or {})
