"""Train the bundled demo model: English -> German words and phrases from FreeDict.

The data are Debian's FreeDict dictionaries (packages dict-freedict-eng-deu and
dict-freedict-deu-eng, generated from the Ding dictionary). The recipe runs in
stages, each one skipped when its output already exists in the scratch
directory (so a re-run or `--resume` continues where it stopped):

    1. pairs   read both dictionaries, clean every (English, German) pair and
               pick one main translation per English source
    2. split   shuffle the English sources with a fixed seed; test and valid
               get ~1000 sources each, every pair of a held-out source leaves
               training (no source is seen in training and tested)
    3. spm     a joint SentencePiece model whose ids are the model's ids
    4. train   a small Transformer with teacher forcing, label smoothing and
               Adam with warmup, for a time budget (`--minutes`), with
               periodic checkpoints that `--resume` continues from; the
               last 15% of the steps favour everyday words and phrases
    5. export  the native model directory (fp16 safetensors + config.yaml +
               SentencePiece model), then beam-5 BLEU/chrF on the test split
               with the project's own decoder and a model card (README.md)

    python scripts/train_demo.py --minutes 120          # the committed weights
    python scripts/train_demo.py --minutes 120 --resume # continue after a stop
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import random
import re
import shutil
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

# oneDNN keeps a compiled kernel for every matmul shape it has seen; with bf16 and
# batches of ever-changing shapes its default cache (1024 kernels) grows to
# several GB. 256 kernels keep memory flat at no measurable cost in speed.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")
import torch  # noqa: E402  (after the variable, which oneDNN reads when it starts)
import torch.nn.functional as F  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the nmtdecode package of this checkout, installed or not
DICT_DIR = "/usr/share/dictd"  # where the Debian packages install the dictionaries
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

# Special ids: SentencePiece is trained with the same ids, so its ids are the model's.
PAD, UNK, BOS, EOS = 0, 1, 2, 3


def log(message: str):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------- dictionary reading


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
PLAIN_LABELS = {"[Am.]", "[Br.]", "[ugs.]", "[coll.]", "[Ös.]", "[Schw.]", "[Dt.]", "[geh.]", "[formal]",
                "[übtr.]", "[fig.]", "[Norddt.]", "[Süddt.]", "[Bayr.]", "[humor.]", "[pej.]", "[slang]",
                "[zool.]", "[bot.]", "[cook.]", "[ornith.]"}


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


# --------------------------------------------------------------------------- cleaning

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


# --------------------------------------------------------------------------- main translations


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


def write_lines(path: Path, lines):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


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
    sizes = {"sources": len(pairs), "train": len(train), "valid": len(valid), "test": len(test),
             "train_variants": len(train) - (len(pairs) - len(valid) - len(test))}
    log(f"pairs: {sizes}")
    return sizes


# --------------------------------------------------------------------------- SentencePiece


def train_spm(args, scratch: Path):
    """Stage 3: one unigram model over both languages of the training split. Its
    special ids are the model's (pad 0, unk 1, bos 2, eos 3)."""
    import sentencepiece as spm

    text = scratch / "spm_input.txt"
    write_lines(text, read_lines(scratch / "train.en") + read_lines(scratch / "train.de"))
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(scratch / "spm"), vocab_size=args.vocab_size, model_type="unigram",
        character_coverage=0.9999, pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
        input_sentence_size=0,  # use every line: no sampling, so the model is reproducible
        num_threads=args.threads, minloglevel=2,
    )
    text.unlink()


def encode_split(sp, scratch: Path, name: str, max_tokens: int, copies: list[int] | None = None):
    """(source ids + [eos], target ids + [eos], copies) per pair; overlong pairs are dropped."""
    src = sp.encode(read_lines(scratch / f"{name}.en"))
    tgt = sp.encode(read_lines(scratch / f"{name}.de"))
    copies = copies or [1] * len(src)
    return [(s + [EOS], t + [EOS], n) for s, t, n in zip(src, tgt, copies)
            if len(s) < max_tokens and len(t) < max_tokens]


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


# --------------------------------------------------------------------------- model


