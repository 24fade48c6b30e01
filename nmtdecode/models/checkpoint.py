"""What every checkpoint format builds on, without torch: the loaded-model record, the rules a
model brings, its errors, the reading of its files and the check of its sizes.

A leaf of the loading layer: the formats (`models/formats/*`) import from here,
the dispatcher (`loading.py`) imports the formats, so neither imports the other
and reading a checkpoint never pulls in the search or the decoding loop. No
torch here, so that a model's files are read and checked, and described by
`nmtdecode inspect`, before (or without) torch: what needs it (reading tensors,
building the model, giving it its weights) is weights.py's.
"""

from __future__ import annotations

import json
import os
import re
import stat
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Protocol

import yaml

from ..options.bounded import TooLarge, safe_load
from .architecture import TransformerConfig


class ModelError(RuntimeError):
    """The model cannot be loaded (runtime error, exit code 1)."""


@dataclass(frozen=True)  # shared by every model of a format (opennmt.OPENNMT_RULES): never changed in place
class ModelRules:
    """Decoding rules that come with a model rather than from the user."""

    banned_ids: tuple[int, ...] = ()  # never generated (e.g. pad)
    forced_bos_id: int | None = None  # first generated token (target-language tag)
    # the decoder's first input where the job chooses it, not the model (a CTranslate2 folder whose
    # decoder_start_token is null: mBART-25's target-language tag); None: the model's
    decoder_start_id: int | None = None
    forced_eos: bool = False  # EOS forced at the step limit
    length_offset: int = 0  # added to the length the length penalty sees (OpenNMT-py: 1)
    opennmt_beam: bool = False  # OpenNMT-py's beam slots and `top` rule (search/beam.py)


class Tokenizer(Protocol):
    """What decoding asks of a model's tokenizer: text and pieces to ids and back, on the source
    and the target side (tokenizer.SentencePieceTokenizer, formats/hf_tokenizers.HFTokenizer,
    formats/opennmt_shared.VocabTokenizer, ensemble.EnsembleTokenizer)."""

    languages: dict[str, int]  # language code -> the id of its tag (empty: not multilingual)

    @property
    def word_marker(self) -> str | None: ...  # what starts a word in the pieces (None: nothing marks it)

    def encode(self, text: str) -> list[int]: ...  # a source line, EOS included
    def encode_pieces(self, pieces: list[str]) -> list[int]: ...
    def encode_target(self, text: str) -> list[int]: ...  # without EOS
    def decode(self, ids: list[int]) -> str: ...
    def source_piece(self, token_id: int) -> str | None: ...
    def target_piece(self, token_id: int) -> str | None: ...
    def source_pieces(self, text: str | list[str]) -> list[str]: ...
    def piece_id(self, piece: str) -> int | None: ...  # a target piece's id
    def source_identity(self) -> tuple: ...
    def set_languages(self, src_lang: str | None, tgt_lang: str | None) -> int | None: ...
    def language_codes(self) -> list[str]: ...


@dataclass
class LoadedModel:
    model: Any  # transformer.Transformer or ensemble.Ensemble (not imported here: they need torch)
    tokenizer: Tokenizer
    format: str  # "native", "huggingface/marian", ...
    path: str
    rules: ModelRules = field(default_factory=ModelRules)
    defaults: dict = field(default_factory=dict)  # decoding defaults shipped with the model
    gemm: str = "torch"  # how the CPU multiplies by its weights: torch, onednn or int8 (models/placement.py)
    files: tuple[str, ...] = ()  # every file the load read (real paths), for the resume signature

    @property
    def shares_source_positions(self) -> bool:
        """Whether every model reads the source at the same positions, so that their attention can
        be averaged and aligned (an ensemble's models may split it differently: models/ensemble.py)."""
        return True

    def rules_for(self, src_lang: str | None, tgt_lang: str | None) -> ModelRules:
        """Set the languages on the tokenizer; the model's rules, with the target-language
        tag forced first where the family does that."""
        forced = self.tokenizer.set_languages(src_lang, tgt_lang)
        if forced is None:
            return self.rules
        return replace(self.rules, forced_bos_id=forced)


@dataclass
class ModelFacts:
    """What a model's files say, read without torch: what `nmtdecode inspect` shows, and what a
    format's loader builds the model from (each format's `describe`)."""

    format: str
    cfg: TransformerConfig
    stored: Any  # the weight files (stored.py): their tensors for a load, their headers for inspect
    shapes: dict[str, tuple[int, ...]]  # our parameters, tied ones once -> the shapes the weights give them
    rules: ModelRules
    defaults: dict  # decoding defaults shipped with the model
    tokenizer: Callable[[], Tokenizer]  # builds it; a load calls it once the weights are in, so their errors come first

    def loaded(self, model: Any, path: str, gemm: str = "torch") -> LoadedModel:
        return LoadedModel(model.eval(), self.tokenizer(), self.format, path, self.rules, self.defaults, gemm)


