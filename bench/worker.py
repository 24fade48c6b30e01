"""Decode one input set with one system and print a JSON result line.

Run as a separate process per measurement, so that peak memory (ru_maxrss) is
that system's own. Every system gets the same token ids, the same batch size,
beam size, length limits and thread count; tokenization is not timed.

    python bench/worker.py SYSTEM MODEL_DIR INPUT.json --beam 5 --batch 32 --threads 2 [--fixed-length N]
SYSTEM: nmtdecode | nmtdecode-int8 | nmtdecode-bf16 | transformers | ctranslate2 | ctranslate2-int8
        | nmtdecode-file (the CLI job on a text file INPUT; for peak memory against input size)
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


def run_nmtdecode(args, task):
    import torch

    from nmtdecode.config import Config
    from nmtdecode.models.loading import load_model
    from nmtdecode.models.quantize import quantize_int8
    from nmtdecode.translator import Translator

    loaded = load_model(args.model) if task["format"] == "native" else None
    if loaded is None:
        from nmtdecode.models.checkpoint import read_json
        from nmtdecode.models.formats.huggingface import load_network

        model, defaults, rules = load_network(args.model, read_json(f"{args.model}/config.json"))
    else:
        model, defaults, rules = loaded.model, loaded.defaults, loaded.rules
    if args.system.endswith("int8"):
        quantize_int8(model)
    elif args.system.endswith("bf16"):
        model.to(torch.bfloat16)
    values = {"beam_size": args.beam, "max_length": task["max_length"], "length_penalty": "avg", "alpha": 1.0}
    if args.fixed_length:
        values.update(min_length=args.fixed_length, max_length=args.fixed_length)
    decoding = Config.from_values(values).decoding
    translator = Translator(model, decoding, rules)
    sources = task["sources"]
    translator.translate_batch(sources[: min(4, len(sources))])  # warm-up
    start = time.perf_counter()
    outputs = []
    with torch.inference_mode():
        for i in range(0, len(sources), args.batch):
            outputs += [h[0].tokens for h in translator.translate_batch(sources[i : i + args.batch])]
    return time.perf_counter() - start, outputs


def run_transformers(args, task):
    import torch
    import transformers

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(args.model).eval()
    pad = model.config.pad_token_id
    eos = model.config.eos_token_id
    kwargs = dict(num_beams=args.beam, do_sample=False, length_penalty=1.0, early_stopping=False,
                  max_new_tokens=task["max_length"], bad_words_ids=[[t] for t in task["banned"]] or None)
    if args.fixed_length:
        kwargs.update(min_new_tokens=args.fixed_length, max_new_tokens=args.fixed_length)

    def generate(batch):
        ids = torch.full((len(batch), max(map(len, batch))), pad)
        for row, source in enumerate(batch):
            ids[row, : len(source)] = torch.tensor(source)
        out = model.generate(input_ids=ids, attention_mask=(ids != pad).long(), **kwargs)
        result = []
        for row in out[:, 1:].tolist():
            result.append(row[: row.index(eos)] if eos in row else [t for t in row if t != pad])
        return result

    sources = task["sources"]
    with torch.inference_mode():
        generate(sources[:4])
        start = time.perf_counter()
        outputs = []
        for i in range(0, len(sources), args.batch):
            outputs += generate(sources[i : i + args.batch])
    return time.perf_counter() - start, outputs


def run_ctranslate2(args, task):
    import ctranslate2

    compute = "int8" if args.system.endswith("int8") else "float32"
    translator = ctranslate2.Translator(args.model, device="cpu", compute_type=compute, intra_threads=args.threads,
                                        inter_threads=1)
    tokens = task["tokens"]
    sources = [[tokens[i] for i in s] for s in task["sources"]]
    index = {t: i for i, t in enumerate(tokens)}
    kwargs = dict(beam_size=args.beam, max_batch_size=args.batch, length_penalty=1.0,
                  max_decoding_length=task["max_length"], suppress_sequences=[[tokens[t]] for t in task["banned"]] or None)
    if args.fixed_length:
        kwargs.update(min_decoding_length=args.fixed_length, max_decoding_length=args.fixed_length)
    translator.translate_batch(sources[:4], **kwargs)
    start = time.perf_counter()
    results = translator.translate_batch(sources, **kwargs)
    seconds = time.perf_counter() - start
    return seconds, [[index[t] for t in r.hypotheses[0]] for r in results]


def run_file_job(args):
    """The whole CLI job on a text file (reading, batching, writing): its peak memory should not
    grow with the number of input lines."""
    import tempfile

    from nmtdecode.config import Config
    from nmtdecode.run import translate_job

    with tempfile.TemporaryDirectory() as tmp:
        config = Config.from_values({"model": args.model, "src": args.task, "output": f"{tmp}/out.txt",
                                     "beam_size": args.beam, "batch_size": args.batch, "threads": args.threads,
                                     "quiet": True})
        start = time.perf_counter()
        summary = translate_job(config)
        seconds = time.perf_counter() - start
    return {"system": "nmtdecode-file", "seconds": seconds, "sentences": summary.sentences,
            "target_tokens": summary.target_tokens, "peak_rss_mb": peak_rss_mb(), "outputs": []}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("system")
    parser.add_argument("model")
    parser.add_argument("task")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--fixed-length", type=int, default=0)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.system == "nmtdecode-file":
        json.dump(run_file_job(args), sys.stdout)
        return
    with open(args.task, encoding="utf-8") as f:
        task = json.load(f)
    runner = {"nmtdecode": run_nmtdecode, "nmtdecode-int8": run_nmtdecode, "nmtdecode-bf16": run_nmtdecode,
              "transformers": run_transformers,
              "ctranslate2": run_ctranslate2, "ctranslate2-int8": run_ctranslate2}[args.system]
    seconds, outputs = runner(args, task)
    json.dump({"system": args.system, "seconds": seconds, "sentences": len(outputs),
               "target_tokens": sum(map(len, outputs)), "peak_rss_mb": peak_rss_mb(), "outputs": outputs},
              sys.stdout)


if __name__ == "__main__":
    main()