def model_config(args, vocab_size: int):
    from nmtdecode.models.transformer import TransformerConfig

    # Untied source embedding: with one matrix for both sides, pieces that only occur
    # in English are never targets and their rows collapse in short runs (every input
    # then gets the same output). The target embedding doubles as the output layer.
    return TransformerConfig(
        src_vocab_size=vocab_size, tgt_vocab_size=vocab_size, d_model=args.d_model, heads=args.heads,
        encoder_layers=args.encoder_layers, decoder_layers=args.decoder_layers, ffn_dim=args.ffn_dim,
        activation="relu", pre_norm=True, positions="sinusoidal", max_positions=args.max_tokens,
        embed_scale=math.sqrt(args.d_model), share_embeddings=False, tie_output=True, dropout=args.dropout,
        pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS, decoder_start_id=BOS,
    )


def init_weights(model):
    """Embeddings N(0, d^-1/2) (scaled by sqrt(d) they are N(0, 1), like the positions,
    and the tied output layer starts with small logits); Xavier for the projections."""
    d = model.cfg.d_model
    for name, p in model.named_parameters():
        if "tokens" in name:
            torch.nn.init.normal_(p, std=d**-0.5)
        elif p.dim() == 2:
            torch.nn.init.xavier_uniform_(p)
        elif name.endswith("bias"):
            torch.nn.init.zeros_(p)


def learning_rate(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to `peak`, then inverse square root decay."""
    step = max(step, 1)
    return peak * min(step / warmup, math.sqrt(warmup / step))


@torch.no_grad()
def valid_loss(model, examples, batch_tokens: int) -> float:
    """Mean per-token NLL (no smoothing) of the valid split, teacher forced."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for batch in epoch_batches(examples, 0, 0, batch_tokens):
        src, mask, tgt_in, gold = collate(examples, batch)
        logits = model(src, mask, tgt_in)
        total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), gold.reshape(-1),
                                 ignore_index=PAD, reduction="sum").item()
        tokens += (gold != PAD).sum().item()
    model.train(was_training)
    return total / tokens


PROBES = ["dog", "cat", "house", "water", "good morning", "thank you", "the children", "How are you?"]


@torch.no_grad()
def probe(model, sp, texts=PROBES) -> str:
    """Greedy translations with the project's own Translator: a quick sign of life."""
    from nmtdecode.config import DecodingConfig
    from nmtdecode.models.checkpoint import ModelRules
    from nmtdecode.translator import Translator

    was_training = model.training
    model.eval()
    translator = Translator(model, DecodingConfig(beam_size=1, max_length=32), ModelRules(banned_ids=(PAD, BOS)))
    hyps = translator.translate_batch([sp.encode(t) + [EOS] for t in texts])
    model.train(was_training)
    return "; ".join(f"{t} -> {sp.decode(h[0].tokens)}" for t, h in zip(texts, hyps))


# --------------------------------------------------------------------------- training

# Options that must not change between a checkpoint and the run that resumes it.
RESUME_KEYS = ("seed", "vocab_size", "d_model", "heads", "encoder_layers", "decoder_layers", "ffn_dim",
               "max_tokens", "dropout", "label_smoothing", "lr", "warmup", "batch_tokens", "ema_decay", "precision",
               "max_copies")


def save_checkpoint(path: Path, model, optimizer, ema, state: dict, args):
    """Atomic: a run killed while writing leaves the previous checkpoint intact."""
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "ema": ema, "state": state,
                "rng": torch.get_rng_state(), "args": {k: getattr(args, k) for k in RESUME_KEYS}}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path, model, optimizer, args) -> tuple[list, dict]:
    saved = torch.load(path, weights_only=True)
    mismatched = [k for k in RESUME_KEYS if saved["args"][k] != getattr(args, k)]
    if mismatched:
        were = ", ".join(f"{k}={saved['args'][k]}" for k in mismatched)
        raise SystemExit(f"--resume: the checkpoint was trained with other settings ({were})")
    model.load_state_dict(saved["model"])
    optimizer.load_state_dict(saved["optimizer"])
    torch.set_rng_state(saved["rng"])
    return saved["ema"], saved["state"]


def in_final_phase(state: dict, args, budget: float) -> bool:
    """The last `--final-share` of the steps (or of the time budget) train on polish_mix."""
    if args.max_steps:
        return state["step"] >= (1 - args.final_share) * args.max_steps
    return state["train_seconds"] >= (1 - args.final_share) * budget


