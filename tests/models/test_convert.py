"""`nmtdecode convert` (models/convert.py, formats/native.py `write`): a model of any format we
read, stored in the native format in one precision, decodes as the original did: in float32 the
same tokens and scores, in int8 the same as quantizing the original at load, from the rows and
scales quantize.py computes, mapped from the file and never quantized again; a damaged
converted model fails in one line."""

import json
import os
import shutil

import pytest
import torch
from safetensors import safe_open

from nmtdecode.models import cpu, quantize
from nmtdecode.models.formats.native_tokenizer import FOLDER
from nmtdecode.models.loading import load_model
from nmtdecode.models.placement import Placement, quantized_in_int8
from nmtdecode.models.weights import shared_names

from tests.helpers import DEMO, one_line
from tests.models.formats.marian_files import train_spm, vocabulary
from tests.models.formats.test_marian_npz import build as marian_npz
from tests.models.formats.test_opennmt_files import tiny_checkpoint

pytestmark = pytest.mark.precision
LINES = ["the house is red .", "good morning", "a dog and a cat sleep in the garden .", "water", "a b"]


def decoded(cli, model, lines_file, *args):
    """Every hypothesis of a beam-4, 2-best jsonl job: its tokens' text and its score."""
    src = lines_file(LINES, "lines.txt")
    run = cli("translate", "-m", model, "--src", src, "--format", "jsonl", "--beam-size", 4, "--n-best", 2, "-q", *args)
    assert run.returncode == 0, run.stderr
    return [[(h["text"], h["score"]) for h in json.loads(line)["hypotheses"]] for line in run.stdout.splitlines()]


def converted(cli, model, out, precision):
    run = cli("convert", model, "--quantize", precision, "--output", out, text=True)
    assert run.returncode == 0, run.stderr
    named = {"bf16": "bfloat16", "fp16": "float16"}.get(precision, precision)
    assert run.stderr == f"nmtdecode: wrote {out} ({named})\n"
    return out


def test_converted_int8_decodes_as_quantizing_at_load_without_quantizing(
    model_dir, tmp_path, cli, lines_file, monkeypatch
):
    int8 = converted(cli, model_dir, tmp_path / "int8", "int8")
    on_the_fly = decoded(cli, model_dir, lines_file, "--quantize", "int8")
    monkeypatch.setattr(quantize, "quantize_rows", lambda rows: pytest.fail("a stored int8 model was quantized"))
    assert decoded(cli, int8, lines_file) == on_the_fly  # int8 unless told, as a CTranslate2 int8 folder
    assert decoded(cli, int8, lines_file, "--quantize", "int8") == on_the_fly


def test_the_stored_rows_and_scales_are_quantize_py_s(model_dir, tmp_path, cli):
    original = load_model(str(model_dir)).model
    int8 = converted(cli, model_dir, tmp_path / "int8", "int8")
    int8_names = {f"{n}.weight" for n, m in original.named_modules() if quantized_in_int8(n, m)}
    aliases = shared_names(original)
    with safe_open(str(int8 / "model.safetensors"), "pt") as stored:
        names = set(stored.keys())
        for name, weight in original.state_dict().items():
            if name in aliases:
                assert name not in names  # a tied weight once
            elif name in int8_names:
                values, scales = quantize.quantize_rows(weight)
                assert torch.equal(stored.get_tensor(name), values), name
                assert torch.equal(stored.get_tensor(name + "_scale"), scales), name
            else:
                assert torch.equal(stored.get_tensor(name), weight), name  # float32, as loaded
    assert "tgt_embed.tokens.weight" in int8_names and "decoder_layers.0.ffn.up.weight" in int8_names


def test_an_int8_load_maps_the_stored_table_instead_of_reading_it(model_dir, tmp_path, cli):
    """The int8 token embeddings are the file's own pages (a memory map, /proc/self/maps)."""
    int8 = converted(cli, model_dir, tmp_path / "int8", "int8")
    model = load_model(str(int8), placement=Placement(backend="int8")).model
    address = model.src_embed.tokens.values.data_ptr()
    weights = os.path.realpath(int8 / "model.safetensors")
    with open("/proc/self/maps", encoding="utf-8") as maps:
        mapped = [line.split() for line in maps if line.rstrip().endswith(weights)]
    ranges = [tuple(int(x, 16) for x in fields[0].split("-")) for fields in mapped]
    assert any(start <= address < end for start, end in ranges)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_a_float_conversion_decodes_as_the_original(precision, model_dir, tmp_path, cli, lines_file):
    """float32: the same numbers; bfloat16: the weights rounded to it, computed in --dtype (float32
    unless told, as a CTranslate2 bfloat16 folder on a CPU), in bfloat16 where the CPU has its arithmetic."""
    out = converted(cli, model_dir, tmp_path / precision, precision)
    with safe_open(str(out / "model.safetensors"), "pt") as stored:
        assert {stored.get_tensor(name).dtype for name in stored.keys()} == {getattr(torch, precision)}
    if precision == "float32":
        assert decoded(cli, out, lines_file) == decoded(cli, model_dir, lines_file)
        return
    assert load_model(str(out)).model.src_embed.tokens.weight.dtype == torch.float32
    if cpu.current().bf16_arithmetic:
        assert decoded(cli, out, lines_file, "--dtype", "bf16") != decoded(cli, out, lines_file)


