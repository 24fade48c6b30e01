"""CPU matrix-product backends (models/gemm.py): oneDNN's prepacked products compute what
`nn.Linear` computes, and `auto` measures once per machine and remembers."""

import json

import pytest
import torch
from torch import nn

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models import gemm

from tests.helpers import placed, random_sources, tiny_transformer

pytestmark = pytest.mark.precision
needs_onednn = pytest.mark.skipif(not gemm.onednn_available(), reason="this torch build has no oneDNN linear")


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 32), (7, 32), (3, 5, 32)])
def test_packed_linear_equals_linear_in_float32(shape, bias):
    torch.manual_seed(0)
    linear = nn.Linear(32, 48, bias=bias)
    x = torch.randn(*shape, 32)
    with torch.inference_mode():
        expected = linear(x)
        got = gemm.PackedLinear(linear.weight, linear.bias)(x)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_a_result_is_transposed_into_place_piece_by_piece(monkeypatch):
    """transpose_into writes source.t() into its target, TRANSPOSE_CHUNK_BYTES of source at a time
    (3 of its rows here, the last piece shorter), and nothing beside the target."""
    monkeypatch.setattr(gemm, "TRANSPOSE_CHUNK_BYTES", 3 * 5 * 4)
    pieces = []
    original = torch.Tensor.t
    monkeypatch.setattr(torch.Tensor, "t", lambda self: pieces.append(self.size(0)) or original(self))
    source, target = torch.randn(11, 5), torch.full((5, 13), float("nan"))
    gemm.transpose_into(target[:, 1:12], source)
    assert pieces == [3, 3, 3, 2]
    assert torch.equal(target[:, 1:12], original(source)) and target[:, [0, 12]].isnan().all()


@needs_onednn
@pytest.mark.parametrize("activation", [None, "relu"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 32), (9, 32), (3, 3, 32), (10, 32), (40, 32), (5, 8, 32)])
def test_a_plain_weights_product_equals_linear_with_few_rows_and_many(shape, bias, activation, monkeypatch):
    """Kept plain (an output projection tied to the embeddings), the weight multiplies up to
    SWAPPED_MAX_ROWS rows with the roles swapped, more rows by blocks of it (7 of its rows at a
    time here; swapped, each block's result transposed into place 80 bytes at a time): both give
    nn.Linear's product, from the very tensor given. An activation to fuse keeps the blocks."""
    monkeypatch.setattr(gemm, "SWAPPED_MAX_ROWS", 9)
    monkeypatch.setattr(gemm, "PLAIN_BLOCK_BYTES", 32 * 4 * 7)
    monkeypatch.setattr(gemm, "TRANSPOSE_CHUNK_BYTES", 80)
    ran = []
    for form in ("_swapped", "_by_blocks"):
        original = getattr(gemm.PackedLinear, form)
        monkeypatch.setattr(gemm.PackedLinear, form, lambda self, x, f=original, n=form: ran.append(n) or f(self, x))
    torch.manual_seed(0)
    linear = nn.Linear(32, 48, bias=bias)
    x = torch.randn(*shape, 32)
    plain = gemm.PackedLinear(linear.weight, linear.bias, activation=activation, pack=False)
    assert plain.plain_weight is linear.weight
    with torch.inference_mode():
        expected, got = linear(x), plain(x)
    if activation:
        expected = torch.relu(expected)
    swapped = x.numel() // 32 <= 9 and activation is None
    assert ran == ["_swapped" if swapped else "_by_blocks"] and plain.swaps(x.numel() // 32) == swapped
    assert got.shape == expected.shape and got.is_contiguous()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_a_tied_projection_kept_plain_decodes_the_same_tokens_swapped_or_by_blocks(monkeypatch):
    """The swapped product is a speed change only: a decoding whose plain output projection
    multiplies with the roles swapped gives the tokens of one that multiplies it by blocks."""
    from nmtdecode.models import placement

    monkeypatch.setattr(placement, "PACKED_TIED_COPY_BYTES", 0)
    model = placed(tiny_transformer(3, vocab=40, eos_bias=-1.0, tie_output=True), "onednn")
    assert not model.output.packed and model.output.swaps(6 * 4)
    cfg = DecodingConfig(beam_size=4, n_best=2, max_length=12)
    sources = random_sources(6, 40, seed=5)
    with torch.inference_mode():
        swapped = BatchDecoder(model, cfg).decode(sources).nbests
        monkeypatch.setattr(gemm, "SWAPPED_MAX_ROWS", 0)
        by_blocks = BatchDecoder(model, cfg).decode(sources).nbests
    assert [[h.tokens for h in hyps] for hyps in swapped] == [[h.tokens for h in hyps] for hyps in by_blocks]


@pytest.mark.skipif(
    "onednn" not in gemm.candidates(torch.bfloat16), reason="oneDNN runs bfloat16 natively only with AVX512_BF16 or AMX"
)
def test_packed_linear_in_bfloat16_rounds_like_bfloat16():
    torch.manual_seed(0)
    linear = nn.Linear(64, 96).to(torch.bfloat16)
    x = torch.randn(10, 64).to(torch.bfloat16)
    with torch.inference_mode():
        exact = nn.functional.linear(x.float(), linear.weight.float(), linear.bias.float())
        got = gemm.PackedLinear(linear.weight, linear.bias)(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), exact, rtol=2e-2, atol=5e-2)  # bfloat16 keeps 8 bits of mantissa


