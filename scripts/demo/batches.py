"""Training examples and batches: ids per pair, how often each pair is shown,
and token-budget batches that are the same for the same (seed, epoch)."""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import torch

from .common import BOS, EOS, PAD, read_lines


def encode_split(sp, scratch: Path, name: str, max_tokens: int, copies: list[int] | None = None):
    """(source ids + [eos], target ids + [eos], copies) per pair; overlong pairs are dropped."""
    src = sp.encode(read_lines(scratch / f"{name}.en"))
    tgt = sp.encode(read_lines(scratch / f"{name}.de"))
    copies = copies or [1] * len(src)
    return [
        (s + [EOS], t + [EOS], n) for s, t, n in zip(src, tgt, copies) if len(s) < max_tokens and len(t) < max_tokens
    ]


def expand(pairs) -> list[tuple[list[int], list[int]]]:
    """Training examples: each pair as many times as its copies."""
    return [(s, t) for s, t, n in pairs for _ in range(n)]


def polish_mix(pairs, seed: int) -> list[tuple[list[int], list[int]]]:
    """The data of the final phase: the everyday pairs (with their copies) and half as
    many other pairs drawn at random, so that the rest is not forgotten.

    In the main phase a bare `dog` -> Hund competes with ~120 `dog ...` -> `Hunde...`
    compounds and still came out as Hunde after 90 minutes; in this mix most of those
    compounds are gone, so the last steps settle the everyday words.
    """
    everyday = expand(p for p in pairs if p[2] > 1)
    rest = [(s, t) for s, t, n in pairs if n == 1]
    return everyday + random.Random(seed).sample(rest, min(len(rest), len(everyday) // 2))


def english_words(text: str) -> list[str]:
    return re.findall(r"[\w'-]+", text.lower())


def everyday_copies(sources: list[str], max_copies: int) -> list[int]:
    """How often each training pair is shown per epoch.

    A word that many phrases build on is shown bare far too rarely: `dog` -> Hund
    is one pair among ~350 `dog ...` -> `Hunde...` compounds, and a run of a few
    epochs learns `dog` -> Hunde (six copies per epoch were not enough either).
    So a single word gets one extra copy per 8 training sources that contain it
    (at most `max_copies` in all), and a phrase of two or three words one per 50
    for its rarest word (at most 3: `good morning` -> Guten Morgen, not gute
    Morgen). These pairs are short, so this adds only ~30% tokens per epoch.
    """
    frequency = Counter(w for source in sources for w in set(english_words(source)))
    copies = []
    for source in sources:
        words = english_words(source)
        if not words or len(words) > 3:
            copies.append(1)
            continue
        rarest = min(frequency[w] for w in words)
        if len(words) == 1:
            copies.append(min(max_copies, 1 + rarest // 8))
        else:
            copies.append(min(max_copies, 3, 1 + rarest // 50))
    return copies


# --------------------------------------------------------------------------- batching

POOL = 50_000  # examples sorted by length together: big enough for tight batches, small enough to mix


def epoch_batches(examples, epoch: int, seed: int, batch_tokens: int) -> list[list[int]]:
    """Token-budget batches for one epoch, the same for the same (seed, epoch) so
    that a resumed run continues with the very batches it would have seen.

    Examples are shuffled, sorted by length within pools (little padding), cut
    so that rows x longest sequence <= batch_tokens, and the batches shuffled.
    """
    rng = random.Random(seed * 100_003 + epoch)
    order = list(range(len(examples)))
    rng.shuffle(order)
    batches = []
    for start in range(0, len(order), POOL):
        pool = sorted(order[start : start + POOL], key=lambda i: (len(examples[i][1]), len(examples[i][0])))
        batch, longest = [], 0
        for i in pool:
            size = max(len(examples[i][0]), len(examples[i][1]))
            if batch and (len(batch) + 1) * max(longest, size) > batch_tokens:
                batches.append(batch)
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, size)
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches


def pad(rows: list[list[int]]):
    longest = max(map(len, rows))
    ids = torch.full((len(rows), longest), PAD, dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
    return ids


def collate(examples, batch: list[int]):
    """-> src (B, S), src_mask (B, S), decoder input [bos] + target, gold target + [eos]."""
    src = pad([examples[i][0] for i in batch])
    gold = pad([examples[i][1] for i in batch])
    tgt_in = pad([[BOS] + examples[i][1][:-1] for i in batch])
    return src, src != PAD, tgt_in, gold
