"""`nmtdecode inspect PATH`: what a model directory (or OpenNMT-py `.pt` file) holds, without decoding anything.

Without torch where the weights are safetensors, a .npz or a CTranslate2 model.bin (the native
format, Hugging Face, eole, Marian, CTranslate2): the format's `describe`, the code its loader
builds the model from, reads the weight files' headers (stored.py, formats/ct2_binary.py), whose
shapes give the parameter count. A pickled checkpoint (an
OpenNMT-py `.pt`, a `pytorch_model.bin`) needs torch to be read at all, so it is loaded whole.

`inspect --device cpu` (`cpu_report`) shows what this CPU runs natively (models/cpu.py): each
precision's kernels or why it is refused, and for a model the kernels chosen for its shapes.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from .architecture import TransformerConfig
from .checkpoint import ModelFacts, ModelRules, Tokenizer
from .detect import is_ctranslate2, model_format
from .formats import ct2_config, eole_config, hf_config, marian_config, native_config
from .formats.ct2_binary import read_model_bin
from .stored import DTYPE_NAMES, HEADED, NeedsTorch, StoredHeaders, file_entries

if TYPE_CHECKING:  # torch is imported only where kernels are asked for
    import torch

    from .transformer import Transformer

# Each format whose files can be read without torch, by its name: its describe(path, read).
DESCRIBE = {fmt.FORMAT: fmt.describe for fmt in (native_config, ct2_config, eole_config, hf_config, marian_config)}
# Those whose describe reads configurations and weight files' headers only: a job reads them before it
# imports torch (`check_without_torch`). A CTranslate2 folder's and a Marian model's describe parse their
# vocabularies too, which the load would do a second time (docs/speed.md#whole-jobs-and-model-loading).
CHECKED_BEFORE_TORCH = {fmt.FORMAT: DESCRIBE[fmt.FORMAT] for fmt in (native_config, eole_config, hf_config)}
# A model is built in torch's default dtype, float32 (Transformer.uninitialised), and
# load_weights converts the stored tensors to it.
LOADED_DTYPES = ["float32"]


@dataclass
class Summary:
    """What inspect shows of a model, read from its files or from the loaded model."""

    format: str
    cfg: TransformerConfig
    rules: ModelRules
    defaults: dict
    tokenizer: Tokenizer
    parameters: int  # tied weights once
    loaded_dtypes: list[str]


def summary(path: str) -> Summary:
    """The model's summary, without torch where its format's describe can read its weight files."""
    facts = _described(path, DESCRIBE)
    if facts is None:
        return loaded_summary(path)
    parameters = sum(math.prod(shape) for shape in facts.shapes.values())
    return Summary(facts.format, facts.cfg, facts.rules, facts.defaults, facts.tokenizer(), parameters, LOADED_DTYPES)


def check_without_torch(path: str) -> None:
    """What the load would refuse in the model's configuration or in its weight files' headers,
    refused before torch is imported: a broken model fails a job in a fraction of a second. A
    format read otherwise (`CHECKED_BEFORE_TORCH`) or weights only torch reads are left to the load."""
    _described(path, CHECKED_BEFORE_TORCH)


def _described(path: str, formats: dict[str, Callable[..., ModelFacts]]) -> ModelFacts | None:
    """The facts `formats`' describe of the model's format reads from its files without torch;
    None for another format, or weight files that only torch reads."""
    describe = formats.get(model_format(path))
    try:
        return None if describe is None else describe(path, StoredHeaders)
    except NeedsTorch:
        return None


def loaded_summary(path: str) -> Summary:
    """The summary of the model loaded whole (torch)."""
    from .loading import load_model

    loaded = load_model(path)
    params = {id(p): p for p in loaded.model.parameters()}.values()  # tied weights once
    dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
    return Summary(
        loaded.format,
        loaded.model.cfg,
        loaded.rules,
        loaded.defaults,
        loaded.tokenizer,
        sum(p.numel() for p in params),
        dtypes,
    )


def _torch_dtypes(path: str) -> set[str]:
    """The dtypes of the tensors in a pickled checkpoint (read with weights_only=True)."""
    import torch

    def tensors(state: Any) -> list:  # a state dict, or the state dicts in a checkpoint dict (OpenNMT-py's)
        if isinstance(state, torch.Tensor):
            return [state]
        if isinstance(state, dict):
            return [t for value in state.values() if isinstance(value, (dict, torch.Tensor)) for t in tensors(value)]
        return []

    with torch.serialization.safe_globals([argparse.Namespace]):  # OpenNMT-py's options
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return {str(t.dtype).replace("torch.", "") for t in tensors(state)}


def stored_dtypes(path: str) -> list[str]:
    """The dtypes of a model's weight files as stored (the loader computes in float32 unless --dtype says)."""
    if is_ctranslate2(path):
        variables = read_model_bin(os.path.join(path, "model.bin")).variables.values()
        return sorted({DTYPE_NAMES[v.dtype] for v in variables if v.name.endswith(("weight", "gamma", "encodings"))})
    names = [path] if os.path.isfile(path) else [os.path.join(path, n) for n in sorted(os.listdir(path))]
    found: set[str] = set()
    for name in names:
        if name.endswith(HEADED):
            found |= {DTYPE_NAMES.get(v["dtype"], v["dtype"].lower()) for _, v in file_entries(name).values()}
        elif name.endswith((".bin", ".pt")):
            found |= _torch_dtypes(name)
    floating = sorted(d for d in found if d.startswith(("float", "bfloat")) or d == "int8")  # int8: rows with scales
    return floating or sorted(found)


