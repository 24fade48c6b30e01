"""Stages 1 and 2: (English, German) pairs from both dictionaries, one main
translation per English source, and the train/valid/test split.

The output, in the scratch directory: {train,valid,test}.{en,de} (one pair per
line) and accepted.json (every dictionary translation of each held-out source).
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

from .common import log, write_lines
from .freedict import (
    SENTENCE_END,
    Entry,
    clean,
    headword_text,
    looks_like_sentence,
    parse_entry,
    read_entries,
    split_alternatives,
)

DATA_VERSION = 2  # bump when the pair extraction changes, so that cached pairs are rebuilt

# --------------------------------------------------------------------------- candidates


def acceptable(en: str, de: str, max_words: int) -> bool:
    """Drop pairs that are too long for a word/phrase model or whose lengths do not match."""
    words_en, words_de = len(en.split()), len(de.split())
    if max(words_en, words_de) > max_words or max(len(en), len(de)) > 150:
        return False
    short, long = sorted((len(en), len(de)))
    # German compounds are long ("long-hair cat" -> "Langhaarkatze"), so only flag
    # gross mismatches, which are usually explanations rather than translations.
    if long > 4 * short + 10:
        return False
    return abs(words_en - words_de) <= max(3, 1.5 * min(words_en, words_de))


def entry_weight(entry: Entry) -> float:
    """How central a sense is: examples and cross references mark the everyday
    senses (`dog` -> Hund has 4 examples; `dog` -> Bandhaken, a cooper's tool, none);
    notes and subject labels mark the narrow ones."""
    weight = 1.0 + 0.5 * min(len(entry.examples), 6) + 0.05 * min(entry.n_see, 10)
    if entry.has_note:
        weight *= 0.7
    if entry.domain:
        weight *= 0.7
    return weight


def collect_candidates(dict_dir: str, max_words: int) -> dict[str, Counter]:
    """English source -> Counter of German translations, weighted by evidence.

    eng-deu gives headword -> translations (the first translation of a line is
    its main one) and example sentences; deu-eng, flipped, adds the same senses
    seen from the German side plus its own examples.
    """
    candidates: dict[str, Counter] = defaultdict(Counter)

    def add(en: str, de: str, weight: float):
        en, de = clean(en), clean(de)
        if en and de and en != de and acceptable(en, de, max_words):
            candidates[en][de] += weight

    for name in ("eng-deu", "deu-eng"):
        flipped = name == "deu-eng"
        entries = [e for e in map(parse_entry, read_entries(dict_dir, name)) if e is not None]
        log(f"{name}: {len(entries)} entries")
        for entry in entries:
            head = headword_text(entry.headword)
            if not head:
                continue
            weight = entry_weight(entry)
            sentence = looks_like_sentence(head, english=not flipped)
            for rank, translation in enumerate(split_alternatives(entry.translations, sentence)):
                share = weight / (1 + rank)  # earlier alternatives are the more usual ones
                if flipped:
                    add(translation, head, share * 0.5)  # the rank orders English words, not German
                else:
                    add(head, translation, share)
            for source, target in entry.examples:
                sentence = looks_like_sentence(source, english=not flipped)
                for rank, alternative in enumerate(split_alternatives(target, sentence)):
                    if flipped:
                        add(alternative, source, 1.0 / (1 + rank))
                    else:
                        add(source, alternative, 1.0 / (1 + rank))
    return candidates


# --------------------------------------------------------------------------- main translations


def german_word_counts(candidates: dict[str, Counter]) -> Counter:
    """In how many distinct translations each German word occurs: everyday words
    (Mond, Hund) recur in many phrases, narrow ones (Bandhaken) do not."""
    counts = Counter()
    for translations in candidates.values():
        for de in translations:
            counts.update(set(de.split()))
    return counts


def main_pairs(candidates: dict[str, Counter]) -> list[tuple[str, str]]:
    """One pair per English source: its best-supported translation.

    Evidence is scaled by how common the translation's rarest word is (`garden`
    -> Garten, not gärtnern) and lowered when the German has more words than the
    English: a single word is rarely best rendered by an idiom (`moon` -> Mond,
    not seinen Hintern entblößen). Ties go to the shorter, then the alphabetically
    first, translation, so that the choice does not depend on dictionary order.
    """
    counts = german_word_counts(candidates)

    def score(en: str, de: str, evidence: float) -> float:
        rarest = min(counts[w] for w in de.split())
        extra_words = max(0, len(de.split()) - len(en.split()))
        return round(evidence * (1.0 + 0.3 * math.log1p(rarest)) / (1.0 + 0.5 * extra_words), 6)

    pairs = []
    for en in sorted(candidates):
        best = min(candidates[en].items(), key=lambda kv: (-score(en, *kv), len(kv[0]), kv[0]))
        pairs.append((en, best[0]))
    return pairs


# --------------------------------------------------------------------------- split and variants


def group_key(en: str) -> str:
    """Sources that differ only in case and punctuation (`Good morning!`, `good morning`)
    form one group, so that no variant of a test source is trained on."""
    return " ".join(re.sub(r"[^\w\s'-]", " ", en.lower()).split())


def split_pairs(pairs, seed: int, n_test: int, n_valid: int):
    """Shuffle the source groups with a fixed seed: the first n_test groups give the
    test pairs (one per group), the next n_valid the valid pairs, the rest train."""
    groups = defaultdict(list)
    for en, de in pairs:
        groups[group_key(en)].append((en, de))
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    test = [groups[k][0] for k in keys[:n_test]]
    valid = [groups[k][0] for k in keys[n_test : n_test + n_valid]]
    train = [pair for k in keys[n_test + n_valid :] for pair in groups[k]]
    return train, valid, test


FIRST_PERSON = {"I", "I'm", "I'll", "I've", "I'd"}


def casual_variants(en: str, de: str) -> list[tuple[str, str]]:
    """`Good morning!` -> `Good morning` and `good morning` (both -> `Guten Morgen`):
    the dictionary writes short phrases as sentences, people type them bare."""
    if len(en.split()) > 5 or not SENTENCE_END.search(en):
        return []
    bare_en, bare_de = en.rstrip(".!?").strip(), de.rstrip(".!?").strip()
    if not bare_en or not bare_de:
        return []
    variants = [(bare_en, bare_de)]
    if en.split()[0] not in FIRST_PERSON:
        variants.append((bare_en[0].lower() + bare_en[1:], bare_de))
    return variants


def add_variants(train):
    sources = {en for en, _ in train}
    extra = []
    for en, de in train:
        for variant in casual_variants(en, de):
            if variant[0] not in sources:
                sources.add(variant[0])
                extra.append(variant)
    return train + extra


# --------------------------------------------------------------------------- the stage


def data_key(args) -> dict:
    """The options the pairs and the split depend on: cached pairs with another key are rebuilt."""
    return {
        "version": DATA_VERSION,
        "dict_dir": args.dict_dir,
        "max_words": args.max_words,
        "seed": args.seed,
        "n_test": args.n_test,
        "n_valid": args.n_valid,
    }


def prepare_data(args, scratch: Path) -> dict:
    """Stage 1+2: pairs and split, written to scratch/{train,valid,test}.{en,de}
    plus every dictionary translation of each held-out source (accepted.json)."""
    candidates = collect_candidates(args.dict_dir, args.max_words)
    pairs = main_pairs(candidates)
    train, valid, test = split_pairs(pairs, args.seed, args.n_test, args.n_valid)
    train = add_variants(train)
    for name, part in (("train", train), ("valid", valid), ("test", test)):
        write_lines(scratch / f"{name}.en", [en for en, _ in part])
        write_lines(scratch / f"{name}.de", [de for _, de in part])
    accepted = {en: sorted(candidates[en]) for en, _ in valid + test}
    with open(scratch / "accepted.json", "w", encoding="utf-8") as f:
        json.dump(accepted, f, ensure_ascii=False, indent=0)
    sizes = {
        "sources": len(pairs),
        "train": len(train),
        "valid": len(valid),
        "test": len(test),
        "train_variants": len(train) - (len(pairs) - len(valid) - len(test)),
    }
    log(f"pairs: {sizes}")
    return sizes
