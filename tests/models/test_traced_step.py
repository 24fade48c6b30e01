"""The traced step (models/traced_step.py) gives the eager step's results bit for bit: every
strategy, with prefixes, sentences finishing at different steps, a cache that grows, sources
with and without padding, both CPU matrix-product backends and the model families' switches;
one trace per kind of step serves batches of every size; a failed trace falls back to eager."""

import pytest
import torch

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.steps import EagerSteps
from nmtdecode.models.traced_step import TracedSteps

from tests.helpers import T5_LIKE, placed, random_sources, tiny_transformer
from tests.models.test_fixed_step import STRATEGIES

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # sizes read as the trace means to


def decode(model, cfg, sources, prefixes=None, traced_steps=None):
    with torch.inference_mode():
        return BatchDecoder(model, cfg, steps=traced_steps).decode(sources, prefixes=prefixes).nbests


def assert_identical(eager, traced):
    """The same hypotheses, scores, alignments and attention, exactly."""

    def facts(results):
        return [[(h.tokens, h.score, h.token_scores, h.alignment, h.attention) for h in n] for n in results]

    assert facts(traced) == facts(eager)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("prefixed", [False, True])
def test_traced_step_gives_the_results_of_the_model_step(strategy, prefixed):
    """19 sentences that end at different steps (EOS is favoured): finished ones leave the batch."""
    model = placed(tiny_transformer(1, vocab=20, eos_bias=1.0), "onednn")
    sources = random_sources(19, 20, seed=6)
    prefixes = [[5 + i % 4] * (i % 3) for i in range(19)] if prefixed else None
    cfg = DecodingConfig(max_length=30, **STRATEGIES[strategy])
    traced = decode(model, cfg, sources, prefixes, TracedSteps(model, eager_steps=0))
    assert_identical(decode(model, cfg, sources, prefixes), traced)


def test_one_trace_per_kind_of_step_serves_every_batch():
    """Batches of other sizes, source lengths (one with no padding at all) and lengths past the
    cache's first capacity reuse the traces of the first batch: greedy steps, and beam steps
    after the first (their rows need the ancestry mask)."""
    model = placed(tiny_transformer(2, vocab=24, eos_bias=-1.0), "onednn")
    steps = TracedSteps(model, eager_steps=0)
    unpadded = [[5 + (i + j) % 15 for j in range(6)] + [2] for i in range(7)]
    batches = (random_sources(5, 24, seed=1, max_len=4), random_sources(40, 24, seed=2, max_len=30), unpadded)
    for cfg in (DecodingConfig(beam_size=1, max_length=40), DecodingConfig(beam_size=3, n_best=3, max_length=40)):
        for sources in batches:
            eager = decode(model, cfg, sources)
            assert_identical(eager, decode(model, cfg, sources, traced_steps=steps))
    assert max(len(h.tokens) for n in eager for h in n) > 16  # the cache grew past its first capacity
    assert sorted(steps.traced) == [(1, False), (3, True)]


def test_a_plain_output_projection_is_traced_once_for_each_form_of_its_product(monkeypatch):
    """A tied output projection kept plain (a large vocabulary's) multiplies a step's few rows with
    the roles swapped and more rows by blocks (models/gemm.py): each form gets its own trace,
    and both give the eager step's results bit for bit."""
    from nmtdecode.models import gemm, placement

    monkeypatch.setattr(placement, "PACKED_TIED_COPY_BYTES", 0)
    monkeypatch.setattr(gemm, "SWAPPED_MAX_ROWS", 6)
    model = placed(tiny_transformer(2, vocab=24, eos_bias=-1.0, tie_output=True), "onednn")
    assert not model.output.packed
    steps = TracedSteps(model, eager_steps=0)
    cfg = DecodingConfig(beam_size=3, n_best=3, max_length=12)
    for sources in (random_sources(2, 24, seed=1), random_sources(9, 24, seed=2)):  # 6 rows, then 27
        assert_identical(decode(model, cfg, sources), decode(model, cfg, sources, traced_steps=steps))
    assert sorted(steps.traced) == [(1, False, False), (1, False, True), (3, True, False), (3, True, True)]


@pytest.mark.parametrize(
    "family",
    [
        dict(),  # pre-norm, sinusoidal
        dict(
            pre_norm=False,
            encoder_final_norm=False,
            decoder_final_norm=False,
            positions="learned",
            position_offset=2,
            layernorm_embedding=True,
            activation="gelu",
        ),  # BART-like
        dict(
            positions="sinusoidal_fairseq",
            position_offset=1,
            zero_pad_positions=True,
            embed_scale=32**0.5,
            activation="silu",
        ),  # M2M100-like
        T5_LIKE,
    ],
)
@pytest.mark.parametrize("backend", ["onednn", "torch"])
def test_traced_step_follows_each_model_family_and_backend(family, backend):
    model = tiny_transformer(3, vocab=20, eos_bias=1.0, **family)
    if backend == "onednn":
        model = placed(model, "onednn")
    sources = random_sources(11, 20, seed=4)
    cfg = DecodingConfig(beam_size=4, n_best=2, max_length=25)
    traced = decode(model, cfg, sources, traced_steps=TracedSteps(model, eager_steps=0))
    assert_identical(decode(model, cfg, sources), traced)


