"""The same code path on CUDA: results equal the CPU's; half precision agrees on tokens.
Marked `cuda`: skipped (and reported as skipped) without a GPU."""

import pytest
import torch

from nmtdecode.engine.batching import Example
from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.engine.engine import in_halves_when_out_of_memory
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.models.fixed_step import FixedShapeSteps

from tests.helpers import forced_total, random_sources, tiny_transformer
from tests.models.test_fixed_step import STRATEGIES, assert_same, decode

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("beam", [1, 4])
def test_cuda_matches_cpu(beam):
    model = tiny_transformer(1, vocab=20, eos_bias=1.0)
    sources = random_sources(16, 20, seed=3)
    cfg = DecodingConfig(beam_size=beam, n_best=beam, max_length=30)
    on_cpu = BatchDecoder(model, cfg).decode(sources).nbests
    on_gpu = BatchDecoder(model.to("cuda"), cfg).decode(sources).nbests
    assert [[h.tokens for h in n] for n in on_gpu] == [[h.tokens for h in n] for n in on_cpu]
    for a, b in zip(on_gpu, on_cpu):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_agrees_on_tokens(dtype):
    model = tiny_transformer(1, vocab=20, eos_bias=1.0)
    sources = random_sources(16, 20, seed=4)
    cfg = DecodingConfig(beam_size=4, max_length=30)
    reference = BatchDecoder(model, cfg).decode(sources).nbests
    half = BatchDecoder(model.to("cuda", dtype), cfg).decode(sources).nbests
    same = sum(a[0].tokens == b[0].tokens for a, b in zip(half, reference))
    assert same >= 14  # rounding may flip a near-tie, not the bulk


def test_cuda_scores_equal_forced_decoding():
    model = tiny_transformer(1, vocab=20, eos_bias=1.0)
    sources = random_sources(4, 20, seed=5)
    decoder = BatchDecoder(model.to("cuda"), DecodingConfig(beam_size=3, n_best=3, max_length=30))
    results = decoder.decode(sources).nbests
    model.to("cpu")
    for source, hyps in zip(sources, results):
        for hyp in hyps:
            assert hyp.total == pytest.approx(sum(forced_total(model, source, hyp.tokens, hyp.ended)), abs=1e-4)


FEATURES = {
    "sampling": dict(sampling=True, n_best=4, temperature=0.8, top_k=10, top_p=0.9, seed=7),
    "diverse": dict(beam_size=4, n_best=4, beam_groups=2, diversity_penalty=0.5),
    "coverage_alignment": dict(beam_size=4, n_best=2, coverage_penalty="wu", beta=0.3, alignment=True),
    "repetition_blocking": dict(beam_size=4, repetition_penalty=1.3, block_ngram_repeat=2),
}


@pytest.mark.parametrize("feature", FEATURES)
@pytest.mark.parametrize("prefixed", [False, True])
def test_cuda_matches_cpu_with_each_strategy_and_penalty(feature, prefixed):
    """Sampling (the hashed uniforms and the CUDA top-p path), diverse groups, coverage and
    alignment (attention recorded on the device), the logits-stage repetition penalty and
    n-gram blocking, with and without forced prefixes: the tokens the CPU gives."""
    model = tiny_transformer(1, vocab=20, eos_bias=1.0)
    sources = random_sources(16, 20, seed=6)
    prefixes = [[5 + i % 4] * (i % 3) for i in range(16)] if prefixed else None
    cfg = DecodingConfig(max_length=30, **FEATURES[feature])
    on_cpu = BatchDecoder(model, cfg).decode(sources, prefixes=prefixes).nbests
    on_gpu = BatchDecoder(model.to("cuda"), cfg).decode(sources, prefixes=prefixes).nbests
    assert [[h.tokens for h in n] for n in on_gpu] == [[h.tokens for h in n] for n in on_cpu]
    assert [[h.alignment for h in n] for n in on_gpu] == [[h.alignment for h in n] for n in on_cpu]
    for a, b in zip(on_gpu, on_cpu):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_device_index_on_the_command_line(cli, model_dir, lines_file):
    """--device cuda:N (the last GPU, so that N is not always 0) translates as the CPU does."""
    src = lines_file(["hello world", "", "the cat sat on the mat", "a b c"])
    on_cpu = cli("translate", "--model", model_dir, "--src", src, "--device", "cpu", "--quiet", text=True)
    on_gpu = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        src,
        "--device",
        f"cuda:{torch.cuda.device_count() - 1}",
        "--quiet",
        text=True,
    )
    assert on_gpu.returncode == 0, on_gpu.stderr
    assert on_gpu.stdout == on_cpu.stdout


