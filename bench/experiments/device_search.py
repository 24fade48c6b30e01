"""Is the device search (search/device/beam.py: the bookkeeping as tensor operations, the host
reading a done flag) faster than the host search (search/beam.py: one host copy a step and a
`Beam` object per sentence), on a GPU and on the CPU too?

    python bench/experiments/device_search.py [--lines 1000] [--beam 5] [--batch 32] [--rounds 3]
        [--model demo|nllb-shape|marian-base] [--threads N] [--advance-only VOCAB] [--device cuda]

Decodes the lines with each search in turn, batch by batch (alternating, in one process: the
machine is shared), through the step runner the engine chooses on a CPU (the traced step), and
prints each variant's total over the batches of each batch's fastest and median round, and
whether the outputs agree. The
demo model decodes its test lines; `--model nllb-shape` a small-vocabulary-free NLLB-600M
shape (bench/convert.py, seeded random weights) on random sources, few lines: it measures the
search against a real-size step, where the search's share is small. `--model marian-base`: a
Transformer-base Marian of seeded random weights (bench/convert.py) on random sources, every
output 32 tokens. On `--device cuda` the model runs in float16 through the step runner the engine
chooses there (CUDA graphs); `--search-on auto` takes the device search from
`DEVICE_SEARCH_FROM` sentences on (engine/decoding.py). There a third variant, `graphed`, is
the device search with its steps replayed as CUDA graphs too (search/device/graphs.py), which
`device` runs without.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import DEMO, OUT, timed  # noqa: E402

from nmtdecode.options.config import Config  # noqa: E402
from nmtdecode.engine.decoding import BatchDecoder  # noqa: E402
from nmtdecode.models.gemm import cpu_description  # noqa: E402
from nmtdecode.models.steps import step_runner_for  # noqa: E402


def demo_task(lines: int):
    from nmtdecode.models.loading import load_model

    loaded = load_model(DEMO)
    with open(os.path.join(DEMO, "test.en"), encoding="utf-8") as f:
        sources = [loaded.tokenizer.encode(line) for line in f.read().splitlines()[:lines]]
    values = dict(Config.from_values({}).decoding.__dict__)  # defaults, then the demo's own (configs/demo.yaml)
    values.update(loaded.defaults, length_penalty="avg", alpha=1.0)
    return loaded.model, loaded.rules, sources, values


def nllb_task(lines: int):
    import convert

    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network

    path = convert.nllb_600m_shape(os.path.join(OUT, "nllb-600m-shape"))
    model, _, rules = load_network(path, read_json(os.path.join(path, "config.json")))
    g = torch.Generator().manual_seed(1)
    sources = [
        torch.randint(4, 1000, (int(torch.randint(10, 30, (1,), generator=g)),), generator=g).tolist() + [2]
        for _ in range(lines)
    ]
    return model, rules, sources, dict(max_length=24, min_length=24)  # forced lengths: both do the same work


def marian_task(lines: int):
    from convert import marian_base_native, random_sources

    from nmtdecode.models.loading import load_model

    loaded = load_model(marian_base_native(OUT))
    sources = random_sources(lines, 2, loaded.model.cfg.tgt_vocab_size - 1, [0])
    return loaded.model, loaded.rules, sources, dict(max_length=32)  # EOS banned (main): 32 tokens each


def advance_only(batch: int, beam: int, vocab: int, steps: int = 40, repeat: int = 15):
    """The two searches' `advance` alone on the same random log-probs (nothing of the model), each
    `repeat` times in turn over `steps` steps of one batch: their bookkeeping per step."""
    from nmtdecode.search.beam import BeamSearch
    from nmtdecode.search.device.beam import DeviceBeamSearch
    from nmtdecode.search.penalties import LengthPenalty

    g = torch.Generator().manual_seed(0)
    logprobs = [
        torch.log_softmax(torch.randn(batch * (1 if t == 0 else beam), vocab, generator=g) * 3, -1)
        for t in range(steps)
    ]
    searches = {"host": BeamSearch, "device": DeviceBeamSearch}
    seconds: dict[str, list[float]] = {name: [] for name in searches}

    def run(cls):
        search = cls(
            batch_size=batch,
            beam_size=beam,
            max_steps=[steps] * batch,
            start_id=2,
            eos_id=3,
            penalty=LengthPenalty("avg", 1.0),
            early_stopping="top",
            device="cpu",
        )
        search.shrink = False
        for t in range(steps):
            search.advance(logprobs[t].clone(), t)

    with torch.inference_mode():
        for _ in range(repeat):
            for name, cls in searches.items():
                seconds[name].append(timed(lambda: run(cls))[0])
    print(
        f"{cpu_description()}, torch {torch.__version__}, {torch.get_num_threads()} threads; advance alone, "
        f"batch {batch}, beam {beam}, {vocab} tokens, {steps} steps, {repeat} rounds"
    )
    for name, times in seconds.items():
        print(
            f"{name:6s} ms a step: fastest {min(times) / steps * 1e3:.3f}, median "
            f"{statistics.median(times) / steps * 1e3:.3f}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="demo", choices=("demo", "nllb-shape", "marian-base"))
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (float16, CUDA graphs)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--advance-only",
        type=int,
        default=0,
        metavar="VOCAB",
        help="time the searches' advance alone on random log-probs over VOCAB tokens",
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.advance_only:
        return advance_only(args.batch, args.beam, args.advance_only)
    tasks = {"demo": demo_task, "nllb-shape": nllb_task, "marian-base": marian_task}
    model, rules, sources, values = tasks[args.model](args.lines)
    values.update(beam_size=args.beam)
    decoding = Config.from_values({k: v for k, v in values.items() if v is not None}).decoding
    device = torch.device(args.device)
    if device.type == "cuda":
        model = model.to(device, torch.float16)
    steps = step_runner_for(model, device)
    # marian-base's outputs run to their step limit: EOS banned, which (unlike --min-length) acts
    # alike at every step, so that the graphed variant replays every step but the first ones
    banned = [model.cfg.eos_id] if args.model == "marian-base" else []
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))  # length-sorted batches, as the CLI's
    batches = [[sources[i] for i in order[s : s + args.batch]] for s in range(0, len(order), args.batch)]
    decoders = {
        "host": BatchDecoder(model, decoding, rules, steps=steps, banned_ids=banned),
        "device": BatchDecoder(model, decoding, rules, steps=steps, banned_ids=banned, search_on="device"),
    }
    if device.type == "cuda":
        decoders["graphed"] = BatchDecoder(model, decoding, rules, steps=steps, banned_ids=banned, search_on="device")
        decoders["device"].search_graphs = None
    # per batch and variant, its seconds in each round; the variants alternate batch by batch (which
    # goes first too), so that what else runs on a shared machine falls on both alike
    seconds = {name: [[] for _ in batches] for name in decoders}
    outputs: dict[str, list] = {name: [None] * len(batches) for name in decoders}
    names = list(decoders)
    with torch.inference_mode():
        for r in range(args.rounds + 1):  # the first round warms up (traces, oneDNN kernels)
            for i, batch in enumerate(batches):
                for name in names if (r + i) % 2 else names[::-1]:
                    took, out = timed(lambda: [h[0].tokens for h in decoders[name].decode(batch).nbests])
                    if r:
                        seconds[name][i].append(took)
                    outputs[name][i] = out
    where = torch.cuda.get_device_name() if device.type == "cuda" else cpu_description()
    print(
        f"{where}, torch {torch.__version__}, {torch.get_num_threads()} threads; {args.model}, "
        f"{len(sources)} lines, beam {args.beam}, batch {args.batch}, {args.rounds} rounds"
    )
    totals = {}
    for name, per_batch in seconds.items():
        totals[name] = (sum(map(min, per_batch)), sum(map(statistics.median, per_batch)))
        print(f"{name:6s} sum of each batch's fastest {totals[name][0]:.3f} s, of its median {totals[name][1]:.3f} s")
    for name in names[1:]:
        same = sum(a == b for x, y in zip(outputs["host"], outputs[name]) for a, b in zip(x, y))
        print(
            f"host / {name}: {totals['host'][0] / totals[name][0]:.2f} (fastest), "
            f"{totals['host'][1] / totals[name][1]:.2f} (median); same 1-best: {same}/{len(sources)}"
        )
    graphs = getattr(decoders.get("graphed"), "search_graphs", None)
    if graphs is not None:
        print(f"graphed search steps: {graphs.captures} captured, {graphs.replays} replayed, on: {graphs.on}")


if __name__ == "__main__":
    main()
