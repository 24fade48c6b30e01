"""Random sampling: the filters against transformers' warpers, the hashed uniforms, draws on a
probability table against its probabilities, greedy limits, and determinism across batches."""

import math
import random

import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from nmtdecode.options.config import Config, ConfigError, DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.search.sampling import Filters, _fmix32, _mul32, draw, hash32, uniforms

from tests.helpers import DEMO, EOS, TableModel, random_sources, tiny_transformer

A, B = 4, 5
BAN_SPECIALS = ModelRules(banned_ids=(0, 1, 2))


def random_logprobs(seed, rows=6, vocab=50):
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(2.0 * torch.randn(rows, vocab, generator=g), dim=-1)


def assert_same_filter(got, expected):
    assert torch.equal(torch.isinf(got), torch.isinf(expected))
    torch.testing.assert_close(got[~torch.isinf(got)], expected[~torch.isinf(expected)])


# --- filters against transformers -------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_temperature_matches_transformers(temperature):
    logprobs = random_logprobs(0)
    expected = TemperatureLogitsWarper(temperature)(None, logprobs.clone())
    assert_same_filter(Filters(temperature=temperature)(logprobs), expected)


@pytest.mark.parametrize("k", [1, 2, 7, 50, 80])
@pytest.mark.parametrize("seed", range(3))
def test_top_k_matches_transformers(k, seed):
    logprobs = random_logprobs(seed)
    expected = TopKLogitsWarper(k)(None, logprobs.clone())
    assert_same_filter(Filters(top_k=k)(logprobs), expected)


def test_top_k_keeps_ties_at_the_boundary_as_transformers():
    logprobs = torch.tensor([[0.5, 0.2, 0.2, 0.1]]).log()
    expected = TopKLogitsWarper(2)(None, logprobs.clone())
    got = Filters(top_k=2)(logprobs)
    assert_same_filter(got, expected)
    assert torch.isfinite(got).tolist() == [[True, True, True, False]]


@pytest.mark.parametrize("p", [1e-6, 0.1, 0.5, 0.8, 0.95, 0.999])
@pytest.mark.parametrize("seed", range(3))
def test_top_p_matches_transformers(p, seed):
    logprobs = random_logprobs(seed)
    expected = TopPLogitsWarper(p)(None, logprobs.clone())
    assert_same_filter(Filters(top_p=p)(logprobs), expected)


def test_top_p_keeps_at_least_the_most_probable_token():
    logprobs = torch.tensor([[0.1, 0.6, 0.3]]).log()
    got = Filters(top_p=1e-9)(logprobs)
    assert torch.isfinite(got).tolist() == [[False, True, False]]
    assert_same_filter(got, TopPLogitsWarper(1e-9, min_tokens_to_keep=1)(None, logprobs.clone()))


def test_top_p_keeps_the_whole_tie_at_its_boundary():
    """[.4 .2 .2 .2], p = .5: .4 and one .2 reach .5; the three .2 are tied, so all are kept
    (transformers keeps whichever of them its sort puts first): a superset of transformers'."""
    logprobs = torch.tensor([[0.2, 0.4, 0.2, 0.2]]).log()
    got = torch.isfinite(Filters(top_p=0.5)(logprobs))
    theirs = torch.isfinite(TopPLogitsWarper(0.5)(None, logprobs.clone()))
    assert got.tolist() == [[True, True, True, True]]
    assert bool((got | ~theirs).all()) and int(theirs.sum()) == 2


def test_a_row_with_one_possible_token_keeps_it():
    logprobs = torch.full((1, 6), -math.inf)
    logprobs[0, 3] = 0.0
    for filters in (Filters(top_k=2), Filters(top_p=0.3), Filters(temperature=0.5, top_k=1, top_p=0.1)):
        got = filters(logprobs)
        assert torch.isfinite(got).tolist() == [[False, False, False, True, False, False]]


@pytest.mark.parametrize("temperature,k,p", [(0.7, 10, 0.9), (1.5, 5, 0.6), (1.0, 30, 0.3), (2.0, 0, 0.7)])
@pytest.mark.parametrize("seed", range(3))
def test_filters_in_order_match_transformers_chain(temperature, k, p, seed):
    """Temperature, then top-k, then top-p (renormalised over what top-k kept), as generate() applies them."""
    logprobs = random_logprobs(seed)
    expected = TemperatureLogitsWarper(temperature)(None, logprobs.clone())
    if k:
        expected = TopKLogitsWarper(k)(None, expected)
    expected = TopPLogitsWarper(p)(None, expected)
    assert_same_filter(Filters(temperature, k, p)(logprobs), expected)


