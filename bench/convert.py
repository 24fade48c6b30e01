"""Put one model into every system the benchmark compares.

* `marian_base`: a Transformer-base shaped Marian (d_model 512, 6+6 layers, 8 heads,
  FFN 2048, 32k vocabulary) with seeded random weights, saved by `transformers`;
  `nllb_600m_shape` and `bart_large_shape` likewise, for the real-size rows.
* `to_ctranslate2`: any model nmtdecode loads -> a CTranslate2 model directory, built
  from our weights through `ctranslate2.specs` (so both run the very same numbers).
* `to_transformers`: a native pre-norm model -> a `transformers` Blenderbot directory
  (Blenderbot is the seq2seq family with pre-norm layers, final layer norms, separate
  encoder/decoder embeddings and a position table loaded from the checkpoint).

Every conversion is checked by the benchmark: greedy outputs must agree.
"""

from __future__ import annotations

import os

import torch

from nmtdecode.models.transformer import Transformer

VOCAB_BASE = 32000


def marian_base(path: str, seed: int = 0, vocab: int = VOCAB_BASE, d_model: int = 512, layers: int = 6) -> str:
    """Transformer-base by default; smaller shapes for harness smoke tests (bench/gpu_check.py --dry-run)."""
    import transformers

    if os.path.isfile(os.path.join(path, "model.safetensors")):
        return path
    torch.manual_seed(seed)
    pad = vocab - 1  # Marian keeps <pad> last; it is also the decoder start token
    config = transformers.MarianConfig(
        vocab_size=vocab,
        decoder_vocab_size=vocab,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=4 * d_model,
        decoder_ffn_dim=4 * d_model,
        max_position_embeddings=512,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        activation_function="swish",
        scale_embedding=True,
        forced_eos_token_id=None,
    )
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.model.shared.weight[pad].zero_()  # as in real Marian checkpoints: the start is a zero embedding
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad, bad_words_ids=[[pad]]
    )
    model.save_pretrained(path)
    return path


VOCAB_600M = 256206  # NLLB-200's vocabulary


def nllb_600m_shape(path: str, seed: int = 0, vocab: int = VOCAB_600M, d_model: int = 1024, layers: int = 12) -> str:
    """An NLLB-200-distilled-600M shaped M2M100 (d_model 1024, 12+12 layers, 16 heads, FFN 4096, 256k
    vocabulary, tied embeddings: 615M parameters, 2.5 GB in float32) with seeded random weights,
    saved by `transformers`; smaller shapes for smoke tests of the harness."""
    import transformers

    config = transformers.M2M100Config(
        **fairseq_shape(vocab, d_model, layers), scale_embedding=True, activation_function="relu"
    )
    return saved_random(path, seed, transformers.M2M100ForConditionalGeneration, config)


VOCAB_BART = 50265  # BART's vocabulary


def bart_large_shape(path: str, seed: int = 0, vocab: int = VOCAB_BART, d_model: int = 1024, layers: int = 12) -> str:
    """A BART-large shaped model (d_model 1024, 12+12 layers, 16 heads, FFN 4096, 50k vocabulary, post-norm,
    learned positions from offset 2, embedding layer norms, GELU, tied embeddings: 406M parameters) with
    seeded random weights, saved by `transformers`; smaller shapes for smoke tests of the harness."""
    import transformers

    config = transformers.BartConfig(
        **fairseq_shape(vocab, d_model, layers),
        scale_embedding=False,
        activation_function="gelu",
        forced_bos_token_id=None,
        forced_eos_token_id=None,
    )
    return saved_random(path, seed, transformers.BartForConditionalGeneration, config)


def fairseq_shape(vocab: int, d_model: int, layers: int) -> dict:
    """The config values the fairseq-born families (M2M100/NLLB, BART) share: 16 heads, FFN 4 x d_model,
    ids <s> 0, <pad> 1, </s> 2 (EOS and decoder start), no dropout, tied embeddings."""
    return dict(
        vocab_size=vocab,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=16,
        decoder_attention_heads=16,
        encoder_ffn_dim=4 * d_model,
        decoder_ffn_dim=4 * d_model,
        max_position_embeddings=1024,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        tie_word_embeddings=True,
    )


def saved_random(path: str, seed: int, model_class, config) -> str:
    """`model_class(config)` with seeded random weights and the fairseq ids' generation config, saved
    by `transformers` at `path` (kept when it is there already)."""
    import transformers

    if os.path.isfile(os.path.join(path, "model.safetensors")):
        return path
    torch.manual_seed(seed)
    model = model_class(config).eval()
    model.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=2, eos_token_id=2, pad_token_id=1, bos_token_id=0
    )
    model.save_pretrained(path)
    return path


