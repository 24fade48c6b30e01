"""What this machine can do for a job's options, checked before the model loads (`device_for`).

The options' own values and combinations were checked where they are declared (options/);
here they meet the machine: a CUDA device where one is asked for, int8 weights only where
their kernels run (the CPU). Checks of the precisions a CPU computes (a dtype or int8 without
the instructions that make it work) belong beside these, in `check_precision`. Errors are
ConfigErrors (exit code 2), named by the option.
"""

from __future__ import annotations

import torch

from ..options.config import ConfigError, RuntimeConfig


def device_for(runtime: RuntimeConfig) -> torch.device:
    """The device the options ask for, there and able to compute in their precision."""
    device = _present(runtime.device)
    check_precision(runtime, device)
    return device


def _present(asked: str) -> torch.device:
    """`auto`: CUDA when present, else the CPU; `cuda` or `cuda:N`: only when CUDA is present."""
    if asked == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if asked.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: {asked} was asked for, but no CUDA device is available")
    return torch.device(asked)


def check_precision(runtime: RuntimeConfig, device: torch.device) -> None:
    """Whether `device` computes in the precision the options ask for (--dtype, --quantize)."""
    if runtime.quantize == "int8" and device.type != "cpu":
        raise ConfigError("quantize: int8 is for CPU decoding; on CUDA use --dtype float16 or bfloat16")