_loads: list[dict[str, str]] = []  # per model load in progress, the paths it read -> their real paths


@contextmanager
def recording_reads() -> Iterator[dict[str, str]]:
    """The files a model load reads, noted by `note_read` as it goes: each path as given (in the
    order first read) -> its real path, which the resume signature hashes (signature.py)."""
    files: dict[str, str] = {}
    _loads.append(files)
    try:
        yield files
    finally:
        _loads.pop()


def note_read(path: str) -> str:
    """Every file a loader reads goes through here (the readers below, the tokenizers' files):
    noted for the resume signature, and refused unless it is a regular file (a FIFO or device
    in its place would block the load, or never end)."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError as e:
        raise ModelError(f"cannot read {path}: {e.strerror}") from None
    if not regular:
        raise ModelError(f"{path} is not a regular file (a FIFO, device or folder): a model's files must be files")
    for files in _loads:
        if path not in files:  # a weights file is read once per tensor: its real path is looked up once
            files[path] = os.path.realpath(path)
    return path


def read_json(path: str, required: bool = True, limit: int | None = None) -> dict:
    """A JSON object from a model directory; a missing optional file is {}. `limit`: the most bytes
    it may hold (options/bounded.py: MAX_CONFIG_BYTES for a config, vocabulary_bytes for a
    vocabulary), checked before it is parsed."""
    return _read_mapping(path, required, json.load, (json.JSONDecodeError,), "a JSON object", limit)


def read_yaml(path: str, required: bool = True, limit: int | None = None) -> dict:
    """A YAML mapping from a model directory (safe_load: plain values only), refused when its
    aliases expand beyond any config (bounded.safe_load); a missing optional file is {}; `limit`
    as read_json's."""
    return _read_mapping(
        path, required, lambda f: safe_load(f.read()), (yaml.YAMLError, TooLarge), "a YAML mapping", limit
    )


def read_vocabulary_json(path: str, kind: type, limit: int) -> Any:
    """A vocabulary's JSON list (`kind` list) or object (dict), at most `limit` bytes, required."""
    what = "a JSON list" if kind is list else "a JSON object"
    return _read_mapping(path, True, json.load, (json.JSONDecodeError,), what, limit, kind, "a vocabulary")


def _read_mapping(
    path: str,
    required: bool,
    parse: Callable,
    errors: tuple[type[Exception], ...],  # what `parse` raises for a file it refuses
    what: str,
    limit: int | None,
    kind: type = dict,
    role: str = "a config",
) -> Any:
    if not os.path.lexists(path):  # a FIFO or folder in its place is not missing: note_read refuses it
        if required:
            raise ModelError(f"{path} is missing")
        return kind()
    note_read(path)
    size = os.path.getsize(path)
    if limit is not None and size > limit:
        raise ModelError(f"{path} cannot be read: it holds {size:,} bytes; no such file needs more than {limit:,}")
    unreadable: tuple[type[Exception], ...] = (OSError, UnicodeDecodeError, *errors)
    try:
        with open(path, encoding="utf-8") as f:
            data = parse(f)
    except unreadable as e:
        raise ModelError(f"{path} cannot be read: {one_line(str(e))}") from None
    except RecursionError:
        raise ModelError(f"{path} cannot be read: it nests too deeply for {role}") from None
    if not isinstance(data, kind):
        raise ModelError(f"{path} cannot be read: expected {what}")
    return data


def one_line(message: str) -> str:
    """A message of several lines (YAML's: the problem, then where) as one."""
    return " ".join(message.split())


def first_line(message: str) -> str:
    """The first sentence of an error message (torch's run over several lines of advice)."""
    line = next((line.strip() for line in message.splitlines() if line.strip()), "no details")
    return line.split(". ")[0].rstrip(".")


def unpickling_reason(message: str) -> str:
    """The weights-only unpickler's long message, cut to what it refused."""
    named = re.search(r"GLOBAL ([\w.]+)", message)
    if named:
        return f"it holds pickled code, not only weights (it would load {named.group(1)})"
    return first_line(message)