def test_filters_leave_their_input_alone():
    logprobs = random_logprobs(1)
    before = logprobs.clone()
    Filters(0.5, 3, 0.5)(logprobs)
    assert torch.equal(logprobs, before)


# --- the uniform generator --------------------------------------------------------------------


def test_mul32_is_multiplication_mod_2_32():
    rng = random.Random(0)
    xs = [0, 1, 0xFFFF, 0x10000, 0xFFFFFFFF] + [rng.getrandbits(32) for _ in range(200)]
    for c in (0x85EBCA6B, 0xC2B2AE35, 3):
        assert _mul32(torch.tensor(xs), c).tolist() == [(x * c) % 2**32 for x in xs]


def fmix32_reference(x: int) -> int:
    """MurmurHash3's fmix32, written from its definition with Python integers."""
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & 0xFFFFFFFF
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_fmix32_matches_its_definition():
    rng = random.Random(1)
    xs = [0, 1, 2, 0xFFFFFFFF] + [rng.getrandbits(32) for _ in range(200)]
    assert _fmix32(torch.tensor(xs)).tolist() == [fmix32_reference(x) for x in xs]
    assert fmix32_reference(1) == 0x514E28B7  # MurmurHash3's published fmix32(1)


def test_uniforms_are_in_the_open_interval_and_uniform():
    keys = hash32(7, 0, torch.arange(20_000), torch.zeros(20_000, dtype=torch.long))
    u = torch.cat([uniforms(keys, step) for step in range(5)])  # 100,000 numbers, fixed: cannot flake
    assert bool(((u > 0) & (u < 1)).all())
    counts = torch.histc(u, bins=100, min=0.0, max=1.0)
    expected = u.numel() / 100
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 149.4  # 99 degrees of freedom: the 0.1% critical value
    assert abs(float(u.mean()) - 0.5) < 0.005
    # consecutive steps of one stream are not correlated
    a, b = uniforms(keys, 0), uniforms(keys, 1)
    assert abs(float(torch.corrcoef(torch.stack([a, b]))[0, 1])) < 0.03


def test_draw_is_the_inverse_cdf():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2]], dtype=torch.float64)
    cdf = probs.cumsum(dim=1).repeat(5, 1)
    u = torch.tensor([0.1, 0.5, 0.79, 0.81, 0.999999], dtype=torch.float64)
    assert draw(cdf, u).tolist() == [0, 2, 2, 3, 3]  # token 1 (probability 0) never


# --- sampling on a probability table ----------------------------------------------------------

# ()    -> a .5, b .3, eos .2
# (a)   -> a .6, eos .4
# (b)   -> eos 1
# outputs: [a a] .3, [a] .2, [b] .3, [] .2
TABLE = {(): {A: 0.5, B: 0.3, EOS: 0.2}, (A,): {A: 0.6, EOS: 0.4}, (A, A): {EOS: 1.0}}
OUTCOMES = {(A, A): 0.3, (A,): 0.2, (B,): 0.3, (): 0.2}


def sample_table(lines=500, n_best=4, seed=3, **decoding):
    cfg = DecodingConfig(sampling=True, n_best=n_best, max_length=10, seed=seed, length_penalty="none", **decoding)
    translator = BatchDecoder(TableModel(6, [TABLE]), cfg, BAN_SPECIALS)
    return translator.decode([[0, EOS]] * lines, list(range(lines))).nbests


def chi_square(nbests, probabilities):
    counts = {outcome: 0 for outcome in probabilities}
    for hyps in nbests:
        for h in hyps:
            counts[tuple(h.tokens)] += 1
    total = sum(counts.values())
    return sum((counts[o] - total * p) ** 2 / (total * p) for o, p in probabilities.items())


def test_sample_frequencies_converge_to_the_table():
    assert chi_square(sample_table(), OUTCOMES) < 16.27  # 3 degrees of freedom, 0.1% critical value (fixed seed)


def test_temperature_reshapes_the_frequencies():
    """T = 2: p^(1/2) renormalised at each step: () -> .5^.5 : .3^.5 : .2^.5; (a) -> .6^.5 : .4^.5."""
    first = {t: p**0.5 for t, p in TABLE[()].items()}
    second = {t: p**0.5 for t, p in TABLE[(A,)].items()}
    z1, z2 = sum(first.values()), sum(second.values())
    expected = {
        (A, A): first[A] / z1 * second[A] / z2,
        (A,): first[A] / z1 * second[EOS] / z2,
        (B,): first[B] / z1,
        (): first[EOS] / z1,
    }
    nbests = sample_table(temperature=2.0)
    assert chi_square(nbests, expected) < 16.27
    assert chi_square(nbests, OUTCOMES) > 30  # and it is not the untempered distribution


