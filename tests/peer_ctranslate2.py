"""CTranslate2 model folders written by CTranslate2's own converters (test-only: `ctranslate2` is in
the test extra), from small seeded models: transformers' Marian, BART, mBART-50, M2M100 and T5
(v1.0, v1.1, mT5, a MADLAD-like start: tests/models/formats/t5_models.py) saved with
`save_pretrained` (TransformersConverter), an OpenNMT-py checkpoint (OpenNMTPyConverter,
tests/peer_opennmt.py builds it); each converted as stored (float32) or quantized (int8, ...)."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import ctranslate2
import pytest
import torch
import transformers

from nmtdecode.models import cpu
from tests.models.formats import t5_models
from tests.models.formats.test_huggingface_parity import COMMON as PARITY_MODELS

VOCAB = PARITY_MODELS["vocab_size"]
SPECIAL = {0: "<s>", 1: "<pad>", 2: "</s>", 3: "<unk>"}
# The sizes of the parity tests' models (d_model 32, 2 + 2 layers, 4 heads), no dropout.
COMMON = {**PARITY_MODELS, "forced_eos_token_id": None}
MBART50_CODES = ["de_DE", "en_XX", "fr_XX"]
M2M100_CODES = ["__de__", "__en__", "__fr__"]
# family -> (config class, model class, config values, the EOS logit bias that ends outputs at
# different steps, extra pieces at the vocabulary's end). Marian keeps <pad> last and starts
# from it (transformers' MarianMT), the fairseq-born families start from </s>.
FAMILIES = {
    "marian": (
        "MarianConfig",
        "MarianMTModel",
        dict(
            vocab_size=VOCAB,
            decoder_vocab_size=VOCAB,
            pad_token_id=VOCAB - 1,
            eos_token_id=0,
            decoder_start_token_id=VOCAB - 1,
            scale_embedding=True,
            activation_function="swish",
        ),
        3.0,
        (),
    ),
    "bart": (
        "BartConfig",
        "BartForConditionalGeneration",
        dict(vocab_size=VOCAB, decoder_start_token_id=2, activation_function="gelu", normalize_before=False),
        5.0,
        (),
    ),
    "mbart": (
        "MBartConfig",
        "MBartForConditionalGeneration",
        dict(
            vocab_size=VOCAB,
            decoder_start_token_id=2,
            scale_embedding=True,
            activation_function="gelu",
            normalize_before=True,
            tokenizer_class="MBart50Tokenizer",
        ),
        4.0,
        MBART50_CODES,
    ),
    "m2m_100": (
        "M2M100Config",
        "M2M100ForConditionalGeneration",
        dict(vocab_size=VOCAB, decoder_start_token_id=2, scale_embedding=True, activation_function="relu"),
        1.5,
        M2M100_CODES,
    ),
}


T5_VARIANTS = ("t5", "t5-v1.1", "mt5", "madlad")
MADLAD_TAGS = ["<2de>", "<2fr>"]  # the madlad variant's last pieces: MADLAD-400's target-language tags


def pieces(family: str) -> list[str]:
    """The vocabulary of a family's model by id: Marian's </s> <unk> ... <pad>, fairseq's <s> <pad>
    </s> <unk> ..., language tags last."""
    _, _, values, _, tags = FAMILIES[family]
    if family == "marian":
        return ["</s>", "<unk>", *(f"w{i}" for i in range(2, VOCAB - 1)), "<pad>"]
    words = [SPECIAL.get(i, f"w{i}") for i in range(VOCAB - len(tags))]
    return words + list(tags)


def t5_pieces(variant: str) -> list[str]:
    """A T5 variant's vocabulary by id: <pad>, </s> and <unk> at its ids among 0-2, w3 ...; the
    madlad variant's last pieces are its language tags."""
    values = t5_models.config_of(variant)
    specials = {values["pad_token_id"]: "<pad>", values["eos_token_id"]: "</s>"}
    words = [specials.get(i, "<unk>" if i < 3 else f"w{i}") for i in range(values["vocab_size"])]
    return words[: len(words) - len(MADLAD_TAGS)] + MADLAD_TAGS if variant == "madlad" else words


