"""Does a partial, in-place cache reorder pay? An A/B against the plain `index_select` nmtdecode uses.

    python bench/reorder.py [--threads 2] [--repeat 3]

The alternative (nmtdecode's beam search until the architecture step): a
continuing hypothesis keeps the slot of the hypothesis it extends where it
can ("stable slots"), so after each step only the rows of hypotheses that
forked move, and the cache copies just those rows in place when they are
fewer than half. Both variants are built here by subclassing the real search
and cache, and decode the demo test set (natural lengths) and marian-base
(32 forced steps), beam 5, batches of 32, interleaved, fastest of --repeat.
Prints the share of rows that moved and the time ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from nmtdecode.models.cache import ROWS, DecoderCache  # noqa: E402
from nmtdecode.search.base import StepOutput  # noqa: E402
from nmtdecode.search.beam import BeamSearch, Candidates  # noqa: E402
from nmtdecode.translator import Translator  # noqa: E402


def stable_slots(prev: torch.Tensor) -> torch.Tensor:
    """perm (n, k): slot j gets alive candidate perm[j]. The best candidate extending slot p
    keeps slot p; the others fill the slots whose hypothesis had no child, in rank order."""
    n, k = prev.shape
    rank = torch.arange(k, device=prev.device)
    same_slot = prev[:, :, None] == prev[:, None, :]
    first = ~(same_slot & (rank[None, :] < rank[:, None])).any(dim=2)  # the best child of its slot
    taken = torch.zeros_like(prev).scatter_reduce_(1, prev, first.long(), reduce="amax")
    free = torch.argsort(taken, dim=1, stable=True)  # free slots first, in order
    turn = (torch.cumsum(~first, dim=1) - 1).clamp(min=0)
    target = torch.where(first, prev, free.gather(1, turn))
    return torch.empty_like(prev).scatter_(1, target, rank.expand(n, k))


class StableSlotSearch(BeamSearch):
    """Beam search whose alive hypotheses stay in their parent's slot where they can;
    each StepOutput also lists the rows that moved (`moved`, host side)."""

    moved_rows = 0
    total_rows = 0

    def commit(self, candidates: Candidates, step: int) -> StepOutput:
        original_take = candidates.take

        def take_stable(order):
            alive = original_take(order)
            return alive.take(stable_slots(alive.prev))

        candidates.take = take_stable
        width = self.width
        out = super().commit(candidates, step)
        if width == self.k and out.keep is None:
            moved = (out.origin != torch.arange(out.origin.numel())).nonzero()[:, 0].tolist()
            out.moved = moved
            StableSlotSearch.moved_rows += len(moved)
            StableSlotSearch.total_rows += out.origin.numel()
        return out


class PartialReorderCache(DecoderCache):
    """Copies only the moved rows, in place, when they are fewer than half."""

    def follow(self, out):
        moved = getattr(out, "moved", None)
        if moved is None or self.self_kv is None or 2 * len(moved) >= out.origin.numel():
            return super().follow(out)
        if moved:
            rows = torch.tensor(moved, dtype=torch.long)
            past = self.self_kv[..., : self.length, :]
            past.index_copy_(ROWS, rows, past.index_select(ROWS, out.origin.index_select(0, rows)))


class StableTranslator(Translator):
    """The translator with stable slots, over a model whose cache copies only moved rows."""

    def __init__(self, model, decoding, rules):
        super().__init__(PartialReorderModel(model), decoding, rules)

    def make_search(self, batch_size, max_steps):
        search = StableSlotSearch(batch_size=batch_size, beam_size=self.cfg.beam_size, max_steps=max_steps,
                                  start_id=self.start_id, eos_id=self.eos_id, penalty=self.penalty,
                                  early_stopping=self.cfg.early_stopping, device=self.device)
        search.shrink = self.shrink
        return search


class PartialReorderModel:
    """The same model, handing out PartialReorderCache."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def init_cache(self, memory, src_mask):
        cache = self.model.init_cache(memory, src_mask)
        return PartialReorderCache(cache.cross_kv, cache.memory_mask)


def decode(translator, sources) -> tuple[float, list]:
    translator.translate_batch(sources[:4])  # warm-up
    start = time.perf_counter()
    outputs = []
    for i in range(0, len(sources), 32):
        outputs += [n[0].tokens for n in translator.translate_batch(sources[i : i + 32])]
    return time.perf_counter() - start, outputs


def cases():
    from run import prepare_marian

    from nmtdecode.config import Config
    from nmtdecode.models.formats.huggingface import load_network
    from nmtdecode.models.loading import load_model, read_json

    demo_dir = os.path.join(os.path.dirname(HERE), "data", "demo")
    demo = load_model(demo_dir)
    with open(os.path.join(demo_dir, "test.en"), encoding="utf-8") as f:
        demo_sources = sorted((demo.tokenizer.encode(line.rstrip("\n")) for line in f), key=len)
    yield "demo", demo.model, demo.rules, demo_sources, Config.from_values(
        {"beam_size": 5, "max_len_a": 2.0, "max_len_b": 10}).decoding
    dirs, task = prepare_marian(64)
    marian, _, rules = load_network(dirs["native"], read_json(os.path.join(dirs["native"], "config.json")))
    yield "marian-base", marian, rules, sorted(task["sources"], key=len), Config.from_values(
        {"beam_size": 5, "min_length": 32, "max_length": 32}).decoding


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, model, rules, sources, decoding in cases():
        variants = {"plain": Translator(model, decoding, rules), "partial": StableTranslator(model, decoding, rules)}
        best, outputs = dict.fromkeys(variants, float("inf")), {}
        StableSlotSearch.moved_rows = StableSlotSearch.total_rows = 0
        for _ in range(args.repeat):  # interleaved: both see the same machine conditions
            for variant, translator in variants.items():
                seconds, outputs[variant] = decode(translator, sources)
                best[variant] = min(best[variant], seconds)
        same = sum(a == b for a, b in zip(outputs["plain"], outputs["partial"])) / len(sources)
        share = StableSlotSearch.moved_rows / max(1, StableSlotSearch.total_rows)
        plain, partial = best["plain"], best["partial"]
        print(f"{name}: rows moved per step {100 * share:.0f}%; plain {plain:.2f} s, partial {partial:.2f} s; "
              f"partial is {100 * (plain / partial - 1):+.1f}% faster; same 1-best {100 * same:.1f}%")


if __name__ == "__main__":
    main()
