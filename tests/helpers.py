"""Test oracles: a hand-written probability-table model, brute-force search, tiny models.

`TableModel` follows fairseq's probability-table decoder idea: the next-token
distribution is written by hand for each (sentence, prefix), so every n-best
list and score can be checked on paper. It implements the model contract the
translator uses (encode / init_cache / decode_step, a cache that follows
the search), so the real search and translator loop run over it.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from nmtdecode.models.transformer import Transformer, TransformerConfig

PAD, UNK, BOS, EOS = 0, 1, 2, 3
REPO = Path(__file__).resolve().parents[1]  # the repository's root
DEMO = str(REPO / "data" / "demo")  # the bundled demo model


@dataclass
class TableConfig:
    tgt_vocab_size: int
    pad_id: int = PAD
    unk_id: int = UNK
    bos_id: int = BOS
    eos_id: int = EOS
    decoder_start_id: int = BOS
    max_positions: int = 1024


class TableCache:
    """Per-row state of TableModel: the sentence each row belongs to and the tokens fed so far;
    `attention` (N, S) after each step when `record_attention` is set (models/cache.py's contract)."""

    def __init__(self, sentences: list[int], source_length: int):
        self.sentences = sentences
        self.fed = [() for _ in sentences]
        self.source_length = source_length
        self.record_attention = False
        self.attention = None

    def follow(self, out):
        if out.origin is not None:
            index = out.origin.tolist()
            self.sentences = [self.sentences[i] for i in index]
            self.fed = [self.fed[i] for i in index]


class TableModel(nn.Module):
    """tables[s][prefix] = {token: probability} for sentence s (source id s);
    a prefix missing from the table gets `default` (EOS certain).

    attention[s][prefix] = [weight of each source position], the cross-attention of the step
    that follows `prefix` (a prefix missing: all on position 0)."""

    def __init__(self, vocab_size: int, tables: list[dict], attention: list[dict] | None = None):
        super().__init__()
        self.cfg = TableConfig(vocab_size)
        self.tables = tables
        self.attention = attention or [{} for _ in tables]
        self.anchor = nn.Parameter(torch.zeros(1))  # gives the model a device

    def encode(self, src_ids, src_mask):
        return src_ids[:, :1].float()  # the "memory" is the sentence id

    def init_cache(self, memory, src_mask):
        return TableCache(memory[:, 0].long().tolist(), src_mask.size(1))

    def weights(self, sentence: int, prefix: tuple, source_length: int) -> torch.Tensor:
        row = torch.zeros(source_length)
        given = self.attention[sentence].get(prefix, [1.0])
        row[: len(given)] = torch.tensor(given)
        return row

    def distribution(self, sentence: int, prefix: tuple) -> torch.Tensor:
        probs = self.tables[sentence].get(prefix, {EOS: 1.0})
        row = torch.zeros(self.cfg.tgt_vocab_size)
        for token, p in probs.items():
            row[token] = p
        return row

    def decode_step(self, tokens, cache):
        cache.fed = [fed + (t,) for fed, t in zip(cache.fed, tokens.tolist())]
        rows = [self.distribution(s, fed[1:]) for s, fed in zip(cache.sentences, cache.fed)]  # without the start token
        if cache.record_attention:
            cache.attention = torch.stack(
                [self.weights(s, fed[1:], cache.source_length) for s, fed in zip(cache.sentences, cache.fed)]
            )
        return torch.stack(rows).log()  # the translator's log_softmax keeps log-probs unchanged


def tiny_config(vocab: int = 12, **overrides) -> TransformerConfig:
    values = dict(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=32,
        heads=4,
        encoder_layers=2,
        decoder_layers=2,
        ffn_dim=64,
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        decoder_start_id=BOS,
        max_positions=64,
    )
    values.update(overrides)
    return TransformerConfig(**values)


# tiny_config's switches of a T5: heads 6 wide (not d_model / heads), relative positions in every
# self-attention (short buckets, which the tests' lengths pass), RMS norms, a gated feed-forward
T5_LIKE = dict(
    norm="rmsnorm",
    gated_ffn=True,
    activation="gelu_tanh",
    head_dim=6,
    positions="relative",
    relative_buckets=8,
    relative_max_distance=12,
    scale_queries=False,
    bias=False,
    decoder_layers=3,
)


def tiny_transformer(seed: int = 0, vocab: int = 12, eos_bias: float = 0.0, **overrides) -> Transformer:
    """A seeded random model; `eos_bias` raises EOS's logit so hypotheses end early."""
    model = Transformer(tiny_config(vocab, final_logits_bias=eos_bias != 0.0, **overrides)).eval()
    torch.manual_seed(seed)  # after construction: the weights do not depend on how modules initialise
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name != "output.bias":  # the logit bias stays zero, but for EOS
                p.normal_(0.0, 0.3)
        if eos_bias:
            model.output.bias.zero_()[EOS] = eos_bias
        elif model.output.bias is not None:
            model.output.bias.zero_()
    return model


def placed(model: Transformer, backend: str, dtype: torch.dtype = torch.float32) -> Transformer:
    """`model` with its weights in the form a load gives them (models/placement.py): `onednn` packed
    products, `int8`, or `torch`; in place."""
    from nmtdecode.models.placement import Placement, place_model

    return place_model(model, Placement(dtype=dtype, backend=backend))


def random_sources(n: int, vocab: int, seed: int = 1, min_len: int = 1, max_len: int = 9) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    sources = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        sources.append(torch.randint(4, vocab, (length,), generator=g).tolist() + [EOS])
    return sources


def forced_total(model, source: list[int], target: list[int], ended: bool = True) -> list[float]:
    """Per-token log-probs of `target` (+ EOS when ended) by a full teacher-forced pass."""
    gold = target + ([EOS] if ended else [])
    src = torch.tensor([source])
    tgt_in = torch.tensor([[model.cfg.decoder_start_id] + gold[:-1]])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(src, torch.ones_like(src, dtype=torch.bool), tgt_in).float(), -1)
    return [logprobs[0, t, token].item() for t, token in enumerate(gold)]