def check_dimensions(cfg: TransformerConfig, shapes: dict[str, tuple[int, ...]], source: str) -> None:
    """Before the model is allocated: the config's sizes against the shapes of the weights that
    fix them (our names -> shapes: a safetensors header, or tensors already read), so that a
    config asking for more than the weights hold fails naming the key and both shapes instead
    of allocating it first (a d_model of 4,096 over a checkpoint 512 wide)."""
    for name, keys in _sized_by(cfg):
        expected = tuple(getattr(cfg, key) + (cfg.position_offset if key == "max_positions" else 0) for key in keys)
        if name not in shapes:
            raise ModelError(f"{source}: weights do not match the architecture; missing: [{name!r}]")
        actual = tuple(shapes[name])
        if actual != expected:
            wrong = [k for k, e, a in zip(keys, expected, actual) if e != a] if len(actual) == len(keys) else keys
            raise ModelError(
                f"{source}: {', '.join(wrong)}: the config asks for {name} of shape {expected}, "
                f"the weights hold {actual}"
            )
    for stack in ("encoder_layers", "decoder_layers"):
        held = {int(m.group(1)) for n in shapes if (m := re.match(rf"{stack}\.(\d+)\.", n))}
        if len(held) != getattr(cfg, stack):
            raise ModelError(
                f"{source}: {stack}: the config asks for {getattr(cfg, stack)} layers, the weights hold {len(held)}"
            )


def check_stored_layers(names: Iterable[str], layer: str, cfg: TransformerConfig, source: str) -> None:
    """Weights of more layers than the config asks for are refused, naming the first extra one:
    decoded without them, the model would be another network than the one trained. `layer`: a
    regular expression matching a stored layer's weight, its groups `stack` (encoder or decoder)
    and `number` (the native and Marian readers refuse every weight they do not expect anyway)."""
    pattern = re.compile(layer)
    for name in sorted(names):
        found = pattern.match(name)
        if found is None:
            continue
        stack = f"{found['stack']}_layers"
        if int(found["number"]) >= getattr(cfg, stack):
            raise ModelError(
                f"{source}: {stack}: the config asks for {getattr(cfg, stack)} layers, the weights hold more "
                f"({name}, ...)"
            )


def _sized_by(cfg: TransformerConfig) -> list[tuple[str, tuple[str, ...]]]:
    """The parameters whose shapes show every size of the config (but heads, which no shape
    shows): each with the config keys of its dimensions."""
    sized: list[tuple[str, tuple[str, ...]]] = [("src_embed.tokens.weight", ("src_vocab_size", "d_model"))]
    if not cfg.share_embeddings:
        sized.append(("tgt_embed.tokens.weight", ("tgt_vocab_size", "d_model")))
    if cfg.positions == "learned":
        sized += [(f"{side}_embed.positions.weight", ("max_positions", "d_model")) for side in ("src", "tgt")]
    # a gated feed-forward's first product is two matrices in one (transformer.GatedFeedForward): its second tells
    ffn = ("ffn.down.weight", ("d_model", "ffn_dim")) if cfg.gated_ffn else ("ffn.up.weight", ("ffn_dim", "d_model"))
    return sized + [(f"{stack}.0.{ffn[0]}", ffn[1]) for stack in ("encoder_layers", "decoder_layers")]


def _demands(cfg: TransformerConfig) -> dict[str, int]:
    """The parameters each size of the config asks for (biases and norms aside), by what asks."""
    d, ffn, inner = cfg.d_model, cfg.ffn_dim, cfg.attention_dim
    products = 3 if cfg.gated_ffn else 2  # matrices of d_model x ffn_dim in a feed-forward layer
    table = (cfg.max_positions + cfg.position_offset) * d * (2 if cfg.positions == "learned" else 0)
    vocab = (
        cfg.src_vocab_size
        + (0 if cfg.share_embeddings else cfg.tgt_vocab_size)
        + (0 if cfg.tie_output else cfg.tgt_vocab_size)
    ) * d
    return {
        f"src_vocab_size {cfg.src_vocab_size:,}, tgt_vocab_size {cfg.tgt_vocab_size:,} x d_model {d:,}": vocab,
        f"max_positions {cfg.max_positions:,} x d_model {d:,}": table,
        f"encoder_layers {cfg.encoder_layers:,} of d_model {d:,}, ffn_dim {ffn:,}": cfg.encoder_layers
        * (4 * d * inner + products * d * ffn),
        f"decoder_layers {cfg.decoder_layers:,} of d_model {d:,}, ffn_dim {ffn:,}": cfg.decoder_layers
        * (8 * d * inner + products * d * ffn),
    }


def largest_demand(cfg: TransformerConfig) -> tuple[str, int]:
    """The config keys that ask for the most parameters, and how many."""
    return max(_demands(cfg).items(), key=lambda item: item[1])


def parameter_count(cfg: TransformerConfig) -> int:
    return sum(_demands(cfg).values())
