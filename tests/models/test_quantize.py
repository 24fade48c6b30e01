"""int8 weights (models/quantize.py), as CTranslate2 keeps them: every linear layer, the token
embeddings and a tied output projection become int8 with one scale per row, the model still
computes nearly the same distribution (the benchmark measures 1-best agreement on real shapes),
and a tied projection multiplies by the embeddings' int8 table: a packed fbgemm copy of it, or the
table itself where the CPU has int8 dot products (AVX512-VNNI)."""

import warnings

import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as QuantizedLinear

from nmtdecode.options.config import Config, ConfigError
from nmtdecode.models import cpu, placement
from nmtdecode.models.quantize import (
    Int8Embedding,
    Int8TiedOutput,
    quantize_block_in_place,
    quantize_rows,
    quantized_rows,
    tied_output,
)
from nmtdecode.models.weights import InMemoryTensor

from tests.helpers import placed, random_sources, tiny_transformer

pytestmark = pytest.mark.precision
# torch._int_mm is exact and native only with AVX512-VNNI, the only CPUs tied_output gives it to; a
# machine emulating AVX2 (ONEDNN_MAX_CPU_ISA=AVX2) runs it on oneDNN's AVX2 kernel, whose int16
# pair sums saturate, a product no real CPU runs.
needs_int8_dot = pytest.mark.skipif(not cpu.detected().int8_dot, reason="torch._int_mm is native only with VNNI")


def realistic(model):
    for p in model.parameters():  # realistic scale: random N(0, 0.3) weights would make int8 look worse than it is
        p.data.mul_(0.3)
    return model


@pytest.mark.parametrize("tied, shared", [(True, False), (True, True), (False, False)])
def test_int8_quantizes_linears_embeddings_and_output_and_keeps_logits_close(tied, shared, monkeypatch):
    if shared:  # the embeddings' own table, where the CPU has int8 dot products: each table is "large"
        if not cpu.detected().int8_dot:
            pytest.skip("torch._int_mm is native only with VNNI")
        monkeypatch.setattr(placement, "INT8_TIED_COPY_BYTES", 0)
    model = realistic(tiny_transformer(0, vocab=40, d_model=64, ffn_dim=128, tie_output=tied))
    src = torch.tensor(random_sources(4, 40, seed=2, min_len=5, max_len=5))
    mask = torch.ones_like(src, dtype=torch.bool)
    tgt = torch.randint(4, 40, (4, 6))
    with torch.no_grad():
        reference = torch.log_softmax(model(src, mask, tgt), -1)
        placed(model, "int8")
        quantized = torch.log_softmax(model(src, mask, tgt), -1)
    assert not any(
        type(m) in (torch.nn.Linear, torch.nn.Embedding) and name.endswith(("tokens", "output"))
        for name, m in model.named_modules()
    )
    assert isinstance(model.src_embed.tokens, Int8Embedding) and isinstance(model.tgt_embed.tokens, Int8Embedding)
    layers = [
        m
        for name, m in model.named_modules()
        if name.startswith(("encoder_layers", "decoder_layers")) and isinstance(m, (torch.nn.Linear, QuantizedLinear))
    ]
    assert layers and all(isinstance(m, QuantizedLinear) for m in layers)
    if shared:  # one int8 table, read by the lookup and the projection
        assert isinstance(model.output, Int8TiedOutput) and model.output.embedding is model.tgt_embed.tokens
    else:  # fbgemm's packed copy of the table when tied
        assert isinstance(model.output, QuantizedLinear)
    assert not torch.equal(quantized, reference)  # really quantized
    assert (quantized.exp() - reference.exp()).abs().max() < 0.02  # probabilities within 2 points


def test_int8_rows_are_the_rows_over_their_scale_rounded():
    rows = torch.tensor([[0.5, -1.0, 0.25], [0.0, 0.0, 0.0], [3.0, 1.5, -0.75]])
    values, scales = quantize_rows(rows)
    torch.testing.assert_close(
        scales, torch.tensor([1.0, 0.0, 3.0]) / 127 + torch.tensor([0, 1, 0]) * torch.finfo(torch.float32).tiny / 127
    )
    assert values.tolist() == [[64, -127, 32], [0, 0, 0], [127, 64, -32]]  # 63.5 and 31.75 round to even/nearest


def test_quantizing_a_stored_weight_in_blocks_equals_quantizing_it_whole():
    torch.manual_seed(0)
    weight = torch.randn(37, 16)
    values, scales = quantized_rows(InMemoryTensor(weight, "w", "test"), rows_at_once=5)
    whole_values, whole_scales = quantize_rows(weight)
    assert torch.equal(values, whole_values) and torch.equal(scales, whole_scales)