def test_top_k_samples_only_from_the_k_best():
    """k = 2 at step 0 keeps a and b (.5, .3), renormalised: .625, .375."""
    nbests = sample_table(top_k=2)
    expected = {(A, A): 0.625 * 0.6, (A,): 0.625 * 0.4, (B,): 0.375}
    assert chi_square(nbests, expected) < 13.82  # 2 degrees of freedom


def test_scores_are_the_model_log_probs_not_the_tempered_ones():
    for hyps in sample_table(lines=20, temperature=3.0, top_k=2):
        for h in hyps:
            assert h.total == pytest.approx(math.log(OUTCOMES[tuple(h.tokens)]))
            assert h.score == pytest.approx(h.total)  # length penalty none


def test_n_samples_come_sorted_by_score():
    nbests = sample_table(lines=50, n_best=6)
    assert all(len(hyps) == 6 for hyps in nbests)
    for hyps in nbests:
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    assert len({tuple(tuple(h.tokens) for h in hyps) for hyps in nbests}) > 5  # lines draw differently


# --- greedy limits and determinism on a random transformer ------------------------------------


@pytest.fixture(scope="module")
def setup():
    model = tiny_transformer(11, vocab=24, eos_bias=0.8)
    return model, random_sources(40, 24, seed=11, max_len=12)


@pytest.mark.parametrize("decoding", [dict(top_k=1), dict(temperature=1e-6), dict(top_p=1e-6)])
def test_sampling_limits_equal_greedy(setup, decoding):
    model, sources = setup
    greedy = BatchDecoder(model, DecodingConfig(beam_size=1, max_length=20)).decode(sources).nbests
    sampled = BatchDecoder(model, DecodingConfig(sampling=True, max_length=20, **decoding)).decode(sources).nbests
    assert [n[0].tokens for n in sampled] == [n[0].tokens for n in greedy]
    assert [n[0].total for n in sampled] == pytest.approx([n[0].total for n in greedy], abs=1e-5)


def decode(translator, sources, line_ids, batch_size):
    results = []
    for start in range(0, len(sources), batch_size):
        end = start + batch_size
        results += translator.decode(sources[start:end], line_ids[start:end]).nbests
    return results


def test_samples_do_not_depend_on_batch_size_or_order(setup):
    model, sources = setup
    translator = BatchDecoder(model, DecodingConfig(sampling=True, n_best=3, max_length=20, top_p=0.9, seed=42))
    lines = list(range(len(sources)))
    reference = decode(translator, sources, lines, 1)
    order = lines[:]
    random.Random(5).shuffle(order)
    shuffled = decode(translator, [sources[i] for i in order], order, 16)
    for results in (decode(translator, sources, lines, 32), [shuffled[order.index(i)] for i in lines]):
        assert [[h.tokens for h in n] for n in results] == [[h.tokens for h in n] for n in reference]
        assert [h.total for n in results for h in n] == pytest.approx([h.total for n in reference for h in n], abs=1e-5)
    other_seed = BatchDecoder(model, DecodingConfig(sampling=True, n_best=3, max_length=20, top_p=0.9, seed=43))
    assert [[h.tokens for h in n] for n in decode(other_seed, sources, lines, 32)] != [
        [h.tokens for h in n] for n in reference
    ]


def test_dropping_finished_sentences_changes_no_sample(setup):
    model, sources = setup
    cfg = DecodingConfig(sampling=True, n_best=3, max_length=20, seed=1)
    shrinking = BatchDecoder(model, cfg).decode(sources).nbests
    fixed = BatchDecoder(model, cfg, shrink=False).decode(sources).nbests
    assert [[h.tokens for h in n] for n in shrinking] == [[h.tokens for h in n] for n in fixed]


def test_sample_scores_equal_forced_decoding(setup):
    model, sources = setup
    translator = BatchDecoder(model, DecodingConfig(sampling=True, n_best=2, max_length=20, temperature=1.5))
    ended = [
        (source, h) for source, hyps in zip(sources[:8], translator.decode(sources[:8]).nbests) for h in hyps if h.ended
    ]
    assert len(ended) >= 4
    for source, h in ended:
        assert translator.score([source], [h.tokens])[0] == pytest.approx(h.total, abs=1e-4)


# --- options ----------------------------------------------------------------------------------


