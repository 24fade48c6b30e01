"""Where and in what form a model's weights live, decided before they are read.

A placement is a device, a dtype and the way the CPU multiplies by the weights
(`backend`): torch's own products on plain tensors, oneDNN on packed ones
(models/gemm.py), or int8 (models/quantize.py). `fill` reads every weight once,
straight into that form, layer by layer: a packed or quantized layer replaces
the plain one as soon as it is made, so no weight is ever held twice, and the
peak of a load is the model's final size plus one layer.

Tied weights stay one tensor where it counts: an output projection tied to the
token embeddings multiplies by the embeddings' own matrix (plain, or int8 with its
scales: the lookup needs its rows as they are) when a packed copy would be large
(PACKED_TIED_COPY_BYTES, INT8_TIED_COPY_BYTES), and by a packed copy below. Layers
are filled by a few threads at once: reading a file and packing a layer run outside
Python's lock.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from . import cpu, gemm, memory
from ..options.config import ConfigError
from .architecture import precision_refusal
from .checkpoint import ModelError, largest_demand
from .quantize import Int8Embedding, Int8TiedOutput, int8_linear, quantized_rows, tied_output
from .transformer import FeedForward, Transformer
from .weights import InMemoryTensor, Source, StoredInt8, check_weights, in_memory, read, shared_names

BACKENDS = ("torch", "onednn", "int8")
# A tied output projection up to this size gets a packed copy beside the embeddings' plain matrix:
# a product by the plain one costs more on Transformer-base shapes, and a second copy of
# 32k x 512 is 64 MB (docs/speed.md#real-size-models-on-the-cpu). Above it (NLLB's, mBART's
# 256k x 1024: 1 GB) the two share one.
PACKED_TIED_COPY_BYTES = 256 << 20
# The same for an int8 table (fbgemm's packed copy; 32k x 512 is 16 MB, NLLB's 250 MB), unless the
# CPU has no fast product by the shared table (no VNNI: models/quantize.py, `tied_output`).
INT8_TIED_COPY_BYTES = 64 << 20
MAX_READERS = 4  # threads filling layers at once (reading from the page cache gains little beyond that)
# Below this many weights a model's layers are filled on the calling thread: the tests' tiny models
# loaded in 14 ms so and in 30 ms handed to threads; the demo's 6.9 million, 54-60 ms in threads and
# 66-73 ms on one.
THREADED_FILL_WEIGHTS = 1 << 20


@dataclass(frozen=True)
class Placement:
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    dtype: torch.dtype = torch.float32
    backend: str = "torch"  # one of BACKENDS, or "auto": gemm.choose_backend decides for the model's shapes

    def resolved(self, model: nn.Module) -> "Placement":
        """The placement with its backend decided: int8 stays, `torch` off the CPU and where oneDNN
        cannot serve, `auto` measured on the model's shapes (gemm.choose_backend)."""
        if self.backend == "int8":
            if self.device.type != "cpu":
                raise ValueError("quantize: int8 is for CPU decoding; on CUDA use --dtype float16 or bfloat16")
            return self
        return replace(self, backend=gemm.choose_backend(model, self.backend, self.device, self.dtype))


KEPT_INT8_BACKENDS = ("auto", "int8")  # a placement leaving the CPU's products to be chosen, or asking for int8


def as_stored_int8(placement: Placement | None) -> Placement | None:
    """The placement of a model stored in int8 (a CTranslate2 model's rows, `nmtdecode convert`'s):
    int8 on a CPU in float32 that runs int8 natively (models/cpu.py), unless the placement names
    float products (--gemm torch/onednn); its rows dequantized as read otherwise. None (a bare
    load: tests, inspect) stays float32, as every format's."""
    if placement is None:
        return None
    keep = placement.device.type == "cpu" and placement.dtype == torch.float32 and cpu.verdict("int8").native
    return replace(placement, backend="int8") if keep and placement.backend in KEPT_INT8_BACKENDS else placement


def fill(model: Transformer, sources: dict[str, Source], placement: Placement) -> Placement:
    """Give every parameter of `model` (built by Transformer.uninitialised, or in memory) its weight
    from `sources` (our names -> stored tensors, models/weights.py; checked by the caller) in the form
    `placement` says. Returns the placement with its backend decided (kept as `model.backend`)."""
    placement = placement.resolved(model)
    try:
        _fill(model, sources, placement)
    except (RuntimeError, MemoryError) as error:  # torch.OutOfMemoryError is a RuntimeError
        if not memory.is_out_of_memory(error):
            raise
        need = sum(t.numel() for t in model.state_dict().values()) * placement.dtype.itemsize
        what, _ = largest_demand(model.cfg)
        raise ModelError(
            f"out of memory placing the model on {placement.device} in "
            f"{str(placement.dtype).removeprefix('torch.')}: its weights need "
            f"{memory.readable_size(need)}, most of them for {what}"
        ) from None
    model.backend = placement.backend
    return placement