@pytest.mark.parametrize(
    "cpu_class, args, int8", [("avx2", [], True), ("avx2", ["--gemm", "torch"], False), ("no-x86", [], False)]
)
def test_an_int8_model_decodes_in_int8_where_the_cpu_runs_it(
    cpu_class, args, int8, model_dir, tmp_path, cli, as_cpu, monkeypatch
):
    """As a CTranslate2 int8 folder: int8 on a CPU that runs it, unless the options name float
    products; its rows multiplied back by their scales otherwise (a CPU without fbgemm)."""
    from nmtdecode.engine import engine

    out = converted(cli, model_dir, tmp_path / "int8", "int8")
    as_cpu(cpu_class)
    backends = []
    original = engine.load_model
    monkeypatch.setattr(
        engine, "load_model", lambda *a, **k: backends.append((loaded := original(*a, **k)).gemm) or loaded
    )
    run = cli("translate", "-m", out, *args, stdin="good morning\n", text=True)
    assert run.returncode == 0, run.stderr
    assert (backends == ["int8"]) == int8


def marian_yaml(root):
    """A Marian .npz model with YAML vocabularies over OPUS-MT's source.spm and target.spm."""
    path = root / "spm" / "source.spm"
    path.parent.mkdir(parents=True)
    return marian_npz(root / "marian", (path, vocabulary(train_spm(path, seed=0), tags=("fra", "deu"))))


