"""nmtdecode: a decoder for encoder-decoder translation and summarization checkpoints.

`nmtdecode.Translator` is the Python API (api.py); importing the package does not import torch.
"""

from .version import __version__

__all__ = ["Translation", "Translator", "__version__"]


def __getattr__(name):
    if name in ("Translator", "Translation"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'nmtdecode' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), "Translation", "Translator"])