def random_sources(n: int, low: int, high: int, eos: list[int]) -> list[list[int]]:
    """`n` seeded random sources of 10-39 ids in [low, high), each followed by `eos`, shortest first."""
    g = torch.Generator().manual_seed(1)
    sources = [
        torch.randint(low, high, (int(torch.randint(10, 40, (1,), generator=g)),), generator=g).tolist() + eos
        for _ in range(n)
    ]
    return sorted(sources, key=len)


def marian_base_tokens() -> list[str]:
    """marian-base's vocabulary as placeholder strings, with Marian's specials where they sit."""
    return token_strings(VOCAB_BASE, {0: "</s>", 1: "<unk>", VOCAB_BASE - 1: "<pad>"})


def token_strings(size: int, specials: dict[int, str]) -> list[str]:
    """Vocabulary strings for CTranslate2 when a model has no tokenizer (ids are fed as tokens)."""
    return [specials.get(i, f"t{i}") for i in range(size)]


def to_native(hf_dir: str, tokens: list[str], path: str, precision: str = "int8") -> str:
    """The Hugging Face checkpoint at `hf_dir` as `nmtdecode convert` stores it (the native format;
    in int8: its rows and scales), with a vocabulary of `tokens`; kept once written."""
    from nmtdecode.models.checkpoint import LoadedModel, read_json
    from nmtdecode.models.convert import write
    from nmtdecode.models.formats.huggingface import load_network
    from nmtdecode.models.formats.opennmt_shared import VocabTokenizer

    if not os.path.isdir(path):
        model, defaults, rules = load_network(hf_dir, read_json(os.path.join(hf_dir, "config.json")))
        tokenizer = VocabTokenizer(tokens, tokens, None, None, {"unk": "<unk>", "eos": "</s>"})
        with torch.no_grad():
            write(path, LoadedModel(model, tokenizer, "huggingface", hf_dir, rules, defaults), precision)
    return path


def marian_base_native(out: str) -> str:
    """marian-base (`marian_base`, the GPU check's copy in `out`/gpu-check) in the native format, with a
    vocabulary of placeholder tokens ("t5 t17 ..." as input): a model the command line and
    `Translator.load` load as a user's."""
    hf_dir = marian_base(os.path.join(out, "gpu-check", "marian-base"))
    return to_native(hf_dir, marian_base_tokens(), os.path.join(out, "marian-base-native"), "float32")


def to_ctranslate2(model: Transformer, tokens: list[str], path: str, quantization: str | None = None) -> str:
    import ctranslate2
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.cfg
    state = {k: v.detach().float() for k, v in model.state_dict().items()}

    class OurConverter(ctranslate2.converters.Converter):
        def _load(self):
            spec = transformer_spec.TransformerSpec.from_config(
                (cfg.encoder_layers, cfg.decoder_layers),
                cfg.heads,
                pre_norm=cfg.pre_norm,
                activation=ACTIVATIONS[cfg.activation],
                layernorm_embedding=cfg.layernorm_embedding,
            )
            for side, embed, prefix in (
                ("encoder", "src_embed", "encoder_layers"),
                ("decoder", "tgt_embed", "decoder_layers"),
            ):
                part = getattr(spec, side)
                embeddings = part.embeddings[0] if isinstance(part.embeddings, list) else part.embeddings
                embeddings.weight = state[f"{embed}.tokens.weight"]
                part.scale_embeddings = cfg.embed_scale
                table = model.src_embed.position_table() if side == "encoder" else model.tgt_embed.position_table()
                part.position_encodings.encodings = table.detach().float()[cfg.position_offset :]
                if cfg.layernorm_embedding:
                    norm(part.layernorm_embedding, f"{embed}.norm")
                if cfg.pre_norm:
                    norm(part.layer_norm, f"{side}_norm")
                for i, layer in enumerate(part.layer):
                    ours = f"{prefix}.{i}"
                    linear(layer.self_attention.linear[0], f"{ours}.self_attn.qkv")
                    linear(layer.self_attention.linear[1], f"{ours}.self_attn.out")
                    first_norm = "self_block" if side == "decoder" else "attn_block"
                    norm(layer.self_attention.layer_norm, f"{ours}.{first_norm}.norm")
                    if side == "decoder":
                        linear(layer.attention.linear[0], f"{ours}.cross_attn.q")
                        linear(layer.attention.linear[1], f"{ours}.cross_attn.kv")
                        linear(layer.attention.linear[2], f"{ours}.cross_attn.out")
                        norm(layer.attention.layer_norm, f"{ours}.cross_block.norm")
                    linear(layer.ffn.linear_0, f"{ours}.ffn.up")
                    linear(layer.ffn.linear_1, f"{ours}.ffn.down")
                    norm(layer.ffn.layer_norm, f"{ours}.ffn_block.norm")
            spec.decoder.projection.weight = (
                state["output.weight"] if "output.weight" in state else state["tgt_embed.tokens.weight"]
            )
            if cfg.final_logits_bias and state["output.bias"].abs().sum() > 0:
                spec.decoder.projection.bias = state["output.bias"]
            spec.register_source_vocabulary(tokens[: cfg.src_vocab_size])
            spec.register_target_vocabulary(tokens[: cfg.tgt_vocab_size])
            spec.config.bos_token = tokens[cfg.bos_id]
            spec.config.eos_token = tokens[cfg.eos_id]
            spec.config.unk_token = tokens[cfg.unk_id]
            spec.config.decoder_start_token = tokens[cfg.decoder_start_id]
            return spec

    def linear(spec, name):
        spec.weight = state[f"{name}.weight"]
        if f"{name}.bias" in state:
            spec.bias = state[f"{name}.bias"]

    def norm(spec, name):
        spec.gamma, spec.beta = state[f"{name}.weight"], state[f"{name}.bias"]

    ACTIVATIONS = {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "gelu_tanh": common_spec.Activation.GELUTanh,
        "silu": common_spec.Activation.SWISH,
    }
    OurConverter().convert(path, quantization=quantization, force=True)
    return path


