"""OpenNMT-py 3.5.1 in the benchmark: the `opennmt-base` checkpoint, its CTranslate2 conversion,
and OpenNMT-py's own Translator on it.

* `opennmt_base`: a Transformer-base shaped model (d_model 512, 6+6 layers, 8 heads, FFN 2048,
  32k shared vocabulary, tied output; `self_attn_type scaled-dot`) built by onmt's model builder
  with its own seeded initialization (Glorot) and saved by its ModelSaver, as `onmt_train`
  writes a checkpoint;
* `to_ctranslate2`: CTranslate2's own converter (`OpenNMTPyConverter`) on that file;
* `translator`: what `onmt_translate` builds (`build_translator`: `load_test_model`, then
  `Translator.from_opt`) from its command-line options.

torch >= 2.6 loads with `weights_only=True` by default, and onmt's and CTranslate2's loaders
then refuse the checkpoint for the one non-tensor class it pickles, `argparse.Namespace` (the
options). Both are run with that class allowed (`torch.serialization.safe_globals`), which is
what nmtdecode's loader allows too; nothing is unpickled with `weights_only=False`.
"""

from __future__ import annotations

import argparse
import io
import os
import warnings

import torch

import common  # noqa: E402, F401  (the repository on sys.path: tests.peer_opennmt)
from convert import VOCAB_BASE  # noqa: E402

SPECIALS = ["<unk>", "<blank>", "<s>", "</s>"]  # OpenNMT-py's default special tokens, in its order
VOCAB = SPECIALS + [f"t{i}" for i in range(len(SPECIALS), VOCAB_BASE)]
SHAPE = {
    "enc_layers": 6,
    "dec_layers": 6,
    "hidden_size": 512,
    "word_vec_size": 512,
    "heads": 8,
    "transformer_ff": 2048,
    "share_vocab": True,
    "share_embeddings": True,
    "share_decoder_embeddings": True,
    # the default, "scaled-dot-flash", is the same arithmetic, but CTranslate2's converter
    # refuses it; onmt_translate takes the attention kind from its own options anyway
    "self_attn_type": "scaled-dot",
    "param_init": 0,
    "param_init_glorot": True,
}  # the initialization of OpenNMT-py's Transformer recipe