class _Tokenizer:
    """What the converters ask of a tokenizer: its vocabulary and special tokens."""

    def __init__(self, vocabulary: list[str], bos_token: str | None = "<s>") -> None:
        self.vocab = {piece: i for i, piece in enumerate(vocabulary)}
        self.bos_token, self.eos_token = bos_token, "</s>"
        self.unk_token, self.pad_token, self.unk_token_id = "<unk>", "<pad>", self.vocab["<unk>"]
        self.special_tokens_map: dict = {}

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def convert_ids_to_tokens(self, i: int) -> str:
        return pieces_by_id(self.vocab)[i]


def pieces_by_id(vocab: dict[str, int]) -> dict[int, str]:
    return {i: p for p, i in vocab.items()}


class _Converter(ctranslate2.converters.TransformersConverter):
    """TransformersConverter on a saved model whose tokenizer is `_Tokenizer` (no tokenizer files)."""

    def __init__(self, path: str, tokenizer: _Tokenizer) -> None:
        super().__init__(path)
        self.tokenizer = tokenizer

    def load_tokenizer(self, *args, **kwargs):
        return self.tokenizer


def hf_model(family: str, path: Path, seed: int = 0, **config_values):
    """A seeded random model of `family` (its config values updated with `config_values`) saved
    with save_pretrained at `path`."""
    config_name, model_name, values, eos_bias, _ = FAMILIES[family]
    config = getattr(transformers, config_name)(**{**COMMON, **values, **config_values})
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).eval()
    eos = config.eos_token_id
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            elif "embed_positions" not in name or family == "bart":
                p.normal_(0.0, 0.4)
        if family == "marian":
            for table in (model.get_encoder().embed_tokens, model.get_decoder().embed_tokens):
                table.weight[config.pad_token_id] = 0  # the zero start embedding CTranslate2 assumes
        if family == "m2m_100":  # no final_logits_bias: its EOS embedding row (tied to the output) is scaled
            model.model.shared.weight[eos] *= eos_bias
        else:
            model.final_logits_bias[0, eos] = eos_bias
    model.save_pretrained(path)
    return model


def convert_hf(
    family: str,
    root: Path,
    quantization: str | None = None,
    seed: int = 0,
    vocabulary: list[str] | None = None,
    **config_values,
) -> Path:
    """A CTranslate2 folder of a seeded `family` model (its transformers copy in root/hf, its config
    values updated with `config_values`), of the family's pieces or `vocabulary` (a real tokenizer's)."""
    hf = root / "hf"
    if not (hf / "config.json").exists():
        hf_model(family, hf, seed, **config_values, **({"vocab_size": len(vocabulary)} if vocabulary else {}))
    out = root / f"ct2-{quantization or 'float32'}"
    tokenizer = _Tokenizer(vocabulary or pieces(family), None if family == "marian" else "<s>")
    _Converter(str(hf), tokenizer).convert(str(out), quantization=quantization, force=True)
    return out


def convert_t5(
    variant: str, root: Path, quantization: str | None = None, seed: int = 0, vocabulary: list[str] | None = None
) -> Path:
    """A CTranslate2 folder of a seeded T5 `variant` of t5_models.py (its transformers copy in
    root/hf), of t5_pieces' vocabulary or `vocabulary` (a SentencePiece model's)."""
    hf = root / "hf"
    if not (hf / "config.json").exists():
        t5_models.build(variant, hf, seed, config={"vocab_size": len(vocabulary)} if vocabulary else None)
    out = root / f"ct2-{quantization or 'float32'}"
    tokenizer = _Tokenizer(vocabulary or t5_pieces(variant), bos_token=None)
    _Converter(str(hf), tokenizer).convert(str(out), quantization=quantization, force=True)
    return out


