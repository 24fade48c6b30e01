"""Tiny seeded OpenNMT-py 3.5.1 models, built with its own model builder and saved by its own
ModelSaver, and run by its own Translator (test-only: `onmt` is installed by `make setup`)."""

import argparse
import io
import warnings

import torch

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # onmt's modules use deprecated torch.cuda.amp decorators
    from onmt import opts
    from onmt.inputters.inputter import dict_to_vocabs
    from onmt.model_builder import build_base_model
    from onmt.models.model_saver import ModelSaver
    from onmt.translate import GNMTGlobalScorer
    from onmt.translate.translator import Translator
    from onmt.utils.optimizers import Optimizer
    from onmt.utils.parse import ArgumentParser

WORDS = [f"w{i}" for i in range(28)]
VOCAB = ["<unk>", "<blank>", "<s>", "</s>", *WORDS]
EOS = VOCAB.index("</s>")
UNK = VOCAB.index("<unk>")


def flags(options: dict) -> list[str]:
    """Command-line flags of OpenNMT-py's parsers: `-name value`, `-name` alone for True,
    `-name v1 v2` for a list."""
    args = []
    for name, value in options.items():
        if value is True:
            args.append(f"-{name}")
        elif isinstance(value, list):
            args += [f"-{name}", *map(str, value)]
        elif value is not False:
            args += [f"-{name}", str(value)]
    return args


def model_options(**options) -> argparse.Namespace:
    """onmt_train's options for a tiny Transformer; `options` are onmt_train flags (name -> value)."""
    parser = ArgumentParser()
    opts.train_opts(parser)
    values = {
        "data": "{}",
        "src_vocab": "unused",
        "save_model": "unused",
        "encoder_type": "transformer",
        "decoder_type": "transformer",
        "enc_layers": 2,
        "dec_layers": 2,
        "hidden_size": 32,
        "word_vec_size": 32,
        "heads": 4,
        "transformer_ff": 64,
        "position_encoding": True,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        **options,
    }
    opt = parser.parse_args(flags(values))
    ArgumentParser.update_model_opts(opt)
    ArgumentParser.validate_model_opts(opt)
    return opt


def build(path, seed=0, eos_bias=3.0, unk_bias=0.0, **options):
    """A random model saved as OpenNMT-py's ModelSaver saves it; returns (onmt model, opt, vocab dict).
    EOS gets a generator bias so hypotheses end at different steps; `unk_bias` makes <unk> likely."""
    opt = model_options(**options)
    vocab = {"src": VOCAB, "tgt": VOCAB, "data_task": "seq2seq", "decoder_start_token": "<s>"}
    torch.manual_seed(seed)
    model = build_base_model(opt, dict_to_vocabs(vocab))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            else:
                p.normal_(0.0, 0.4)
        model.generator.bias[EOS] += eos_bias
        model.generator.bias[UNK] += unk_bias
    model.eval()
    optim = Optimizer.from_opt(model, model_options(**options, optim="adam", learning_rate=1.0))
    saver = ModelSaver(str(path), model, opt, dict_to_vocabs(vocab), optim)
    checkpoint_path, _ = saver._save(1, model)
    return model, opt, vocab, checkpoint_path


def translator(model, opt, vocab, **options) -> Translator:
    """OpenNMT-py's Translator with onmt_translate's defaults and `options` (its flags)."""
    parser = ArgumentParser()
    opts.translate_opts(parser)
    translate_opt = parser.parse_args(["-model", "unused", "-src", "unused", *flags(options)])
    return Translator.from_opt(
        model,
        dict_to_vocabs(vocab),
        translate_opt,
        opt,
        global_scorer=GNMTGlobalScorer.from_opt(translate_opt),
        out_file=io.StringIO(),
        report_score=False,
    )


def translate(onmt_translator: Translator, tokens: list[str]):
    """n-best (tokens, score) of one source sentence (batch size 1), as onmt_translate would give."""
    ids = torch.tensor([[VOCAB.index(t) for t in tokens]])
    batch = {"src": ids[:, :, None], "srclen": torch.tensor([len(tokens)]), "indices": torch.tensor([0])}
    with torch.no_grad():
        results = onmt_translator.translate_batch(batch, attn_debug=False)
    return [
        ([VOCAB[i] for i in pred.tolist() if i != EOS], float(score))
        for pred, score in zip(results["predictions"][0], results["scores"][0])
    ]


def gold_score(onmt_translator: Translator, src: list[str], tgt: list[str]) -> float:
    """The log-probability onmt_translate reports for a given target (`-tgt`): <s> fed first,
    every target token and </s> scored."""
    ids = torch.tensor([[VOCAB.index(t) for t in src]])
    target = torch.tensor([[VOCAB.index(t) for t in ["<s>", *tgt, "</s>"]]])
    batch = {
        "src": ids[:, :, None],
        "srclen": torch.tensor([len(src)]),
        "tgt": target[:, :, None],
        "indices": torch.tensor([0]),
    }
    with torch.no_grad():
        return float(onmt_translator.translate_batch(batch, attn_debug=False)["gold_score"][0])
