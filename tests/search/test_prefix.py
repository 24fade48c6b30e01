"""Prefix decoding: every output starts with its prefix (greedy, beam, sampling; mixed lengths in
one batch), the continuation is the best one after the prefix (brute force on a table), prefix
tokens score 0 as forced tokens do, a prefix past the step limit is cut, and the file is checked."""

import itertools
import json
import math
import random

import pytest

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.search.penalties import LengthPenalty

from tests.helpers import DEMO, EOS, TableModel, random_sources, tiny_transformer

A, B, TAG = 4, 5, 6
STRATEGIES = {
    "greedy": dict(beam_size=1),
    "beam": dict(beam_size=4, n_best=2),
    "sampling": dict(sampling=True, n_best=3, seed=7),
}


@pytest.fixture(scope="module")
def model():
    return tiny_transformer(5, vocab=24, eos_bias=0.5)


def prefixes_for(n, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(4, 24) for _ in range(rng.choice([0, 0, 1, 2, 5]))] for _ in range(n)]


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("forced_tag", [None, 9])
def test_outputs_start_with_their_prefix(model, strategy, forced_tag):
    sources, prefixes = random_sources(12, 24, seed=3), prefixes_for(12)
    assert any(not p for p in prefixes) and len({len(p) for p in prefixes}) > 2  # mixed, some empty
    translator = BatchDecoder(
        model, DecodingConfig(max_length=20, **STRATEGIES[strategy]), ModelRules(forced_bos_id=forced_tag)
    )
    batch = translator.decode(sources, list(range(12)), prefixes).nbests
    head = [] if forced_tag is None else [forced_tag]
    for prefix, hyps in zip(prefixes, batch):
        for h in hyps:
            assert h.tokens[: len(head) + len(prefix)] == head + prefix
            assert h.token_scores[: len(head) + len(prefix)] == [0.0] * (len(head) + len(prefix))
    alone = [translator.decode([s], [i], [p]).nbests[0] for i, (s, p) in enumerate(zip(sources, prefixes))]
    assert [[h.tokens for h in n] for n in batch] == [[h.tokens for h in n] for n in alone]


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_total_is_the_forced_decoding_log_prob_after_the_prefix(strategy):
    """Prefix tokens count 0 (as CTranslate2's target_prefix); the rest are the model's log-probs,
    so `score` of the output = the reported total + the prefix tokens' log-probs."""
    sources, prefixes = random_sources(8, 24, seed=4), prefixes_for(8, seed=1)
    model = tiny_transformer(5, vocab=24, eos_bias=2.5)  # outputs that end
    translator = BatchDecoder(model, DecodingConfig(max_length=40, **STRATEGIES[strategy]))
    checked = 0
    for source, prefix, hyps in zip(sources, prefixes, translator.decode(sources, None, prefixes).nbests):
        for h in hyps[:1]:
            if not h.ended:
                continue
            [(tokens, forced, eos)] = translator.score_tokens([source], [h.tokens])
            assert tokens == h.tokens
            assert h.total == pytest.approx(sum(forced[len(prefix) :]) + eos, abs=1e-4)
            assert translator.score([source], [h.tokens])[0] == pytest.approx(
                h.total + sum(forced[: len(prefix)]), abs=1e-4
            )
            assert h.token_scores[len(prefix) :] == pytest.approx(forced[len(prefix) :], abs=1e-4)
            assert h.eos_score == pytest.approx(eos, abs=1e-4)
            checked += 1
    assert checked >= 4


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_prefix_past_the_step_limit_is_cut_there(model, strategy):
    translator = BatchDecoder(model, DecodingConfig(max_length=3, **STRATEGIES[strategy]))
    [hyps] = translator.decode(random_sources(1, 24, seed=2), None, [[7, 8, 9, 10, 11]]).nbests
    possible = [h for h in hyps if h.score != -math.inf]  # a beam's other slots had no other path
    assert possible and all(h.tokens == [7, 8, 9] and not h.ended and h.total == 0.0 for h in possible)


# --- the continuation is the best one: brute force on a probability table ---------------------


def random_table(seed, depth, head=()):
    """Distributions over {a, b, eos} for every a/b sequence (after `head`) up to `depth` tokens."""
    rng = random.Random(seed)
    table = {}
    for length in range(depth + 1):
        for body in itertools.product((A, B), repeat=length):
            weights = [rng.random() + 0.05 for _ in range(3)]
            table[tuple(head) + body] = dict(zip((A, B, EOS), (w / sum(weights) for w in weights)))
    return table