def to_transformers(model: Transformer, path: str) -> str:
    """A pre-norm native model as a `transformers` Blenderbot checkpoint (same weights)."""
    import transformers

    cfg = model.cfg
    if not cfg.pre_norm or cfg.layernorm_embedding or cfg.position_offset or not cfg.tie_output:
        raise ValueError("to_transformers handles pre-norm models without embedding norm or position offset")
    config = transformers.BlenderbotConfig(
        vocab_size=cfg.tgt_vocab_size,
        d_model=cfg.d_model,
        encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.heads,
        decoder_attention_heads=cfg.heads,
        encoder_ffn_dim=cfg.ffn_dim,
        decoder_ffn_dim=cfg.ffn_dim,
        max_position_embeddings=cfg.max_positions,
        activation_function={"silu": "swish", "gelu_tanh": "gelu_new"}.get(cfg.activation, cfg.activation),
        scale_embedding=cfg.embed_scale != 1.0,
        pad_token_id=cfg.pad_id,
        bos_token_id=cfg.bos_id,
        eos_token_id=cfg.eos_id,
        decoder_start_token_id=cfg.decoder_start_id,
        tie_word_embeddings=False,
        forced_eos_token_id=None,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    if cfg.embed_scale not in (1.0, cfg.d_model**0.5):
        raise ValueError("Blenderbot scales embeddings by 1 or sqrt(d_model) only")
    hf = transformers.BlenderbotForConditionalGeneration(config).eval()
    ours = {k: v.detach().float() for k, v in model.state_dict().items()}
    theirs = {}
    for side, embed, layers in (("encoder", "src_embed", "encoder_layers"), ("decoder", "tgt_embed", "decoder_layers")):
        theirs[f"model.{side}.embed_tokens.weight"] = ours[f"{embed}.tokens.weight"]
        theirs[f"model.{side}.embed_positions.weight"] = getattr(model, embed).position_table().detach().float()
        theirs[f"model.{side}.layer_norm.weight"] = ours[f"{side}_norm.weight"]
        theirs[f"model.{side}.layer_norm.bias"] = ours[f"{side}_norm.bias"]
        for i in range(getattr(cfg, layers)):
            o, t = f"{layers}.{i}", f"model.{side}.layers.{i}"
            first_block = "self_block" if side == "decoder" else "attn_block"
            for p in ("weight", "bias"):
                q, k, v = ours[f"{o}.self_attn.qkv.{p}"].chunk(3)
                theirs.update(
                    {
                        f"{t}.self_attn.q_proj.{p}": q,
                        f"{t}.self_attn.k_proj.{p}": k,
                        f"{t}.self_attn.v_proj.{p}": v,
                        f"{t}.self_attn.out_proj.{p}": ours[f"{o}.self_attn.out.{p}"],
                        f"{t}.fc1.{p}": ours[f"{o}.ffn.up.{p}"],
                        f"{t}.fc2.{p}": ours[f"{o}.ffn.down.{p}"],
                        f"{t}.self_attn_layer_norm.{p}": ours[f"{o}.{first_block}.norm.{p}"],
                        f"{t}.final_layer_norm.{p}": ours[f"{o}.ffn_block.norm.{p}"],
                    }
                )
                if side == "decoder":
                    k2, v2 = ours[f"{o}.cross_attn.kv.{p}"].chunk(2)
                    theirs.update(
                        {
                            f"{t}.encoder_attn.q_proj.{p}": ours[f"{o}.cross_attn.q.{p}"],
                            f"{t}.encoder_attn.k_proj.{p}": k2,
                            f"{t}.encoder_attn.v_proj.{p}": v2,
                            f"{t}.encoder_attn.out_proj.{p}": ours[f"{o}.cross_attn.out.{p}"],
                            f"{t}.encoder_attn_layer_norm.{p}": ours[f"{o}.cross_block.norm.{p}"],
                        }
                    )
    theirs["lm_head.weight"] = ours["tgt_embed.tokens.weight"]
    theirs["model.shared.weight"] = ours["tgt_embed.tokens.weight"]
    if "output.bias" in ours:
        theirs["final_logits_bias"] = ours["output.bias"][None, :]
    missing, unexpected = hf.load_state_dict(theirs, strict=False)
    left = [m for m in missing if not m.endswith("final_logits_bias")]
    if left or unexpected:
        raise ValueError(f"Blenderbot export: missing {left}, unexpected {unexpected}")
    hf.save_pretrained(path)
    return path


def to_marian(model: Transformer, path: str, banned_ids=()) -> str:
    """A post-norm native model (scripts/train_demo.py --architecture marian) as a Hugging Face
    Marian checkpoint: the inverse of nmtdecode's own Marian mapping (formats/huggingface.py).
    `banned_ids` (never generated) become the generation config's bad_words_ids."""
    import transformers

    from nmtdecode.models.formats.hf_config import weight_map

    cfg = model.cfg
    if cfg.pre_norm or cfg.encoder_final_norm or cfg.positions != "sinusoidal" or cfg.share_embeddings:
        raise ValueError("to_marian handles post-norm models with Marian's sinusoids and separate vocabularies")
    config = transformers.MarianConfig(
        vocab_size=cfg.src_vocab_size,
        decoder_vocab_size=cfg.tgt_vocab_size,
        share_encoder_decoder_embeddings=False,
        d_model=cfg.d_model,
        encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.heads,
        decoder_attention_heads=cfg.heads,
        encoder_ffn_dim=cfg.ffn_dim,
        decoder_ffn_dim=cfg.ffn_dim,
        max_position_embeddings=cfg.max_positions,
        activation_function={"silu": "swish", "gelu_tanh": "gelu_new"}.get(cfg.activation, cfg.activation),
        scale_embedding=cfg.embed_scale != 1.0,
        pad_token_id=cfg.pad_id,
        bos_token_id=cfg.bos_id,
        eos_token_id=cfg.eos_id,
        decoder_start_token_id=cfg.decoder_start_id,
        forced_eos_token_id=None,
        tie_word_embeddings=cfg.tie_output,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    hf = transformers.MarianMTModel(config).eval()
    ours = {k: v.detach().float() for k, v in model.state_dict().items()}
    theirs = {}
    for name, sources in weight_map(cfg).items():
        if name.endswith("tokens.weight"):
            theirs[sources[0]] = ours[name]  # the side's own matrix (not model.shared)
        else:
            theirs.update(zip(sources, ours[name].chunk(len(sources))))  # fused projections, split again
    theirs["final_logits_bias"] = (ours["output.bias"] if "output.bias" in ours else torch.zeros(cfg.tgt_vocab_size))[
        None, :
    ]
    missing, unexpected = hf.load_state_dict(theirs, strict=False)
    left = [m for m in missing if "embed_positions" not in m and m not in ("lm_head.weight", "model.shared.weight")]
    if left or unexpected:
        raise ValueError(f"Marian export: missing {left}, unexpected {unexpected}")
    hf.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=cfg.decoder_start_id,
        eos_token_id=cfg.eos_id,
        pad_token_id=cfg.pad_id,
        bad_words_ids=[[t] for t in banned_ids] or None,
    )
    hf.save_pretrained(path)
    return path