def _fill(model: Transformer, sources: dict[str, Source], placement: Placement) -> None:
    parents = _parents(model)
    aliases = shared_names(model)
    tied: list[tuple[str, nn.Module]] = []
    own: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        names = [f"{name}.{p}" if name else p for p, t in module.named_parameters(recurse=False)]
        if names:
            (tied if any(n in aliases for n in names) else own).append((name, module))
    # a tied layer -> the layer whose weight it reads; those go first, each followed by the layers
    # that read it, so that a long job (fbgemm packing a copy of a 256k-token table) overlaps the rest
    owners = {name: aliases[f"{name}.weight"].rpartition(".")[0] for name, _ in tied}
    own.sort(key=lambda job: job[0] not in owners.values())
    readers = max(1, min(MAX_READERS, torch.get_num_threads()))
    small = sum(p.numel() for p in model.parameters()) < THREADED_FILL_WEIGHTS
    with InlinePool() if small else ThreadPoolExecutor(readers) as pool:
        jobs = []
        for name, module in own:
            filled = pool.submit(_fill_layer, name, module, sources, placement, parents)
            jobs.append(filled)
            for reader, tied_module in tied:
                if owners[reader] == name:  # started after its owner (the queue is first in, first out)
                    args = (model, reader, tied_module, aliases, sources, placement, parents)
                    jobs.append(pool.submit(_after, filled, _fill_tied, *args))
        for job in jobs:
            job.result()  # each job's error comes out here
    for module in model.modules():  # buffers the model computed itself (sinusoids)
        for key, buffer in module._buffers.items():
            if buffer is not None and buffer.is_floating_point() and buffer.layout == torch.strided:
                module._buffers[key] = buffer.to(placement.device, placement.dtype)


class InlinePool:
    """ThreadPoolExecutor's `submit` run at once on the calling thread, its outcome in the future."""

    def __enter__(self) -> "InlinePool":
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def submit(self, job: Callable[..., None], *args: object) -> Future:
        done: Future = Future()
        try:
            job(*args)
            done.set_result(None)
        except Exception as error:  # out of memory included: raised by result(), as a thread's would be
            done.set_exception(error)
        return done


def _after(first: Future, then: Callable[..., None], *args: object) -> None:
    """`then(*args)` once `first` is done (its error, if any, comes out of `first` itself)."""
    if first.exception() is None:
        then(*args)


def load_weights(model: Transformer, sources: dict, source: str, placement: Placement | None = None) -> Placement:
    """Give `model` its weights from `sources` (our parameter names -> stored tensors of
    models/weights.py, or plain tensors), strictly checked (names and shapes, before anything is
    read), each read once into the form `placement` gives it (default: float32 on the CPU).
    Returns the placement with its backend decided. A dtype the model cannot compute in is refused
    first, in one line (architecture.precision_refusal: T5 in float16)."""
    refusal = precision_refusal(model.cfg, str((placement or Placement()).dtype).removeprefix("torch."))
    if refusal:
        raise ConfigError(refusal)
    sources = {
        name: InMemoryTensor(t, name, source) if isinstance(t, torch.Tensor) else t for name, t in sources.items()
    }
    check_weights(model, sources, source)
    return fill(model, sources, placement or Placement())


def place_model(model: Transformer, placement: Placement) -> Transformer:
    """A model already in memory, its weights given the form `placement` says (in place)."""
    tensors = {
        n: t.detach()
        for n, t in model.state_dict().items()
        if n not in shared_names(model) and t.layout == torch.strided
    }
    sources: dict[str, Source] = dict(in_memory(tensors, "model"))
    check_weights(model, sources, "model")
    fill(model, sources, placement)
    return model


def _parents(model: nn.Module) -> "Parents":
    """Every place a module hangs from (a module shared by two parents, as shared embeddings are,
    is replaced in both): id(module) -> [(parent, attribute)]."""
    parents: dict[int, list[tuple[nn.Module, str]]] = {}
    for parent in model.modules():
        for key, child in parent._modules.items():
            if child is not None:
                parents.setdefault(id(child), []).append((parent, key))
    return parents


Parents = dict[int, list[tuple[nn.Module, str]]]  # id(module) -> [(parent, attribute)]


def _replace(old: nn.Module, new: nn.Module, parents: Parents) -> None:
    for parent, key in parents.get(id(old), []):
        setattr(parent, key, new)


