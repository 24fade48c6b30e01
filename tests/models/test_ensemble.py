"""Ensembles (models/ensemble.py): each rule's combination checked by hand on probability tables,
an ensemble of one model against the model, the mean attention, forced scores, the checks that
refuse models which cannot decode as one, and the options that name an ensemble."""

import math

import pytest
import torch

from nmtdecode.options.config import Config, ConfigError, DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelError, ModelRules
from nmtdecode.models.ensemble import Ensemble, default_rule
from nmtdecode.models.loading import load_model
from nmtdecode.jobs.signature import job_signature

from tests.helpers import DEMO, EOS, TableModel, build_native_model, random_sources, tiny_transformer

A, B, C = 4, 5, 6
BAN_SPECIALS = ModelRules(banned_ids=(0, 1, 2))
# One sentence; after the first token both models end (EOS certain).
TABLE_A = {(): {A: 0.7, B: 0.3}}
TABLE_B = {(): {A: 0.05, B: 0.35, C: 0.6}}


def greedy(model, sources=([0, EOS],), **options):
    cfg = DecodingConfig(beam_size=1, max_length=4, **options)
    return [hyps[0] for hyps in BatchDecoder(model, cfg, BAN_SPECIALS).decode([list(s) for s in sources]).nbests]


def tables(rule, weights=None):
    return Ensemble([TableModel(7, [TABLE_A]), TableModel(7, [TABLE_B])], rule, weights)


def test_prob_rule_takes_the_mean_of_the_probabilities():
    """fairseq's rule: a .7/2 + .05/2 = .375, b .325, c .3: `a`, log-prob ln .375 (then EOS, 0)."""
    [hyp] = greedy(tables("prob"))
    assert hyp.tokens == [A]
    assert hyp.total == pytest.approx(math.log(0.375))
    assert hyp.eos_score == pytest.approx(0.0, abs=1e-6)


def test_logprob_rule_sums_the_log_probabilities_unnormalised():
    """Marian's rule, weights 1: a ln .7 + ln .05 = ln .035, b ln .105, c -inf (A never writes c):
    `b`, scored ln .105 as it is, not renormalised over the vocabulary."""
    [hyp] = greedy(tables("logprob"))
    assert hyp.tokens == [B]
    assert hyp.total == pytest.approx(math.log(0.3) + math.log(0.35))


def test_opennmt_rule_log_softmaxes_the_mean_of_the_logits():
    """OpenNMT-py's rule on models whose logits are log-probs: the normalised geometric mean,
    b: sqrt(.105) / (sqrt(.035) + sqrt(.105))."""
    [hyp] = greedy(tables("opennmt"))
    assert hyp.tokens == [B]
    assert hyp.total == pytest.approx(math.log(math.sqrt(0.105) / (math.sqrt(0.035) + math.sqrt(0.105))))


def test_weights_are_normalised_for_a_mixture_and_taken_as_given_by_logprob():
    """prob with weights 1 and 3 (.25, .75): a .2125, b .3375, c .45, so `c`; logprob with weights
    .5 and 2: a .5 ln .7 + 2 ln .05 = -6.17, b .5 ln .3 + 2 ln .35 = -2.70, so `b` at exactly that."""
    [mixed] = greedy(tables("prob", [1.0, 3.0]))
    assert mixed.tokens == [C] and mixed.total == pytest.approx(math.log(0.45))
    [linear] = greedy(tables("logprob", [0.5, 2.0]))
    assert linear.tokens == [B] and linear.total == pytest.approx(0.5 * math.log(0.3) + 2 * math.log(0.35))


def test_alignment_and_attention_are_the_models_mean():
    """A attends .6/.4 over the two source positions, B 0/1: the mean .3/.7 aligns `a`'s step to
    position 1, where A alone would say 0 (OpenNMT-py's combine_attns takes the mean)."""
    first = TableModel(7, [TABLE_A], attention=[{(): [0.6, 0.4]}])
    second = TableModel(7, [{(): {A: 1.0}}], attention=[{(): [0.0, 1.0]}])
    [hyp] = greedy(Ensemble([first, second], "prob", None), alignment=True, attention=True)
    assert hyp.tokens == [A]
    assert hyp.alignment[0] == 1
    assert hyp.attention[0] == pytest.approx([0.3, 0.7])
    [alone] = greedy(first, alignment=True)
    assert alone.alignment[0] == 0


