"""Small seeded T5 checkpoints of each configuration users run, built with `transformers` from
their configs and saved with `save_pretrained` (no hub): the parity tests' models.

  t5       v1.0: ReLU, output tied to the embeddings and scaled by d_model^-0.5
  t5-v1.1  gated GELU, its own output projection, unscaled (flan-T5)
  mt5      as v1.1, model_type mt5
  byt5     as v1.1 over 384 byte ids, a deeper encoder than decoder
  madlad   as v1.1, the decoder starting with a token that is not pad

Heads are d_kv = 12 wide over d_model 32 (heads x d_kv != d_model, as in flan-T5-small), and
the relative buckets are few and short (8 up to 12 positions) so that the test sentences reach
their logarithmic buckets; mT5 keeps T5's 32 up to 128.
"""

import torch
import transformers
from transformers import GenerationConfig

from nmtdecode.models.checkpoint import read_json
from nmtdecode.models.formats.huggingface import load_network

SIZES = dict(
    vocab_size=64,
    d_model=32,
    d_kv=12,
    d_ff=48,
    num_layers=3,
    num_decoder_layers=2,
    num_heads=4,
    dropout_rate=0.0,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=12,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=0,
)
V11 = dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)
# name -> (config class, model class, config values over SIZES)
VARIANTS = {
    "t5": ("T5Config", "T5ForConditionalGeneration", dict(feed_forward_proj="relu")),
    "t5-v1.1": ("T5Config", "T5ForConditionalGeneration", V11),
    "mt5": (
        "MT5Config",
        "MT5ForConditionalGeneration",
        dict(V11, relative_attention_num_buckets=32, relative_attention_max_distance=128),
    ),
    "byt5": ("T5Config", "T5ForConditionalGeneration", dict(V11, vocab_size=384, num_layers=4, num_decoder_layers=1)),
    "madlad": (
        "T5Config",
        "T5ForConditionalGeneration",
        dict(V11, pad_token_id=1, eos_token_id=2, decoder_start_token_id=0),
    ),
}
# A random model falls into repeating one token. EOS's output row is made one feature times a
# weight (it wins at the steps where that feature is large), or, tied to the embeddings (t5), its
# own row scaled; with these values (found by a sweep) greedy outputs end at different steps.
EOS_ROW = {"t5": ("scaled", 2.5), "t5-v1.1": ("feature", 5.0), "mt5": ("feature", 5.0)}
EOS_ROW.update({"byt5": ("feature", 5.0), "madlad": ("feature", 6.0)})
GREEDY_BATCH = {"madlad": 2}  # the seed of the batch whose greedy outputs end at different steps; else 0
STD = {"t5": 0.4}  # of the weights; 0.25 for the others
# queries smaller: T5's scores are not divided by sqrt(d_kv), and large ones make the random models'
# float32 logits differ from their float64 ones by more than the parity tests' 1e-4
Q_SCALE = 0.3


def config_of(variant: str) -> dict:
    return {**SIZES, **VARIANTS[variant][2]}


def build(variant, path, seed=0, eos_row=None, config=None, **generation):
    """A random model of `variant` (its config values updated with `config`) saved to `path` with
    generation_config.json of `generation`; returns (the transformers model, our Transformer,
    decoding defaults, rules)."""
    config_name, model_name, _ = VARIANTS[variant]
    values, std = {**config_of(variant), **(config or {})}, STD.get(variant, 0.25)
    torch.manual_seed(seed)
    hf = getattr(transformers, model_name)(getattr(transformers, config_name)(**values)).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.normal_(1.0, 0.1) if "layer_norm" in name else p.normal_(0.0, std * (Q_SCALE if ".q." in name else 1))
        if values.get("tie_word_embeddings") is False:  # its own output projection, stored as lm_head
            hf.lm_head.weight = torch.nn.Parameter(torch.randn_like(hf.shared.weight) * std)
        output = hf.lm_head.weight if values.get("tie_word_embeddings") is False else hf.shared.weight
        kind, weight = EOS_ROW[variant] if eos_row is None else eos_row
        eos = values["eos_token_id"]
        if kind == "scaled":
            output[eos] *= weight
        else:
            output[eos] = 0.0
            output[eos, 0] = weight
    hf.generation_config = GenerationConfig(
        decoder_start_token_id=values["decoder_start_token_id"],
        eos_token_id=values["eos_token_id"],
        pad_token_id=values["pad_token_id"],
        **generation,
    )
    hf.save_pretrained(path)
    model, defaults, rules = load_network(str(path), read_json(str(path / "config.json")))
    return hf, model, defaults, rules


def batch(variant, seed=0, sizes=(9, 3, 14, 6, 1, 12)):
    """Source ids of mixed lengths (EOS last), right-padded: (rows, ids, mask)."""
    values = config_of(variant)
    pad, eos = values["pad_token_id"], values["eos_token_id"]
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(3, values["vocab_size"], (n,), generator=g).tolist() + [eos] for n in sizes]
    ids = torch.full((len(rows), max(map(len, rows))), pad)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    return rows, ids, ids != pad
