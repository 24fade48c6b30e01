"""Marian model directories for the tests, written as Marian writes them (numpy, the tests' own).

`to_marian` names the weights of a Hugging Face Marian model (a state dict, from transformers or
`random_hf_state`) as Marian's transformer names them (src/models/transformer.h; CTranslate2's
converters/marian.py reads the same), without the row Hugging Face adds for <pad>: linear
weights (in, out), biases and layer norms (1, n), Marian's options as the int8 string
`special:model.yml`. `write_model` adds decoder.yml, the vocabulary (.yml: `</s>` 0, `<unk>` 1,
then the pieces) and OPUS-MT's source.spm/target.spm.
"""

from __future__ import annotations

import io
import random

import numpy as np
import sentencepiece as spm
import yaml

WORDS = (
    "the a house cat dog runs quickly green blue red tree river mountain small large walks sees eats "
    "fish bread water hello world over under big little"
).split()
OPTIONS = {  # what Marian stores for an OPUS-MT transformer, but the sizes
    "type": "transformer",
    "enc-depth": 2,
    "dec-depth": 2,
    "dim-emb": 32,
    "transformer-heads": 4,
    "transformer-dim-ffn": 64,
    "transformer-decoder-dim-ffn": 0,
    "transformer-ffn-depth": 2,
    "transformer-decoder-ffn-depth": 0,
    "transformer-ffn-activation": "swish",
    "transformer-preprocess": "",
    "transformer-postprocess": "dan",
    "transformer-postprocess-emb": "d",
    "transformer-postprocess-top": "",
    "transformer-decoder-autoreg": "self-attention",
    "transformer-guided-alignment-layer": "last",
    "transformer-no-projection": False,
    "transformer-tied-layers": [],
    "transformer-train-position-embeddings": False,
    "tied-embeddings": False,
    "tied-embeddings-src": False,
    "tied-embeddings-all": True,
    "output-omit-bias": False,
    "ulr": False,
    "lemma-dim-emb": 0,
    "factors-combine": "sum",
    "right-left": False,
    "version": "v1.10.0",
}


def train_spm(path, seed: int, size: int = 90) -> spm.SentencePieceProcessor:
    """A tiny SentencePiece model (<unk> <s> </s> at 0-2), saved at `path`."""
    r = random.Random(seed)
    lines = [
        " ".join(r.choice(WORDS) for _ in range(r.randint(3, 9))).capitalize() + r.choice(".!?,") for _ in range(300)
    ]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        vocab_size=size,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
    )
    path.write_bytes(model.getvalue())
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def vocabulary(*models: spm.SentencePieceProcessor, tags=()) -> list[str]:
    """Marian's vocabulary of OPUS-MT pieces: </s>, <unk>, the pieces, >>xx<< tags."""
    tokens = ["</s>", "<unk>"]
    for sp in models:
        tokens += [p for p in map(sp.id_to_piece, range(3, sp.get_piece_size())) if p not in tokens]
    return tokens + [f">>{t}<<" for t in tags]


def write_vocabulary(path, tokens: list[str]):
    path.write_text(
        yaml.safe_dump({t: i for i, t in enumerate(tokens)}, allow_unicode=True, sort_keys=False), encoding="utf-8"
    )


# What yaml-cpp's emitter (Marian's DefaultVocab::save) writes in double quotes as an escape: newer
# releases also escape C1 controls and U+00A0 (\x..), older ones write them as they are.
YAML_CPP_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}
YAML_INDICATORS = "-?:,[]{}#&*!|>'\"%@`"


def yaml_cpp_scalar(piece: str, escape_c1: bool) -> str:
    """A vocabulary key as yaml-cpp's emitter writes it: plain where YAML reads it back as the same
    text, else double-quoted with its escapes."""
    special = piece.lower() in ("", "~", "null", "true", "false", "yes", "no", "on", "off", "y", "n")
    plain = (
        not special
        and piece[0] not in YAML_INDICATORS
        and piece == piece.strip(" ")
        and ": " not in piece
        and " #" not in piece
        and not piece.endswith(":")
        and all(0x20 <= ord(c) < 0x7F or ord(c) > 0xA0 for c in piece)
        and "\ufeff" not in piece
    )
    if plain:
        return piece
    out = []
    for c in piece:
        if c in YAML_CPP_ESCAPES:
            out.append(YAML_CPP_ESCAPES[c])
        elif ord(c) < 0x20 or (escape_c1 and 0x80 <= ord(c) <= 0xA0) or c == "\ufeff":
            out.append(f"\\x{ord(c):02x}" if ord(c) < 0xFF else f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def write_vocabulary_as_marian(path, tokens: list[str], escape_c1: bool = False):
    """The vocabulary as Marian writes it (yaml-cpp's emitter, `yaml_cpp_scalar`); keys longer than
    1024 characters in YAML's long-key form (`? key`, then `: id`)."""
    lines = []
    for i, token in enumerate(tokens):
        key = yaml_cpp_scalar(token, escape_c1)
        lines += [f"? {key}", f": {i}"] if len(key) > 1024 else [f"{key}: {i}"]
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))


def hf_names(layer: str, side: str, n: int) -> dict[str, str]:
    """Marian's name prefix -> Hugging Face's module of each block of layer n (from 1)."""
    blocks = {f"{side}_l{n}_self": f"{layer}.self_attn"}
    if side == "decoder":
        blocks[f"{side}_l{n}_context"] = f"{layer}.encoder_attn"
    return blocks