def test_a_block_quantized_in_place_gets_the_rules_bits():
    """The in-place quantizer (the load's, and `quantize_rows`' in a copy) against the rule written
    out in six plain passes, on rows that test its edges: all zero, below float32's smallest
    normal, halves that round to even, a row whose largest magnitude is negative, and random rows
    of many scales."""
    torch.manual_seed(0)
    rows = torch.randn(64, 33) * torch.rand(64, 1) * 10
    rows[0] = 0.0
    rows[1] = 1e-40
    rows[2] = torch.arange(33) * 0.5 - 8.0  # x / scale lands on halves
    rows[3] = -rows[3].abs()
    rows[3, 5] = -20.0
    expected_scales = rows.abs().amax(dim=1).clamp_min(torch.finfo(torch.float32).tiny) / 127
    expected_values = torch.round(rows / expected_scales[:, None]).clamp(-127, 127).to(torch.int8)
    values, scales = torch.empty(rows.shape, dtype=torch.int8), torch.empty(len(rows))
    block = rows.clone()
    quantize_block_in_place(block, values, scales)
    assert torch.equal(values, expected_values) and torch.equal(scales, expected_scales)
    copied_values, copied_scales = quantize_rows(rows)
    assert torch.equal(copied_values, expected_values) and torch.equal(copied_scales, expected_scales)
    assert values[3, 5] == -127 and values[0].eq(0).all()


def test_int8_embedding_looks_up_scaled_rows():
    torch.manual_seed(0)
    embedding = Int8Embedding(*quantize_rows(torch.randn(30, 16)))
    dequantized = embedding.values.float() * embedding.scales[:, None]
    ids = torch.tensor([[3, 7], [29, 0]])
    torch.testing.assert_close(embedding(ids), dequantized[ids])


@pytest.mark.parametrize("shared", [pytest.param(True, marks=needs_int8_dot), False])
def test_tied_output_multiplies_by_the_embeddings_int8_table(shared):
    """Int8TiedOutput (torch._int_mm on the table itself) or fbgemm on its packed copy: the product
    by the dequantized table, up to the rounding of x to int8."""
    torch.manual_seed(0)
    embedding = Int8Embedding(*quantize_rows(torch.randn(30, 16)))
    dequantized = embedding.values.float() * embedding.scales[:, None]
    bias = torch.randn(30)
    x = torch.randn(2, 3, 16)
    output = Int8TiedOutput(embedding, bias) if shared else tied_output(embedding, bias, copy_bytes=1 << 20)
    assert isinstance(output, Int8TiedOutput if shared else QuantizedLinear)
    logits = output(x)
    exact = x @ dequantized.t() + bias
    assert logits.shape == (2, 3, 30)
    assert (logits - exact).abs().max() < 0.03 * exact.abs().max()  # only x's own rounding to int8 differs


def test_int8_needs_float32():
    with pytest.raises(ConfigError, match="quantize: int8 works with --dtype float32"):
        Config.from_values({"quantize": "int8", "dtype": "bfloat16"})


@needs_int8_dot
def test_tied_output_in_blocks_of_tokens_equals_one_block(monkeypatch):
    torch.manual_seed(0)
    embedding = Int8Embedding(*quantize_rows(torch.randn(50, 16)))
    output = Int8TiedOutput(embedding, torch.randn(50))
    x = torch.randn(3, 16)
    whole = output(x)
    monkeypatch.setattr(Int8TiedOutput, "TOKENS_AT_ONCE", 7)  # 8 blocks, the last one short
    assert torch.equal(output(x), whole)


def test_a_large_weight_is_packed_from_a_copy_on_huge_pages_with_its_rows_and_scales(monkeypatch):
    """fbgemm's input for a weight of HUGE_PAGES_FROM elements or more is advised onto 2 MB pages
    (MADV_HUGEPAGE, over the copy's own bytes), and holds the same rows and scales: the layer gives
    the smaller path's outputs bit for bit. (Whether the kernel finds 2 MB pages is its own affair:
    with memory fragmented it falls back to 4 KB ones.)"""
    import mmap

    from nmtdecode.models import quantize, weights

    torch.manual_seed(0)
    values, scales = quantize_rows(torch.randn(8192, 1024))  # 8 MiB: whole 2 MiB-aligned runs inside it
    small = quantize.int8_linear(values, scales, None)
    advised, madvise = [], weights._c_library().madvise

    def recorded(at, size, advice):
        advised.append((at.value, size.value, advice))
        return madvise(at, size, advice)

    spy = type("Libc", (), {"madvise": staticmethod(recorded)})
    monkeypatch.setattr(weights, "_c_library", lambda: spy)
    monkeypatch.setattr(quantize, "HUGE_PAGES_FROM", values.numel())
    with warnings.catch_warnings():  # torch's quantized tensors announce their deprecation
        warnings.simplefilter("ignore")
        weight = quantize._packing_input(values, scales)
    assert torch.equal(weight.int_repr(), values) and torch.equal(weight.q_per_channel_scales(), scales.double())
    ((at, size, advice),) = advised
    assert advice == mmap.MADV_HUGEPAGE and at <= weight.data_ptr() < weight.data_ptr() + values.numel() <= at + size
    large = quantize.int8_linear(values, scales, None)
    x = torch.randn(5, 1024)
    assert torch.equal(large(x), small(x))
    monkeypatch.setattr(quantize, "HUGE_PAGES_FROM", values.numel() + 1)
    advised.clear()
    quantize.int8_linear(values, scales, None)
    assert advised == []  # a smaller one is left as malloc gives it