def _plain(source: Source, placement: Placement) -> nn.Parameter:
    return nn.Parameter(read(source, placement.dtype).to(placement.device), requires_grad=False)


def _fill_layer(
    name: str, module: nn.Module, sources: dict[str, Source], placement: Placement, parents: Parents
) -> None:
    """One layer's weights, in the placement's form; a linear layer or token embedding may be
    replaced by its packed or int8 kind."""
    own = {key: sources.pop(f"{name}.{key}" if name else key) for key, p in module.named_parameters(recurse=False)}
    int8 = placement.backend == "int8" and quantized_in_int8(name, module)
    if int8 and type(module) is nn.Linear:
        bias = read(own["bias"], torch.float32) if "bias" in own else None
        _replace(module, _int8_linear(own["weight"], bias), parents)
    elif type(module) is nn.Linear and placement.backend == "onednn":
        weight = read(own["weight"], placement.dtype)
        bias = read(own["bias"], placement.dtype) if "bias" in own else None
        parent, key = parents[id(module)][0]
        feed_forward = parent if key == "up" and isinstance(parent, FeedForward) else None
        activation = None if feed_forward is None else feed_forward.activation_name
        fused = activation in gemm.POST_OPS
        _replace(module, gemm.PackedLinear(weight, bias, activation if fused else None), parents)
        if fused and feed_forward is not None:
            feed_forward.activation = None  # applied inside the product
    elif int8:  # the token embeddings
        per_row = isinstance(own["weight"], StoredInt8) and own["weight"].activations_per_row
        _replace(module, Int8Embedding(*int8_rows(own["weight"]), activations_per_row=per_row), parents)
    else:
        for key, source in own.items():
            setattr(module, key, _plain(source, placement))


def quantized_in_int8(name: str, module: nn.Module) -> bool:
    """Whether int8 keeps this layer's weight as int8 rows: every linear layer and the token
    embeddings (as CTranslate2 does); the rest stays float32."""
    return type(module) is nn.Linear or type(module) is nn.Embedding and name.endswith("tokens")


def int8_rows(source: Source) -> tuple[torch.Tensor, torch.Tensor]:
    """A weight's int8 rows and their scales: as the checkpoint stores them where it holds int8 (a
    CTranslate2 model's, formats/ct2.py; `nmtdecode convert`'s, weights.QuantizedSource: used as
    they are), else quantized as read."""
    return source.int8_rows() if isinstance(source, StoredInt8) else quantized_rows(source)


def _int8_linear(weight: Source, bias: torch.Tensor | None) -> nn.Module:
    """An int8 linear layer: fbgemm's dynamic layer, on rows quantized as read or stored so. Rows
    stored by CTranslate2 (`activations_per_row`) multiply as its products do, each row of
    activations quantized alone (Int8TiedOutput over the layer's own rows: 99-100% of CTranslate2's
    int8 outputs on random models, against 55-71% for fbgemm's one scale a batch, docs/formats.md),
    where the CPU has int8 dot products: without VNNI torch._int_mm is a reference loop
    (models/cpu.py), and fbgemm's layer multiplies them."""
    if isinstance(weight, StoredInt8):
        (values, scales), per_row = weight.int8_rows(), weight.activations_per_row
    else:
        (values, scales), per_row = quantized_rows(weight, kept=False), False  # packed: a copy
    if per_row and cpu.current().int8_dot:
        return Int8TiedOutput(Int8Embedding(values, scales), bias)
    return int8_linear(values, scales, bias)


def _fill_tied(
    model: Transformer,
    name: str,
    module: nn.Module,
    aliases: dict[str, str],
    sources: dict[str, Source],
    placement: Placement,
    parents: Parents,
) -> None:
    """A layer whose weight is another's (the output projection tied to the token embeddings):
    it reads that layer's weight, in whatever form it was given; its own bias is its own."""
    first = aliases[f"{name}.weight"]
    owner = model.get_submodule(first.rpartition(".")[0])
    bias = sources.pop(f"{name}.bias", None)
    if isinstance(owner, Int8Embedding):
        bias_values = None if bias is None else read(bias, torch.float32)
        _replace(module, tied_output(owner, bias_values, INT8_TIED_COPY_BYTES), parents)
        return
    module.weight = owner.weight
    if bias is not None:
        module.bias = _plain(bias, placement)
    if type(module) is nn.Linear and placement.backend == "onednn":
        copy = module.weight.numel() * module.weight.element_size() <= PACKED_TIED_COPY_BYTES
        _replace(module, gemm.PackedLinear(module.weight, module.bias, pack=copy), parents)
