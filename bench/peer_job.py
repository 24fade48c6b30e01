"""The demo translation job as a user of CTranslate2 or transformers writes it: a whole process
(imports, model load, SentencePiece, batches of 32, beam 5, writing), to time against
`nmtdecode translate` on the same file.

    python bench/peer_job.py ctranslate2|transformers MODEL_DIR DEMO_DIR SRC OUT THREADS [INTER [BEAM]]

MODEL_DIR is the demo model converted by bench/convert.py; DEMO_DIR gives the SentencePiece
model and the tokens the demo never generates. Each system runs with its own defaults.
THREADS is CTranslate2's intra_threads, INTER its inter_threads (batches translated at once,
default 1; transformers: 1 only); BEAM the beam size (default 5).
"""

from __future__ import annotations

import os
import sys


def main():
    system, model_dir, demo_dir, src, out, threads = sys.argv[1:7]
    inter, beam = (int(a) for a in (sys.argv[7:9] + ["1", "5"][len(sys.argv[7:9]) :]))
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=os.path.join(demo_dir, "spm.model"))
    with open(src, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    banned = [sp.pad_id(), sp.bos_id()]
    if system == "ctranslate2":
        import ctranslate2

        translator = ctranslate2.Translator(model_dir, device="cpu", intra_threads=int(threads), inter_threads=inter)
        pieces = [sp.encode(line, out_type=str) + ["</s>"] for line in lines]
        results = translator.translate_batch(
            pieces, beam_size=beam, max_batch_size=32, suppress_sequences=[[sp.id_to_piece(t)] for t in banned]
        )
        outputs = [sp.decode(r.hypotheses[0]) for r in results]
    else:
        if inter != 1:
            raise SystemExit("transformers: one batch at a time")
        import torch
        import transformers

        torch.set_num_threads(int(threads))
        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
        order = sorted(range(len(lines)), key=lambda i: len(lines[i]))
        outputs = [""] * len(lines)
        with torch.inference_mode():
            for start in range(0, len(order), 32):
                batch = order[start : start + 32]
                ids = [sp.encode(lines[i]) + [sp.eos_id()] for i in batch]
                padded = torch.full((len(ids), max(map(len, ids))), sp.pad_id())
                for row, seq in enumerate(ids):
                    padded[row, : len(seq)] = torch.tensor(seq)
                generated = model.generate(
                    input_ids=padded,
                    attention_mask=(padded != sp.pad_id()).long(),
                    num_beams=beam,
                    bad_words_ids=[[t] for t in banned],
                    max_new_tokens=64,
                )
                for i, row in zip(batch, generated[:, 1:].tolist()):
                    outputs[i] = sp.decode([t for t in row if t not in (sp.pad_id(), sp.eos_id())])
    with open(out, "w", encoding="utf-8") as f:
        f.write("".join(o + "\n" for o in outputs))


if __name__ == "__main__":
    main()
