"""A CTranslate2 model's vocabularies, and the tokenizer they make, read without torch.

A converted folder keeps the pieces, not the tool that cuts text into them: `shared_vocabulary`,
or `source_vocabulary` and `target_vocabulary` (`.json`: a list of pieces; `.txt`: a piece a line,
a carriage return ending every line dropped), each piece's id its position. As CTranslate2 reads
them (src/vocabulary.cc), a piece listed twice keeps its first id, and `<unk>` is appended when
missing.

Text is cut into those pieces by a SentencePiece model or a Hugging Face `tokenizer.json` (byte-level
BPE: BART's, mBART's and others' that are not SentencePiece; the optional `tokenizers` library):
the one `--tokenizer` names (a file, or a folder holding one), else one found in the folder or
beside it, as Argos Translate packages keep `sentencepiece.model` next to `model/`
(`SENTENCEPIECE_NAMES`, then `tokenizer.json`, as `ct2-transformers-converter --copy_files` puts it
in the folder). The pieces it cuts are looked up in the folder's vocabulary, and a hypothesis's
pieces are joined by it. Without one, a line is its pieces separated by spaces, and a hypothesis
its pieces joined by spaces, as CTranslate2's translate_file reads and writes them. Pieces given
as a list (the Python API, nmtdecode.compat.ctranslate2) are taken as CTranslate2 takes them: the
config's `add_source_bos`/`add_source_eos` and nothing else. Text follows the conventions of the
model's family (`SourceFrame`): a converted Marian model reads `</s>` after the source (and
`>>xx<<` first for --tgt-lang); BART `<s>` before it and `</s>` after; mBART-50, M2M100 and NLLB
the source's language tag first (--src-lang) and `</s>` after, and --tgt-lang forces the target's
tag first; T5 `</s>` after it (MADLAD-400: `<2xx>` first for --tgt-lang xx); other models the
config's flags.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Iterable

from ...options.config import ConfigError
from ..checkpoint import ModelError, note_read
from .hf_tokenizers import HFTokenizer, _Pieces, _read_tokenizer_json, _TokenizerJson
from .marian_yaml import MAX_BYTES, MAX_ENTRIES

# The files of each side, in CTranslate2's order of looking (sequence_to_sequence.cc).
SHARED, SOURCE, TARGET = "shared_vocabulary", "source_vocabulary", "target_vocabulary"
# SentencePiece models looked for in the folder, then in the folder above it: one for both sides,
# or OPUS-MT's pair.
SENTENCEPIECE_NAMES = ("sentencepiece.model", "sentencepiece.bpe.model", "spm.model", "spiece.model")
SENTENCEPIECE_PAIR = ("source.spm", "target.spm")
TOKENIZER_JSON = "tokenizer.json"  # a Hugging Face tokenizer (the `tokenizers` library reads it)
# Language tags in a vocabulary: M2M100's __de__, NLLB's deu_Latn, mBART-50's de_DE; Marian's >>de<<.
TAGS = {"m2m100": re.compile(r"__([a-z]{2,3})__"), "nllb": re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")}
MADLAD_TAG = re.compile(r"<2(.+)>")  # MADLAD-400's target languages: <2de>, <2zh_Latn>
SENTINEL = re.compile(r"<extra_id_\d+>")  # T5's
MBART_TAG = re.compile(r"[a-z]{2}_[A-Z]{2}")
MARIAN_TAG = re.compile(r">>(.+)<<")
PADDING = ("<pad>", "<blank>")  # never text: OpenNMT-py's <blank>, the others' <pad>


def read_vocabulary(directory: str, name: str) -> list[str] | None:
    """The pieces of `name`.json or `name`.txt in `directory`, or None when neither is there."""
    for extension in (".json", ".txt"):
        path = os.path.join(directory, name + extension)
        if os.path.lexists(path):
            try:
                return _pieces(note_read(path), extension)
            except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
                raise ModelError(f"{path} cannot be read: {e}") from None
    return None


def _pieces(path: str, extension: str) -> list[str]:
    if os.path.getsize(path) > MAX_BYTES:
        raise ValueError(f"it holds more than {MAX_BYTES >> 20} MB, more than any vocabulary")
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    if extension == ".json":
        tokens = json.loads(text)
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ValueError("expected a JSON list of pieces")
    else:
        tokens = text.split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()  # the line feed that ends the last line
        if tokens and all(t.endswith("\r") for t in tokens):
            tokens = [t[:-1] for t in tokens]
    if len(tokens) > MAX_ENTRIES:
        raise ValueError(f"it holds more than {MAX_ENTRIES:,} pieces, more than any model's vocabulary")
    return tokens


class Vocabulary:
    """One side's pieces by id, and the id of each piece (its first)."""

    def __init__(self, tokens: list[str], unk: str) -> None:
        self.tokens = list(tokens)
        if unk not in self.tokens:  # as CTranslate2 does
            self.tokens.append(unk)
        self.ids: dict[str, int] = {}
        for i, token in enumerate(self.tokens):
            self.ids.setdefault(token, i)

    def __len__(self) -> int:
        return len(self.tokens)

    def id(self, token: str | None, what: str, where: str) -> int:
        if token is None or token not in self.ids:
            raise ModelError(f"{where}: {what} {token!r} is not in the vocabulary")
        return self.ids[token]


