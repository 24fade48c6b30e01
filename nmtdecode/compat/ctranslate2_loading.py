"""The model behind a CTranslate2 Translator, which `unload_model` frees and `load_model` brings
back, as CTranslate2's replica pool does (python/cpp/replica_pool.h): unloading frees the model's
memory; `to_cpu=True` on a GPU keeps its weights in host memory instead (on a CPU it changes
nothing); loading reads the model again, or moves the kept weights back to the GPU, keeping
them in host memory too with `keep_cache=True`. A call while the model is unloaded raises
CTranslate2's RuntimeError."""

from __future__ import annotations

import copy
import dataclasses
import gc
from typing import TYPE_CHECKING, Any

from .. import api

if TYPE_CHECKING:
    from ..models.checkpoint import LoadedModel


class ModelSlot:
    """An API Translator loaded from `model_path` with `options` (Translator.load's), or nothing."""

    def __init__(self, model_path: str, options: dict[str, Any]) -> None:
        self.model_path, self.options = model_path, options
        self._api: api.Translator | None = api.Translator.load(model_path, **options)
        engine = self._api.engine
        self.config, self.device = engine.config, engine.device  # what a reload rebuilds
        self.on_gpu = self.device.type != "cpu"  # where to_cpu=True keeps the weights in host memory
        self.host_copy: LoadedModel | None = None  # a GPU model's weights in host memory (to_cpu=True)

    @property
    def loaded(self) -> bool:
        return self._api is not None

    @property
    def api(self) -> api.Translator:
        """The loaded model's API Translator; RuntimeError when unloaded, as CTranslate2's."""
        if self._api is None:
            raise RuntimeError("The model for this translator was unloaded")
        return self._api

    def unload(self, to_cpu: bool) -> None:
        """Free the model (and any weights kept in host memory); with to_cpu=True on a GPU, keep its
        weights in host memory, once."""
        if to_cpu and not self.on_gpu:
            return
        if self._api is not None:
            kept = self._api.engine.loaded
            if to_cpu and self.host_copy is None:
                kept.model.to("cpu")  # in place: the engine that held it goes with _api
                self.host_copy = kept
            self._api = None
        if not to_cpu:
            self.host_copy = None
        gc.collect()  # what the engine held in reference cycles, before the device's cache is emptied
        if self.on_gpu:
            import torch

            torch.cuda.empty_cache()

    def load(self, keep_cache: bool) -> None:
        """Load the model again: from its files, or from the weights kept in host memory (moved to
        the device; with keep_cache=True copied, the host's kept)."""
        if self._api is not None:
            return
        if self.host_copy is None:
            self._api = api.Translator.load(self.model_path, **self.options)
            return
        from ..engine.engine import Engine

        kept = self.host_copy
        model = copy.deepcopy(kept.model) if keep_cache else kept.model
        moved = dataclasses.replace(kept, model=model.to(self.device))
        self._api = api.Translator(Engine.around(self.config, moved, self.device))
        if not keep_cache:
            self.host_copy = None