@pytest.mark.parametrize("rule", ["prob", "logprob", "opennmt"])
def test_an_ensemble_of_one_model_is_the_model(rule):
    model = tiny_transformer(3, vocab=12, eos_bias=1.5)
    sources = random_sources(5, 12, seed=2)
    cfg = Config.from_values({"beam_size": 4, "n_best": 4, "max_length": 12}).decoding
    ours = BatchDecoder(Ensemble([model], rule, None), cfg, BAN_SPECIALS).decode(sources).nbests
    plain = BatchDecoder(model, cfg, BAN_SPECIALS).decode(sources).nbests
    assert [[h.tokens for h in n] for n in ours] == [[h.tokens for h in n] for n in plain]
    assert [h.score for n in ours for h in n] == pytest.approx([h.score for n in plain for h in n], abs=1e-5)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"coverage_penalty": "wu", "beta": 0.3, "alignment": True},
        {"beam_groups": 3, "diversity_penalty": 0.5},
        {"block_ngram_repeat": 2},
    ],
)
def test_two_copies_of_a_model_decode_as_the_model(options):
    """A mixture (or mean of logits) of two equal distributions is that distribution, and the
    mean of two equal attentions that attention (coverage penalty, alignment)."""
    model = tiny_transformer(4, vocab=12, eos_bias=1.5)
    sources = random_sources(4, 12, seed=3)
    cfg = Config.from_values({"beam_size": 3, "n_best": 2, "max_length": 10, **options}).decoding
    plain = BatchDecoder(model, cfg, BAN_SPECIALS).decode(sources).nbests
    for rule in ("prob", "opennmt"):
        ours = BatchDecoder(Ensemble([model, model], rule, None), cfg, BAN_SPECIALS).decode(sources).nbests
        assert [[(h.tokens, h.alignment) for h in n] for n in ours] == [
            [(h.tokens, h.alignment) for h in n] for n in plain
        ]
        assert [h.score for n in ours for h in n] == pytest.approx([h.score for n in plain for h in n], abs=1e-5)


def test_forced_score_is_the_log_of_the_mean_probability_of_each_token():
    """score under prob: per target token, ln((p_A + p_B) / 2), each model's p by its own
    teacher-forced pass."""
    first, second = tiny_transformer(5, vocab=12), tiny_transformer(6, vocab=12)
    source, target = [4, 7, 9, EOS], [5, 8, 6]
    cfg = DecodingConfig(beam_size=1)
    [total] = BatchDecoder(Ensemble([first, second], "prob", None), cfg).score([source], [target])

    def token_logprobs(model):
        src, tgt_in = torch.tensor([source]), torch.tensor([[model.cfg.decoder_start_id, *target]])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(src, torch.ones_like(src, dtype=torch.bool), tgt_in), -1)[0]
        return [logprobs[t, token].item() for t, token in enumerate([*target, EOS])]

    expected = sum(
        math.log((math.exp(a) + math.exp(b)) / 2) for a, b in zip(token_logprobs(first), token_logprobs(second))
    )
    assert total == pytest.approx(expected, abs=1e-5)


def test_the_default_rule_is_opennmt_for_opennmt_checkpoints_only():
    assert default_rule(["opennmt-py", "eole"]) == "opennmt"
    assert default_rule(["opennmt-py", "huggingface/marian"]) == "prob"
    assert default_rule(["native", "native"]) == "prob"


@pytest.fixture(scope="module")
def native_models(tmp_path_factory):
    """Two tiny native models sharing one SentencePiece vocabulary (seeds 0 and 1), and one with
    another vocabulary."""
    root = tmp_path_factory.mktemp("ensemble")
    return (
        build_native_model(root / "a", seed=0),
        build_native_model(root / "b", seed=1),
        build_native_model(root / "other", vocab_size=40, seed=0),
    )


def test_models_with_another_target_vocabulary_are_refused_before_decoding(native_models):
    first, _, other = native_models
    with pytest.raises(ModelError, match=r"different target vocabularies \(id \d+ is '.+' in one and '.+' in the"):
        load_model([str(first), str(other)])


def test_a_loaded_ensemble_decodes_with_every_model(native_models, cli):
    """Through the command line: `-m A -m B`, `--model A B` and `model: [A, B]` are one ensemble, whose
    output differs from each model's alone."""
    first, second, _ = native_models
    lines = "the house is red\na dog and a cat\nwhere is the station ?\n"
    args = ("translate", "--max-length", "12", "-q", "--format", "jsonl")
    outputs = {
        name: cli(*args, *models, stdin=lines, text=True)
        for name, models in {
            "repeated": ("-m", first, "-m", second),
            "spread": ("--model", first, second),
            "first": ("-m", first),
            "second": ("-m", second),
        }.items()
    }
    assert all(out.returncode == 0 for out in outputs.values()), [out.stderr for out in outputs.values()]
    assert outputs["repeated"].stdout == outputs["spread"].stdout
    assert outputs["repeated"].stdout not in (outputs["first"].stdout, outputs["second"].stdout)


