"""int8 weights for CPU decoding: dynamic quantization of every linear layer.

Weights are stored as int8 with one scale per output row; activations are
quantized on the fly per batch (PyTorch's fbgemm/onednn kernels). Embeddings,
layer norms and the attention arithmetic stay in float32.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn


def quantize_int8(model: nn.Module) -> nn.Module:
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("quantize: int8 is for CPU decoding; on CUDA use --dtype float16 or bfloat16")
    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)
