"""The engine, and with it torch, imported with Python's cyclic garbage collector paused.

`import torch` makes about a million Python objects, and the collector walks them all three
times over while they are being made: full collections that find nothing to free, 0.25-0.3 s
of a one-line job on the demo model (docs/speed.md#whole-jobs-and-model-loading). Paused for
the import, the collector is restored as it was. In a process that is nmtdecode's own (the
command line) the objects made until then are also frozen (`gc.freeze`): modules, functions
and classes that live as long as the process, which later collections then skip; the Python
API leaves its caller's objects as they are.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Engine


def import_engine(own_process: bool = False) -> type[Engine]:
    """engine.Engine, imported with the collector paused (frozen after, with `own_process`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        from .engine import Engine
    finally:
        if own_process:
            gc.freeze()
        if enabled:
            gc.enable()
    return Engine