def test_an_ensemble_in_yaml_and_in_the_api(native_models, tmp_path, cli):
    from nmtdecode.api import Translator

    first, second, _ = native_models
    config = tmp_path / "ensemble.yaml"
    config.write_text(
        f"model: [{first}, {second}]\nensemble_rule: logprob\nensemble_weights: [0.3, 0.7]\n"
        "max_length: 12\nquiet: true\n"
    )
    by_file = cli("translate", "-c", config, stdin="the house is red\n", text=True)
    translator = Translator.load(
        [str(first), str(second)], ensemble_rule="logprob", ensemble_weights=[0.3, 0.7], max_length=12
    )
    assert by_file.returncode == 0, by_file.stderr
    assert by_file.stdout.splitlines() == translator.translate(["the house is red"])


@pytest.mark.parametrize(
    "args, message",
    [
        (("--ensemble-weights", "0.5"), "ensemble_weights: weights are for an ensemble"),
        (("--ensemble-rule", "prob"), "ensemble_rule: a rule is for an ensemble"),
    ],
)
def test_ensemble_options_without_an_ensemble_are_refused(cli, args, message):
    out = cli("translate", "-m", DEMO, *args, stdin="hello\n", text=True)
    assert out.returncode == 2 and message in out.stderr


def test_weights_must_match_the_models(cli):
    out = cli("translate", "-m", DEMO, DEMO, "--ensemble-weights", "1", "2", "3", stdin="hello\n", text=True)
    assert out.returncode == 2 and "3 weights for 2 models" in out.stderr
    out = cli("translate", "-m", DEMO, DEMO, "--ensemble-rule", "max", stdin="hello\n", text=True)
    assert out.returncode == 2 and "max" in out.stderr


def test_the_resume_signature_covers_every_model_the_rule_and_the_weights(native_models):
    first, second, _ = native_models

    def signature(**values):
        return job_signature(Config.from_values({"output": "out.txt", **values}))

    pair = signature(model=[str(first), str(second)])
    assert pair != signature(model=str(first))
    assert pair != signature(model=[str(second), str(first)])
    assert pair != signature(model=[str(first), str(second)], ensemble_rule="logprob")
    assert signature(model=[str(first), str(second)], ensemble_weights=[1, 2]) != signature(
        model=[str(first), str(second)], ensemble_weights=[2, 1]
    )


def test_ensemble_options_are_checked_when_loaded():
    with pytest.raises(ConfigError, match="each must be > 0"):
        Config.from_values({"model": ["a", "b"], "ensemble_weights": [1, -1]})


def assert_score_is_the_mixture(cli, tmp_path, first, second):
    """`score -m A -m B` under prob: per target token (EOS included), ln((p_A + p_B) / 2), with
    each model's p from its own `score --format jsonl`."""
    import json

    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("the house is red\nwhere is the station ?\n")
    tgt.write_text("a dog\nthe garden\n")

    def scores(*models):
        run = cli("score", *models, "--src", src, "--tgt", tgt, "-q", "--format", "jsonl", text=True)
        assert run.returncode == 0, run.stderr
        return [json.loads(line) for line in run.stdout.splitlines()]

    both, alone_a, alone_b = scores("-m", first, "-m", second), scores("-m", first), scores("-m", second)
    for pair, a, b in zip(both, alone_a, alone_b, strict=True):
        per_token = zip([*a["token_scores"], a["eos_score"]], [*b["token_scores"], b["eos_score"]])
        expected = sum(math.log((math.exp(x) + math.exp(y)) / 2) for x, y in per_token)
        assert pair["log_prob"] == pytest.approx(expected, abs=1e-5)


def test_score_gives_the_ensembles_log_probability(native_models, tmp_path, cli):
    assert_score_is_the_mixture(cli, tmp_path, *native_models[:2])


def test_sentencepiece_models_trained_apart_split_alike(native_models):
    """The source check compares what splits text (pieces, normaliser), not the trainer's record of
    where each copy was trained: the two copies agree, the model of another vocabulary does not."""
    first, second, other = (load_model(str(path)).tokenizer.source_identity() for path in native_models)
    assert first == second
    assert first != other


def test_inspect_and_dump_config_take_an_ensemble(native_models, cli):
    first, second, _ = native_models
    shown = cli("inspect", first, second, text=True)
    assert shown.returncode == 0 and shown.stdout.count("format:        native") == 2
    assert f"path:          {first}" in shown.stdout and f"path:          {second}" in shown.stdout
    dumped = cli("translate", "-m", first, second, "--ensemble-rule", "logprob", "--dump-config", text=True)
    assert dumped.returncode == 0, dumped.stderr
    import yaml

    values = yaml.safe_load(dumped.stdout)
    assert values["model"] == [str(first), str(second)] and values["ensemble_rule"] == "logprob"


