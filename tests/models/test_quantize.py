"""int8 dynamic quantization: every linear layer becomes int8, and the model still computes
nearly the same distribution (the benchmark measures the BLEU difference on real data)."""

import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as QuantizedLinear

from nmtdecode.config import Config, ConfigError
from nmtdecode.models.quantize import quantize_int8

from tests.helpers import random_sources, tiny_transformer


def test_int8_replaces_linear_layers_and_keeps_logits_close():
    model = tiny_transformer(0, vocab=40, d_model=64, ffn_dim=128)
    for p in model.parameters():  # realistic scale: random N(0, 0.3) weights would make int8 look worse than it is
        p.data.mul_(0.3)
    src = torch.tensor(random_sources(4, 40, seed=2, min_len=5, max_len=5))
    mask = torch.ones_like(src, dtype=torch.bool)
    tgt = torch.randint(4, 40, (4, 6))
    with torch.no_grad():
        reference = torch.log_softmax(model(src, mask, tgt), -1)
        quantize_int8(model)
        quantized = torch.log_softmax(model(src, mask, tgt), -1)
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, QuantizedLinear))]
    assert layers and all(isinstance(m, QuantizedLinear) for m in layers)
    assert not torch.equal(quantized, reference)  # really quantized
    assert (quantized.exp() - reference.exp()).abs().max() < 0.02  # probabilities within 2 points


def test_int8_needs_float32():
    with pytest.raises(ConfigError, match="quantize: int8 works with --dtype float32"):
        Config.from_values({"quantize": "int8", "dtype": "bfloat16"})