def test_a_real_cuda_out_of_memory_is_split_in_halves(capsys):
    """With the allocator capped (set_per_process_memory_fraction) a batch whose logits do not fit
    raises CUDA's own OutOfMemoryError; the engine retries it in halves and every sentence gets
    its translation."""
    model = tiny_transformer(1, vocab=32000, eos_bias=-5.0).to("cuda")  # no early EOS: every step is full
    sources = random_sources(64, 32000, seed=8)
    decoder = BatchDecoder(model, DecodingConfig(beam_size=8, max_length=12))
    reference = [n[0].tokens for n in decoder.decode(sources).nbests]
    batch = [Example(i, "", ids) for i, ids in enumerate(sources)]
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction((torch.cuda.memory_reserved() + 48 * 2**20) / total)
    try:
        split = in_halves_when_out_of_memory(
            batch, lambda part: [n[0].tokens for n in decoder.decode([e.ids for e in part]).nbests]
        )
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert "out of memory on a batch of 64 sentences; retrying it in halves" in capsys.readouterr().err
    assert len(split) == 64
    assert sum(a == b for a, b in zip(split, reference)) >= 60  # other batch shapes may flip a near-tie


def refuse_to_fall_back(message):
    raise AssertionError(message)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cuda_graphs_give_the_tokens_of_the_eager_step(strategy):
    """Every strategy, with prefixes, replayed from captured graphs (a capture that fails would
    fall back to eager steps with a warning: here it fails the test); a second batch of another
    size reuses the graphs its buckets share."""
    model = tiny_transformer(1, vocab=20, eos_bias=1.0).to("cuda")
    sources = random_sources(19, 20, seed=6)
    prefixes = [[5 + i % 4] * (i % 3) for i in range(19)]
    cfg = DecodingConfig(max_length=30, **STRATEGIES[strategy])
    steps = FixedShapeSteps(model, graphs=True, warn=refuse_to_fall_back)
    assert_same(decode(model, cfg, sources, prefixes), decode(model, cfg, sources, prefixes, steps))
    captured = len(steps.captured)
    assert steps.graphs and captured > 0 and steps.captures == captured  # one capture per bucket
    assert_same(decode(model, cfg, sources[:13], prefixes[:13]), decode(model, cfg, sources[:13], prefixes[:13], steps))
    assert len(steps.captured) <= captured + 2  # 13 sentences: the bucket of 16, already captured as sentences ended
    assert steps.captures == len(steps.captured)  # the buffers did not grow: nothing captured twice


def test_cuda_graphs_in_half_precision_agree_with_eager_half_precision():
    model = tiny_transformer(1, vocab=20, eos_bias=1.0).to("cuda", torch.float16)
    sources = random_sources(16, 20, seed=4)
    cfg = DecodingConfig(beam_size=4, max_length=30)
    eager = decode(model, cfg, sources)
    graphed = decode(model, cfg, sources, fixed_steps=FixedShapeSteps(model, True, warn=refuse_to_fall_back))
    assert sum(a[0].tokens == b[0].tokens for a, b in zip(graphed, eager)) >= 14


def test_the_command_line_uses_cuda_graphs_unless_told_not_to(cli, model_dir, lines_file):
    src = lines_file(["hello world", "", "the cat sat on the mat", "a b c", "x"])
    graphed = cli("translate", "--model", model_dir, "--src", src, "--device", "cuda", "--beam-size", "3", text=True)
    eager = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        src,
        "--device",
        "cuda",
        "--beam-size",
        "3",
        "--cuda-graphs",
        "off",
        text=True,
    )
    assert graphed.returncode == 0 and "CUDA graphs are off" not in graphed.stderr, graphed.stderr
    assert graphed.stdout == eager.stdout


