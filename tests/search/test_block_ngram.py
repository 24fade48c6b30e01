"""--block-ngram-repeat / --ignore-when-blocking (OpenNMT-py's semantics) and --banned-tokens.

The scenarios follow OpenNMT-py's onmt/tests/test_beam_search.py
(`test_advance_with_all_repeats_gets_blocked`, `..._some_repeats_gets_blocked`,
`test_repeating_excluded_index_does_not_die`), on probability tables.
"""

import json
import math
import random

import pytest
import torch
from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

from nmtdecode.options.config import ConfigError, DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.engine.resolve import piece_ids
from nmtdecode.search.processors import BlockNgramRepeat, RowHistory

from tests.helpers import DEMO, EOS, TableModel

BLOCKED = BlockNgramRepeat.BLOCKED
A, B, C = 4, 5, 6
PIECES = {"a": A, "b": B, "c": C}


def definition(history: list[int], n: int, excluded: set) -> set:
    """OpenNMT-py's bookkeeping, one row: every n-gram of the history without an excluded token
    is recorded as prefix -> next tokens; the tokens recorded after the last n-1 are blocked."""
    recorded = {}
    for i in range(len(history) - n + 1):
        gram = tuple(history[i : i + n])
        if not set(gram) & excluded:
            recorded.setdefault(gram[:-1], set()).add(gram[-1])
    return recorded.get(tuple(history[len(history) - n + 1 :]), set())


def rows_of(history: torch.Tensor) -> RowHistory:
    rows = RowHistory(history[:, 0], torch.full((history.size(0),), 99), keep_history=True)
    rows.history = history
    return rows


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", range(6))
def test_matches_the_definition_on_random_histories(n, seed):
    rng = random.Random(seed)
    vocab, rows = 7, 64
    history = torch.tensor([[rng.randrange(3) for _ in range(14)] for _ in range(rows)])  # 3 tokens: repeats
    excluded = set(rng.sample(range(3), rng.randint(0, 1)))
    logprobs = torch.log_softmax(torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)), -1)
    logprobs[0, 6] = -math.inf  # a banned token stays banned, blocked or not
    got = BlockNgramRepeat(n, excluded)(logprobs.clone(), step=9, rows=rows_of(history))
    expected = logprobs.clone()
    for r in range(rows):
        for token in definition(history[r].tolist(), n, excluded):
            expected[r, token] = min(expected[r, token].item(), BLOCKED)
    assert torch.equal(got, expected)
    assert (got == BLOCKED).any()  # the case blocks something: the test can fail


@pytest.mark.parametrize("n", [2, 3])
def test_without_exclusions_blocks_what_no_repeat_ngram_bans(n):
    """Same tokens as transformers' NoRepeatNGramLogitsProcessor, at BLOCKED instead of -inf."""
    g = torch.Generator().manual_seed(n)
    history = torch.randint(0, 4, (6, 12), generator=g)
    logprobs = torch.log_softmax(torch.randn(6, 8, generator=g), dim=-1)
    banned = torch.isinf(NoRepeatNGramLogitsProcessor(n)(history, logprobs.clone()))
    got = BlockNgramRepeat(n)(logprobs.clone(), step=11, rows=rows_of(history))
    assert torch.equal(got == BLOCKED, banned)


def decode(table, beam, **options):
    cfg = DecodingConfig(beam_size=beam, n_best=1, max_length=10, length_penalty="none", **options)
    translator = BatchDecoder(
        TableModel(8, [table]),
        cfg,
        ModelRules(banned_ids=(0, 1, 2)),
        banned_ids=piece_ids("banned_tokens", cfg.banned_tokens, PIECES.get),
        excluded_ids=piece_ids("ignore_when_blocking", cfg.ignore_when_blocking, PIECES.get),
    )
    [[hyp]] = translator.decode([[0, EOS]]).nbests
    return hyp


# Every step has one possible token: a b a b, then EOS. The fourth token repeats the bigram (a b).
ONLY_REPEATS = {(): {A: 1.0}, (A,): {B: 1.0}, (A, B): {A: 1.0}, (A, B, A): {B: 1.0}}


@pytest.mark.parametrize("beam", [1, 4])
def test_all_repeats_blocked_the_search_still_returns(beam):
    hyp = decode(ONLY_REPEATS, beam, block_ngram_repeat=2)
    assert hyp.tokens == [A, B, A, B] and hyp.ended
    # the blocked step's score (in float32); every other token scored 0
    assert hyp.token_scores + [hyp.eos_score] == pytest.approx([0.0, 0.0, 0.0, BLOCKED, 0.0], rel=1e-6)


@pytest.mark.parametrize("beam", [1, 4])
def test_no_repeat_ngram_size_bans_instead(beam):
    """The difference on one case: transformers' ban (-inf) leaves no possible hypothesis."""
    hyp = decode(ONLY_REPEATS, beam, no_repeat_ngram_size=2)
    assert hyp.total == -math.inf
    assert decode(ONLY_REPEATS, beam).tokens == [A, B, A, B]  # unblocked, it repeats