def best_continuation(table, forced, penalty):
    """Every a/b continuation after the forced tokens, ended by EOS, scored from the table:
    the best by penalty(total of the continuation and EOS, all tokens generated)."""
    best = (None, -math.inf)
    for length in range(8):
        for body in itertools.product((A, B), repeat=length):
            seq, total = tuple(forced), 0.0
            for token in body + (EOS,):
                p = table.get(seq, {EOS: 1.0}).get(token, 0.0)
                total += math.log(p) if p > 0 else -math.inf
                seq += (token,)
            score = penalty(total, len(forced) + length + 1)
            if score > best[1]:
                best = (list(body), score)
    return best


@pytest.mark.parametrize("length_penalty", ["none", "avg"])
@pytest.mark.parametrize("tag", [None, TAG])
@pytest.mark.parametrize("seed", range(4))
def test_continuation_is_the_brute_force_best(length_penalty, tag, seed):
    head = () if tag is None else (TAG,)
    table = random_table(seed, depth=5, head=head)
    prefix = [A, B] if seed % 2 else [B]
    # a beam of 16 keeps every a/b continuation alive (at most 2^4 after the prefix): exact
    cfg = DecodingConfig(beam_size=16, n_best=1, max_length=12, length_penalty=length_penalty, early_stopping="never")
    translator = BatchDecoder(TableModel(7, [table]), cfg, ModelRules(banned_ids=(0, 1, 2), forced_bos_id=tag))
    [[h]] = translator.decode([[0, EOS]], None, [prefix]).nbests
    body, score = best_continuation(table, list(head) + prefix, LengthPenalty(length_penalty, 1.0))
    assert h.tokens == list(head) + prefix + body
    assert h.score == pytest.approx(score)


# --- the command line -------------------------------------------------------------------------


