"""Stage 3: the joint SentencePiece model, and the copy of it that ships.

SentencePiece records the paths it was trained from in its model file; the
shipped copy leaves them out (plain protobuf wire format, so that the recipe
needs no protobuf package).
"""

from __future__ import annotations

from pathlib import Path

from nmtdecode.models.tokenizer import protobuf_fields, read_varint

from .common import BOS, EOS, PAD, UNK, read_lines, write_lines


def train_spm(args, scratch: Path):
    """One unigram model over both languages of the training split. Its
    special ids are the model's (pad 0, unk 1, bos 2, eos 3)."""
    import sentencepiece as spm

    text = scratch / "spm_input.txt"
    write_lines(text, read_lines(scratch / "train.en") + read_lines(scratch / "train.de"))
    spm.SentencePieceTrainer.train(
        input=str(text),
        model_prefix=str(scratch / "spm"),
        vocab_size=args.vocab_size,
        model_type="unigram",
        character_coverage=0.9999,
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        input_sentence_size=0,  # use every line: no sampling, so the model is reproducible
        num_threads=args.threads,
        minloglevel=2,
    )
    text.unlink()


# --------------------------------------------------------------------------- protobuf wire format


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def without_training_paths(model: bytes) -> bytes:
    """The SentencePiece model minus the paths it was trained from: its TrainerSpec
    (field 2) records `input` (1) and `model_prefix` (2), absolute paths of the
    machine that trained it. Pieces and normalizer are untouched."""
    out = bytearray()
    for number, wire, raw in protobuf_fields(model):
        if number == 2 and wire == 2:
            key_end = read_varint(raw, 0)[1]
            body = read_varint(raw, key_end)[1]
            spec = b"".join(r for n, _, r in protobuf_fields(raw[body:]) if n not in (1, 2))
            raw = raw[:key_end] + _encode_varint(len(spec)) + spec
        out += raw
    return bytes(out)
