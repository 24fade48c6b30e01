"""The CTranslate2 stand-in's device, compute types and model lifecycle, without CTranslate2:
`device` names the device chosen ("auto" resolved), `compute_type` the type computed in
("auto" is CTranslate2's choice: int8 where this CPU multiplies in int8 natively),
get_supported_compute_types answers from what this CPU runs natively, and unload_model /
load_model free the model and bring it back. test_ctranslate2_parity.py compares the same with
CTranslate2 itself."""

import os
import subprocess
import sys
import weakref

import pytest
import torch

from nmtdecode.compat import ctranslate2
from nmtdecode.compat import ctranslate2_options

from tests.helpers import REPO

DEMO = str(REPO / "data" / "demo")
SOURCES = [["\u2581good", "\u2581morning"], ["\u2581the", "\u2581red", "\u2581house"], ["\u2581water"]]


@pytest.fixture()
def native(monkeypatch):
    """`native(*precisions)`: this CPU computes those precisions natively, and no other."""

    def only(*precisions):
        monkeypatch.setattr(ctranslate2_options, "natively_computed", lambda precision: precision in precisions)

    return only


def test_auto_is_the_device_chosen_and_compute_type_what_is_computed():
    translator = ctranslate2.Translator(DEMO, device="auto")
    assert translator.device == ("cuda" if torch.cuda.device_count() else "cpu")
    assert translator.device_index == [0] and translator.num_translators == 1
    assert translator.compute_type == "float32"  # "default": the demo's own precision
    assert ctranslate2.Translator(DEMO, compute_type="int8").compute_type == "int8_float32"


@pytest.mark.parametrize(
    ("natively", "chosen", "gemm"),
    [(("int8",), "int8_float32", "int8"), (("bfloat16", "float16"), "float32", "torch")],
    ids=["int8 native", "no int8"],
)
def test_auto_compute_type_is_ctranslate2s_choice_on_a_cpu(native, natively, chosen, gemm):
    """On a CPU CTranslate2 computes in int8 wherever it can, whatever float16 or bfloat16 do;
    where int8 is not native here, float32 (CTranslate2's next, int16, nmtdecode lacks)."""
    native(*natively)
    translator = ctranslate2.Translator(DEMO, device="cpu", compute_type="auto")
    assert translator.compute_type == chosen
    assert translator._slot.api.engine.loaded.gemm in ((gemm,) if gemm == "int8" else ("torch", "onednn"))


def test_supported_compute_types_are_what_this_cpu_runs_natively(native):
    native()
    assert ctranslate2.get_supported_compute_types("cpu") == {"float32"}
    native("int8", "bfloat16", "float16")
    assert ctranslate2.get_supported_compute_types("cpu") == {"float32", "int8", "int8_float32", "bfloat16", "float16"}
    with pytest.raises(ValueError, match="unsupported device"):
        ctranslate2.get_supported_compute_types("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device 0"):  # as CTranslate2 without a GPU
            ctranslate2.get_supported_compute_types("cuda")


@pytest.mark.subprocess  # a Python started with the ISA capped: 1.5-1.7 s
def test_a_cpu_without_avx512_has_no_bfloat16_and_keeps_int8():
    """torch's own answers, on this CPU capped at AVX2 (as the AVX2 runs of the benchmark do)."""
    query = "from nmtdecode.compat import ctranslate2; print(sorted(ctranslate2.get_supported_compute_types('cpu')))"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    run = subprocess.run([sys.executable, "-c", query], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[0] == str(
        ["float32", "int8", "int8_float32"] if "fbgemm" in torch.backends.quantized.supported_engines else ["float32"]
    )


def test_unload_frees_the_model_and_load_brings_it_back():
    translator = ctranslate2.Translator(DEMO, device="cpu")
    expected = translator.translate_batch(SOURCES, return_scores=True)
    weight = weakref.ref(next(translator._slot.api.engine.loaded.model.parameters()))
    pending = translator.translate_batch(SOURCES, return_scores=True, asynchronous=True)
    translator.unload_model()
    assert [p.result() for p in pending] == expected  # the calls made before it ran first
    assert not translator.model_is_loaded and weight() is None
    for call in (lambda: translator.translate_batch(SOURCES), lambda: translator.score_batch(SOURCES, SOURCES)):
        with pytest.raises(RuntimeError, match="The model for this translator was unloaded"):
            call()
    translator.load_model()
    assert translator.model_is_loaded and translator.translate_batch(SOURCES, return_scores=True) == expected
    translator.unload_model(to_cpu=True)  # on a CPU: nothing changes, as in CTranslate2
    assert translator.model_is_loaded and translator.translate_batch(SOURCES, return_scores=True) == expected


def test_to_cpu_keeps_a_gpu_models_weights_in_host_memory_until_loaded():
    """The bookkeeping of unload_model(to_cpu=True) and load_model(keep_cache), on a CPU model
    made to take the GPU's path (its moves to the host and back change nothing here);
    test_cuda_to_cpu_and_back does it on a GPU. float32 products: weights that copy."""
    translator = ctranslate2.Translator(DEMO, device="cpu", compute_type="float32")
    expected = translator.translate_batch(SOURCES, return_scores=True)
    slot = translator._slot
    slot.on_gpu = True
    model = slot.api.engine.loaded.model
    translator.unload_model(to_cpu=True)
    assert not translator.model_is_loaded and slot.host_copy.model is model
    translator.load_model(keep_cache=True)  # a copy goes to the device, the host's stays
    assert slot.host_copy.model is model and slot.api.engine.loaded.model is not model
    assert translator.translate_batch(SOURCES, return_scores=True) == expected
    translator.unload_model(to_cpu=True)  # the host copy is kept as it was
    translator.load_model()  # the host's weights themselves go back
    assert slot.host_copy is None and slot.api.engine.loaded.model is model
    assert translator.translate_batch(SOURCES, return_scores=True) == expected
    weight = weakref.ref(next(model.parameters()))
    del model
    translator.unload_model(to_cpu=True)
    translator.unload_model()  # to_cpu=False frees the host copy too
    assert slot.host_copy is None and weight() is None


@pytest.mark.cuda
def test_cuda_to_cpu_and_back():
    translator = ctranslate2.Translator(DEMO, device="cuda")
    assert translator.device == "cuda" and translator.device_index == [0]
    expected = translator.translate_batch(SOURCES, return_scores=True)
    used = torch.cuda.memory_allocated()
    translator.unload_model(to_cpu=True)
    assert torch.cuda.memory_allocated() < used and translator._slot.host_copy is not None
    assert next(translator._slot.host_copy.model.parameters()).device.type == "cpu"
    translator.load_model()
    assert next(translator._slot.api.engine.loaded.model.parameters()).device.type == "cuda"
    assert translator.translate_batch(SOURCES, return_scores=True) == expected