def test_sampling_refuses_an_explicit_beam_size():
    with pytest.raises(ConfigError, match="beam_size: 4 with sampling"):
        Config.from_values({"sampling": True, "beam_size": 4})
    config = Config.from_values({"sampling": True, "n_best": 8})  # the default beam (5) is not in the way
    assert config.decoding.rows_per_sentence == 8
    assert Config.from_values({"sampling": True, "beam_size": 1}).decoding.sampling
    with pytest.raises(ConfigError, match="beam_groups: 2 with sampling"):
        Config.from_values({"sampling": True, "beam_groups": 2, "diversity_penalty": 0.5})


@pytest.mark.parametrize(
    "values,message",
    [
        ({"temperature": 0}, "temperature: must be > 0"),
        ({"top_k": -1}, "top_k: must be >= 0"),
        ({"top_p": 0}, r"top_p: must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p: must be in \(0, 1\]"),
        ({"seed": -1}, r"seed: must be in \[0, 2\^64\)"),
    ],
)
def test_invalid_sampling_options_name_the_key(values, message):
    with pytest.raises(ConfigError, match=message):
        Config.from_values({"sampling": True, **values})


# --- through the command line, on the demo model ----------------------------------------------


def test_cli_samples_do_not_depend_on_batching(cli, lines_file):
    with open(f"{DEMO}/test.en", encoding="utf-8") as f:
        src = lines_file(f.read().splitlines()[:20])
    common = [
        "translate",
        "-m",
        DEMO,
        "--src",
        src,
        "--sampling",
        "--n-best",
        "3",
        "--top-k",
        "20",
        "--seed",
        "9",
        "--format",
        "nbest",
        "-q",
    ]
    outputs = [
        cli(*common, "--batch-size", size, *extra, text=True)
        for size, extra in (("1", []), ("8", []), ("200", ["--batch-type", "tokens"]))
    ]
    assert all(out.returncode == 0 for out in outputs), outputs[0].stderr
    entries = [[line.split(" ||| ") for line in out.stdout.splitlines()] for out in outputs]
    assert len(entries[0]) == 60
    for other in entries[1:]:  # the same samples; scores up to the batch's rounding
        assert [e[:2] for e in other] == [e[:2] for e in entries[0]]
        assert [float(e[2]) for e in other] == pytest.approx([float(e[2]) for e in entries[0]], abs=1e-4)
    other_seed = cli(*common[:-4], "--seed", "10", "--format", "nbest", "-q", text=True)
    assert [line.split(" ||| ")[:2] for line in other_seed.stdout.splitlines()] != [e[:2] for e in entries[0]]


def test_cli_warns_of_sampling_options_without_sampling(cli):
    out = cli("translate", "-m", DEMO, "--top-k", "5", "--temperature", "0.5", "-q", stdin="good morning\n", text=True)
    assert out.returncode == 0
    assert "top_k: has no effect without --sampling" in out.stderr
    assert "temperature: has no effect without --sampling" in out.stderr
    out = cli(
        "translate", "-m", DEMO, "--sampling", "--early-stopping", "never", "-q", stdin="good morning\n", text=True
    )
    assert out.returncode == 0 and "early_stopping: has no effect with --sampling" in out.stderr


def test_cli_refuses_sampling_with_a_beam(cli, tmp_path):
    out = cli("translate", "-m", DEMO, "--sampling", "--beam-size", "4", stdin="good morning\n", text=True)
    assert out.returncode == 2 and "beam_size: 4 with sampling" in out.stderr
    (tmp_path / "both.yaml").write_text("sampling: true\nbeam_size: 4\n")  # one layer asks for both
    out = cli("translate", "-m", DEMO, "-c", tmp_path / "both.yaml", stdin="good morning\n", text=True)
    assert out.returncode == 2 and "beam_size: 4 with sampling" in out.stderr