@needs_onednn
def test_onednn_model_decodes_like_the_plain_model():
    plain = tiny_transformer(2, vocab=24, eos_bias=0.8)
    packed = placed(tiny_transformer(2, vocab=24, eos_bias=0.8), "onednn")
    assert not any(type(m) is nn.Linear for m in packed.modules())
    assert sum(isinstance(m, gemm.PackedLinear) for m in packed.modules()) == sum(gemm.linear_shapes(plain).values())
    src = torch.tensor(random_sources(3, 24, seed=2, min_len=6, max_len=6))
    mask = torch.ones_like(src, dtype=torch.bool)
    tgt = torch.randint(4, 24, (3, 5))
    with torch.inference_mode():
        torch.testing.assert_close(packed(src, mask, tgt), plain(src, mask, tgt), rtol=1e-5, atol=1e-5)
    sources = random_sources(12, 24, seed=3)
    cfg = DecodingConfig(beam_size=4, n_best=4, max_length=20)
    expected = BatchDecoder(plain, cfg).decode(sources).nbests
    got = BatchDecoder(packed, cfg).decode(sources).nbests
    assert [[h.tokens for h in n] for n in got] == [[h.tokens for h in n] for n in expected]


def test_backend_is_torch_off_the_cpu_for_float16_or_without_onednn(as_cpu):
    model = tiny_transformer(0)
    assert gemm.choose_backend(model, "onednn", torch.device("cuda"), torch.float32) == "torch"
    assert gemm.choose_backend(model, "onednn", torch.device("cpu"), torch.float16) == "torch"
    as_cpu("no-x86")
    assert gemm.choose_backend(model, "onednn", torch.device("cpu"), torch.float32) == "torch"
    assert gemm.choose_backend(model, "auto", torch.device("cpu"), torch.float32) == "torch"


@needs_onednn
@pytest.mark.parametrize("requested", ["onednn", "torch"])
def test_a_forced_backend_is_used_without_measuring(requested, monkeypatch):
    monkeypatch.setattr(gemm, "measure", lambda *a: pytest.fail("measured although the backend was forced"))
    assert gemm.choose_backend(tiny_transformer(0), requested, torch.device("cpu"), torch.float32) == requested


@needs_onednn
def test_auto_measures_once_per_machine_and_remembers(tmp_path, monkeypatch, as_cpu):
    as_cpu("avx512-bf16")  # bfloat16 native too (nothing is multiplied: the measurement is faked)
    monkeypatch.setenv("NMTDECODE_CACHE", str(tmp_path / "cache"))
    calls = []

    def fake_measure(shapes, dtype):
        calls.append(dict(shapes))
        return {"torch": 2.0, "onednn": 1.0}

    monkeypatch.setattr(gemm, "measure", fake_measure)
    model = tiny_transformer(0)
    assert gemm.choose_backend(model, "auto", torch.device("cpu"), torch.float32) == "onednn"
    assert gemm.choose_backend(model, "auto", torch.device("cpu"), torch.float32) == "onednn"
    assert calls == [gemm.linear_shapes(model)]  # measured once, on the model's own shapes
    [entry] = json.loads((tmp_path / "cache" / "gemm.json").read_text()).values()
    assert entry == {"backend": "onednn", "seconds": {"torch": 2.0, "onednn": 1.0}}
    gemm.choose_backend(model, "auto", torch.device("cpu"), torch.bfloat16)
    assert len(calls) == 2  # another precision is another measurement


