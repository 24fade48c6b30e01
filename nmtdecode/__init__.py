"""nmtdecode: a decoder for encoder-decoder translation and summarization checkpoints.

`nmtdecode.Translator` is the Python API (api.py); importing the package does not import torch.
"""

__version__ = "0.1.0"


def __getattr__(name):
    if name in ("Translator", "Translation"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'nmtdecode' has no attribute {name!r}")