def convert_opennmt(checkpoint: str, out: Path, quantization: str | None = None) -> Path:
    """A CTranslate2 folder of an OpenNMT-py checkpoint (its options, an argparse.Namespace, read
    with weights_only as the converter reads it)."""
    with torch.serialization.safe_globals([argparse.Namespace]):
        converter = ctranslate2.converters.OpenNMTPyConverter(checkpoint)
        converter.convert(str(out), quantization=quantization, force=True)
    return out


def set_config(folder: Path, **values) -> None:
    """Change a folder's config.json."""
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **values}))


def sources(words: list[str], end: list[str], seed: int = 0, count: int = 60) -> list[list[str]]:
    """`count` sources of 1 to 10 of `words`, with the end the converted family's tokenizer gives them."""
    rng = random.Random(seed)
    return [[rng.choice(words) for _ in range(rng.randint(1, 10))] + end for _ in range(count)]


def same_share(theirs: list, ours: list) -> float:
    """The share of results (TranslationResults) whose hypotheses are the same."""
    return sum(a.hypotheses == b.hypotheses for a, b in zip(theirs, ours)) / len(theirs)


SEARCHES = [{"beam_size": 1}, {"beam_size": 4, "num_hypotheses": 2, "return_scores": True}]
INT8_SAME = 0.95  # the share of identical n-best lists required in int8 (measured: docs/formats.md)
# CTranslate2's int8 outputs come from its per-row int8 products, which nmtdecode makes the same
# way only where the CPU has int8 dot products (AVX512-VNNI: torch._int_mm); without them fbgemm's
# products (one scale for a batch's activations) decide these random models' near-ties otherwise
# (docs/formats.md), and an int8 test asserts fidelity to the float32 outputs instead
# (assert_int8_as_faithful_as_theirs).
EXACT_INT8 = cpu.current().int8_dot


def assert_int8_as_faithful_as_theirs(float_folder, int8_folder, batch: list[list[str]], steps: int = 20) -> None:
    """Without int8 dot products (no AVX512-VNNI) nmtdecode multiplies in int8 with fbgemm, one scale
    for a batch's activations, where CTranslate2 scales each row: the two int8 models round
    differently and their near-ties fall either way. What holds is fidelity: greedy and beam 4,
    nmtdecode's int8 outputs on `int8_folder` keep CTranslate2's float32 outputs (`float_folder`)
    at least as often as CTranslate2's own int8 outputs do."""
    from nmtdecode.compat import ctranslate2 as compat

    reference = ctranslate2.Translator(str(float_folder), device="cpu", intra_threads=1)
    theirs = ctranslate2.Translator(str(int8_folder), device="cpu", intra_threads=1)
    ours = compat.Translator(str(int8_folder), device="cpu", intra_threads=1)
    for search in SEARCHES:
        expected, their_int8, our_int8 = (
            t.translate_batch(batch, max_decoding_length=steps, **search) for t in (reference, theirs, ours)
        )
        assert same_share(expected, our_int8) >= same_share(expected, their_int8), search


def assert_same_outputs(theirs, ours, batch: list[list[str]], int8: bool, steps: int = 20) -> None:
    """CTranslate2's Translator and ours on `batch`, greedy and beam 4 with 2 hypotheses: the same
    n-best lists with scores within 1e-4 (float32), or at least INT8_SAME of them (int8); and
    outputs of several lengths (EOS handled)."""
    lengths = set()
    for search in SEARCHES:
        expected, found = (t.translate_batch(batch, max_decoding_length=steps, **search) for t in (theirs, ours))
        lengths |= {len(h) for r in expected for h in r.hypotheses}
        if int8:
            assert same_share(expected, found) >= INT8_SAME
            continue
        assert same_share(expected, found) == 1.0
        for a, b in zip(expected, found):
            assert b.scores == pytest.approx(a.scores, rel=1e-4, abs=1e-5)
    assert len(lengths) > 3