def vocabularies(path: str, unk: str) -> tuple[Vocabulary, Vocabulary]:
    """The source and target vocabularies of the folder (one object when shared)."""
    shared = read_vocabulary(path, SHARED)
    if shared is not None:
        vocabulary = Vocabulary(shared, unk)
        return vocabulary, vocabulary
    target, source = read_vocabulary(path, TARGET), read_vocabulary(path, SOURCE)
    if target is None or source is None:
        features = read_vocabulary(path, "source_1_vocabulary") is not None
        raise ModelError(
            f"{path}: source features (source_1_vocabulary, ...) are not supported"
            if features
            else f"{path}: no {SHARED}.json/.txt, nor {SOURCE} and {TARGET}"
        )
    return Vocabulary(source, unk), Vocabulary(target, unk)


def find_tokenizer(folder: str, given: str | None) -> tuple[str, str] | None:
    """The (source, target) files that cut text: SentencePiece models, or one tokenizer.json for
    both; `given`'s (a file, or a folder holding one), else the folder's or the one above it; None
    when there is none."""
    if given is not None:
        if os.path.isfile(given):
            return given, given
        found = _in(given) if os.path.isdir(given) else None
        if found is None:
            names = ", ".join((*SENTENCEPIECE_NAMES, " and ".join(SENTENCEPIECE_PAIR), TOKENIZER_JSON))
            raise ConfigError(
                f"tokenizer: {given} is not a SentencePiece model or tokenizer.json, nor a folder holding one ({names})"
            )
        return found
    return _in(folder) or _in(os.path.dirname(os.path.abspath(folder)))


def _in(folder: str) -> tuple[str, str] | None:
    pair = [os.path.join(folder, name) for name in SENTENCEPIECE_PAIR]
    if all(os.path.isfile(p) for p in pair):
        return pair[0], pair[1]
    names = (*SENTENCEPIECE_NAMES, TOKENIZER_JSON)
    single = next((os.path.join(folder, n) for n in names if os.path.isfile(os.path.join(folder, n))), None)
    return None if single is None else (single, single)


def _is_tokenizer_json(path: str) -> bool:
    """A tokenizer.json (a JSON object: `{` first), not a SentencePiece model (a protobuf)."""
    with open(path, "rb") as f:
        return f.read(64).lstrip()[:1] == b"{"


class _JsonPieces:
    """A Hugging Face tokenizer.json cutting text into pieces that the folder's vocabulary numbers
    (a piece it lacks: <unk>), and joining a hypothesis's pieces into text (the backend protocol
    of hf_tokenizers). Its own ids are not used: the vocabulary's are the model's."""

    def __init__(self, tokenizer: _TokenizerJson, vocabulary: Vocabulary, unk_id: int) -> None:
        self.tokenizer, self.vocabulary, self.unk_id = tokenizer, vocabulary, unk_id
        self.marks_words = tokenizer.marks_words  # hf_tokenizers.HFTokenizer.word_marker

    def ids(self, text: str) -> list[int]:
        return [self.vocabulary.ids.get(p, self.unk_id) for p in self.tokenizer.split_pieces(text)]

    def split_pieces(self, text: str) -> list[str]:
        return self.tokenizer.split_pieces(text)

    def id(self, piece: str) -> int | None:
        return self.vocabulary.ids.get(piece)

    def piece(self, i: int) -> str | None:
        return self.vocabulary.tokens[i] if 0 <= i < len(self.vocabulary) else None

    def identity(self) -> tuple:
        return ("tokenizer.json", self.tokenizer.identity(), tuple(self.vocabulary.tokens))

    def text(self, ids: list[int]) -> str:
        own = (self.tokenizer.id(p) for p in map(self.piece, ids) if p is not None)
        return self.tokenizer.text([i for i in own if i is not None])


