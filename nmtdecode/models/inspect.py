"""`nmtdecode inspect PATH`: what a model directory holds, without decoding anything."""

from __future__ import annotations

from .loading import load_model


def describe(path: str) -> str:
    loaded = load_model(path)
    model, cfg = loaded.model, loaded.model.cfg
    params = {id(p): p for p in model.parameters()}.values()  # tied weights once
    dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
    lines = [
        f"path:          {path}",
        f"format:        {loaded.format}",
        f"architecture:  Transformer {cfg.encoder_layers}+{cfg.decoder_layers} layers, d_model {cfg.d_model}, "
        f"{cfg.heads} heads, ffn {cfg.ffn_dim}, {cfg.activation}, {'pre' if cfg.pre_norm else 'post'}-norm, "
        f"{cfg.positions} positions",
        f"vocabulary:    source {cfg.src_vocab_size}, target {cfg.tgt_vocab_size}"
        f"{' (shared embeddings)' if cfg.share_embeddings else ''}",
        f"parameters:    {sum(p.numel() for p in params):,}",
        f"dtype:         {', '.join(dtypes)} (as loaded; --dtype chooses the compute precision)",
        f"special ids:   pad {cfg.pad_id}, unk {cfg.unk_id}, bos {cfg.bos_id}, eos {cfg.eos_id}, "
        f"decoder start {cfg.decoder_start_id}",
    ]
    if loaded.defaults:
        lines.append("decoding defaults: " + ", ".join(f"{k}={v}" for k, v in sorted(loaded.defaults.items())))
    codes = loaded.tokenizer.language_codes()
    if codes:
        lines.append(f"languages:     {len(codes)} ({', '.join(codes[:10])}{', ...' if len(codes) > 10 else ''})")
    return "\n".join(lines)
