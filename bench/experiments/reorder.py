"""How should the self-attention cache follow a beam search? Two designs, measured side by side.

    python bench/experiments/reorder.py [--threads 2] [--repeat 3] [--gemm auto]

* paths (nmtdecode's `models/cache.py`): keys/values stay where they were written;
  each row keeps the slot of its ancestor at every position and attends over all of
  its sentence's slots with the others masked out. Nothing is copied per step.
* gather (nmtdecode until this design, and what CTranslate2 and transformers do): after
  each step every row's past is copied to where its hypothesis went, one
  `index_select` over all positions (into a second buffer, no allocation per step).

(An earlier variant kept a continuing hypothesis in its parent's slot and copied only
the rows that moved; on the demo set it was 4.5% slower than the plain gather, on
marian-base 2-4% faster: not worth its bookkeeping.)

Both decode the demo test set (natural lengths) and marian-base (32 forced steps),
beam 5, batches of 32, interleaved, fastest of --repeat; the 1-best must agree.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO, timed  # noqa: E402

from nmtdecode.models.placement import Placement, place_model  # noqa: E402
from nmtdecode.engine.decoding import BatchDecoder  # noqa: E402

INITIAL_CAPACITY = 16


class GatherCache:
    """The cache as a row-per-hypothesis tensor (layers, 2, N, H, capacity, hd), its rows
    gathered after every step; the model sees one row per sentence-slot, width 1."""

    def __init__(self, cross_kv, memory_mask):
        self.cross_kv, self.memory_mask = cross_kv, memory_mask
        self.self_kv = self.spare = None
        self.length = 0

    def cross(self, layer):
        return self.cross_kv[layer, 0], self.cross_kv[layer, 1]

    def append_self(self, layer, kv):
        if self.self_kv is None or self.length == self.self_kv.size(4):
            self._grow(kv)
        t = self.length
        self.self_kv[layer, :, :, :, t] = kv.transpose(0, 1)
        past = self.self_kv[layer, :, :, :, : t + 1]  # (2, N, H, t+1, hd): each row is its own "sentence"
        return past[0], past[1], None

    def advance(self):
        self.length += 1

    def _grow(self, like):
        n, _, heads, hd = like.shape
        grown = like.new_empty((self.cross_kv.size(0), 2, n, heads, max(INITIAL_CAPACITY, 2 * self.length), hd))
        if self.self_kv is not None:
            grown[..., : self.length, :] = self.self_kv[..., : self.length, :]
        self.self_kv, self.spare = grown, None

    def follow(self, out):
        if out.keep is not None:
            self.cross_kv = self.cross_kv.index_select(2, out.keep)
            if self.memory_mask is not None:
                self.memory_mask = self.memory_mask.index_select(0, out.keep)
        if out.origin is None or self.self_kv is None:
            return
        shape = list(self.self_kv.shape)
        shape[2] = out.origin.numel()
        if self.spare is None or list(self.spare.shape) != shape:
            self.spare = self.self_kv.new_empty(shape)
        t = self.length
        torch.index_select(self.self_kv[..., :t, :], 2, out.origin, out=self.spare[..., :t, :])
        self.self_kv, self.spare = self.spare, self.self_kv


class GatherModel:
    """The same model, handing out GatherCache; self-attention then runs one row per group."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def init_cache(self, memory, src_mask):
        cache = self.model.init_cache(memory, src_mask)
        return GatherCache(cache.cross_kv, cache.memory_mask)


def decode(translator, sources) -> tuple[float, list]:
    translator.decode(sources[:4])  # warm-up
    return timed(
        lambda: [n[0].tokens for i in range(0, len(sources), 32) for n in translator.decode(sources[i : i + 32]).nbests]
    )


def cases():
    from run import prepare_marian

    from nmtdecode.options.config import Config
    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network
    from nmtdecode.models.loading import load_model

    demo = load_model(DEMO)
    with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
        demo_sources = sorted((demo.tokenizer.encode(line.rstrip("\n")) for line in f), key=len)
    yield (
        "demo",
        demo.model,
        demo.rules,
        demo_sources,
        Config.from_values({"beam_size": 5, "max_len_a": 2.0, "max_len_b": 10}).decoding,
    )
    dirs, task = prepare_marian(64)
    marian, _, rules = load_network(dirs["nmtdecode"], read_json(os.path.join(dirs["nmtdecode"], "config.json")))
    yield (
        "marian-base",
        marian,
        rules,
        task["sources"],
        Config.from_values({"beam_size": 5, "min_length": 32, "max_length": 32}).decoding,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gemm", default="auto", choices=["auto", "onednn", "torch"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, model, rules, sources, decoding in cases():
        place_model(model, Placement(backend=args.gemm))
        backend = model.backend
        variants = {
            "paths": BatchDecoder(model, decoding, rules),
            "gather": BatchDecoder(GatherModel(model), decoding, rules),
        }
        best, outputs = dict.fromkeys(variants, float("inf")), {}
        for _ in range(args.repeat):  # interleaved: both see the same machine conditions
            for variant, translator in variants.items():
                seconds, outputs[variant] = decode(translator, sources)
                best[variant] = min(best[variant], seconds)
        same = sum(a == b for a, b in zip(outputs["paths"], outputs["gather"])) / len(sources)
        print(
            f"{name} (gemm {backend}): paths {best['paths']:.2f} s, gather {best['gather']:.2f} s; "
            f"paths are {100 * (best['gather'] / best['paths'] - 1):+.1f}% faster; same 1-best {100 * same:.1f}%"
        )


if __name__ == "__main__":
    main()