class _SpacedPieces:
    """No SentencePiece model: a line is its pieces separated by spaces, as CTranslate2's
    translate_file reads it (the tokenizer backend protocol of hf_tokenizers)."""

    def __init__(self, vocabulary: Vocabulary, unk_id: int) -> None:
        self.vocabulary, self.unk_id = vocabulary, unk_id

    def ids(self, text: str) -> list[int]:
        return [self.vocabulary.ids.get(p, self.unk_id) for p in text.split()]

    def split_pieces(self, text: str) -> list[str]:
        return text.split()

    def id(self, piece: str) -> int | None:
        return self.vocabulary.ids.get(piece)

    def piece(self, i: int) -> str | None:
        return self.vocabulary.tokens[i] if 0 <= i < len(self.vocabulary) else None

    def identity(self) -> tuple:
        return ("pieces", tuple(self.vocabulary.tokens))

    def text(self, ids: list[int]) -> str:
        return " ".join(p for p in map(self.piece, ids) if p is not None)


@dataclass(frozen=True)
class SourceFrame:
    """What goes around a source: pieces get the config's flags (`bos`, `eos`), as CTranslate2
    takes them; text gets its family's frame too (see the module's docstring)."""

    family: str  # marian, bart, fairseq, t5, transformer
    bos: bool  # the config's add_source_bos
    eos: bool  # the config's add_source_eos
    user_start: bool = False  # config.json's decoder_start_token is null: the target's tag starts


class Ct2Tokenizer(HFTokenizer):
    """The tokenizer protocol (models/tokenizer.py) over a CTranslate2 folder's vocabularies."""

    pieces_as_given = True  # nmtdecode.compat.ctranslate2 passes a script's pieces unchanged
    cuts_text = ""  # what cuts text into pieces (`nmtdecode inspect` says)

    def __init__(
        self, source: Any, target: Any, frame: SourceFrame, *, bos_id: int, source_unk: int, **kw: Any
    ) -> None:
        self.frame, self.bos_id, self.source_unk = frame, bos_id, source_unk
        super().__init__(source, target=target, **kw)

    @property
    def user_start(self) -> bool:
        """Whether the target language's tag starts the decoder (config.json's decoder_start_token
        null): nmtdecode.compat.ctranslate2 takes it from each target prefix's first token."""
        return self.frame.user_start

    def set_languages(self, src_lang: str | None, tgt_lang: str | None) -> int | None:
        """The family's frame around text (see the module), the config's flags at least; returns
        the target tag to force first (M2M100, NLLB, mBART-50)."""
        family = self.frame.family
        if family == "marian":  # a multi-target model reads >>tgt<< before the source
            if src_lang:
                raise ConfigError("src_lang: Marian models have no source-language tag (tgt_lang picks >>xx<<)")
            tgt_lang = (
                tgt_lang[2:-2] if tgt_lang and tgt_lang.startswith(">>") and tgt_lang.endswith("<<") else tgt_lang
            )
            self.before, self.after = [self._tag("tgt_lang", tgt_lang)] if tgt_lang else [], [self.eos_id]
            return None
        if family == "t5":  # MADLAD-400 reads <2xx> before the source; nothing is forced
            if src_lang:
                raise ConfigError("src_lang: T5 models have no source-language tag (MADLAD-400: --tgt-lang)")
            self.before, self.after = [self._tag("tgt_lang", tgt_lang)] if tgt_lang else [], [self.eos_id]
            return None
        forced = self._tag("tgt_lang", tgt_lang) if tgt_lang and not self.frame.user_start else None
        tag = [self._tag("src_lang", src_lang)] if src_lang else []
        bos, eos = self.frame.bos or family == "bart", self.frame.eos or family in ("bart", "fairseq")
        self.before = ([self.bos_id] if bos else []) + ([] if self.tag_at_end else tag)
        self.after = ([self.eos_id] if eos else []) + (tag if self.tag_at_end else [])
        return forced

    def decoder_start_for(self, tgt_lang: str | None) -> int | None:
        """The decoder start the target language gives where config.json leaves it to the user
        (null: mBART-25's, as CTranslate2 takes each target prefix's first token), else None."""
        if not self.frame.user_start:
            return None
        if not tgt_lang:
            codes = list(self.languages)
            raise ConfigError(
                "tgt_lang: this model starts decoding with the target language's tag (config.json's "
                f"decoder_start_token is null, as mBART-25's): give one of {', '.join(codes[:12])}"
                f"{', ...' if len(codes) > 12 else ''}"
            )
        return self._tag("tgt_lang", tgt_lang)

    def _given(self) -> tuple[list[int], list[int]]:
        return [self.bos_id] if self.frame.bos else [], [self.eos_id] if self.frame.eos else []

    def encode_pieces(self, pieces: list[str]) -> list[int]:
        """Source pieces as CTranslate2 takes them: the config's BOS and EOS around them, a piece
        the vocabulary lacks <unk>."""
        before, after = self._given()
        ids = [self.source.id(piece) for piece in pieces]
        return before + [self.source_unk if i is None else i for i in ids] + after

    def source_pieces(self, text: str | list[str]) -> list[str]:
        if isinstance(text, str):
            return super().source_pieces(text)
        before, after = self._given()
        return [self.source_piece(i) or "" for i in before] + text + [self.source_piece(i) or "" for i in after]


