"""Decode one input set with one system and print a JSON result line.

Run as a separate process per measurement, so that peak memory (VmHWM) is
that system's own. Every system gets the same token ids, the same batches,
beam size, length limits and thread count; tokenization is not timed.

    python bench/worker.py SYSTEM MODEL_DIR TASK.json --beam 5 --batch 32 --threads 2
        [--precision float32|int8|bfloat16] [--rule top|true|false|never] [--gemm auto|onednn|torch]
        [--length-penalty A] [--fixed-length N] [--inter-threads N] [--max-length N] [--traced-step auto|off]
SYSTEM: nmtdecode | transformers | ctranslate2
        | opennmt-py (OpenNMT-py's Translator, as onmt_translate builds it; bench/opennmt_py.py)
        | nmtdecode-file (the CLI job on a text file TASK; for peak memory against input size)

--rule is nmtdecode's stop rule (transformers always runs early_stopping=False, CTranslate2
its own rule, OpenNMT-py its own); --length-penalty is the exponent alpha of the average length
penalty (nmtdecode and OpenNMT-py: 0 means `none`; CTranslate2: 0 switches it to its early-exit
rule, OpenNMT's `top`). --fixed-length N sets the minimum and maximum length to N (OpenNMT-py:
-min_length N -max_length N -max_length_ratio 0, which yields exactly N tokens, EOS banned
until then). --inter-threads N decodes N batches at once, each operation with --threads
threads (nmtdecode: batch_threads.in_order, as its --inter-threads; CTranslate2: inter_threads N and
intra_threads --threads). --max-length N replaces the task's output limit: with 1, a run is the
encoder and one step, so the time above that of a full run is the decoding steps'.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM). Not ru_maxrss: Linux carries that
    over from the parent across exec."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def clocked(work):
    """`work()`'s wall seconds, its CPU seconds (every thread of this process: on a shared machine,
    what the work cost apart from the time it waited for a core), and what it returned."""
    start, cpu_start = time.perf_counter(), time.process_time()
    result = work()
    return {"seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu_start}, result


def decode_in_batches(translate, sources, batch_size, at_once=1):
    """Warm up on a few sentences, then time `translate` over the batches, `at_once` of them at the
    same time (nmtdecode's --inter-threads: batch_threads.in_order); returns (clocked's times, outputs)."""
    from nmtdecode.jobs.batch_threads import in_order

    translate(sources[: min(4, len(sources))])
    batches = [sources[i : i + batch_size] for i in range(0, len(sources), batch_size)]
    return clocked(lambda: [out for _, translated in in_order(translate, batches, at_once) for out in translated])


def run_nmtdecode(args, task):
    import torch

    from nmtdecode.options.config import Config
    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.detect import model_format
    from nmtdecode.models.formats.huggingface import load_network
    from nmtdecode.models import memory
    from nmtdecode.models.loading import load_model
    from nmtdecode.models.placement import Placement
    from nmtdecode.engine.decoding import BatchDecoder
    from nmtdecode.models.steps import step_runner_for

    start = time.perf_counter()
    dtype = torch.bfloat16 if args.precision == "bfloat16" else torch.float32
    placement = Placement(dtype=dtype, backend="int8" if args.precision == "int8" else args.gemm)  # as Engine.load
    if model_format(args.model) in ("native", "opennmt-py"):  # a converted model, whatever the task's source
        loaded = load_model(args.model, placement=placement)
        model, rules = loaded.model, loaded.rules
    else:
        model, _, rules = load_network(args.model, read_json(f"{args.model}/config.json"), placement)
    backend = model.backend
    memory.tune_allocator()  # as Engine.load
    load_seconds = time.perf_counter() - start
    values = {
        "beam_size": args.beam,
        "max_length": task["max_length"],
        "early_stopping": args.rule,
        "length_penalty": "avg" if args.length_penalty else "none",
        "alpha": args.length_penalty or 1.0,
    }
    if args.fixed_length:
        values.update(min_length=args.fixed_length, max_length=args.fixed_length)
    quantize = "int8" if args.precision == "int8" else "none"
    steps = step_runner_for(model, torch.device("cpu"), "off", args.traced_step, quantize)  # as Engine.load decides
    translator = BatchDecoder(model, Config.from_values(values).decoding, rules, steps=steps)

    def translate(batch):
        with torch.inference_mode():  # in the thread that decodes it
            return [n[0].tokens for n in translator.decode(batch).nbests]

    times, outputs = decode_in_batches(translate, task["sources"], args.batch, args.inter_threads)
    return times, outputs, backend, load_seconds


def generate(
    model,
    beam: int,
    max_length: int,
    banned: list[int],
    fixed_length: int = 0,
    length_penalty: float = 1.0,
    device=None,
):
    """`transformers` `generate` as the benchmarks run it: a function from a batch of source ids to
    the 1-best output ids (EOS cut), with Hugging Face's stop rule (early_stopping=False), the
    banned tokens, and with fixed_length every output exactly that long."""
    import torch

    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    kwargs = dict(
        num_beams=beam,
        do_sample=False,
        length_penalty=length_penalty,
        early_stopping=False,
        max_new_tokens=max_length,
        bad_words_ids=[[t] for t in banned] or None,
    )
    if fixed_length:
        kwargs.update(min_new_tokens=fixed_length, max_new_tokens=fixed_length)

    def translate(batch):
        ids = torch.full((len(batch), max(map(len, batch))), pad)
        for row, source in enumerate(batch):
            ids[row, : len(source)] = torch.tensor(source)
        ids = ids.to(device) if device is not None else ids
        out = model.generate(input_ids=ids, attention_mask=(ids != pad).long(), **kwargs)
        result = []
        for row in out[:, 1:].tolist():
            result.append(row[: row.index(eos)] if eos in row else [t for t in row if t != pad])
        return result

    return translate


def run_transformers(args, task):
    import torch
    import transformers

    start = time.perf_counter()
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(args.model).eval()
    load_seconds = time.perf_counter() - start
    translate = generate(model, args.beam, task["max_length"], task["banned"], args.fixed_length, args.length_penalty)
    with torch.inference_mode():
        times, outputs = decode_in_batches(translate, task["sources"], args.batch)
    return times, outputs, "torch", load_seconds


def run_ctranslate2(args, task):
    import ctranslate2

    start = time.perf_counter()
    translator = ctranslate2.Translator(
        args.model,
        device="cpu",
        compute_type=args.precision,
        intra_threads=args.threads,
        inter_threads=args.inter_threads,
    )
    load_seconds = time.perf_counter() - start
    tokens = task["tokens"]
    sources = [[tokens[i] for i in s] for s in task["sources"]]
    index = {t: i for i, t in enumerate(tokens)}
    kwargs = dict(
        beam_size=args.beam,
        max_batch_size=args.batch,
        length_penalty=args.length_penalty,
        max_decoding_length=task["max_length"],
        suppress_sequences=[[tokens[t]] for t in task["banned"]] or None,
    )
    if args.fixed_length:
        kwargs.update(min_decoding_length=args.fixed_length, max_decoding_length=args.fixed_length)
    translator.translate_batch(sources[:4], **kwargs)
    times, results = clocked(lambda: translator.translate_batch(sources, **kwargs))  # length-sorted: our batches
    return times, [[index[t] for t in r.hypotheses[0]] for r in results], "ctranslate2's own", load_seconds


def run_opennmt(args, task):
    import torch

    from opennmt_py import translate_batch, translator

    if args.precision != "float32":  # its -precision int8 is a no-op on CPU in 3.5.1 (load_test_model)
        raise SystemExit("opennmt-py: float32 only")
    options = {
        "beam_size": args.beam,
        "max_length": task["max_length"],
        "length_penalty": "avg" if args.length_penalty else "none",
        "alpha": args.length_penalty or 1.0,
    }
    if args.fixed_length:  # its step limit is min(max_length, |src| * max_length_ratio + 5): ratio 0 lifts it
        options.update(min_length=args.fixed_length, max_length=args.fixed_length, max_length_ratio=0)
    start = time.perf_counter()
    onmt = translator(args.model, **options)
    load_seconds = time.perf_counter() - start
    with torch.no_grad():  # as onmt_translate runs (its translate_batch also sets no_grad)
        times, outputs = decode_in_batches(lambda batch: translate_batch(onmt, batch), task["sources"], args.batch)
    return times, outputs, "torch", load_seconds


def run_file_job(args):
    """The whole CLI job on a text file (reading, batching, writing): its peak memory should not
    grow with the number of input lines."""
    import tempfile

    from nmtdecode.options.config import Config
    from nmtdecode.jobs.run import translate_job

    with tempfile.TemporaryDirectory() as tmp:
        config = Config.from_values(
            {
                "model": args.model,
                "src": args.task,
                "output": f"{tmp}/out.txt",
                "beam_size": args.beam,
                "batch_size": args.batch,
                "threads": args.threads,
                "quiet": True,
            }
        )
        start = time.perf_counter()
        summary = translate_job(config)
        seconds = time.perf_counter() - start
    return {
        "system": "nmtdecode-file",
        "seconds": seconds,
        "sentences": summary.sentences,
        "target_tokens": summary.target_tokens,
        "peak_rss_mb": peak_rss_mb(),
        "outputs": [],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("system", choices=["nmtdecode", "transformers", "ctranslate2", "opennmt-py", "nmtdecode-file"])
    parser.add_argument("model")
    parser.add_argument("task")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="threads of each operation (CTranslate2: intra_threads)")
    parser.add_argument(
        "--inter-threads",
        type=int,
        default=1,
        help="batches decoded at once (nmtdecode: --inter-threads; CTranslate2: inter_threads)",
    )
    parser.add_argument("--fixed-length", type=int, default=0)
    parser.add_argument("--precision", default="float32", choices=["float32", "int8", "bfloat16"])
    parser.add_argument("--rule", default="top", choices=["top", "true", "false", "never"])
    parser.add_argument("--gemm", default="auto", choices=["auto", "onednn", "torch"])
    parser.add_argument(
        "--traced-step",
        default="auto",
        choices=["auto", "off"],
        help="nmtdecode: its CPU step recorded by TorchScript, as the engine runs it (auto)",
    )
    parser.add_argument("--length-penalty", type=float, default=1.0)
    parser.add_argument("--max-length", type=int, default=0, help="output limit instead of the task's")
    args = parser.parse_args()
    if args.system in ("nmtdecode", "nmtdecode-file"):
        start_as_the_command()
    if args.system != "ctranslate2":  # a CTranslate2 process does not pay for importing torch
        import torch

        torch.set_num_threads(args.threads)
    if args.system == "nmtdecode-file":
        json.dump(run_file_job(args), sys.stdout)
        end_as_the_cli_does()
    with open(args.task, encoding="utf-8") as f:
        task = json.load(f)
    if args.max_length:
        task["max_length"] = args.max_length
    runner = {
        "nmtdecode": run_nmtdecode,
        "transformers": run_transformers,
        "ctranslate2": run_ctranslate2,
        "opennmt-py": run_opennmt,
    }
    times, outputs, backend, load_seconds = runner[args.system](args, task)
    json.dump(
        {
            "system": args.system,
            **times,
            "load_seconds": load_seconds,
            "sentences": len(outputs),
            "gemm": backend,
            "target_tokens": sum(map(len, outputs)),
            "peak_rss_mb": peak_rss_mb(),
            "outputs": outputs,
        },
        sys.stdout,
    )
    if args.system == "nmtdecode":
        end_as_the_cli_does()


def start_as_the_command() -> None:
    """Start an nmtdecode worker as `nmtdecode translate` starts (cli.prepare_process: among
    others, OpenMP's idle workers spinning briefly), then import the engine, and torch with it,
    as its first model load does."""
    from nmtdecode.cli import prepare_process
    from nmtdecode.engine.importing import import_engine

    prepare_process()
    import_engine()


def end_as_the_cli_does() -> None:
    """End an nmtdecode worker as `nmtdecode translate` ends (cli.exit_now: the output flushed, no
    interpreter teardown), so that its process time is the command's. The teardown of a process
    that imported torch takes 0.3-0.65 s (docs/speed.md#the-whole-process); the other systems'
    workers end as their users' scripts do."""
    from nmtdecode.cli import exit_now

    exit_now(0)


if __name__ == "__main__":
    main()