# The best path a b a b repeats (a b); stopping early or b alone do not.
#   ()      -> a .7, b .3
#   (a)     -> b .9, eos .1      (a b)   -> a .9, eos .1
#   (a b a) -> b .9, eos .1      (b)     -> eos 1
SOME_REPEAT = {
    (): {A: 0.7, B: 0.3},
    (A,): {B: 0.9, EOS: 0.1},
    (A, B): {A: 0.9, EOS: 0.1},
    (A, B, A): {B: 0.9, EOS: 0.1},
    (B,): {EOS: 1.0},
}


@pytest.mark.parametrize("beam, tokens, probability", [(1, [A, B, A], 0.7 * 0.9 * 0.9 * 0.1), (4, [B], 0.3)])
def test_some_repeats_blocked(beam, tokens, probability):
    assert decode(SOME_REPEAT, beam).tokens == [A, B, A, B]
    hyp = decode(SOME_REPEAT, beam, block_ngram_repeat=2)
    # greedy follows a b a and ends there; the beam finds b (.3) above a b a (.057)
    assert hyp.tokens == tokens
    assert hyp.total == pytest.approx(math.log(probability))


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("excluded, tokens", [(["b"], [A, B, A, B]), (["a"], [A, B, A, B]), (["c"], None)])
def test_repeating_excluded_token_does_not_die(beam, excluded, tokens):
    """An n-gram holding an excluded piece may repeat; excluding an unrelated one changes nothing."""
    hyp = decode(SOME_REPEAT, beam, block_ngram_repeat=2, ignore_when_blocking=excluded)
    assert hyp.tokens == (tokens or decode(SOME_REPEAT, beam, block_ngram_repeat=2).tokens)
    assert hyp.total > -1e20


def test_unknown_pieces_are_refused_by_name():
    with pytest.raises(ConfigError, match="ignore_when_blocking: 'zz' is not a piece"):
        decode(SOME_REPEAT, 1, block_ngram_repeat=2, ignore_when_blocking=["zz"])
    with pytest.raises(ConfigError, match="banned_tokens: 'b2' is not a piece"):
        decode(SOME_REPEAT, 1, banned_tokens=["b2"])


@pytest.mark.parametrize("beam", [1, 4])
def test_banned_piece_is_never_generated(beam):
    assert decode(SOME_REPEAT, beam).tokens == [A, B, A, B]
    hyp = decode(SOME_REPEAT, beam, banned_tokens=["b"])
    assert hyp.tokens == [A] and hyp.total == pytest.approx(math.log(0.7 * 0.1))


@pytest.mark.parametrize("value, pieces", [("\u2581Haus ,", ["\u2581Haus", ","]), (["a", "b"], ["a", "b"])])
def test_piece_lists_from_yaml_or_one_string(value, pieces):
    from nmtdecode.options.config import Config

    assert Config.from_values({"banned_tokens": value}).decoding.banned_tokens == pieces


def test_piece_list_refuses_other_values():
    from nmtdecode.options.config import Config

    with pytest.raises(ConfigError, match="banned_tokens: expected target pieces"):
        Config.from_values({"banned_tokens": [1, 2]})


def test_banned_piece_leaves_the_demo_output(cli, lines_file, tmp_path):
    """Through the command line on the demo model: the banned piece of its output is gone."""
    import sentencepiece as spm

    src = lines_file(["the house is red", "good morning"])
    pieces = spm.SentencePieceProcessor(model_file=f"{DEMO}/spm.model")

    def outputs(*options):
        run = cli(
            "translate", "-m", DEMO, "--src", src, "--format", "jsonl", "--token-scores", "-q", *options, text=True
        )
        assert run.returncode == 0, run.stderr
        return [json.loads(line)["hypotheses"][0] for line in run.stdout.splitlines()]

    plain = outputs()
    assert "\u2581Haus" in [pieces.id_to_piece(t) for t in plain[0]["tokens"]]
    assert "\u2581Gut" in [pieces.id_to_piece(t) for t in plain[1]["tokens"]]
    banned = outputs("--banned-tokens", "\u2581Haus \u2581Gut")
    for hyp in banned:
        assert not {"\u2581Haus", "\u2581Gut"} & {pieces.id_to_piece(t) for t in hyp["tokens"]}
    assert [h["text"] for h in banned] != [h["text"] for h in plain]
    config = tmp_path / "ban.yaml"
    config.write_text("banned_tokens: [\u2581Haus, \u2581Gut]\n", encoding="utf-8")
    assert outputs("-c", config) == banned  # the YAML list is the same option


def test_unknown_banned_piece_exits_2_naming_it(cli, lines_file):
    run = cli(
        "translate", "-m", DEMO, "--src", lines_file(["good morning"]), "--banned-tokens", "\u2581Hauss", text=True
    )
    assert run.returncode == 2
    assert "banned_tokens: '\u2581Hauss' is not a piece of the target vocabulary" in run.stderr
