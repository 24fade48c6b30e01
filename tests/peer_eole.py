"""Tiny seeded eole 0.6.4 models, built with its own model classes and saved by its own
ModelSaver (a model directory: config.json, vocab.json, model.00.safetensors), and run by its
own inference engine (test-only: `eole` is installed by `make setup`)."""

import contextlib
import warnings

import torch

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # eole warns that flash attention is missing
    from eole.config.run import PredictConfig, TrainConfig
    from eole.inference_engine import InferenceEnginePY
    from eole.inputters.inputter import dict_to_vocabs
    from eole.models.model import get_model_class
    from eole.models.model_saver import TrainingModelSaver
    from eole.utils.misc import configure_cuda_backends
    from eole.utils.optimizers import Optimizer

WORDS = [f"w{i}" for i in range(28)]
VOCAB = ["<unk>", "<blank>", "<s>", "</s>", *WORDS]
SPECIALS = {"bos_token": "<s>", "pad_token": "<blank>", "eos_token": "</s>", "unk_token": "<unk>"}
EOS = VOCAB.index("</s>")


def train_config(path, **model) -> TrainConfig:
    """eole's training config of a tiny Transformer; `model` are keys of its `model:` section."""
    return TrainConfig(
        **{
            "src_vocab": "unused",
            "tgt_vocab": "unused",
            "share_vocab": True,
            "data": {},
            "model": {
                "architecture": "transformer",
                "hidden_size": 32,
                "layers": 2,
                "heads": 4,
                "transformer_ff": 64,
                "embeddings": {"word_vec_size": 32},
                **model,
            },
            "training": {
                "model_path": str(path),
                "dropout": [0.0],
                "attention_dropout": [0.0],
                "compute_dtype": "fp32",
                "optim": "adam",
                "learning_rate": 1.0,
            },
        }
    )


def build(path, seed=0, eos_bias=3.0, **model):
    """A random model saved as eole's ModelSaver saves it; returns (eole model, model directory).
    EOS gets a generator bias so hypotheses end at different steps."""
    config = train_config(path, **model)
    vocab = {"src": VOCAB, "tgt": VOCAB, "decoder_start_token": "<s>", "specials": SPECIALS}
    vocabs = dict_to_vocabs(vocab)
    torch.manual_seed(seed)
    net = get_model_class(config.model).for_training(config.model, vocabs, config.training)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "layernorm" in name or "layer_norm" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            else:
                p.normal_(0.0, 0.4)
        net.generator.bias[EOS] += eos_bias
    net.eval()
    optim = Optimizer.from_config(net, config)
    saver = TrainingModelSaver(
        str(path),
        net,
        config,
        vocabs,
        optim,
        keep_checkpoint=-1,
        save_format="safetensors",
        device_id=0,
        transforms=None,
    )
    saver._save(1)
    return net, path


SDPA_BACKENDS = ("math", "flash", "mem_efficient", "cudnn")


@contextlib.contextmanager
def eole_attention_backends():
    """eole's inference engine switches off PyTorch's math attention kernel for the whole
    process (eole/utils/misc.py configure_cuda_backends); its calls run with its settings,
    and ours are given back afterwards."""
    saved = {name: getattr(torch.backends.cuda, f"{name}_sdp_enabled")() for name in SDPA_BACKENDS}
    try:
        configure_cuda_backends()
        yield
    finally:
        for name, enabled in saved.items():
            getattr(torch.backends.cuda, f"enable_{name}_sdp")(enabled)


def engine(path, **options) -> InferenceEnginePY:
    """eole's inference engine on the model directory, `eole predict`'s defaults and `options`."""
    config = PredictConfig(model_path=str(path), src="unused", batch_size=1, world_size=0, gpu_ranks=[], **options)
    with eole_attention_backends():
        return InferenceEnginePY(config)


def predict(eole_engine: InferenceEnginePY, tokens: list[str]):
    """n-best (tokens, score) of one source sentence."""
    with eole_attention_backends():
        scores, _, preds = eole_engine.infer_list([" ".join(tokens)])
    return [(text.split(), float(score)) for text, score in zip(preds[0], scores[0])]
