"""The engine, and with it torch, imported with Python's cyclic garbage collector paused.

`import torch` makes about a million Python objects, and the collector walks them all three
times over while they are being made: full collections that find nothing to free, 0.25-0.3 s
of a one-line job on the demo model (docs/speed.md#whole-jobs-and-model-loading). Paused for
the import, the collector is restored as it was. In a process that is nmtdecode's own (the
command line's, which says so: `own_the_process`) the objects made until then are also frozen
(`gc.freeze`): modules, functions and classes that live as long as the process, which later
collections then skip. Elsewhere (the Python API, the command run in-process by a test) the
caller's objects are left as they are.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import Engine

_process_is_ours = False


def own_the_process() -> None:
    """Say that this process is nmtdecode's own (cli.main, the program's entry point)."""
    global _process_is_ours
    _process_is_ours = True


def import_engine() -> type[Engine]:
    """engine.Engine, imported with the collector paused (what the import made frozen after, in
    nmtdecode's own process)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        from .engine import Engine
    finally:
        if _process_is_ours:
            gc.freeze()
        if enabled:
            gc.enable()
    return Engine