def test_cli_outputs_start_with_the_prefix(cli, lines_file):
    src = lines_file(["good morning", "thank you", "", "the house", "I love you."])
    prefix = lines_file(["Das", "", "Hallo", "Ich", "Ich liebe"], name="prefix.txt")
    for extra in ([], ["--beam-size", "1"], ["--sampling", "--n-best", "2", "--format", "nbest"]):
        out = cli("translate", "-m", DEMO, "--src", src, "--prefix", prefix, "-q", *extra, text=True)
        assert out.returncode == 0, out.stderr
        texts = [line.split(" ||| ")[1] if "|||" in line else line for line in out.stdout.splitlines()]
        per_line = 2 if "--sampling" in extra else 1
        expected = ["Das", "", "Hallo", "Ich", "Ich liebe"]
        assert len(texts) == 5 * per_line
        for i, text in enumerate(texts):
            assert text.startswith(expected[i // per_line]), (text, expected[i // per_line])
    assert texts[4:6] == ["Hallo", "Hallo"]  # an empty source line gives its prefix (as CTranslate2)


def test_cli_jsonl_prefix_scores_zero(cli, lines_file):
    src = lines_file(["good morning"])
    prefix = lines_file(["Das"], name="prefix.txt")
    out = cli(
        "translate",
        "-m",
        DEMO,
        "--src",
        src,
        "--prefix",
        prefix,
        "--format",
        "jsonl",
        "--token-scores",
        "-q",
        text=True,
    )
    [hyp] = json.loads(out.stdout)["hypotheses"]
    scored = cli(
        "score",
        "-m",
        DEMO,
        "--src",
        src,
        "--tgt",
        lines_file([hyp["text"]], name="tgt.txt"),
        "--format",
        "jsonl",
        text=True,
    )
    forced = json.loads(scored.stdout)
    assert forced["tokens"] == hyp["tokens"]
    n = next(i for i, s in enumerate(hyp["token_scores"]) if s != 0.0)  # the prefix's tokens
    assert n >= 1 and hyp["log_prob"] == pytest.approx(sum(forced["token_scores"][n:]) + forced["eos_score"], abs=1e-4)


def test_cli_refuses_a_prefix_file_of_another_length(cli, lines_file):
    src = lines_file(["good morning", "thank you"])
    prefix = lines_file(["Das"], name="prefix.txt")
    out = cli("translate", "-m", "no-such-model", "--src", src, "--prefix", prefix, text=True)
    assert out.returncode == 2  # before the model loads
    assert "prefix.txt has 1 lines but" in out.stderr and "has 2" in out.stderr


def test_cli_reads_prefixes_from_a_fifo_once_and_refuses_to_resume_with_one(cli, lines_file, tmp_path):
    """A FIFO (or pipe) of prefixes is read as the job goes, once: not consumed by the resume
    signature first (which left the job "0 lines" of prefixes); --resume cannot check it, and
    refuses it before the model loads."""
    import os
    import threading

    src = lines_file(["good morning", "thank you", "the house"])
    regular = lines_file(["Das", "", "Ich"], name="prefix.txt")
    expected = cli("translate", "-m", DEMO, "--src", src, "--prefix", regular, "-q", text=True)
    fifo = tmp_path / "prefix.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(regular.read_bytes()), daemon=True)
    writer.start()
    out = cli(
        "translate", "-m", DEMO, "--src", src, "--prefix", fifo, "-q", "--output", tmp_path / "out.txt", text=True
    )
    writer.join(timeout=30)
    assert out.returncode == 0 and (tmp_path / "out.txt").read_text() == expected.stdout, out.stderr
    out = cli(
        "translate",
        "-m",
        "no-such-model",
        "--src",
        src,
        "--prefix",
        fifo,
        "--output",
        tmp_path / "out.txt",
        "--resume",
        text=True,
    )
    assert out.returncode == 2 and f"the prefixes come from {fifo}, a pipe or device" in out.stderr


def test_cli_prefix_shorter_than_stdin_fails_naming_the_line(cli, lines_file):
    prefix = lines_file(["Das"], name="prefix.txt")
    out = cli("translate", "-m", DEMO, "--prefix", prefix, "-q", stdin="good morning\nthank you\n", text=True)
    assert out.returncode == 1 and "fewer than the source (line 2)" in out.stderr
    out = cli("translate", "-m", DEMO, "--prefix", prefix, "-q", stdin="", text=True)
    assert out.returncode == 1 and "more lines than the source" in out.stderr


def test_cli_prefix_goes_with_one_input(cli, lines_file, tmp_path):
    a, b = lines_file(["good morning"], name="a.en"), lines_file(["thank you"], name="b.en")
    pa, _ = lines_file(["Das"], name="a.prefix"), lines_file(["Ich"], name="b.prefix")  # b.prefix: for jobs.yaml
    out = cli(
        "translate", "-m", DEMO, "--src", a, b, "--output-dir", tmp_path, "--suffix", ".de", "--prefix", pa, text=True
    )
    assert out.returncode == 2 and "prefix: a prefix file goes with one input" in out.stderr
    config = tmp_path / "jobs.yaml"
    config.write_text(
        f"model: {DEMO}\nquiet: true\njobs:\n  - {{src: a.en, output: a.de, prefix: a.prefix}}\n"
        f"  - {{src: b.en, output: b.de, prefix: b.prefix}}\n"
    )
    out = cli("translate", "-c", config, text=True)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "a.de").read_text().startswith("Das") and (tmp_path / "b.de").read_text().startswith("Ich")


def test_api_takes_prefixes():
    import nmtdecode

    translator = nmtdecode.Translator.load(DEMO, beam_size=2)
    out = translator.translate(["good morning", "", "thank you"], prefixes=["Das", "Hallo", ""])
    assert out[0].startswith("Das") and out[1] == "Hallo" and out[2] == translator.translate(["thank you"])[0]
    with pytest.raises(ValueError, match="2 sources but 1 prefixes"):
        translator.translate(["a", "b"], prefixes=["x"])
    with pytest.raises(ValueError, match="prefixes="):
        translator.translate(["a"], prefix="file.txt")


def test_api_translate_file_takes_a_prefix_file(lines_file, tmp_path):
    import nmtdecode

    src, prefix = lines_file(["good morning", "thank you"]), lines_file(["Das", "Ich"], name="prefix.txt")
    nmtdecode.Translator.load(DEMO).translate_file(str(src), str(tmp_path / "out.txt"), prefix=str(prefix))
    assert [line.split()[0] for line in (tmp_path / "out.txt").read_text().splitlines()] == ["Das", "Ich"]


def test_the_prefix_file_content_is_part_of_the_resume_signature(lines_file):
    from nmtdecode.options.config import Config
    from nmtdecode.jobs.signature import job_signature

    src, prefix = lines_file(["good morning"]), lines_file(["Das"], name="prefix.txt")
    config = Config.from_values({"model": DEMO, "src": str(src), "output": "out.txt", "prefix": str(prefix)})
    before = job_signature(config)
    prefix.write_text("Ich\n", encoding="utf-8")
    assert job_signature(config) != before
    assert job_signature(Config.from_values({"model": DEMO, "src": str(src), "output": "out.txt"})) != before


def test_cli_empty_line_with_a_prefix_has_one_entry_per_token(cli, lines_file):
    src, prefix = lines_file(["", "good morning"]), lines_file(["Hallo Welt", "Das"], name="prefix.txt")
    out = cli(
        "translate",
        "-m",
        DEMO,
        "--src",
        src,
        "--prefix",
        prefix,
        "--format",
        "jsonl",
        "--token-scores",
        "--alignment",
        "--attention",
        "-q",
        text=True,
    )
    assert out.returncode == 0, out.stderr
    for line in out.stdout.splitlines():
        [hyp] = json.loads(line)["hypotheses"]
        assert len(hyp["tokens"]) == len(hyp["token_scores"]) == len(hyp["alignment"]) == len(hyp["attention"]) > 0
    first = json.loads(out.stdout.splitlines()[0])["hypotheses"][0]
    assert first["text"] == "Hallo Welt" and set(first["token_scores"]) == {0.0}
