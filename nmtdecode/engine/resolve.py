"""Resolve once: a job's layered options and the loaded model become the job as it will run.

Everything the options of a job mean for this model is worked out in one call right after
the model loads (`resolve`): the model's own decoding defaults under the user's options, the
rules that come with the model for these languages (a language the model lacks is refused by
its tokenizer, asked here), the ids of the pieces that options name, whether an ensemble's
attention can be read, the notes about options that change nothing, whether one sentence's
beam fits in memory, the resume signature, and the job's decoder (decoding.py) on the loaded
model, which the job owns. This is the one place where options are checked against the model;
what needs no model was checked before it loaded (options/: `Config.validate`), and files and
the machine by jobs/files.py and engine/system.py. So an option error is raised here, named by
its key, and the engine, the pipeline and the sinks take a `ResolvedJob` as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ..options.bounded import shown
from ..options.config import Config, ConfigError, DecodingConfig
from .messages import print_warning

if TYPE_CHECKING:
    from .decoding import BatchDecoder
    from .engine import Engine


@dataclass
class ResolvedJob:
    """A job's options as they will run with this model, and what follows from them."""

    config: Config  # the user's options over the model's own decoding defaults
    decoder: BatchDecoder  # the job's decoding loop on the loaded model (the engine decodes batches with it)
    notes: list[str] = field(default_factory=list)  # options that change nothing, in the caller's terms
    model_files: tuple[str, ...] = ()  # what the loader read: part of the resume signature (jobs/signature.py)
    device_type: str = "cpu"

    @property
    def batches_at_once(self) -> int:
        """--inter-threads on CPU; one batch at a time on CUDA (its steps replay one captured graph)
        and when answering line by line (each line is answered before the next is read)."""
        return batches_at_once(self.config, self.device_type)


def resolve(
    config: Config,
    engine: Engine,
    api_method: str | None = None,
    call_options: dict | None = None,
    scoring: bool = False,
) -> ResolvedJob:
    """The job of `config` on the engine's model, with its decoder. `api_method`: the Python API's
    method the job serves, with the options of that call (notes name keyword arguments); else the
    command line's (notes name flags). `scoring`: forced decoding, which no search option affects
    (no notes, no beam to fit)."""
    from .decoding import BatchDecoder  # with torch: a job is resolved once its model is loaded

    loaded = engine.loaded
    config = config.with_model_defaults(loaded.defaults)
    decoding, notes = config.decoding, []
    rules = loaded.rules_for(decoding.src_lang, decoding.tgt_lang)
    engine.source_prefix = decoding.source_prefix  # what every source line of the job gets before it
    piece_id = loaded.tokenizer.piece_id
    banned_ids = piece_ids("banned_tokens", decoding.banned_tokens, piece_id)
    excluded_ids = piece_ids("ignore_when_blocking", decoding.ignore_when_blocking, piece_id)
    if not scoring:
        check_attention(decoding, loaded.shares_source_positions)
        notes = ineffective(config, loaded.model.cfg.max_positions, engine.device.type, api_method, call_options)
        check_fits(config, engine)
    # generate_tokens() pauses between tokens while other calls may decode: it reads the host
    # search's records, with its own step state where the engine's step shares buffers (CUDA graphs)
    streams = api_method == "generate_tokens()"
    command_line = api_method is None and not scoring  # its notes are told together, after resolving
    decoder = BatchDecoder(
        loaded.model,
        decoding,
        rules,
        banned_ids=banned_ids,
        excluded_ids=excluded_ids,
        steps=None if streams and engine.steps.shares_buffers else engine.steps,  # None: eager, its own
        trace=command_line and config.io.dump_beam is not None,
        search_on="host" if streams else engine.config.runtime.search_on,
        warn=notes.append if command_line else print_warning,  # --search-on device: what it does not hold
    )
    return ResolvedJob(config, decoder, notes, tuple(loaded.files), engine.device.type)


def piece_ids(key: str, pieces: list[str], piece_id: Callable[[str], int | None]) -> list[int]:
    """Target pieces named by option `key` -> their ids; a piece the vocabulary lacks is an error."""
    ids = []
    for piece in pieces:
        found = piece_id(piece)
        if found is None:
            raise ConfigError(
                f"{key}: {shown(piece)} is not a piece of the target vocabulary (give pieces as the "
                "tokenizer spells them, e.g. \u2581the for a word-initial 'the')"
            )
        ids.append(found)
    return ids


def check_attention(decoding: DecodingConfig, shared_positions: bool) -> None:
    """Options that read the cross-attention need one source position for every model: an
    ensemble whose models split the source differently has none in common."""
    asked = decoding.attention_readers
    if asked and not shared_positions:
        raise ConfigError(
            f"{asked[0]}: the ensemble's models split the source differently, so their "
            "attention has no common source positions to average or align to"
        )