def default_target_language(loaded: Summary) -> str:
    """The target language a multilingual model decodes into without --tgt-lang."""
    languages = loaded.tokenizer.languages
    if not languages:
        return "none (not a multilingual model)"
    by_id = {i: code for code, i in languages.items()}
    forced = loaded.rules.forced_bos_id
    if forced in by_id:
        return f"{by_id[forced]} (forced_bos_token_id; --tgt-lang changes it)"
    start = getattr(loaded.tokenizer, "decoder_start_id", None)  # mBART's tokenizer alone fixes one
    if start in by_id:
        return f"{by_id[start]} (decoder_start_token_id; fixed)"
    return "none: give --tgt-lang"


def describe(path: str) -> str:
    model = summary(path)
    cfg, stored = model.cfg, stored_dtypes(path)
    lines = [
        f"path:          {path}",
        f"format:        {model.format}",
        f"architecture:  Transformer {cfg.encoder_layers}+{cfg.decoder_layers} layers, d_model {cfg.d_model}, "
        f"{cfg.heads} heads{f' of {cfg.head_dim}' if cfg.head_dim else ''}, ffn {cfg.ffn_dim}, "
        f"{'gated ' if cfg.gated_ffn else ''}{cfg.activation}, {'pre' if cfg.pre_norm else 'post'}-norm"
        f"{' (RMS)' if cfg.norm == 'rmsnorm' else ''}, {cfg.positions} positions",
        f"vocabulary:    source {cfg.src_vocab_size}, target {cfg.tgt_vocab_size}"
        f"{' (shared embeddings)' if cfg.share_embeddings else ''}",
        f"parameters:    {model.parameters:,}",
        f"dtype:         stored {', '.join(stored) or 'unknown'}; "
        f"loaded as {', '.join(model.loaded_dtypes)} (--dtype chooses the compute precision)"
        + ("; int8 weights are decoded as stored on a CPU" if "int8" in stored else ""),
        f"special ids:   pad {cfg.pad_id}, unk {cfg.unk_id}, bos {cfg.bos_id}, eos {cfg.eos_id}, "
        f"decoder start {cfg.decoder_start_id}",
    ]
    if model.defaults:
        lines.append("decoding defaults: " + ", ".join(f"{k}={v}" for k, v in sorted(model.defaults.items())))
    codes = model.tokenizer.language_codes()
    if codes:
        lines.append(f"languages:     {len(codes)} ({', '.join(codes[:10])}{', ...' if len(codes) > 10 else ''})")
    lines.append(f"target language: {default_target_language(model)}")
    cuts = getattr(model.tokenizer, "cuts_text", None)  # a tokenizer that is not the model's own says which
    if cuts:
        lines.append(f"tokenizer:     {cuts}")
    return "\n".join(lines)


def cpu_report(path: str | None = None) -> str:
    """What this CPU runs natively, each precision's kernels or why it is refused (models/cpu.py);
    with a model, the kernels chosen for its shapes (--gemm auto's measurement, remembered)."""
    from . import cpu

    caps = cpu.current()
    cap = f"; oneDNN capped at {caps.onednn_cap} (ONEDNN_MAX_CPU_ISA)" if caps.onednn_cap else ""
    lines = [
        f"cpu:           {caps.name}",
        f"instructions:  torch's kernels {caps.torch_isa}{cap}",
        f"features:      {caps.features()}",
        "precisions:",
    ]
    for precision in cpu.PRECISIONS:
        verdict = cpu.verdict(precision, caps)
        lines.append(f"  {precision:<9} " + (verdict.kernels if verdict.native else f"refused: {verdict.refusal}"))
    if path is not None:
        lines += [f"kernels for {path}:", *chosen_kernels(summary(path).cfg)]
    return "\n".join(lines)


def _float_products(model: Transformer, dtype: torch.dtype) -> str:
    """The products --gemm auto gives `model` in `dtype`, and the measurement it chose them by."""
    from . import gemm

    backend, seconds = gemm.auto_choice(model, dtype)
    if seconds is None:
        return "torch linear (--gemm auto: oneDNN has no native kernels for it here)"
    ratio = f"oneDNN's products took {seconds['onednn'] / seconds['torch']:.2f} of torch's time on this machine"
    if backend == "onednn":
        return f"oneDNN, packed weights (--gemm auto: {ratio})"
    return f"torch linear (--gemm auto: {ratio}; oneDNN is taken at {gemm.ONEDNN_MARGIN:.2f} or less)"


def chosen_kernels(cfg: TransformerConfig) -> list[str]:
    """The products a load in each native precision would use for a model of `cfg`'s shapes."""
    import torch

    from . import cpu, placement
    from .transformer import Transformer

    with torch.device("meta"):  # the shapes alone: nothing allocated
        model = Transformer(cfg)
    lines = []
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        if cpu.verdict(name).native:
            lines.append(f"  {name:<9} {_float_products(model, dtype)}")
    if cpu.verdict("int8").native:
        table = cfg.tgt_vocab_size * cfg.d_model
        shared = cfg.tie_output and cpu.current().int8_dot and table > placement.INT8_TIED_COPY_BYTES
        output = (
            "torch._int_mm on the embeddings' own table"
            if shared
            else "fbgemm"
            + (f" on a packed copy of the embeddings' table ({table / 2**20:,.0f} MB)" if cfg.tie_output else "")
        )
        lines.append(f"  {'int8':<9} fbgemm linear layers; output projection: {output}")
    return lines