def _quiet_import():
    """onmt's modules warn about deprecated torch.cuda.amp decorators on import."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import onmt.translate.translator  # noqa: F401


def opennmt_base(directory: str, seed: int = 0) -> str:
    """The checkpoint file (built once): onmt's builder and initialization (Glorot, as its
    Transformer recipe asks) under `seed`, saved by its ModelSaver."""
    path = os.path.join(directory, "model_step_1.pt")
    if os.path.isfile(path):
        return path
    _quiet_import()
    from onmt.inputters.inputter import dict_to_vocabs
    from onmt.model_builder import build_model
    from onmt.models.model_saver import ModelSaver
    from onmt.utils.optimizers import Optimizer

    from tests.peer_opennmt import model_options

    os.makedirs(directory, exist_ok=True)
    vocab = {"src": VOCAB, "tgt": VOCAB, "data_task": "seq2seq", "decoder_start_token": "<s>"}
    opt = model_options(**SHAPE)
    torch.manual_seed(seed)
    model = build_model(opt, opt, dict_to_vocabs(vocab), None, 0).eval()  # onmt_train's fresh start
    optim = Optimizer.from_opt(model, model_options(**SHAPE, optim="adam", learning_rate=1.0))
    saved, _ = ModelSaver(os.path.join(directory, "model"), model, opt, dict_to_vocabs(vocab), optim)._save(1, model)
    assert os.path.abspath(saved) == os.path.abspath(path), saved
    return path


def opennmt_base_without_onmt(directory: str, seed: int = 0, vocab_size: int = VOCAB_BASE, **shape) -> str:
    """The same kind of checkpoint where OpenNMT-py is not installed (the GPU machine): the dict
    onmt_train saves (`model`, `generator`, `vocab`, `opt`), written by torch.save with our
    Transformer's own seeded initialization split into OpenNMT-py's layer names. Same shapes
    as `opennmt_base` (SHAPE, `shape` overriding), not the same numbers."""
    from nmtdecode.models.formats import opennmt
    from nmtdecode.models.transformer import Transformer

    path = os.path.join(directory, "model_step_1.pt")
    if os.path.isfile(path):
        return path
    os.makedirs(directory, exist_ok=True)
    tokens = SPECIALS + [f"t{i}" for i in range(len(SPECIALS), vocab_size)]
    vocab = {"src": tokens, "tgt": tokens, "data_task": "seq2seq", "decoder_start_token": "<s>"}
    opt = argparse.Namespace(
        **{
            **SHAPE,
            "position_encoding": True,
            "max_relative_positions": 0,
            "add_qkvbias": False,
            "add_ffnbias": True,
            "transforms": [],
            **shape,
        }
    )
    cfg = opennmt.model_config(opt, vocab, {}, path)
    torch.manual_seed(seed)
    ours = Transformer(cfg).state_dict()
    linear, direct = opennmt.weight_map(cfg)
    model, generator = {}, {}
    for name, parts in linear.items():  # our fused projections, cut back into theirs
        for part, weight in zip(parts, ours[f"{name}.weight"].chunk(len(parts))):
            model[f"{part}.weight"] = weight.clone()
        if "feed_forward" in parts[0]:  # add_qkvbias off: only the feed-forward layers have biases
            model[f"{parts[0]}.bias"] = ours[f"{name}.bias"].clone()
    for name, theirs in direct.items():
        if name in ours:
            target = generator if theirs.startswith("generator.") else model
            target[theirs.removeprefix("generator.")] = ours[name].clone()
    torch.save({"model": model, "generator": generator, "opt": opt, "vocab": vocab}, path)
    return path


def to_ctranslate2(checkpoint: str, path: str) -> str:
    import ctranslate2

    if not os.path.isfile(os.path.join(path, "model.bin")):
        with torch.serialization.safe_globals([argparse.Namespace]):
            ctranslate2.converters.OpenNMTPyConverter(checkpoint).convert(path, force=True)
    return path


def translator(checkpoint: str, **options):
    """OpenNMT-py's Translator as `onmt_translate -model CHECKPOINT` builds it, with `options`
    (its flags, name -> value) over its defaults."""
    _quiet_import()
    from onmt import opts
    from onmt.translate.translator import build_translator
    from onmt.utils.parse import ArgumentParser

    from tests.peer_opennmt import flags

    parser = ArgumentParser()
    opts.translate_opts(parser)
    opt = parser.parse_args(["-model", checkpoint, "-src", "unused", *flags(options)])
    ArgumentParser.validate_translate_opts(opt)
    with torch.serialization.safe_globals([argparse.Namespace]):
        return build_translator(opt, report_score=False, out_file=io.StringIO())


def translate_batch(onmt_translator, sources: list[list[int]]) -> list[list[int]]:
    """The 1-best token ids (EOS cut) of one batch of source ids, given as OpenNMT-py's batches hold
    them: (batch, length, 1) padded with <blank>, and the lengths."""
    pad = onmt_translator._tgt_pad_idx  # onmt pads sources with the target's <blank> too (its translate_batch)
    ids = torch.full((len(sources), max(map(len, sources)), 1), pad)
    for row, source in enumerate(sources):
        ids[row, : len(source), 0] = torch.tensor(source)
    batch = {"src": ids, "srclen": torch.tensor([len(s) for s in sources]), "indices": torch.arange(len(sources))}
    results = onmt_translator.translate_batch(batch, attn_debug=False)
    eos = onmt_translator._tgt_eos_idx
    return [[t for t in nbest[0].tolist() if t != eos] for nbest in results["predictions"]]
