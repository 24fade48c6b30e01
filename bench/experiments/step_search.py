"""What does the search's share of a large-vocabulary step cost, and in which form is it cheapest?

    python bench/experiments/step_search.py [--threads 2] [--isa native|avx2] [--sentences 16]
        [--beam 4] [--vocab 256206] [--repeat 20] [--cpu-time]

After the output projection, a beam step turns the logits of every row into log-probabilities
(in place), adds each row's running total and takes the 2k best of each sentence's beam x vocab
candidates (one million at beam 4 on NLLB's 256k vocabulary). Each way below is timed on the
same random logits, best of --repeat, and checked against one plain `topk` (same scores):

  totals first        log_softmax in place; the running totals added in place to every row; top_k
                      (search/beam.py: the k blocks of 32 with the largest maxima, then a topk of
                      their values) of each sentence's beam x vocab;
  rows first          log_softmax in place; search/beam.py's best_continuations: each row's 2k best
                      (top_k), its running total added to those only, then the 2k best of each
                      sentence's beam x 2k;
  one topk            log_softmax in place; totals added; one topk over beam x vocab (the reference);
  logits first        no log_softmax: each row's 2k best logits, minus the row's log-sum-exp
                      (torch.logsumexp), plus its running total, then the 2k best; its scores
                      round differently (checked only to 1e-4);
  log_softmax alone   the log-probabilities only: what the other ways pay before the search.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/, for common
from common import kernel_experiment_parser, start_kernel_experiment  # noqa: E402


def main():
    parser = kernel_experiment_parser(__doc__, repeat=20)
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=256206)
    args = parser.parse_args()
    clock = start_kernel_experiment(args)
    import torch

    from nmtdecode.models.gemm import cpu_description
    from nmtdecode.search.candidates import best_continuations, top_k

    n, k, vocab = args.sentences, args.beam, args.vocab
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(n * k, vocab, generator=generator) * 3
    alive = -torch.rand(n * k, generator=generator) * 10

    def totals_first(x):
        totals = torch.log_softmax(x, dim=-1, out=x).add_(alive[:, None]).view(n, -1)
        return top_k(totals, 2 * k)[0]

    def rows_first(x):
        return best_continuations(torch.log_softmax(x, dim=-1, out=x), alive, n, k, eos_id=2).scores

    def one_topk(x):
        return torch.log_softmax(x, dim=-1, out=x).add_(alive[:, None]).view(n, -1).topk(2 * k, dim=1)[0]

    def logits_first(x):
        best, _ = top_k(x, 2 * k)
        best += alive[:, None] - torch.logsumexp(x, dim=-1, keepdim=True)
        return best.view(n, -1).topk(2 * k, dim=1)[0]

    ways = {
        "totals first": totals_first,
        "rows first": rows_first,
        "one topk": one_topk,
        "logits first": logits_first,
        "log_softmax alone": lambda x: torch.log_softmax(x, dim=-1, out=x),
    }
    tolerance = {"logits first": 1e-4}
    print(f"CPU: {cpu_description()}; ISA {args.isa}; {args.threads} threads; torch {torch.__version__}")
    clock_name = "CPU" if args.cpu_time else "wall"
    print(f"{n} sentences x beam {k} x vocabulary {vocab}; {clock_name} ms, best of {args.repeat}\n")
    print("| way | ms | ÷ totals first |")
    print("|---|---|---|")
    with torch.inference_mode():
        expected = one_topk(logits.clone())
        times = {}
        for way, work in ways.items():
            if way != "log_softmax alone":
                torch.testing.assert_close(work(logits.clone()), expected, rtol=0, atol=tolerance.get(way, 0.0))
            best = float("inf")
            for _ in range(args.repeat):
                x = logits.clone()
                start = clock()
                work(x)
                best = min(best, clock() - start)
            times[way] = best
        for way, seconds in times.items():
            print(f"| {way} | {seconds * 1e3:.1f} | {seconds / times['totals first']:.2f} |")


if __name__ == "__main__":
    main()