def test_cuda_graphs_are_captured_again_when_the_buffers_grow():
    """A larger batch, a longer source or another beam reallocates the buffers and drops the
    graphs; the next captures need a new memory pool (reusing the dropped graphs' pool handle
    made the allocator assert, which turned graphs off for the rest of the run)."""
    model = tiny_transformer(2, vocab=24, eos_bias=0.5).to("cuda")
    steps = FixedShapeSteps(model, graphs=True, warn=refuse_to_fall_back)
    cfg = DecodingConfig(beam_size=3, n_best=3, max_length=20)
    small, large = random_sources(5, 24, seed=1, max_len=4), random_sources(40, 24, seed=2, max_len=30)
    for sources, config in ((small, cfg), (large, cfg), (small, DecodingConfig(beam_size=5, max_length=20))):
        assert_same(decode(model, config, sources), decode(model, config, sources, fixed_steps=steps))
        assert steps.graphs and steps.captured


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")  # torch.profiler's notice on first use
@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_full_sequence_attention_runs_without_cudnn(dtype, padded):
    """torch picks cuDNN's attention for half precision on some GPUs (an H100 with torch 2.11, with
    and without a padding mask), and cuDNN builds a plan for every new shape (7.5 ms a call: most
    of a float16 job's first pass over new source lengths). The encoder runs another fused kernel,
    with the math kernel's values. (Where torch would not pick cuDNN anyway, the first assertion
    holds either way.)"""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = tiny_transformer(1, vocab=20, d_model=256, heads=4, ffn_dim=256).to("cuda", dtype)
    ids = torch.randint(4, 20, (8, 13), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    mask = torch.ones(8, 13, dtype=torch.bool, device="cuda")
    if padded:
        mask[0, 9:] = False  # a padded sentence: the masked kernel
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        memory = model.encode(ids, mask)
    names = {event.key for event in prof.key_averages()}
    assert not [n for n in names if "cudnn" in n], sorted(names)
    assert [n for n in names if "efficient_attention" in n or "flash_attention" in n], sorted(names)
    with sdpa_kernel(SDPBackend.MATH):
        reference = model.encode(ids, mask)
    torch.testing.assert_close(memory, reference, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sampling", "coverage_alignment_attention"])
@pytest.mark.parametrize("graphs", [False, True])
def test_the_device_search_gives_the_host_search_tokens_on_cuda(strategy, graphs):
    """The device search as a GPU runs it (the done flags read asynchronously every 4 steps,
    search/done_flags.py), with the eager step and with the graphed one; its late checks drop
    sentences at other steps than the host search, so batch shapes differ: scores may differ in
    rounding."""
    model = tiny_transformer(1, vocab=20, eos_bias=1.0).to("cuda")
    sources = random_sources(19, 20, seed=6)
    prefixes = [[5 + i % 4] * (i % 3) for i in range(19)]
    cfg = DecodingConfig(max_length=30, **STRATEGIES[strategy])

    def run(on_device):
        steps = FixedShapeSteps(model, graphs=True, warn=refuse_to_fall_back) if graphs else None
        decoder = BatchDecoder(model, cfg, steps=steps, search_on="device" if on_device else "host")
        assert decoder.on_device(32) == on_device and decoder.check_every == 4  # the device's; unused on the host
        return decoder.decode(sources, prefixes=prefixes).nbests

    assert_same(run(False), run(True))


@pytest.mark.parametrize(
    "strategy, options",
    [
        ("greedy", {}),
        ("beam", {}),
        ("beam_opennmt_rules", {}),
        ("beam", dict(min_length=3, ban_unk=True, early_stopping="ctranslate2")),  # graphed from step 3
        ("beam", "forced_first_and_last"),  # Hugging Face's forced BOS and EOS (Marian's, BART's, NLLB's configs)
        ("greedy", "forced_first_and_last"),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_device_search_replays_its_steps_as_cuda_graphs(strategy, options, dtype):
    """The device search's steps replayed as CUDA graphs (search/device/graphs.py) give the tokens
    and scores of the same search run eagerly, bit for bit, batch after batch: the second batch,
    of another size, captures its own shapes; the third, the first's again, only replays (each
    batch's search taking up the graphs' state), and the host search agrees with all of them."""
    model = tiny_transformer(1, vocab=20, eos_bias=1.0).to("cuda", dtype)
    sources = random_sources(19, 20, seed=6)
    rules = ModelRules(forced_bos_id=7, forced_eos=True) if options == "forced_first_and_last" else None
    cfg = DecodingConfig(max_length=30, **STRATEGIES[strategy], **(options if rules is None else {}))
    steps = FixedShapeSteps(model, graphs=True, warn=refuse_to_fall_back)
    graphed = BatchDecoder(model, cfg, rules, steps=steps, search_on="device", warn=refuse_to_fall_back)
    eager = BatchDecoder(model, cfg, rules, steps=steps, search_on="device")
    eager.search_graphs = None
    graphs = graphed.search_graphs
    assert graphs is not None
    for batch in (sources, sources[:13], sources, sources):  # a shape is captured the second time it is seen
        before = graphs.captures
        replayed = graphed.decode(batch).nbests
        expected = eager.decode(batch).nbests
        assert [[(h.tokens, h.score) for h in n] for n in replayed] == [
            [(h.tokens, h.score) for h in n] for n in expected
        ]
        if dtype == torch.float32:
            assert_same(BatchDecoder(model, cfg, rules, search_on="host").decode(batch).nbests, replayed)
    assert graphs.on and graphs.captures == before and graphs.replays > 2 * graphs.captures > 0


def test_the_done_flags_reach_the_host_one_check_late_on_cuda():
    from nmtdecode.search.device.done_flags import DoneFlags

    done = torch.tensor([False, True, False], device="cuda")
    flags = DoneFlags(3, every=2, device="cuda")
    assert flags.check(1, done) is None
    assert flags.check(2, done) == [False, False, False]  # nothing posted yet
    flags.post(done)
    done[2] = True
    assert flags.check(4, done) == [False, True, False]  # what was posted at step 2
    flags.post(done[1:])  # the batch lost its first sentence
    assert flags.check(6, done[1:]) == [True, True]


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
def test_a_gpu_step_runs_the_fused_kernel():
    """Without recorded attention weights, no softmax of its own in the step: one fused kernel."""
    model = tiny_transformer(1, vocab=20, eos_bias=1.0).to("cuda")
    decoder = BatchDecoder(model, DecodingConfig(beam_size=3, max_length=4))
    sources = random_sources(3, 20, seed=2)
    decoder.decode(sources)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in decoder.stepwise(sources):
            pass
    names = {event.key for event in prof.key_averages()}
    assert "aten::scaled_dot_product_attention" in names and "aten::softmax" not in names, sorted(names)