def brute_force(model, source: list[int], tokens: list[int], max_steps: int, score_fn):
    """Every hypothesis over `tokens` (EOS-ended, or cut at max_steps), scored by teacher forcing.

    Returns (best token list, its score); score_fn(total, length) is the length penalty.
    """
    best = (None, -math.inf)
    content = [t for t in tokens if t != EOS]
    for length in range(0, max_steps + 1):
        ended = length < max_steps  # a hypothesis of max_steps tokens is cut there, without EOS
        for body in itertools.product(content, repeat=length):
            logprobs = forced_total(model, source, list(body), ended=ended)
            score = score_fn(sum(logprobs), len(logprobs))
            if score > best[1]:
                best = (list(body), score)
    return best


WORDS = (
    "the house is red . a dog and a cat sleep in the garden . good morning , thank you . "
    "water is cold . my friend reads a book . we go home now . where is the station ?"
).split()


def train_sentencepiece(directory, vocab_size: int = 48) -> str:
    """A tiny SentencePiece model with the native id convention (pad 0, unk 1, bos 2, eos 3)."""
    import random

    import sentencepiece as spm

    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(400)]
    prefix = str(directory / "spm")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=prefix,
        vocab_size=vocab_size,
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    return prefix + ".model"


def build_native_model(directory, vocab_size: int = 48, seed: int = 0, decoding=None, unk_bias: float = 0.0):
    """Save a tiny random model in the native format; returns its directory. `unk_bias` raises
    <unk>'s logit, so that the model generates it."""
    import shutil

    from nmtdecode.models.formats import native

    directory.mkdir(parents=True, exist_ok=True)
    spm_file = train_sentencepiece(directory, vocab_size)
    model = tiny_transformer(seed, vocab=vocab_size, eos_bias=2.0, max_positions=128)
    with torch.no_grad():
        model.output.bias[UNK] = unk_bias
    shutil.move(spm_file, directory / "spm.model")
    native.save(
        str(directory), model, {"source": "spm.model"}, decoding=decoding, banned_ids=[PAD, BOS], dtype=torch.float32
    )
    return directory


def nbest_of(translator, tokens: list[str], **options) -> list[tuple[list[str], float]]:
    """A pre-tokenized sentence through the Python API: its n-best as (tokens, score), best first
    (the parity tests' view of a peer's output, OpenNMT-py's and eole's)."""
    results = translator.translate_batch([tokens], **options)[0]
    return [(r.text.split(), r.score) for r in results]


def assert_same_nbest(theirs, ours):
    """Two n-best lists of (tokens, score): the same tokens, scores within 1e-4."""
    import pytest

    assert [tokens for tokens, _ in ours] == [tokens for tokens, _ in theirs]
    assert [score for _, score in ours] == pytest.approx([score for _, score in theirs], abs=1e-4)


def wait_for_checkpoint(journal, lines: int, proc, timeout: float = 300):
    """Until `journal` records at least `lines` input lines done (while `proc` runs)."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        try:
            if json.loads(journal.read_text())["lines"] >= lines:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.01)
    raise AssertionError(f"{journal} never recorded {lines} lines (exit code {proc.poll()})")