def out_of_time(state: dict, args, budget: float) -> bool:
    if args.max_steps:
        return state["step"] >= args.max_steps
    return state["train_seconds"] >= budget


def train(args, scratch: Path, budget: float):
    """Stage 4. Returns the trained model, its EMA weights and the run's state."""
    import sentencepiece as spm
    from nmtdecode.models.transformer import Transformer

    sp = spm.SentencePieceProcessor(model_file=str(scratch / "spm.model"))
    copies = everyday_copies(read_lines(scratch / "train.en"), args.max_copies)
    pairs = encode_split(sp, scratch, "train", args.max_tokens, copies)
    examples, polish = expand(pairs), polish_mix(pairs, args.seed)
    valid = expand(encode_split(sp, scratch, "valid", args.max_tokens))
    log(f"{sum(c > 1 for c in copies):,} everyday pairs shown more than once per epoch")
    torch.manual_seed(args.seed)
    model = Transformer(model_config(args, sp.get_piece_size()))
    init_weights(model)
    params = list(model.parameters())
    log(f"model: {sum(p.numel() for p in params):,} parameters; {len(examples):,} training examples per epoch, "
        f"{len(polish):,} in the final phase's")
    optimizer = torch.optim.Adam(params, lr=args.lr, betas=(0.9, 0.98), eps=1e-9)
    # An exponential moving average of the weights: a cheap ensemble over the
    # last few thousand steps, usually better than the last step of a short run.
    ema = [p.detach().clone() for p in params]
    state = {"step": 0, "epoch": 0, "position": 0, "train_seconds": 0.0, "history": []}
    checkpoint = scratch / "checkpoint.pt"
    if args.resume and checkpoint.exists():
        ema, state = load_checkpoint(checkpoint, model, optimizer, args)
        log(f"resumed at step {state['step']} (epoch {state['epoch']}, {state['train_seconds'] / 60:.1f} min trained)")
    elif args.resume:
        log("--resume: no checkpoint yet, starting from scratch")

    state["everyday_pairs"], state["epoch_examples"] = sum(c > 1 for c in copies), len(examples)
    state["polish_examples"] = len(polish)
    model.train()
    started, base = time.monotonic(), state["train_seconds"]
    last_save = started
    window = [0.0, 0, 0]  # loss x tokens, target tokens, steps since the last report
    batches, batches_key = None, None
    while not out_of_time(state, args, budget):
        # The main phase's epoch and position live in `state`, the final phase's in state["polish"].
        polishing = in_final_phase(state, args, budget)
        if polishing and "polish" not in state:
            state["polish"] = {"epoch": 0, "position": 0, "from_step": state["step"]}
            log(f"final phase from step {state['step']}: everyday pairs and a sample of the rest")
        data, cursor = (polish, state["polish"]) if polishing else (examples, state)
        if batches_key != (polishing, cursor["epoch"]):
            batches = epoch_batches(data, cursor["epoch"], args.seed + polishing, args.batch_tokens)
            batches_key = (polishing, cursor["epoch"])
            if not polishing:
                state["epoch_batches"] = len(batches)
        if cursor["position"] >= len(batches):
            cursor["epoch"], cursor["position"] = cursor["epoch"] + 1, 0
            continue
        src, mask, tgt_in, gold = collate(data, batches[cursor["position"]])
        step = state["step"] + 1
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, args.lr, args.warmup)
        # bfloat16 autocast: matmuls in bf16 (AMX / AVX512-BF16 make them ~1.7x faster
        # here), weights, optimizer state and the loss stay float32.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = model(src, mask, tgt_in)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), gold.reshape(-1), ignore_index=PAD,
                               label_smoothing=args.label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(ema, [p.detach() for p in params], 1.0 - args.ema_decay)
        state["step"], cursor["position"] = step, cursor["position"] + 1
        state["train_seconds"] = base + time.monotonic() - started

        tokens = int((gold != PAD).sum())
        window = [window[0] + loss.item() * tokens, window[1] + tokens, window[2] + 1]
        if step % args.report_every == 0:
            log(f"step {step} epoch {state['epoch']} lr {learning_rate(step, args.lr, args.warmup):.2e} "
                f"loss {window[0] / window[1]:.3f} {window[1] / window[2]:.0f} tgt tokens/step "
                f"trained {state['train_seconds'] / 60:.1f} min")
            window = [0.0, 0, 0]
        if step % args.eval_every == 0:
            nll = valid_loss(model, valid, args.batch_tokens)
            state["history"].append((step, round(nll, 4)))
            log(f"valid nll {nll:.3f} | {probe(model, sp)}")
        if time.monotonic() - last_save > args.checkpoint_minutes * 60:
            save_checkpoint(checkpoint, model, optimizer, ema, state, args)
            last_save = time.monotonic()
    save_checkpoint(checkpoint, model, optimizer, ema, state, args)
    log(f"training stopped at step {state['step']} ({state['train_seconds'] / 60:.1f} min)")
    return model, ema, state, sp, valid