# Each format we read, as its own tests build it (formats/), with the tokenizer kind it converts to
FORMATS = {
    "native": (lambda root, model_dir: model_dir, "sentencepiece"),
    "demo": (lambda root, model_dir: DEMO, "sentencepiece"),
    "opennmt-py": (lambda root, model_dir: tiny_checkpoint(root / "model.pt"), "vocab"),
    "marian": (lambda root, model_dir: marian_yaml(root), "marian"),
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_converts_and_decodes_as_the_original(fmt, model_dir, tmp_path, cli, lines_file):
    make, kind = FORMATS[fmt]
    source = make(tmp_path, model_dir)
    out = converted(cli, source, tmp_path / "converted", "float32")
    with open(out / "config.yaml", encoding="utf-8") as f:
        assert (f"kind: {kind}" in f.read()) == (kind != "sentencepiece")
    assert decoded(cli, out, lines_file) == decoded(cli, source, lines_file)
    int8 = converted(cli, source, tmp_path / "int8", "int8")
    assert decoded(cli, int8, lines_file) == decoded(cli, source, lines_file, "--quantize", "int8")


@pytest.mark.parity
@pytest.mark.parametrize("family", ["marian", "mbart"])
def test_hugging_face_models_convert_with_their_tokenizer(family, tmp_path, cli, lines_file):
    from tests.models.formats.test_inspect_formats import with_tokenizer

    """The same ids for every line (the tokenizer's files copied, read as that format reads them),
    the same weights, the same rules. (These models' vocabularies are larger than their tokenizers':
    they are compared, not decoded.)"""
    source = with_tokenizer(family, tmp_path / "model")
    out = converted(cli, source, tmp_path / "converted", "float32")
    assert (out / FOLDER / "config.json").is_file()
    theirs, ours = load_model(str(source)), load_model(str(out))
    if family == "mbart":
        for loaded in (theirs, ours):
            loaded.tokenizer.set_languages("en_XX", "de_DE")
    assert [ours.tokenizer.encode(line) for line in LINES] == [theirs.tokenizer.encode(line) for line in LINES]
    assert ours.tokenizer.decode(list(range(4, 40))) == theirs.tokenizer.decode(list(range(4, 40)))
    assert ours.rules == theirs.rules and ours.defaults == theirs.defaults
    for name, tensor in theirs.model.state_dict().items():
        assert torch.equal(ours.model.state_dict()[name], tensor), name


@pytest.mark.parity
def test_an_eole_model_converts_with_its_vocabularies(tmp_path, cli, lines_file):
    from tests import peer_eole

    _, source = peer_eole.build(tmp_path / "model", seed=0)
    out = converted(cli, source, tmp_path / "converted", "int8")
    assert decoded(cli, out, lines_file) == decoded(cli, source, lines_file, "--quantize", "int8")


def damage(path, how):
    weights = path / "model.safetensors"
    data = weights.read_bytes()
    if how == "truncated":
        weights.write_bytes(data[: len(data) - 1000])
    elif how == "header":
        weights.write_bytes(data[:8] + b"{not json" + data[17:])
    else:  # the scales of the token embeddings: the first made negative or too large, or all 1e30
        header_size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + header_size])
        begin, end = header["src_embed.tokens.weight_scale"]["data_offsets"]
        start = 8 + header_size + begin
        scales = {"scale": [-1.0], "huge scale": [1e38], "overflowing scales": [1e30] * ((end - begin) // 4)}[how]
        weights.write_bytes(data[:start] + torch.tensor(scales).numpy().tobytes() + data[start + 4 * len(scales) :])


@pytest.mark.parametrize(
    "how, message",
    [
        ("truncated", "(truncated?)"),
        ("header", "cannot read weights"),
        ("scale", "src_embed.tokens.weight_scale holds a scale that is not positive, or larger than"),
        ("huge scale", "src_embed.tokens.weight_scale holds a scale that is not positive, or larger than"),
    ],
)
def test_a_damaged_converted_model_fails_in_one_line(how, message, model_dir, tmp_path, cli):
    out = converted(cli, model_dir, tmp_path / "int8", "int8")
    damage(out, how)
    run = cli("translate", "-m", out, "--quantize", "int8", stdin="good morning\n", text=True)
    assert run.returncode == 1 and message in one_line(run.stderr)


@pytest.mark.parametrize("gemm", ["auto", "torch"])
def test_scales_that_overflow_the_model_s_numbers_fail_at_the_first_batch(gemm, model_dir, tmp_path, cli):
    """Scales of 1e30 are finite and positive, but no trained row gives them: the encoder computes
    infinities, and each line would be written empty with exit 0 (float products) or end in
    fbgemm's own words (int8); one line naming the input lines instead."""
    out = converted(cli, model_dir, tmp_path / "int8", "int8")
    damage(out, "overflowing scales")
    run = cli("translate", "-m", out, "--gemm", gemm, stdin="good morning\nwater\n", text=True)
    assert run.returncode == 1 and run.stdout == ""
    assert "input lines 1 to 2: the model computed NaN or infinite values" in one_line(run.stderr)


def test_convert_refuses_an_existing_output_and_a_missing_model(model_dir, tmp_path, cli):
    (tmp_path / "there").mkdir()
    run = cli("convert", model_dir, "--quantize", "int8", "-o", tmp_path / "there", text=True)
    assert run.returncode == 2 and "exists; give --output a new directory" in one_line(run.stderr)
    run = cli("convert", tmp_path / "nothing", "--quantize", "int8", "-o", tmp_path / "out", text=True)
    assert run.returncode == 2 and "does not exist" in one_line(run.stderr) and not (tmp_path / "out").exists()
    run = cli("convert", model_dir, "--quantize", "int4", "-o", tmp_path / "out", text=True)
    assert run.returncode == 2 and "int4" in run.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no half-written directory left


def test_an_interrupted_conversion_leaves_nothing(model_dir, tmp_path, cli, monkeypatch):
    from nmtdecode.models import convert

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(convert, "export", interrupted)
    run = cli("convert", model_dir, "--quantize", "int8", "-o", tmp_path / "out", text=True)
    assert run.returncode == 130 and os.listdir(tmp_path) == []
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_mapped_table_s_pages_are_let_go_and_read_again_and_a_heap_tensor_is_left_alone(model_dir, tmp_path, cli):
    """After fbgemm packs a copy of a mapped int8 table, its pages may leave the process
    (weights.release_pages): they come back from the file as they were. A tensor that is not
    mapped is never advised (MADV_DONTNEED would zero it)."""
    from nmtdecode.models.weights import read_tensors, release_pages

    int8 = converted(cli, model_dir, tmp_path / "int8", "int8")
    table = read_tensors([str(int8 / "model.safetensors")]).tensors["src_embed.tokens.weight"].mapped()
    before = table.clone()
    release_pages(table)
    assert torch.equal(table, before)
    heap = torch.arange(1 << 16, dtype=torch.int32)
    release_pages(heap)
    assert torch.equal(heap, torch.arange(1 << 16, dtype=torch.int32))


def test_mapped_rows_leave_the_process_before_fbgemm_packs_their_copy(model_dir, tmp_path, cli, monkeypatch):
    """int8_linear lets a mapped weight's pages go once its quantized copy is made and before the
    packing, so that the file's pages, the copy and the packed layer are never held at once (what
    that saves: docs/speed.md, "A model stored in int8"). The layer is the one the same rows give
    from memory, and the rows read back from the file unchanged."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

    from nmtdecode.models import quantize
    from nmtdecode.models.weights import read_tensors

    int8 = converted(cli, model_dir, tmp_path / "int8", "int8")

    def table():
        return read_tensors([str(int8 / "model.safetensors")]).tensors["src_embed.tokens.weight"].mapped()

    rows = table()
    scales = quantize.quantize_rows(torch.randn(rows.shape[0], 4))[1]  # any positive scales
    events, release, pack = [], quantize.release_pages, DynamicInt8Linear.set_weight_bias
    monkeypatch.setattr(quantize, "release_pages", lambda t: (events.append(("released", t is rows)), release(t)))
    monkeypatch.setattr(
        DynamicInt8Linear, "set_weight_bias", lambda self, w, b: (events.append(("packed", None)), pack(self, w, b))
    )
    from_file = quantize.int8_linear(rows, scales, None)
    from_memory = quantize.int8_linear(rows.clone(), scales, None)
    assert events[:2] == [("released", True), ("packed", None)]
    x = torch.randn(3, rows.shape[1])
    assert torch.equal(from_file(x), from_memory(x))
    assert torch.equal(rows, table())