def test_the_command_line_chooses_between_the_files_beam_and_sampling(cli, tmp_path, lines_file):
    """A config file's beam (configs/demo.yaml has beam_size: 5) gives way to --sampling on the
    command line, and a file's sampling to --beam-size: the flag wins, as for any one key."""
    src = lines_file(["good morning", "the house is red .", "thank you very much"])

    def translate(*args):
        out = cli("translate", "-m", DEMO, "--src", src, "-q", "--format", "jsonl", *args, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout

    (tmp_path / "beam.yaml").write_text("beam_size: 5\nbeam_groups: 5\ndiversity_penalty: 1.0\n")
    (tmp_path / "sample.yaml").write_text("sampling: true\ntop_k: 5\n")
    sampled = translate("--sampling", "--n-best", "3", "--seed", "4")
    assert translate("-c", tmp_path / "beam.yaml", "--sampling", "--n-best", "3", "--seed", "4") == sampled
    beam = translate("--beam-size", "4")
    assert translate("-c", tmp_path / "sample.yaml", "--beam-size", "4") == beam != sampled


def test_top_p_looks_further_on_flat_rows_as_transformers():
    """On CPU top-p looks at the best 64 tokens first, then more for rows that need it: flat
    rows (many tokens to reach P) beside peaked ones give transformers' sets."""
    g = torch.Generator().manual_seed(4)
    spread = torch.tensor([0.05, 0.3, 1.0, 4.0, 8.0])[:, None].repeat(4, 1)  # flat to peaked
    logprobs = torch.log_softmax(spread * torch.randn(20, 3000, generator=g), dim=-1)
    for p in (0.5, 0.9, 0.999):
        assert_same_filter(Filters(top_p=p)(logprobs), TopPLogitsWarper(p)(None, logprobs.clone()))
        assert_same_filter(
            Filters(top_k=500, top_p=p)(logprobs),
            TopPLogitsWarper(p)(None, TopKLogitsWarper(500)(None, logprobs.clone())),
        )


def test_samples_carry_alignment_and_attention_per_token(setup):
    """Recording the attention changes no sample; each sample's arrays have one entry per token,
    and its alignment is the argmax of its attention rows."""
    model, sources = setup
    plain = BatchDecoder(model, DecodingConfig(sampling=True, n_best=3, max_length=20, seed=2))
    facts = BatchDecoder(
        model, DecodingConfig(sampling=True, n_best=3, max_length=20, seed=2, alignment=True, attention=True)
    )
    with_facts = facts.decode(sources[:10]).nbests
    without = plain.decode(sources[:10]).nbests
    assert [[h.tokens for h in n] for n in with_facts] == [[h.tokens for h in n] for n in without]
    for source, hyps in zip(sources, with_facts):
        for h in hyps:
            assert len(h.alignment) == len(h.attention) == len(h.tokens) == len(h.token_scores)
            assert all(len(row) == len(source) for row in h.attention)
            assert h.alignment == [max(range(len(row)), key=row.__getitem__) for row in h.attention]


def test_hugging_face_do_sample_becomes_the_default_with_transformers_values():
    """A generation_config.json that samples (do_sample, one beam) makes sampling the default, with
    what transformers would use: the file's values, else GenerationConfig's own defaults (the file
    is saved as the difference from them). Beam sampling is not offered: beam search stays."""
    import json

    from transformers import GenerationConfig

    from nmtdecode.models.formats.hf_config import generation_settings

    from tests.helpers import tiny_config

    reference = GenerationConfig._get_default_generation_params()  # what generate() fills in
    saved = json.loads(GenerationConfig(do_sample=True, temperature=0.7).to_json_string())
    defaults, _ = generation_settings(saved, tiny_config())
    assert defaults["sampling"] is True and defaults["temperature"] == 0.7
    assert (defaults["top_k"], defaults["top_p"]) == (reference["top_k"], reference["top_p"])
    saved = json.loads(GenerationConfig(do_sample=True, top_k=0, top_p=0.9).to_json_string())
    defaults, _ = generation_settings(saved, tiny_config())
    assert (defaults["top_k"], defaults["top_p"], defaults["temperature"]) == (0, 0.9, reference["temperature"])
    for beam_sampling in ({"num_beams": 4}, {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 1.0}):
        saved = json.loads(GenerationConfig(do_sample=True, **beam_sampling).to_json_string())
        assert "sampling" not in generation_settings(saved, tiny_config())[0]
    assert "sampling" not in generation_settings({}, tiny_config())[0]


def test_a_sampling_model_samples_unless_a_beam_is_asked_for(model_dir, tmp_path, lines_file, cli):
    """A native model whose defaults sample (as a do_sample generation config makes them) samples:
    the output is that of --sampling given by hand; --beam-size 3 turns it back to beam search."""
    import yaml

    from tests.helpers import build_native_model

    sampling = {"sampling": True, "temperature": 1.5, "top_k": 8, "seed": 3}
    model = build_native_model(tmp_path / "model", decoding=sampling)
    src = lines_file(["the house is red .", "good morning", "a dog and a cat"])
    assert yaml.safe_load((model / "config.yaml").read_text())["decoding"]["sampling"] is True

    def translate(target, *args):
        run = cli("translate", "-m", target, "--src", src, "--quiet", "--max-length", 8, *args, text=True)
        assert run.returncode == 0, run.stderr
        return run.stdout

    plain = model_dir  # the same weights (same seed), no decoding defaults
    assert translate(model) == translate(plain, "--sampling", "--temperature", "1.5", "--top-k", "8", "--seed", "3")
    assert translate(model) != translate(plain)
    assert translate(model, "--beam-size", "3") == translate(plain, "--beam-size", "3")