def pick_weights(model, ema, sp, valid, args) -> str:
    """Keep the last or the averaged weights, whichever has the lower valid loss."""
    last = valid_loss(model, valid, args.batch_tokens)
    saved = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        for p, e in zip(model.parameters(), ema):
            p.copy_(e)
    averaged = valid_loss(model, valid, args.batch_tokens)
    log(f"valid nll: last weights {last:.4f}, averaged weights {averaged:.4f}")
    if averaged <= last:
        return f"exponential moving average of the weights (decay {args.ema_decay}; valid NLL {averaged:.3f})"
    with torch.no_grad():
        for p, s in zip(model.parameters(), saved):
            p.copy_(s)
    return f"weights of the last step (valid NLL {last:.3f})"


# --------------------------------------------------------------------------- export and evaluation

# Decoding defaults shipped with the model: beam 5, and at most 2 target tokens
# per source token + 10, so that a rare runaway output stays short.
DECODING = {"beam_size": 5, "max_len_a": 2.0, "max_len_b": 10}


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if byte < 0x80:
            return value, i


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _fields(data: bytes):
    """(field number, wire type, raw bytes of the whole field) of one protobuf message."""
    i = 0
    while i < len(data):
        start = i
        key, i = _varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            size, i = _varint(data, i)
            i += size
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
        yield key >> 3, wire, data[start:i]


def without_training_paths(model: bytes) -> bytes:
    """The SentencePiece model minus the paths it was trained from: its TrainerSpec
    (field 2) records `input` (1) and `model_prefix` (2), absolute paths of the
    machine that trained it. Pieces and normalizer are untouched. (Plain protobuf
    wire format, so that the recipe needs no protobuf package.)"""
    out = bytearray()
    for number, wire, raw in _fields(model):
        if number == 2 and wire == 2:
            key_end = _varint(raw, 0)[1]
            body = _varint(raw, key_end)[1]
            spec = b"".join(r for n, _, r in _fields(raw[body:]) if n not in (1, 2))
            raw = raw[:key_end] + _encode_varint(len(spec)) + spec
        out += raw
    return bytes(out)


def export(model, scratch: Path, model_dir: Path):
    """Stage 5a: the native directory, fp16 weights. Dropout is a training setting:
    the exported config says 0."""
    from dataclasses import replace

    from nmtdecode.models.formats import native
    from nmtdecode.models.transformer import Transformer

    inference = Transformer(replace(model.cfg, dropout=0.0))
    inference.load_state_dict(model.state_dict())
    inference.eval()
    model_dir.mkdir(parents=True, exist_ok=True)
    native.save(str(model_dir), inference, spm_files={"source": "spm.model"}, decoding=DECODING,
                banned_ids=[PAD, BOS], dtype=torch.float16)
    (model_dir / "spm.model").write_bytes(without_training_paths((scratch / "spm.model").read_bytes()))
    size = sum(f.stat().st_size for f in model_dir.iterdir() if f.name in ("model.safetensors", "config.yaml", "spm.model"))
    log(f"exported {os.path.relpath(model_dir, REPO)}: {size / 1e6:.1f} MB")
    return size