def languages(family: str, target: Vocabulary) -> tuple[dict[str, int], str]:
    """The language tags of the target vocabulary, code -> id, and how a code is spelt as a piece."""
    if family in ("marian", "t5"):
        pattern, spelling = (MARIAN_TAG, ">>{}<<") if family == "marian" else (MADLAD_TAG, "<2{}>")
        return {m.group(1): i for t, i in target.ids.items() if (m := pattern.fullmatch(t))}, spelling
    if family != "fairseq":
        return {}, "{}"
    m2m100 = {m.group(1): i for t, i in target.ids.items() if (m := TAGS["m2m100"].fullmatch(t))}
    if m2m100:
        return m2m100, "__{}__"
    pattern = TAGS["nllb"] if any(TAGS["nllb"].fullmatch(t) for t in target.ids) else MBART_TAG
    return {t: i for t, i in target.ids.items() if pattern.fullmatch(t)}, "{}"


def make_tokenizer(
    folder: str,
    given: str | None,
    source: Vocabulary,
    target: Vocabulary,
    frame: SourceFrame,
    specials: dict[str, int],
    unk: str,
    ours: Iterable[int] = (),
) -> Ct2Tokenizer:
    """The folder's tokenizer; `specials`: bos, eos, unk, start -> target ids; `ours`: ids of our
    own (Marian's zero start row), never text."""
    files = find_tokenizer(folder, given)
    source_unk = source.ids[unk]
    source_side: _SpacedPieces | _Pieces | _JsonPieces
    target_side: _SpacedPieces | _Pieces | _JsonPieces
    if files is None:
        source_side, target_side = _SpacedPieces(source, source_unk), _SpacedPieces(target, specials["unk"])
    elif _is_tokenizer_json(note_read(files[0])):
        pipeline = _read_tokenizer_json(files[0])
        source_side, target_side = (
            _JsonPieces(pipeline, source, source_unk),
            _JsonPieces(pipeline, target, specials["unk"]),
        )
    else:
        marian = frame.family == "marian"
        source_side = _Pieces(files[0], source.ids, source_unk, {}, marian=marian)
        target_side = _Pieces(files[1], target.ids, specials["unk"], {}, marian=marian)
    tags, spelling = languages(frame.family, target)
    # mBART-25's source tag follows the source (its tokenizer's `X </s> en_XX`)
    tag_at_end = frame.user_start and bool(tags) and all(MBART_TAG.fullmatch(code) for code in tags)
    padding = {target.ids[p] for p in PADDING if p in target.ids}
    if frame.family == "t5":  # its sentinels, left out of text as transformers' decode leaves them
        padding |= {i for t, i in target.ids.items() if SENTINEL.fullmatch(t)}
    tokenizer = Ct2Tokenizer(
        source_side,
        target_side,
        frame,
        bos_id=specials["bos"],
        eos_id=specials["eos"],
        unk_id=specials["unk"],
        source_unk=source_unk,
        special_ids={*specials.values(), *padding, *ours},
        languages=tags,
        tag_piece=spelling,
        tag_at_end=tag_at_end,
    )
    kind = "tokenizer.json" if isinstance(source_side, _JsonPieces) else "SentencePiece"
    tokenizer.cuts_text = (
        "none found: a line is its pieces separated by spaces (--tokenizer: a SentencePiece model, tokenizer.json)"
        if files is None
        else f"{' and '.join(dict.fromkeys(files))} ({kind})"
    )
    return tokenizer
