"""Stage 3: the joint SentencePiece model, and the copy of it that ships.

SentencePiece records the paths it was trained from in its model file; the
shipped copy leaves them out (plain protobuf wire format, so that the recipe
needs no protobuf package).
"""

from __future__ import annotations

from pathlib import Path

from .common import BOS, EOS, PAD, UNK, read_lines, write_lines


def train_spm(args, scratch: Path):
    """One unigram model over both languages of the training split. Its
    special ids are the model's (pad 0, unk 1, bos 2, eos 3)."""
    import sentencepiece as spm

    text = scratch / "spm_input.txt"
    write_lines(text, read_lines(scratch / "train.en") + read_lines(scratch / "train.de"))
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(scratch / "spm"), vocab_size=args.vocab_size, model_type="unigram",
        character_coverage=0.9999, pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
        input_sentence_size=0,  # use every line: no sampling, so the model is reproducible
        num_threads=args.threads, minloglevel=2,
    )
    text.unlink()


# --------------------------------------------------------------------------- protobuf wire format


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if byte < 0x80:
            return value, i


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def _fields(data: bytes):
    """(field number, wire type, raw bytes of the whole field) of one protobuf message."""
    i = 0
    while i < len(data):
        start = i
        key, i = _varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            size, i = _varint(data, i)
            i += size
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
        yield key >> 3, wire, data[start:i]


def without_training_paths(model: bytes) -> bytes:
    """The SentencePiece model minus the paths it was trained from: its TrainerSpec
    (field 2) records `input` (1) and `model_prefix` (2), absolute paths of the
    machine that trained it. Pieces and normalizer are untouched."""
    out = bytearray()
    for number, wire, raw in _fields(model):
        if number == 2 and wire == 2:
            key_end = _varint(raw, 0)[1]
            body = _varint(raw, key_end)[1]
            spec = b"".join(r for n, _, r in _fields(raw[body:]) if n not in (1, 2))
            raw = raw[:key_end] + _encode_varint(len(spec)) + spec
        out += raw
    return bytes(out)
