"""FreeDict dictionaries in dictd format, and their markup.

A dictionary is two files: `NAME.dict.dz`, the entries' text (gzip-compatible
dictzip), and `NAME.index`, one line per headword: `headword<TAB>offset<TAB>length`,
offset and length in bytes written as base64 numbers. The FreeDict Ding
dictionaries write an entry as

    headword /pronunciation/ <grammar>
    translation [label], other translation {f}, ...
    "example" - its translation
    see: {related headword}
    Note: ...

Everything here is a pure function of its text (apart from reading the two files).
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass

DICT_DIR = "/usr/share/dictd"  # where the Debian packages install the dictionaries
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

# --------------------------------------------------------------------------- files


def b64_number(text: str) -> int:
    """dictd's base64 numbers: most significant digit first."""
    value = 0
    for char in text:
        value = value * 64 + B64.index(char)
    return value


def read_entries(dict_dir: str, name: str) -> list[str]:
    """Every entry of freedict-NAME, once, in file order (the index lists an entry
    under several headwords, e.g. `cat` also points at `computed axial tomography`)."""
    with gzip.open(os.path.join(dict_dir, f"freedict-{name}.dict.dz")) as f:
        data = f.read()
    spans = set()
    with open(os.path.join(dict_dir, f"freedict-{name}.index"), encoding="utf-8") as index:
        for line in index:
            headword, offset, length = line.rstrip("\n").split("\t")
            if headword.startswith("00-database") or headword.startswith("00database"):
                continue  # header entries: licence, changelog, ...
            spans.add((b64_number(offset), b64_number(length)))
    return [data[o : o + n].decode("utf-8") for o, n in sorted(spans)]


def read_header(dict_dir: str, name: str) -> str:
    """The start of the dictionary's header entry (edition, licence), for the model card."""
    with gzip.open(os.path.join(dict_dir, f"freedict-{name}.dict.dz")) as f:
        return f.read(20000).decode("utf-8", "replace")


# --------------------------------------------------------------------------- entries


@dataclass
class Entry:
    headword: str  # raw first line
    translations: str  # raw second line: comma-separated translations with tags
    examples: list[tuple[str, str]]  # (headword language, translation language) raw
    n_see: int  # how many cross references: a rough sign of a common, central sense
    has_note: bool  # a `Note:` usually marks a narrow or technical sense
    domain: bool  # a subject tag such as [techn.] or [med.]


EXAMPLE = re.compile(r'^"(.*)"\s+-\s+(.*)$')
# Usage and region labels that do not make a sense specialised.
PLAIN_LABELS = {
    "[Am.]",
    "[Br.]",
    "[ugs.]",
    "[coll.]",
    "[Ös.]",
    "[Schw.]",
    "[Dt.]",
    "[geh.]",
    "[formal]",
    "[übtr.]",
    "[fig.]",
    "[Norddt.]",
    "[Süddt.]",
    "[Bayr.]",
    "[humor.]",
    "[pej.]",
    "[slang]",
    "[zool.]",
    "[bot.]",
    "[cook.]",
    "[ornith.]",
}


def parse_entry(text: str) -> Entry | None:
    lines = text.split("\n")
    if len(lines) < 2 or not lines[1].strip():
        return None
    examples, n_see, has_note = [], 0, False
    for line in lines[2:]:
        stripped = line.strip()
        match = EXAMPLE.match(stripped)
        if match:
            examples.append((match.group(1), match.group(2)))
        elif stripped.startswith("see:"):
            n_see += stripped.count("{")
        elif stripped.startswith("Note:"):
            has_note = True
    labels = re.findall(r"\[[^\]]*\]", lines[1])
    domain = any(label not in PLAIN_LABELS for label in labels)
    return Entry(lines[0], lines[1], examples, n_see, has_note, domain)


# --------------------------------------------------------------------------- markup

IPA = set("ˈˌːəɪʊɒɑɔæʃʒθðŋɹɜɐɛʌɡɾøœçχʁɲɘɵʏʔ̃")
PRONUNCIATION = re.compile(r"\s/([^/]+)/")
BRACKETS = [re.compile(p) for p in (r"<[^<>]*>", r"\[[^\[\]]*\]", r"\{[^{}]*\}", r"\([^()]*\)")]
# "a/b" or "a / b" between two words: keep the first alternative.
WORD = r"[^\W\d_][\w'’.-]*"
ALTERNATIVE = re.compile(rf"({WORD})\s?/\s?{WORD}")
JUNK = re.compile(r"[<>\[\]{}()=|@#*_~^\\/…]|\.\.\.|https?:|www\.")
SENTENCE_END = re.compile(r"[.!?]$")
# An abbreviation glued to a translation: `Straße <fem>Str.,  /ˌɛstˌiːˈɑː/`.
ABBREVIATION = re.compile(r"\S+,\s+/([^/]+)/")


def drop_pronunciation(text: str) -> str:
    """Remove ` /kˈat/`-style IPA (but not slash-separated alternatives)."""
    return PRONUNCIATION.sub(lambda m: "" if IPA & set(m.group(1)) else m.group(0), text)


def clean(text: str) -> str:
    """One translation or example side -> plain text, or '' if it is not usable."""
    text = drop_pronunciation(" " + text)
    for _ in range(3):  # nested brackets: strip the inner ones first
        for pattern in BRACKETS:
            text = pattern.sub(" ", text)
    for _ in range(3):  # a/b/c -> a
        text = ALTERNATIVE.sub(r"\1", text)
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s+([.,!?;:])", r"\1", text)  # "bleiben ." left by a removed "(...)"
    text = text.strip(" ,;:-")
    if not text or JUNK.search(text) or not re.search(r"[^\W\d_]", text):
        return ""
    return text


def split_alternatives(text: str, sentence: bool) -> list[str]:
    """The comma-separated translations of one line. Sentences contain commas of
    their own, so their alternatives are split only after a sentence end."""
    pattern = r"(?<=[.!?]),\s+" if sentence else r",(?!\d)\s*"  # not inside "1,000"
    # Commas inside brackets are not separators: blank the brackets first.
    for _ in range(3):
        for bracket in BRACKETS:
            text = bracket.sub(" ", text)
    text = ABBREVIATION.sub(lambda m: " " if IPA & set(m.group(1)) else m.group(0), text)
    return [t for t in re.split(pattern, text) if t.strip()]


def looks_like_sentence(text: str, english: bool) -> bool:
    """Whether the translations of `text` are sentences (with commas of their own).
    English examples are not always punctuated ("I didn't shadow the official all
    the time, but ..."); a capital and four words mark those. German nouns are
    capitalised, so German text needs the final punctuation."""
    text = text.strip()
    if SENTENCE_END.search(text):
        return True
    return english and text[:1].isupper() and len(text.split()) >= 4


def headword_text(first_line: str) -> str:
    """`cat /kˈat/ <n>` or `computed axial tomography /.../ (CAT /kˈat/)` -> the headword."""
    return clean(first_line)