def to_marian(
    state: dict,
    vocab: int,
    layers: tuple[int, int],
    *,
    shared=True,
    tied_output=True,
    legacy_output=False,
    pre_norm=False,
) -> dict[str, np.ndarray]:
    """Marian's arrays from a Hugging Face Marian state dict (numpy arrays or tensors) whose
    vocabularies have `vocab` pieces and then <pad>."""
    state = {k: np.asarray(v, dtype=np.float32) for k, v in state.items()}
    suffix = "_pre" if pre_norm else ""
    arrays = {}
    for side, count in zip(("encoder", "decoder"), layers):
        for i in range(count):
            layer, n = f"model.{side}.layers.{i}", i + 1
            for marian, hf in hf_names(layer, side, n).items():
                for x, proj in zip("qkvo", ("q_proj", "k_proj", "v_proj", "out_proj")):
                    arrays[f"{marian}_W{x}"] = state[f"{hf}.{proj}.weight"].T
                    arrays[f"{marian}_b{x}"] = state[f"{hf}.{proj}.bias"][None]
                norm = f"{hf}_layer_norm"  # self_attn_layer_norm, encoder_attn_layer_norm
                arrays[f"{marian}_Wo_ln_scale{suffix}"] = state[f"{norm}.weight"][None]
                arrays[f"{marian}_Wo_ln_bias{suffix}"] = state[f"{norm}.bias"][None]
            for x, fc in (("1", "fc1"), ("2", "fc2")):
                arrays[f"{side}_l{n}_ffn_W{x}"] = state[f"{layer}.{fc}.weight"].T
                arrays[f"{side}_l{n}_ffn_b{x}"] = state[f"{layer}.{fc}.bias"][None]
            arrays[f"{side}_l{n}_ffn_ffn_ln_scale{suffix}"] = state[f"{layer}.final_layer_norm.weight"][None]
            arrays[f"{side}_l{n}_ffn_ffn_ln_bias{suffix}"] = state[f"{layer}.final_layer_norm.bias"][None]
    if shared:
        arrays["Wemb"] = state["model.shared.weight"][:vocab]
    else:
        arrays["encoder_Wemb"] = state["model.encoder.embed_tokens.weight"][:vocab]
        arrays["decoder_Wemb"] = state["model.decoder.embed_tokens.weight"][:vocab]
    if not tied_output:
        output = state["lm_head.weight"][:vocab]
        arrays["decoder_ff_logit_out_W" if legacy_output else "decoder_ff_logit_out_Wt"] = (
            output.T if legacy_output else output
        )
    arrays["decoder_ff_logit_out_b"] = state["final_logits_bias"][:, :vocab]
    return {name: np.ascontiguousarray(a) for name, a in arrays.items()}


def random_hf_state(seed: int, vocab: int, d: int = 32, ffn: int = 64, layers=(2, 2), shared=True) -> dict:
    """A Hugging Face Marian state dict of random numbers (no transformers needed), `vocab` + 1 rows."""
    rng = np.random.default_rng(seed)
    state = {
        "final_logits_bias": rng.normal(0, 0.5, (1, vocab + 1)),
        "lm_head.weight": rng.normal(0, 0.4, (vocab + 1, d)),
    }
    for key in (
        ["model.shared.weight"]
        if shared
        else ["model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"]
    ):
        state[key] = rng.normal(0, 0.4, (vocab + 1, d))
    for side, count in zip(("encoder", "decoder"), layers):
        for i in range(count):
            layer = f"model.{side}.layers.{i}"
            for hf in hf_names(layer, side, i + 1).values():
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    state[f"{hf}.{proj}.weight"], state[f"{hf}.{proj}.bias"] = (
                        rng.normal(0, 0.4, (d, d)),
                        rng.normal(0, 0.4, d),
                    )
                state[f"{hf}_layer_norm.weight"], state[f"{hf}_layer_norm.bias"] = (
                    rng.normal(1, 0.1, d),
                    rng.normal(0, 0.1, d),
                )
            for fc, shape in (("fc1", (ffn, d)), ("fc2", (d, ffn))):
                state[f"{layer}.{fc}.weight"] = rng.normal(0, 0.4, shape)
                state[f"{layer}.{fc}.bias"] = rng.normal(0, 0.4, shape[0])
            state[f"{layer}.final_layer_norm.weight"] = rng.normal(1, 0.1, d)
            state[f"{layer}.final_layer_norm.bias"] = rng.normal(0, 0.1, d)
    return state


def write_npz(path, arrays: dict[str, np.ndarray], options: dict):
    """The weights and Marian's options (a NUL-terminated YAML string of int8) in one .npz."""
    text = yaml.safe_dump(options).encode("utf-8") + b"\0"
    np.savez(path, **arrays, **{"special:model.yml": np.frombuffer(text, dtype=np.int8)})


def write_model(
    directory,
    arrays: dict[str, np.ndarray],
    options: dict,
    tokens: list[str],
    target_tokens: list[str] | None = None,
    npz: str = "model.npz",
    **decoder,
):
    """A Marian model directory as OPUS-MT ships one (source.spm and target.spm written by the caller)."""
    directory.mkdir(parents=True, exist_ok=True)
    sizes = [len(tokens), len(target_tokens or tokens)]
    write_npz(directory / npz, arrays, {"dim-vocabs": sizes, **options})
    vocabs = ["vocab.yml"] * 2 if target_tokens is None else ["source.vocab.yml", "target.vocab.yml"]
    for name, table in zip(vocabs, (tokens, target_tokens or tokens)):
        write_vocabulary(directory / name, table)
    settings = {
        "relative-paths": True,
        "models": [npz],
        "vocabs": vocabs,
        "beam-size": 4,
        "normalize": 1.0,
        "word-penalty": 0,
        "mini-batch": 16,
        "maxi-batch": 100,
        "maxi-batch-sort": "src",
        **decoder,
    }
    (directory / "decoder.yml").write_text(yaml.safe_dump(settings), encoding="utf-8")
    return directory