@needs_onednn
@pytest.mark.parametrize(
    "onednn_seconds, expected", [(0.89, "onednn"), (0.90, "onednn"), (0.95, "torch"), (1.2, "torch")]
)
def test_auto_wants_onednn_clearly_faster(onednn_seconds, expected, tmp_path, monkeypatch):
    """oneDNN's kernel compilation per row count and its memory are not in the measurement:
    it is chosen only at 90% of torch's time or less."""
    monkeypatch.setenv("NMTDECODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gemm, "measure", lambda shapes, dtype: {"torch": 1.0, "onednn": onednn_seconds})
    assert gemm.choose_backend(tiny_transformer(0), "auto", torch.device("cpu"), torch.float32) == expected


@needs_onednn
@pytest.mark.parametrize(
    "ratios, probes, expected",
    [
        ([0.5], 1, "onednn"),  # clear: one probe
        ([1.2], 1, "torch"),
        ([0.92, 0.70, 0.70], 3, "onednn"),  # close: (0.92 + 0.70 + 0.70) / 3 = 0.77
        ([0.85, 0.60], 2, "onednn"),  # (0.85 + 0.60) / 2 = 0.725, no longer close
        ([0.88, 0.95, 0.99], 3, "torch"),  # close every time: three probes at most, 0.94
    ],
)
def test_a_close_call_is_probed_again_and_summed(ratios, probes, expected, tmp_path, monkeypatch):
    """A probe within CLOSE_CALL (0.1) of the margin is noise-prone: more probes, their times summed."""
    monkeypatch.setenv("NMTDECODE_CACHE", str(tmp_path / "cache"))
    answers = iter(ratios)
    calls = []

    def fake_measure(shapes, dtype):
        calls.append(1)
        return {"torch": 1.0, "onednn": next(answers)}

    monkeypatch.setattr(gemm, "measure", fake_measure)
    assert gemm.choose_backend(tiny_transformer(0), "auto", torch.device("cpu"), torch.float32) == expected
    assert len(calls) == probes
    [entry] = json.loads((tmp_path / "cache" / "gemm.json").read_text()).values()
    assert entry["seconds"] == pytest.approx({"torch": probes, "onednn": sum(ratios)})


@needs_onednn
def test_auto_decides_from_remembered_times(tmp_path, monkeypatch):
    """A cache written under an older rule (backend recorded, times kept) is decided by today's rule."""
    monkeypatch.setenv("NMTDECODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(gemm, "measure", lambda shapes, dtype: {"torch": 1.0, "onednn": 0.95})
    model = tiny_transformer(0)
    assert gemm.choose_backend(model, "auto", torch.device("cpu"), torch.float32) == "torch"
    path = tmp_path / "cache" / "gemm.json"
    cached = json.loads(path.read_text())
    for entry in cached.values():
        entry["backend"] = "onednn"  # what the old rule (the faster, whatever the margin) wrote
    path.write_text(json.dumps(cached))
    monkeypatch.setattr(gemm, "measure", lambda shapes, dtype: pytest.fail("measured again"))
    assert gemm.choose_backend(model, "auto", torch.device("cpu"), torch.float32) == "torch"


@needs_onednn
def test_auto_survives_a_corrupt_or_unwritable_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "gemm.json").write_text("{not json")
    monkeypatch.setenv("NMTDECODE_CACHE", str(cache))
    monkeypatch.setattr(gemm, "measure", lambda shapes, dtype: {"torch": 1.0, "onednn": 3.0})
    assert gemm.choose_backend(tiny_transformer(0), "auto", torch.device("cpu"), torch.float32) == "torch"
    assert json.loads((cache / "gemm.json").read_text())  # rewritten as valid JSON
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache directory should be: nothing can be written
    monkeypatch.setenv("NMTDECODE_CACHE", str(blocked / "cache"))
    assert gemm.choose_backend(tiny_transformer(0), "auto", torch.device("cpu"), torch.float32) == "torch"


@needs_onednn
def test_measure_times_both_backends_on_every_shape():
    seconds = gemm.measure({(48, 32): 2, (32, 48): 1}, torch.float32)
    assert set(seconds) == {"torch", "onednn"} and all(s > 0 for s in seconds.values())


def test_cpu_description_names_a_vendor_or_machine():
    assert gemm.cpu_description().strip()


@needs_onednn
def test_cli_backends_give_the_same_output(cli, model_dir, lines_file):
    src = lines_file(["the house is red .", "good morning", "where is the station ?"])
    outputs = {}
    for backend in ("onednn", "torch"):
        run = cli("translate", "--model", model_dir, "--src", src, "--gemm", backend, "--format", "jsonl", "--quiet")
        assert run.returncode == 0, run.stderr
        outputs[backend] = [[h["text"] for h in json.loads(line)["hypotheses"]] for line in run.stdout.splitlines()]
    assert outputs["onednn"] == outputs["torch"]
    bad = cli("translate", "--model", model_dir, "--gemm", "blas", stdin=b"")
    assert bad.returncode == 2 and b"blas" in bad.stderr
