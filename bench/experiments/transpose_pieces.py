"""Whole decodings with a swapped product's results transposed into place whole or in pieces.

    python bench/experiments/transpose_pieces.py [--beam 4] [--threads 2] [--isa native|avx2]
        [--repeat 3] [--cpu-time]

The benchmark's batch of 16 sentences on the NLLB-600M shape (profile_decode.py's batch), 32
tokens each, decoded by the eager step: its tied 256k x 1024 output projection is kept plain
and multiplied with the roles swapped (models/gemm.py). Each round decodes the batch once with
every 16 MB result transposed into the logits whole (the former way) and once in pieces of
TRANSPOSE_CHUNK_BYTES (`transpose_into`), interleaved, and checks that both give the same
hypotheses; it prints each decoding's seconds, of which in `transpose_into` (timed around each
call, without a profiler: torch.profiler counted the copies several times their time), and the
best of each way.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import kernel_experiment_parser, start_kernel_experiment  # noqa: E402


def main() -> None:
    parser = kernel_experiment_parser(__doc__, repeat=3)
    parser.add_argument("--beam", type=int, default=4)
    args = parser.parse_args()
    clock = start_kernel_experiment(args)
    import torch
    from profile_decode import profiled_batch

    from nmtdecode.engine.decoding import BatchDecoder
    from nmtdecode.models import gemm
    from nmtdecode.models.placement import Placement, place_model
    from nmtdecode.options.config import Config

    copying = [0.0]
    transpose_into = gemm.transpose_into

    def timed_transpose_into(target, source):
        start = time.perf_counter()
        transpose_into(target, source)
        copying[0] += time.perf_counter() - start

    gemm.transpose_into = timed_transpose_into
    model, rules, sources, forced = profiled_batch("nllb-600m")
    place_model(model, Placement(backend="onednn"))
    values = {"beam_size": args.beam, "length_penalty": "avg", "alpha": 1.0, **forced}
    decoder = BatchDecoder(model, Config.from_values(values).decoding, rules)
    ways = {"whole": 1 << 60, f"pieces of {gemm.TRANSPOSE_CHUNK_BYTES >> 10} KB": gemm.TRANSPOSE_CHUNK_BYTES}
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    print(f"{gemm.cpu_description()}, --isa {args.isa}, {args.threads} threads, beam {args.beam}")
    with torch.inference_mode():
        decoder.decode(sources[:4])  # warm-up
        outputs = {}
        for _ in range(args.repeat):
            for way, size in ways.items():
                gemm.TRANSPOSE_CHUNK_BYTES = size
                copying[0] = 0.0
                start = clock()
                nbests = decoder.decode(sources).nbests
                seconds[way].append(clock() - start)
                outputs[way] = [[(h.tokens, h.score) for h in n] for n in nbests]
                print(f"{way}: {seconds[way][-1]:.2f} s, of which transpose_into {copying[0]:.2f} s", flush=True)
    assert len({repr(o) for o in outputs.values()}) == 1, "the ways gave other hypotheses"
    print("best: " + ", ".join(f"{way} {min(times):.2f} s" for way, times in seconds.items()))


if __name__ == "__main__":
    main()
