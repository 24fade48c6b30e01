"""Diverse beam search against transformers' own group beam search, which left the library after
v4.55 (so the test suite, on transformers 5, checks an unbatched reading of its definition
instead: tests/test_diverse.py). This is the check against the real thing, run by hand:

    python3 -m venv ../tf455 && ../tf455/bin/pip install torch==2.13.0 transformers==4.55.4
    .venv/bin/python scripts/check_group_beam_hf.py --hf-python ../tf455/bin/python

The transformers side (this file run with --hf-side DIR under that interpreter) builds random
tiny Marian and mBART models (mBART with a forced first token), saves them, and runs
`generate(num_beam_groups=..., diversity_penalty=...)` over early_stopping False/True/"never"
and length penalties 1 and 0; it also runs HammingDiversityLogitsProcessor on random tensors.
Our side loads the same checkpoints and compares every hypothesis of the n-best (tokens, and
`sequences_scores` within 1e-4) and the processor against tests/test_diverse.py's definition.
Exit 0 when everything matches.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

VOCAB, EOS, PAD = 64, 2, 1
SETTINGS = [(6, 3, 0.8), (4, 2, 1.5), (6, 2, 0.4)]  # beams, groups, diversity penalty


def hf_side(directory: str):
    import torch
    import transformers
    from transformers import GenerationConfig
    from transformers.generation.logits_process import HammingDiversityLogitsProcessor

    common = dict(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        bos_token_id=0,
        pad_token_id=PAD,
        eos_token_id=EOS,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        forced_eos_token_id=None,
    )
    families = {
        "marian": (
            transformers.MarianConfig,
            transformers.MarianMTModel,
            dict(decoder_start_token_id=PAD, scale_embedding=True, activation_function="swish"),
            None,
        ),
        "mbart": (
            transformers.MBartConfig,
            transformers.MBartForConditionalGeneration,
            dict(decoder_start_token_id=EOS, scale_embedding=True, activation_function="gelu"),
            60,
        ),
    }
    cases = {}
    for family, (config_cls, model_cls, extra, forced) in families.items():
        for seed in (0, 1):
            for beams, groups, penalty in SETTINGS:
                for early_stopping in (False, True, "never"):
                    for length_penalty in (1.0, 0.0):
                        name = f"{family}-seed{seed}-k{beams}-g{groups}-{early_stopping}-lp{length_penalty}"
                        torch.manual_seed(seed)
                        model = model_cls(config_cls(**common, **extra)).eval()
                        with torch.no_grad():
                            for pname, p in model.named_parameters():
                                if "norm" in pname:
                                    p.normal_(1.0 if pname.endswith("weight") else 0.0, 0.1)
                                elif "embed_positions" not in pname or family != "marian":
                                    p.normal_(0.0, 0.4)
                            model.final_logits_bias[0, EOS] = 4.0  # hypotheses end at varied steps
                        model.generation_config = GenerationConfig(
                            decoder_start_token_id=model.config.decoder_start_token_id,
                            bos_token_id=0,
                            eos_token_id=EOS,
                            pad_token_id=PAD,
                            num_beams=beams,
                            num_beam_groups=groups,
                            diversity_penalty=penalty,
                            max_length=16,
                            early_stopping=early_stopping,
                            length_penalty=length_penalty,
                            forced_bos_token_id=forced,
                        )
                        path = os.path.join(directory, name)
                        model.save_pretrained(path)
                        g = torch.Generator().manual_seed(seed)
                        rows = [torch.randint(4, VOCAB, (n,), generator=g).tolist() + [EOS] for n in (9, 3, 6, 1, 12)]
                        ids = torch.full((len(rows), max(map(len, rows))), PAD)
                        for i, row in enumerate(rows):
                            ids[i, : len(row)] = torch.tensor(row)
                        out = model.generate(
                            input_ids=ids,
                            attention_mask=(ids != PAD).long(),
                            return_dict_in_generate=True,
                            output_scores=True,
                            num_return_sequences=beams,
                            trust_remote_code=True,
                        )
                        skip = 1 + (forced is not None)  # the decoder start token, the forced token
                        outputs = []
                        for sequence in out.sequences.tolist():
                            tokens = sequence[skip:]
                            tokens = tokens[: tokens.index(EOS)] if EOS in tokens else tokens
                            outputs.append([t for t in tokens if t != PAD])
                        cases[name] = dict(
                            path=path,
                            rows=rows,
                            beams=beams,
                            groups=groups,
                            penalty=penalty,
                            forced=forced,
                            outputs=outputs,
                            scores=out.sequences_scores.tolist(),
                        )
    processor = []
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        current = torch.randint(0, 10, (18,), generator=g)  # 3 sentences x 6 beams
        for group in range(3):
            scores = torch.randn(6, 10, generator=g)  # 3 sentences x 2 beams of the group
            hamming = HammingDiversityLogitsProcessor(0.9, num_beams=6, num_beam_groups=3)
            penalised = hamming(None, scores.clone(), current_tokens=current, beam_group_idx=group)
            processor.append(
                dict(scores=scores.tolist(), current=current.tolist(), group=group, penalised=penalised.tolist())
            )
    with open(os.path.join(directory, "hf.json"), "w") as f:
        json.dump(dict(version=transformers.__version__, cases=cases, processor=processor), f)


def our_side(directory: str) -> int:
    import torch

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from nmtdecode.options.config import Config
    from nmtdecode.models.checkpoint import read_json
    from nmtdecode.models.formats.huggingface import load_network
    from nmtdecode.engine.decoding import BatchDecoder
    from tests.test_diverse import hamming_definition

    with open(os.path.join(directory, "hf.json")) as f:
        hf = json.load(f)
    failed = 0
    for name, case in hf["cases"].items():
        model, defaults, rules = load_network(case["path"], read_json(os.path.join(case["path"], "config.json")))
        config = Config.from_values({"n_best": case["beams"], "beam_size": case["beams"]})
        decoding = config.with_model_defaults(defaults).decoding  # groups and penalty from generation_config
        nbests = BatchDecoder(model.eval(), decoding, rules).decode(case["rows"]).nbests
        hyps = [h for nbest in nbests for h in nbest]
        tokens = [h.tokens[1:] if case["forced"] is not None else h.tokens for h in hyps]
        close = all(abs(h.score - s) <= 1e-4 + 1e-5 * abs(s) for h, s in zip(hyps, case["scores"]))
        if tokens != case["outputs"] or not close:
            failed += 1
            print(f"differs: {name}")
    print(
        f"group beam search: {len(hf['cases']) - failed} of {len(hf['cases'])} settings identical to "
        f"transformers {hf['version']} (every n-best hypothesis; scores within 1e-4)"
    )
    worst = max(
        (
            hamming_definition(torch.tensor(p["scores"]), torch.tensor(p["current"]), p["group"], 6, 3, 0.9)
            - torch.tensor(p["penalised"])
        )
        .abs()
        .max()
        .item()
        for p in hf["processor"]
    )
    print(f"HammingDiversityLogitsProcessor: largest difference from the tests' definition {worst}")
    return 1 if failed or worst > 0 else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hf-python", help="an interpreter with transformers 4.55 (and torch)")
    parser.add_argument("--hf-side", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hf_side:
        return hf_side(args.hf_side)
    if not args.hf_python:
        parser.error("give --hf-python PATH (see this file's docstring)")
    with tempfile.TemporaryDirectory(prefix="group-beam-") as directory:
        subprocess.run([args.hf_python, os.path.abspath(__file__), "--hf-side", directory], check=True)
        sys.exit(our_side(directory))


if __name__ == "__main__":
    main()