def translate(model_dir: Path, src: Path, beam_size: int, threads: int) -> list[str]:
    """Run the project's decoder exactly as a user would (the `nmtdecode translate` CLI)."""
    import subprocess

    command = [sys.executable, "-m", "nmtdecode", "translate", "--model", str(model_dir), "--src", str(src),
               "--beam-size", str(beam_size), "--threads", str(threads), "--quiet"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, encoding="utf-8")
    if result.returncode != 0:
        raise SystemExit(f"nmtdecode translate failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout.split("\n")[:-1]


def evaluate(args, scratch: Path, model_dir: Path) -> dict:
    """Stage 5b: BLEU and chrF of beam-5 output on the held-out test split."""
    import sacrebleu

    shutil.copyfile(scratch / "test.en", model_dir / "test.en")
    shutil.copyfile(scratch / "test.de", model_dir / "test.de")
    sources, refs = read_lines(model_dir / "test.en"), read_lines(model_dir / "test.de")
    started = time.monotonic()
    hyps = translate(model_dir, model_dir / "test.en", 5, args.threads)
    seconds = time.monotonic() - started
    write_lines(scratch / "test.hyp.de", hyps)
    with open(scratch / "accepted.json", encoding="utf-8") as f:
        accepted = json.load(f)
    metrics = {
        "bleu": round(sacrebleu.corpus_bleu(hyps, [refs]).score, 1),
        "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 1),
        "exact": round(100 * sum(h == r for h, r in zip(hyps, refs)) / len(refs), 1),
        "accepted": round(100 * sum(h in accepted[s] for s, h in zip(sources, hyps)) / len(refs), 1),
        "decode_seconds": round(seconds, 1),
    }
    log(f"test (beam 5): {metrics}")
    return metrics, sources, hyps, accepted


def common_words(scratch: Path, model_dir: Path, sources, hyps, accepted, count: int = 20):
    """Held-out test sources of at most three everyday words that the model translates
    to one of the dictionary's translations: common_words.tsv (english<TAB>a|b|c).
    Everyday = every word occurs in many training sources."""
    frequency = Counter(w.lower() for line in read_lines(scratch / "train.en") for w in set(line.split()))
    found = []
    for src, hyp in zip(sources, hyps):
        words = src.split()
        if len(words) > 3 or re.search(r"[\d.]", src) or hyp not in accepted[src]:
            continue
        found.append((min(frequency[w.lower()] for w in words), src))
    found.sort(key=lambda x: (-x[0], x[1]))
    chosen = [src for _, src in found[:count]]
    write_lines(model_dir / "common_words.tsv", [f"{src}\t{'|'.join(accepted[src])}" for src in chosen])
    log(f"common_words.tsv: {len(chosen)} of {len(found)} correctly translated short test sources")
    return chosen


# Demo phrases and the translations counted as right; sample.en gets the first ten
# the model gets right (what `nmtdecode translate --src data/demo/sample.en` shows).
DEMO = {
    "good morning": ["Guten Morgen"],
    "thank you": ["danke", "Danke", "Dankeschön", "Danke schön", "vielen Dank", "Vielen Dank"],
    "the house": ["das Haus"],
    "water": ["Wasser"],
    "cat": ["Katze"],
    "dog": ["Hund"],
    "good night": ["Gute Nacht"],
    "the children": ["die Kinder"],
    "How are you?": ["Wie geht es Ihnen?", "Wie geht es dir?", "Wie geht's?", "Wie geht es euch?"],
    "I love you.": ["Ich liebe dich.", "Ich liebe Sie."],
    "beer": ["Bier"],
    "red wine": ["Rotwein"],
    "good evening": ["Guten Abend"],
    "the old man": ["der alte Mann"],
    "book": ["Buch"],
    "apple": ["Apfel"],
    "Good luck!": ["Viel Glück!"],
    "my friend": ["mein Freund", "meine Freundin"],
}


def demo_sample(args, scratch: Path, model_dir: Path, count: int = 10):
    phrases = list(DEMO)
    write_lines(scratch / "demo.en", phrases)
    outputs = translate(model_dir, scratch / "demo.en", 5, args.threads)
    right = [p for p, o in zip(phrases, outputs) if o in DEMO[p]]
    for p, o in zip(phrases, outputs):
        log(f"demo: {p} -> {o}{'' if o in DEMO[p] else '   (not one of ' + ', '.join(DEMO[p]) + ')'}")
    write_lines(model_dir / "sample.en", right[:count])
    return list(zip(phrases, outputs)), right[:count]


# --------------------------------------------------------------------------- model card


def dictionary_facts(dict_dir: str) -> dict:
    """Edition, date and licence text, quoted from the dictionary's own header."""
    header = read_header(dict_dir, "eng-deu")
    edition = re.search(r"Edition: (\S+)", header)
    date = re.search(r"Publication date: (\S+?)\.?\n", header)
    availability = re.search(r"Availability:\n(.*?)\n\n", header, re.S)
    licence = " ".join(availability.group(1).split()) if availability else ""
    licence = re.sub(r" <[^>]*>", "", licence)  # no e-mail addresses in the card
    return {"edition": edition.group(1) if edition else "?", "date": date.group(1) if date else "?",
            "licence": licence}


def write_card(path: Path, *, args, command: str, facts: dict, sizes: dict, cfg, n_params: int, size: int,
               state: dict, timings: dict, weights: str, metrics: dict, chosen: list, demo: list):
    if "polish" in state:
        final_phase = (f"from step {state['polish']['from_step']:,} (the last {args.final_share:.0%} of training), "
                       "batches come\n  from the everyday pairs with their copies plus half as many other pairs\n"
                       f"  drawn at random ({state['polish_examples']:,} examples per pass), so that bare everyday "
                       "words\n  are not outvoted by the compounds built on them.")
    else:
        final_phase = "none (`--final-share 0`)."
    history = ", ".join(f"{nll:.2f} @ {step}" for step, nll in state["history"][-6:]) or "none recorded"
    epochs = state["epoch"] + state["position"] / max(1, state.get("epoch_batches", 1))
    examples = "\n".join(f"| {src} | {out} |" for src, out in demo)
    text = f"""# Demo model: English → German words and phrases (FreeDict)

A small Transformer trained in about {timings['total'] / 60:.0f} minutes on two CPU cores, for demos
and tests of nmtdecode. It translates single words, dictionary phrases and
short example sentences; it is not a general-purpose translator. Built by
`scripts/train_demo.py` (the whole recipe: data, tokenizer, training,
export, evaluation, this card).

## Data and licence

* FreeDict English–German and German–English dictionaries, edition
  {facts['edition']} ({facts['date']}), generated from the Ding dictionary
  (<https://dict.tu-chemnitz.de/>), as packaged by Debian:
  `dict-freedict-eng-deu` and `dict-freedict-deu-eng` (`/usr/share/dictd/`).
* The dictionary's licence, quoted from its header:

  > {facts['licence']}

* The weights and every other file in this directory are derived from the
  dictionary, so they are distributed under the dictionary's terms
  (GPLv3 and AGPLv3), not under the licence of the nmtdecode code.

## How the pairs were built

* Every entry of both dictionaries (the deu-eng one flipped), without the
  `00-database-*` header entries: headword → each comma-separated
  translation, and every example line (`"english"  - german`) → each of its
  alternatives.
* Cleaning: pronunciations (`/kˈat/`), grammar and subject tags (`<fem>`,
  `[zool.]`, `{{n}}`), parentheses and glued abbreviations are removed;
  `a/b` alternatives keep `a`; pairs with leftover markup, `…`, more than
  {args.max_words} words or very unequal lengths are dropped.
* One German translation per English source: the one with the most
  evidence (earlier in the translation list, entries with examples and
  cross references, not a narrow sense with a note or subject label), scaled
  up for everyday German words and down for idioms that render a single
  word; e.g. `dog` → Hund, not the cooper's Bandhaken.
* {sizes['sources']:,} English sources. Sources that differ only in case and
  punctuation form one group; the groups are shuffled with seed {args.seed}:
  test {sizes['test']:,} and valid {sizes['valid']:,} sources (one pair per group), the rest
  train. No test or valid source (or a case/punctuation variant of one) is
  in training. Training also gets {sizes['train_variants']:,} bare variants of short
  sentence-like phrases (`Good morning!` → `good morning` / `Guten Morgen`):
  {sizes['train']:,} training pairs.
* Joint SentencePiece unigram model, {cfg.src_vocab_size:,} pieces, trained on the
  training split; its ids are the model's (pad 0, unk 1, bos 2, eos 3).

## Model

Transformer, pre-norm, {cfg.encoder_layers} encoder + {cfg.decoder_layers} decoder layers, d_model {cfg.d_model},
{cfg.heads} heads, FFN {cfg.ffn_dim}, ReLU, sinusoidal positions, embeddings scaled by
sqrt(d_model). Separate source and target embeddings; the target embedding
is also the output layer. {n_params:,} parameters, stored as float16
({size / 1e6:.1f} MB with the SentencePiece model).

## Training

```
{command}
```

* Everyday words and short phrases are shown more than once per epoch
  (`everyday_copies`: a single word once more per 8 training sources that
  contain it, at most {args.max_copies} copies; a 2–3-word phrase once more per 50
  for its rarest word, at most 3): {state['everyday_pairs']:,} pairs, {state['epoch_examples']:,}
  examples per epoch. Without this, `dog` (one pair among hundreds of
  `dog …` → `Hunde…` compounds) came out as Hunde.
* Final phase: {final_phase}
* Teacher forcing, label smoothing {args.label_smoothing}, dropout {args.dropout}, {args.precision} compute
  ({'bfloat16 autocast, float32 weights' if args.precision == 'bf16' else 'float32'}), Adam (0.9, 0.98),
  learning rate {args.lr} after {args.warmup} warmup steps then inverse square root
  decay, gradient clipping 1.0, batches of at most {args.batch_tokens} tokens
  (rows × longest sequence) from length-sorted pools, seed {args.seed}.
* {state['step']:,} steps ({epochs:.2f} epochs), training {timings['train'] / 60:.1f} min, data preparation
  {timings['prep'] / 60:.1f} min, export and evaluation {timings['eval'] / 60:.1f} min
  ({args.threads} threads; the cores were shared with other work, so another
  run of the same command may reach a different step count: add
  `--max-steps {state['step']}` to train exactly as many steps).
* Exported: {weights}. Valid NLL during training (per token, step):
  {history}.

## Held-out evaluation

Test split: `test.en` / `test.de` ({sizes['test']:,} sources never seen in training,
reference = the main translation). Beam 5, the project's decoder:

```
nmtdecode translate --model data/demo --src data/demo/test.en --beam-size 5 --quiet > hyp.de
sacrebleu data/demo/test.de -i hyp.de -m bleu chrf
```

| metric | value |
|---|---|
| BLEU | {metrics['bleu']} |
| chrF | {metrics['chrf']} |
| exact match with the reference | {metrics['exact']}% |
| output is one of the dictionary's translations of the source | {metrics['accepted']}% |

Most test sources are rare technical terms and inflected forms, hence the
modest scores. `common_words.tsv` lists {len(chosen)} short everyday test sources the
model gets right, with every translation the dictionary gives for them.

## Examples (beam 5)

| English | output |
|---|---|
{examples}
"""
    path.write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------- main

DATA_VERSION = 2  # bump when the pair extraction changes, so that cached pairs are rebuilt


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--minutes", type=float, default=30, help="wall-clock budget of the whole recipe (default 30)")
    add("--max-steps", type=int, help="train exactly this many steps instead of using the time budget")
    add("--resume", action="store_true", help="continue from the checkpoint in the scratch directory")
    add("--dict-dir", default=DICT_DIR, help="where the freedict-eng-deu / freedict-deu-eng files are")
    add("--scratch", default="scripts/out", help="pairs, tokenizer and checkpoints (relative to the repository)")
    add("--model-dir", default="data/demo", help="the exported model (relative to the repository)")
    add("--seed", type=int, default=1)
    add("--threads", type=int, default=2)
    data = parser.add_argument_group("data")
    data.add_argument("--max-words", type=int, default=25, help="longest pair side in words")
    data.add_argument("--n-test", type=int, default=1000)
    data.add_argument("--n-valid", type=int, default=1000)
    data.add_argument("--vocab-size", type=int, default=6000)
    model = parser.add_argument_group("model")
    model.add_argument("--d-model", type=int, default=256)
    model.add_argument("--heads", type=int, default=4)
    model.add_argument("--encoder-layers", type=int, default=3)
    model.add_argument("--decoder-layers", type=int, default=2)
    model.add_argument("--ffn-dim", type=int, default=768)
    model.add_argument("--max-tokens", type=int, default=128, help="longest sequence in pieces (and position table)")
    opt = parser.add_argument_group("training")
    opt.add_argument("--batch-tokens", type=int, default=3000, help="rows x longest sequence per batch")
    opt.add_argument("--max-copies", type=int, default=40,
                     help="most copies per epoch of an everyday word or phrase (1: every pair once)")
    opt.add_argument("--final-share", type=float, default=0.15,
                     help="share of the training budget spent on everyday pairs at the end (0: none)")
    opt.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                     help="compute precision of the training steps (bf16 autocast; weights stay fp32)")
    opt.add_argument("--lr", type=float, default=1e-3)
    opt.add_argument("--warmup", type=int, default=1000)
    opt.add_argument("--dropout", type=float, default=0.1)
    opt.add_argument("--label-smoothing", type=float, default=0.1)
    opt.add_argument("--ema-decay", type=float, default=0.999)
    opt.add_argument("--eval-minutes", type=float, default=2, help="time kept back for export and evaluation")
    opt.add_argument("--checkpoint-minutes", type=float, default=5)
    opt.add_argument("--report-every", type=int, default=200)
    opt.add_argument("--eval-every", type=int, default=500, help="valid loss and probe translations")
    return parser.parse_args(argv)


