"""Hugging Face checkpoints (issue: HF formats)."""
from ..loading import ModelError


def load(path):
    raise ModelError(f"{path}: Hugging Face checkpoints are not supported yet")
