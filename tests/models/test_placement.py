"""Weights read once, into their final form (models/weights.py, models/placement.py): what is read
equals what was saved, in any dtype; a packed or int8 layer replaces the plain one; a tied output
projection reads the embeddings' own matrix (one copy); and a weight that is not a float, or not a
finite one, fails the load by name."""

import struct

import pytest
import torch
from safetensors.torch import save_file
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as QuantizedLinear

from nmtdecode.models import gemm, placement
from nmtdecode.models.checkpoint import ModelError
from nmtdecode.models.placement import Placement, load_weights, place_model
from nmtdecode.models.quantize import Int8Embedding, Int8TiedOutput
from nmtdecode.models.transformer import Transformer
from nmtdecode.models.weights import InMemoryTensor, StoredTensors, Transposed, join, read

from tests.helpers import random_sources, tiny_transformer

needs_onednn = pytest.mark.skipif(not gemm.onednn_available(), reason="this torch build has no oneDNN linear")


def saved(tmp_path, tensors: dict) -> StoredTensors:
    path = tmp_path / "weights.safetensors"
    save_file(tensors, str(path))
    return StoredTensors([str(path)])


@pytest.mark.parametrize("stored_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_stored_tensor_reads_back_whole_in_rows_and_joined(tmp_path, monkeypatch, stored_dtype):
    monkeypatch.setattr("nmtdecode.models.weights.CHUNK_BYTES", 40)  # many chunks per tensor
    torch.manual_seed(0)
    a, b = torch.randn(7, 5).to(stored_dtype), torch.randn(3, 5).to(stored_dtype)
    stored = saved(tmp_path, {"a": a, "b": b, "scalar": torch.tensor(2.5)})
    assert torch.equal(read(stored.tensors["a"]), a)
    assert torch.equal(read(stored.tensors["a"], torch.float32), a.float())
    joined = join([stored.tensors["a"], stored.tensors["b"]])
    assert joined.shape == (10, 5) and torch.equal(read(joined), torch.cat([a, b]))
    rows = torch.empty(4, 5, dtype=stored_dtype)
    joined.read_rows(5, rows)  # across the two parts
    assert torch.equal(rows, torch.cat([a, b])[5:9])
    assert stored.values("scalar") == [2.5]


@pytest.mark.parametrize("stored_dtype", [torch.float32, torch.float16])
def test_a_transposed_tensor_reads_any_block_of_its_rows(tmp_path, monkeypatch, stored_dtype):
    """Marian's (in, out) weights as (out, in): whole, and a block of rows (int8's quantizer reads
    blocks), with the stored rows read a few at a time."""
    monkeypatch.setattr("nmtdecode.models.weights.CHUNK_BYTES", 24)  # three stored rows per block
    torch.manual_seed(0)
    a = torch.randn(7, 5).to(stored_dtype)
    seen = Transposed(saved(tmp_path, {"a": a}).tensors["a"])
    assert seen.shape == (5, 7) and torch.equal(read(seen, torch.float32), a.T.float())
    rows = torch.empty(2, 7, dtype=torch.float32)
    seen.read_rows(3, rows)
    assert torch.equal(rows, a.T[3:5].float())


@pytest.mark.parametrize("code, name", [("I16", "int16"), ("I64", "int64"), ("U8", "uint8")])
def test_a_weight_that_is_not_floating_point_is_refused_by_name(tmp_path, code, name):
    """Integer bytes in a weight's place (float16 relabelled I16) would be converted to numbers that
    mean nothing: the load names the tensor and its dtype."""
    path = tmp_path / "model.safetensors"
    size = 4 * {"I64": 8, "I16": 2, "U8": 1}[code]
    header = f'{{"w": {{"dtype": "{code}", "shape": [2, 2], "data_offsets": [0, {size}]}}}}'
    data = header.encode()
    path.write_bytes(struct.pack("<Q", len(data)) + data + b"\x01" * size)
    stored = StoredTensors([str(path)])
    with pytest.raises(ModelError, match=f"tensor w holds {name}; weights must be float32, float16 or bfloat16"):
        read(stored.tensors["w"])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_weights_fail_the_load_by_name(tmp_path, bad):
    weight = torch.ones(64, 8)
    weight[40, 3] = bad
    stored = saved(tmp_path, {"layer.weight": weight})
    with pytest.raises(ModelError, match="tensor layer.weight holds NaN or infinite values"):
        read(stored.tensors["layer.weight"])
    with pytest.raises(ModelError, match="holds NaN or infinite values"):
        read(InMemoryTensor(weight, "layer.weight", "memory"))


def test_a_file_shorter_than_its_header_fails_before_anything_is_read(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({"w": torch.ones(100, 10)}, str(path))
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ModelError, match="truncated"):
        StoredTensors([str(path)])


def model_and_sources(tmp_path, **cfg):
    """A seeded model and its weights saved as safetensors (tied ones once, as checkpoints hold them)."""
    from nmtdecode.models.weights import shared_names

    source = tiny_transformer(1, vocab=40, **cfg)
    aliases = shared_names(source)
    stored = saved(tmp_path, {n: t.contiguous() for n, t in source.state_dict().items() if n not in aliases})
    return source, stored.tensors


def outputs(model):
    """The model's logits on fixed inputs (teacher forcing)."""
    src = torch.tensor(random_sources(3, 40, seed=2, min_len=6, max_len=6))
    tgt = torch.tensor(random_sources(3, 40, seed=3, min_len=5, max_len=5))
    with torch.inference_mode():
        return model(src, torch.ones_like(src, dtype=torch.bool), tgt)


@needs_onednn
@pytest.mark.parametrize("tied", [True, False])
def test_a_load_through_onednn_packs_every_linear_and_computes_the_same(tmp_path, tied):
    source, sources = model_and_sources(tmp_path, tie_output=tied)
    model = Transformer.uninitialised(source.cfg).eval()
    placed = load_weights(model, dict(sources), "test", Placement(backend="onednn"))
    assert placed.backend == model.backend == "onednn"
    assert not any(type(m) is nn.Linear for m in model.modules())
    torch.testing.assert_close(outputs(model), outputs(source), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_a_large_tied_projection_reads_the_embeddings_own_matrix(tmp_path, monkeypatch):
    """Above PACKED_TIED_COPY_BYTES the output projection keeps no copy: its weight is the very
    tensor the embedding looks rows up in; below it, a packed copy."""
    source, sources = model_and_sources(tmp_path, tie_output=True)
    small = Transformer.uninitialised(source.cfg).eval()
    load_weights(small, dict(sources), "test", Placement(backend="onednn"))
    assert small.output.packed
    monkeypatch.setattr(placement, "PACKED_TIED_COPY_BYTES", 0)
    monkeypatch.setattr(gemm, "PLAIN_BLOCK_BYTES", 32 * 4 * 7)  # 7 tokens at a time: 6 blocks
    large = Transformer.uninitialised(source.cfg).eval()
    load_weights(large, dict(sources), "test", Placement(backend="onednn"))
    assert not large.output.packed
    assert large.output.plain_weight.data_ptr() == large.tgt_embed.tokens.weight.data_ptr()
    torch.testing.assert_close(outputs(large), outputs(source), rtol=1e-5, atol=1e-5)


@pytest.mark.precision
@pytest.mark.parametrize("cpu_class, shared", [("avx512-vnni", True), ("avx2", False)])
def test_an_int8_load_keeps_one_int8_table_where_the_cpu_multiplies_by_it(
    tmp_path, monkeypatch, as_cpu, cpu_class, shared
):
    """Above INT8_TIED_COPY_BYTES the lookup and the projection share the embeddings' int8 table
    where the CPU has int8 dot products (VNNI); without them the projection gets fbgemm's packed
    copy, whatever its size (nothing is multiplied here: the choice alone)."""
    as_cpu(cpu_class)
    monkeypatch.setattr(placement, "INT8_TIED_COPY_BYTES", 0)
    source, sources = model_and_sources(tmp_path, tie_output=True, share_embeddings=True)
    model = Transformer.uninitialised(source.cfg).eval()
    load_weights(model, dict(sources), "test", Placement(backend="int8"))
    assert isinstance(model.src_embed.tokens, Int8Embedding) and model.tgt_embed.tokens is model.src_embed.tokens
    if shared:
        assert isinstance(model.output, Int8TiedOutput) and model.output.embedding is model.src_embed.tokens
    else:
        assert isinstance(model.output, QuantizedLinear)
    assert not any(p.dtype == torch.float32 and p.dim() == 2 for p in model.parameters())  # no float matrix left


@pytest.mark.precision
def test_a_load_in_bfloat16_converts_each_weight_as_it_is_read(tmp_path):
    source, sources = model_and_sources(tmp_path)
    model = Transformer.uninitialised(source.cfg).eval()
    load_weights(model, dict(sources), "test", Placement(dtype=torch.bfloat16, backend="torch"))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.src_embed.sinusoids.dtype == torch.bfloat16  # the model's own buffers too
    for name, tensor in source.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor.to(torch.bfloat16)), name


def test_placing_a_model_in_memory_keeps_its_tensors_where_nothing_changes():
    model = tiny_transformer(0)
    before = {n: t.data_ptr() for n, t in model.state_dict().items()}
    place_model(model, Placement(backend="torch"))
    assert {n: t.data_ptr() for n, t in model.state_dict().items()} == before


def test_the_auto_probe_times_a_wide_product_on_a_block_of_it():
    assert gemm.probed_shapes({(256_000, 1024): 1, (1024, 1024): 4, (4096, 1024): 2}) == {
        (4096, 1024): 2 + 256_000 / 4096,
        (1024, 1024): 4.0,
    }


def test_the_auto_probe_cycles_through_a_weight_per_layer_up_to_its_budget():
    # The demo's size: every layer its own weight (the 6,000-token projection is two 4,096-row blocks).
    small = {(768, 256): 10.0, (256, 256): 9.0, (4096, 256): 6000 / 4096}
    assert gemm.probe_copies(small, 4) == {(768, 256): 10, (256, 256): 9, (4096, 256): 2}
    # NLLB's: 65 blocks of 16 MB and four 4 MB weights want 1,056 MB; 64 MB keeps 64/1056 of each.
    large = {(4096, 1024): 2 + 256_000 / 4096, (1024, 1024): 4.0}
    assert gemm.PROBE_BYTES == 64 << 20
    assert gemm.probe_copies(large, 4) == {(4096, 1024): 4, (1024, 1024): 1}


@pytest.mark.parametrize("backend", ["torch", "int8"])
def test_layers_filled_by_threads_or_on_the_loading_thread_are_the_same(tmp_path, monkeypatch, backend):
    """A model above THREADED_FILL_WEIGHTS has its layers filled by threads, a tied projection after
    the embeddings it reads; a smaller one on the loading thread: the same weights either way, and
    a layer's error comes out of the load in both."""
    source, sources = model_and_sources(tmp_path, tie_output=True)
    loaded = {}
    for threads in (True, False):
        monkeypatch.setattr(placement, "THREADED_FILL_WEIGHTS", 0 if threads else 1 << 40)
        model = Transformer.uninitialised(source.cfg).eval()
        load_weights(model, dict(sources), "test", Placement(backend=backend))
        loaded[threads] = model
    assert torch.equal(outputs(loaded[True]), outputs(loaded[False]))
    if backend == "torch":
        torch.testing.assert_close(outputs(loaded[True]), outputs(source), rtol=1e-5, atol=1e-5)
    for threads in (True, False):
        monkeypatch.setattr(placement, "THREADED_FILL_WEIGHTS", 0 if threads else 1 << 40)
        monkeypatch.setattr(placement, "_plain", lambda *args: (_ for _ in ()).throw(MemoryError("no room")))
        with pytest.raises(ModelError, match="out of memory placing the model"):
            load_weights(Transformer.uninitialised(source.cfg).eval(), dict(sources), "test", Placement())
        monkeypatch.undo()