def load_progress(path: Path) -> dict:
    if path.exists():
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    return {}


def save_progress(path: Path, progress: dict):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(progress, f, indent=1)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    scratch, model_dir = REPO / args.scratch, REPO / args.model_dir
    scratch.mkdir(parents=True, exist_ok=True)
    progress_file = scratch / "progress.json"
    progress = load_progress(progress_file)

    # Stages 1-3 are cached in the scratch directory, keyed by the options they depend on.
    data_key = {"version": DATA_VERSION, "dict_dir": args.dict_dir, "max_words": args.max_words,
                "seed": args.seed, "n_test": args.n_test, "n_valid": args.n_valid}
    if progress.get("data_key") != data_key:
        started = time.monotonic()
        progress = {"data_key": data_key, "sizes": prepare_data(args, scratch),
                    "data_seconds": time.monotonic() - started}
        save_progress(progress_file, progress)
    spm_key = {**data_key, "vocab_size": args.vocab_size}
    if progress.get("spm_key") != spm_key or not (scratch / "spm.model").exists():
        started = time.monotonic()
        train_spm(args, scratch)
        progress.update(spm_key=spm_key, spm_seconds=time.monotonic() - started)
        save_progress(progress_file, progress)
        (scratch / "checkpoint.pt").unlink(missing_ok=True)  # trained on other ids
    prep_seconds = progress["data_seconds"] + progress["spm_seconds"]
    log(f"data and tokenizer ready ({prep_seconds / 60:.1f} min when built)")

    if not args.resume and (scratch / "checkpoint.pt").exists():
        log("a checkpoint exists; training from scratch (use --resume to continue it)")
        (scratch / "checkpoint.pt").unlink()
    budget = args.minutes * 60 - args.eval_minutes * 60 - prep_seconds
    model, ema, state, sp, valid = train(args, scratch, budget)
    weights = pick_weights(model, ema, sp, valid, args)

    started = time.monotonic()
    size = export(model, scratch, model_dir)
    metrics, sources, hyps, accepted = evaluate(args, scratch, model_dir)
    chosen = common_words(scratch, model_dir, sources, hyps, accepted)
    demo, _ = demo_sample(args, scratch, model_dir)
    timings = {"prep": prep_seconds, "train": state["train_seconds"], "eval": time.monotonic() - started}
    timings["total"] = sum(timings.values())
    shown = [a for a in argv if a != "--resume"]
    command = "python scripts/train_demo.py" + (" " + " ".join(shown) if shown else "")
    n_params = sum(p.numel() for p in model.parameters())
    write_card(model_dir / "README.md", args=args, command=command, facts=dictionary_facts(args.dict_dir),
               sizes=progress["sizes"], cfg=model.cfg, n_params=n_params, size=size, state=state,
               timings=timings, weights=weights, metrics=metrics, chosen=chosen, demo=demo)
    with open(scratch / "metrics.json", "w", encoding="utf-8") as f:
        json.dump({"metrics": metrics, "steps": state["step"], "timings": timings, "command": command}, f, indent=1)
    log(f"done in {timings['total'] / 60:.1f} min (recipe total); model card {os.path.relpath(model_dir, REPO)}/README.md")


if __name__ == "__main__":
    main()