def test_an_int8_ensemble_of_two_copies_decodes_as_the_int8_model():
    """--quantize int8 quantizes every model of the ensemble: two copies of the demo model, each
    quantized, give the quantized demo model's translations."""
    from nmtdecode.api import Translator

    lines = ["good morning", "the house is big", "thank you very much", "where is the station?"]

    def best(translator):
        return [(n[0].text, n[0].score) for n in translator.translate_batch(lines)]

    alone = best(Translator.load(DEMO, quantize="int8", max_length=16))
    both = best(Translator.load([DEMO, DEMO], quantize="int8", max_length=16))
    assert [text for text, _ in both] == [text for text, _ in alone]
    assert [score for _, score in both] == pytest.approx([score for _, score in alone], abs=1e-5)
    in_float32 = best(Translator.load(DEMO, max_length=16))
    assert [score for _, score in in_float32] != pytest.approx([score for _, score in alone], abs=1e-5)


@pytest.fixture(scope="module")
def split_models(tmp_path_factory):
    """Two native models that share a target SentencePiece model (48 pieces) but each split the
    source with its own (40 and 44 pieces): an ensemble whose models encode each line their own way."""
    import shutil

    from nmtdecode.models.formats import native
    from tests.helpers import BOS, PAD, train_sentencepiece

    root = tmp_path_factory.mktemp("split")
    target = train_sentencepiece(root, 48)
    paths = []
    for name, source_pieces, seed in (("a", 40, 5), ("b", 44, 6)):
        directory = root / name
        directory.mkdir()
        shutil.copy(train_sentencepiece(directory, source_pieces), directory / "src.model")
        shutil.copy(target, directory / "tgt.model")
        model = tiny_transformer(seed, vocab=48, src_vocab_size=source_pieces, eos_bias=1.0, max_positions=128)
        native.save(
            str(directory),
            model,
            {"source": "src.model", "target": "tgt.model"},
            banned_ids=[PAD, BOS],
            dtype=torch.float32,
        )
        paths.append(str(directory))
    return paths


def reference_greedy(paths: list[str], text: str, steps: int) -> tuple[list[int], float]:
    """fairseq's mixture by hand: each model encodes `text` with its own tokenizer and scores every
    prefix by a full teacher-forced pass; the mixture's best token (pad and BOS banned) is taken."""
    from tests.helpers import BOS, PAD

    loaded = [load_model(path) for path in paths]
    tokens, total = [], 0.0
    for _ in range(steps):
        mixed = 0.0
        for model in loaded:
            src = torch.tensor([model.tokenizer.encode(text)])
            tgt_in = torch.tensor([[model.model.cfg.decoder_start_id, *tokens]])
            with torch.no_grad():
                logits = model.model(src, torch.ones_like(src, dtype=torch.bool), tgt_in)[0, -1]
            mixed = mixed + torch.softmax(logits.double(), -1) / len(loaded)
        logprobs = mixed.log()
        logprobs[[PAD, BOS]] = -math.inf
        token = int(logprobs.argmax())
        total += float(logprobs[token])
        if token == EOS:
            break
        tokens.append(token)
    return tokens, total


def test_models_that_split_the_source_differently_each_encode_their_own_ids(split_models):
    from nmtdecode.api import Translator

    first, second = (load_model(path).tokenizer for path in split_models)
    lines = ["the house is red", "a dog and a cat sleep in the garden", "good morning , thank you"]
    assert any(first.encode(line) != second.encode(line) for line in lines)  # the test could fail
    translator = Translator.load(split_models, beam_size=1, max_length=12)
    for line, [best] in zip(lines, translator.translate_batch(lines)):
        tokens, total = reference_greedy(split_models, line, 12)
        assert best.tokens == tokens
        assert best.log_prob == pytest.approx(total, abs=1e-4)


def test_models_that_split_the_source_differently_score_and_refuse_attention(split_models, tmp_path, cli):
    """score: the mixture of each model's own forced pass; options that need the models' attention
    at common source positions are refused by name."""
    assert_score_is_the_mixture(cli, tmp_path, *split_models)
    for option in ("--alignment", "--replace-unk", "--report-align"):
        run = cli("translate", "-m", *split_models, option, stdin="the house is red\n", text=True)
        assert run.returncode == 2 and "split the source differently" in run.stderr