def test_a_step_that_cannot_be_traced_runs_eagerly_after_one_warning(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("not traceable\nsecond line")

    monkeypatch.setattr(torch.jit, "trace", refuse)
    model = placed(tiny_transformer(1, vocab=20, eos_bias=1.0), "onednn")
    warnings = []
    steps = TracedSteps(model, warn=warnings.append, eager_steps=0)
    sources = random_sources(6, 20, seed=3)
    cfg = DecodingConfig(beam_size=2, n_best=2, max_length=20)
    for _ in range(2):
        assert_identical(decode(model, cfg, sources), decode(model, cfg, sources, traced_steps=steps))
    assert warnings == [
        "the traced decoding step is off for this run (RuntimeError: not traceable); decoding without it"
    ]
    assert steps.traced == {}


def test_the_engine_traces_on_the_cpu_unless_told_not_to(model_dir, tmp_path):
    """A whole job: the same bytes (scores included) with `traced_step: off`, and with every step
    traced from the first; int8 models, whose products are torch's quantized ones, run eagerly."""
    from nmtdecode.options.config import Config
    from nmtdecode.engine.engine import Engine
    from nmtdecode.jobs.run import translate_job

    src = tmp_path / "in.txt"
    src.write_text("a b\nthe cat\n\nx y z w\nb a\ncat the a\n", encoding="utf-8")

    def job(name, **options):
        values = {
            "model": str(model_dir),
            "src": str(src),
            "output": str(tmp_path / name),
            "format": "jsonl",
            "token_scores": True,
            "n_best": 2,
            "beam_size": 3,
            "batch_size": 2,
            "quiet": True,
            **options,
        }
        engine = Engine.load(Config.from_values(values))
        translate_job(Config.from_values(values), engine)
        return engine, (tmp_path / name).read_text(encoding="utf-8")

    traced_engine, traced = job("traced.jsonl")
    traced_engine.steps.eager_steps = 0
    translate_job(
        Config.from_values(
            {
                "model": str(model_dir),
                "src": str(src),
                "output": str(tmp_path / "again.jsonl"),
                "format": "jsonl",
                "token_scores": True,
                "n_best": 2,
                "beam_size": 3,
                "batch_size": 2,
                "quiet": True,
            }
        ),
        traced_engine,
    )
    assert sorted(traced_engine.steps.traced) == [(1, False), (3, True)]
    assert (tmp_path / "again.jsonl").read_text(encoding="utf-8") == traced
    eager_engine, eager = job("eager.jsonl", traced_step="off")
    assert isinstance(traced_engine.steps, TracedSteps)  # this short job ran its steps eagerly (EAGER_STEPS)
    assert isinstance(eager_engine.steps, EagerSteps)
    assert traced == eager
    assert isinstance(job("int8.jsonl", quantize="int8")[0].steps, EagerSteps)


def test_a_kind_of_step_is_traced_after_its_eager_steps():
    """Three steps of each kind run eagerly, then that kind is traced: a short batch never pays
    for a trace."""
    model = placed(tiny_transformer(1, vocab=20, eos_bias=-2.0), "onednn")
    steps = TracedSteps(model, eager_steps=3)
    greedy = DecodingConfig(beam_size=1, min_length=2, max_length=3)  # three steps
    sources = random_sources(4, 20, seed=2)
    assert_identical(decode(model, greedy, sources), decode(model, greedy, sources, traced_steps=steps))
    assert steps.traced == {} and steps.seen == {(1, False): 3}
    assert_identical(decode(model, greedy, sources), decode(model, greedy, sources, traced_steps=steps))
    assert list(steps.traced) == [(1, False)]


def test_replays_run_without_torchscripts_graph_optimizations():
    """The replay turns the executor's optimizations off for its own call (a one-off cost, no gain
    on the CPU: traced_step.py) and leaves the thread's setting as it found it."""
    model = placed(tiny_transformer(1, vocab=20, eos_bias=-2.0), "onednn")
    steps = TracedSteps(model, eager_steps=0)
    cfg = DecodingConfig(beam_size=1, min_length=2, max_length=4)
    sources = random_sources(4, 20, seed=2)
    decode(model, cfg, sources, traced_steps=steps)  # traces the greedy kind
    replay, optimized = steps.traced[(1, False)], []

    def spy(*args):
        optimized.append(torch._C._get_graph_executor_optimize())
        return replay(*args)

    steps.traced[(1, False)] = spy
    assert_identical(decode(model, cfg, sources), decode(model, cfg, sources, traced_steps=steps))
    assert optimized and not any(optimized)
    assert torch._C._get_graph_executor_optimize()