def check_fits(config: Config, engine: Engine) -> None:
    """On CPU, refuse before decoding a beam that not even one sentence could be decoded with
    (memory.py: an allocation that large may end in the kernel's OOM killer, not an error)."""
    from ..models import memory  # with torch: imported once the model is loaded

    decoding, total = config.decoding, memory.total_bytes()
    width = decoding.rows_per_sentence
    if engine.device.type != "cpu" or total is None or width == 1 or decoding.max_length < 2:
        return
    need = engine.decoding_bytes(1, width, 2)
    if need > total:
        key = "n_best" if decoding.sampling else "beam_size"
        raise ConfigError(
            f"{key}: {width} needs at least {memory.readable_size(need)} for one "
            f"sentence's second decoding step, more than the {memory.readable_size(total)} "
            "this process can use; choose a smaller beam"
        )


def batches_at_once(config: Config, device_type: str) -> int:
    """See ResolvedJob.batches_at_once."""
    if device_type != "cpu" or config.io.stream:
        return 1
    return config.runtime.inter_threads


def ineffective(
    config: Config,
    max_positions: int,
    device_type: str,
    api_method: str | None = None,
    call_options: dict | None = None,
) -> list[str]:
    """Notes for options that change nothing (or only slow things down) in this job: not errors,
    since a shared config file may well set them for another model or format. The command line's
    are named as flags; the Python API's as keyword arguments, with those whose results its
    method's return type does not carry (`api_method`: "translate()", ...; `call_options`: its call's)."""
    decoding, user, api = config.decoding, config.user_keys, api_method is not None
    notes = [] if api else format_notes(config)
    flag = keyword if api else cli_flag
    if "beta" in user and decoding.beta != 0 and decoding.coverage_penalty == "none":
        notes.append(f"beta: {decoding.beta} has no effect without {flag('coverage_penalty', 'wu', 'summary')}")
    if decoding.coverage_penalty != "none" and decoding.beta == 0:
        wanted = "beta > 0" if api else "--beta B, B > 0"
        notes.append(f"coverage_penalty: {decoding.coverage_penalty} with beta 0 changes nothing ({wanted})")
    if "max_length" in user and decoding.max_length > max_positions:
        notes.append(
            f"max_length: {decoding.max_length} is above the model's {max_positions} target positions, "
            f"which cap every output at {max_positions} tokens"
        )
    if "diversity_penalty" in user and decoding.beam_groups == 1:
        notes.append(f"diversity_penalty: has no effect without {flag('beam_groups')} above 1")
    if decoding.ignore_when_blocking and not decoding.block_ngram_repeat:
        notes.append(f"ignore_when_blocking: has no effect without {flag('block_ngram_repeat')}")
    sampling = "sampling=True" if api else "--sampling"
    if not decoding.sampling:
        notes += [
            f"{key}: has no effect without {sampling}{'' if api else ' (sampling: true)'}"
            for key in ("temperature", "top_k", "top_p", "seed")
            if key in user
        ]
    elif "early_stopping" in user:
        notes.append(f"early_stopping: has no effect with {sampling} (each sample ends at EOS or the step limit)")
    if config.runtime.inter_threads > 1 and batches_at_once(config, device_type) == 1:
        where = "on CUDA" if device_type != "cpu" else "when answering line by line (--stream)"
        notes.append(f"inter_threads: has no effect {where}: one batch is decoded at a time")
    if api_method is not None:
        notes += returned_notes(config, api_method, call_options or {})
    return notes


def format_notes(config: Config) -> list[str]:
    """Options whose results the job's output format does not write."""
    io, decoding, notes = config.io, config.decoding, []
    if io.token_scores and io.format not in ("jsonl", "nbest-marian"):
        notes.append(
            f"token_scores: has no effect with --format {io.format} (it adds fields to jsonl, and "
            "Marian's WordScores to nbest-marian)"
        )
    for key in ("alignment", "attention"):
        if getattr(decoding, key) and io.format != "jsonl" and io.dump_beam is None:
            notes.append(f"{key}: has no effect with --format {io.format} (it adds fields to jsonl and --dump-beam)")
    return notes


def returned_notes(config: Config, method: str, call_options: dict) -> list[str]:
    """Options whose results the Python API's `method` does not return (its type cannot carry them)."""
    notes = []
    if "format" in call_options:
        notes.append(
            f"format={shown(call_options['format'])} has no effect on {method}: translate_file() writes formats"
        )
    if config.decoding.report_align:
        notes.append(f"report_align=True has no effect on {method}: translate_file() writes the Pharaoh pairs")
    if method in ("translate()", "translate_iterable()"):
        decoding = config.decoding
        returns = "the best translation as a string; translate_batch() returns"
        if decoding.n_best > 1:
            notes.append(f"n_best={decoding.n_best} has no effect on {method}, which returns {returns} the n-best")
        for key in ("alignment", "attention", "token_scores"):
            if config.value(key):
                notes.append(f"{key}=True has no effect on {method}, which returns {returns} Translations with it")
    return notes


def cli_flag(key: str, *values: str) -> str:
    """An option as the command line spells it: `--coverage-penalty wu or summary`."""
    return f"--{key.replace('_', '-')}" + (f" {' or '.join(values)}" if values else "")


def keyword(key: str, *values: str) -> str:
    """An option as the Python API spells it: `coverage_penalty='wu' or 'summary'`."""
    return key + (f"={' or '.join(map(repr, values))}" if values else "")
