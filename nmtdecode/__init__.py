"""nmtdecode: a decoder for encoder-decoder translation and summarization checkpoints.

`nmtdecode.Translator` is the Python _API (api.py); importing the package does not import torch.
"""

from .version import __version__

# The Python API's names: imported from api.py on first use, so that `import nmtdecode` stays light
_API = ("GeneratedToken", "IneffectiveOptionWarning", "Scored", "Translation", "Translator")
__all__ = [*_API, "__version__"]


def __getattr__(name: str) -> object:
    if name in _API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'nmtdecode' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
