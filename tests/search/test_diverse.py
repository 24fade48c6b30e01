"""Diverse beam search against a plain, unbatched reading of Hugging Face's definition.

`reference` below follows transformers' group beam search (v4.55 `_group_beam_search`,
`BeamSearchScorer` with num_beam_groups, `HammingDiversityLogitsProcessor`) one sentence and
one candidate at a time, with Python lists and dicts; the stop rules and the length of a
hypothesis are the project's (search/beam.py), spelt out again here.
"""

import math
import random
from collections import Counter

import pytest
import torch

from nmtdecode.options.config import Config, ConfigError, DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.search.diverse import DiverseBeamSearch
from nmtdecode.search.penalties import LengthPenalty

from tests.helpers import EOS, TableModel, random_sources, tiny_transformer

BANNED = (0, 1, 2)
CONTENT = (4, 5, 6, 7)
VOCAB = 8


def random_table(seed: int, depth: int = 4) -> dict:
    """Every prefix over CONTENT up to `depth` tokens gets a random distribution over CONTENT + EOS."""
    rng = random.Random(seed)
    table, frontier = {}, [()]
    for _ in range(depth):
        grown = []
        for prefix in frontier:
            weights = [rng.random() ** 2 + 0.01 for _ in range(len(CONTENT) + 1)]
            total = sum(weights)
            table[prefix] = {t: w / total for t, w in zip((*CONTENT, EOS), weights)}
            grown += [prefix + (t,) for t in CONTENT]
        frontier = grown
    return table


def reference(table, k, groups, diversity, max_steps, penalty, early_stopping, n_best):
    """One sentence, by the definition: [(tokens, score, total)] best first."""
    size = k // groups
    alive = [[((), 0.0, 0.0)] for _ in range(groups)]  # per group: (tokens, penalised total, log-prob total)
    pools = [[] for _ in range(groups)]  # per group: (score, tokens, total), best `size` kept
    done, top_ended = [False] * groups, [False] * groups
    for step in range(max_steps):
        chosen = Counter()  # tokens the earlier groups keep alive at this step
        for g in range(groups):
            if done[g]:
                continue
            candidates = []
            for tokens, ranked, total in alive[g]:
                for token, p in table.get(tokens, {EOS: 1.0}).items():
                    if p > 0:
                        lp = math.log(p)
                        candidates.append((ranked + lp - diversity * chosen[token], tokens + (token,), total + lp))
            candidates.sort(key=lambda c: -c[0])
            candidates = candidates[: 2 * size]
            last = step + 1 == max_steps
            alive[g] = []
            for rank, (ranked, tokens, total) in enumerate(candidates):
                if tokens[-1] == EOS or last:
                    if rank < size:
                        pools[g].append((penalty(ranked, step + 1), tokens, total))
                elif len(alive[g]) < size:
                    alive[g].append((tokens, ranked, total))
            pools[g] = sorted(pools[g], key=lambda f: -f[0])[:size]
            chosen.update(tokens[-1] for tokens, _, _ in alive[g])
            top_ended[g] = top_ended[g] or last or candidates[0][1][-1] == EOS
            done[g] = last or stops(
                pools[g],
                size,
                candidates[0][0],
                step,
                penalty,
                early_stopping,
                max_steps,
                top_ended[g],
                min(n_best, size),
            )
        if all(done):
            break
    merged = sorted((f for pool in pools for f in pool), key=lambda f: -f[0])[:n_best]
    return [([t for t in tokens if t != EOS], score, total) for score, tokens, total in merged]


def stops(pool, size, best, step, penalty, mode, max_steps, top_ended, n_best):
    if mode == "top":
        return top_ended and len(pool) >= n_best
    if len(pool) < size:
        return False
    if mode == "true":
        return True
    if mode == "false":
        return penalty(best, step + 1) <= pool[-1][0]
    return max(penalty(best, step + 1), penalty(best, max_steps)) <= pool[-1][0]  # never


def decode(tables, k, groups, diversity, max_steps=5, n_best=None, **options):
    cfg = DecodingConfig(
        beam_size=k,
        n_best=n_best or k,
        max_length=max_steps,
        beam_groups=groups,
        diversity_penalty=diversity,
        **options,
    )
    sources = [[s, EOS] for s in range(len(tables))]
    return BatchDecoder(TableModel(VOCAB, tables), cfg, ModelRules(banned_ids=BANNED)).decode(sources).nbests


@pytest.mark.parametrize("k, groups", [(4, 2), (6, 3), (6, 2), (3, 3)])
@pytest.mark.parametrize("early_stopping", ["top", "true", "false", "never"])
@pytest.mark.parametrize("length_penalty", ["none", "avg"])
def test_groups_equal_the_definition(k, groups, early_stopping, length_penalty):
    tables = [random_table(seed) for seed in range(4)]  # one batch of four sentences
    penalty = LengthPenalty(length_penalty, 1.0)
    outputs = decode(tables, k, groups, 0.7, early_stopping=early_stopping, length_penalty=length_penalty)
    for table, hyps in zip(tables, outputs):
        expected = reference(table, k, groups, 0.7, 5, penalty, early_stopping, k)
        assert [h.tokens for h in hyps] == [tokens for tokens, _, _ in expected]
        assert [h.score for h in hyps] == pytest.approx([score for _, score, _ in expected], abs=1e-5)
        assert [h.total for h in hyps] == pytest.approx([total for _, _, total in expected], abs=1e-5)


def test_groups_differ_from_plain_beam_search():
    """The test above can fail: on these tables diversity changes the n-best."""
    tables = [random_table(seed) for seed in range(4)]
    diverse = decode(tables, 4, 2, 0.7)
    plain = (
        BatchDecoder(
            TableModel(VOCAB, tables),
            DecodingConfig(beam_size=4, n_best=4, max_length=5),
            ModelRules(banned_ids=BANNED),
        )
        .decode([[s, EOS] for s in range(4)])
        .nbests
    )
    assert [[h.tokens for h in n] for n in diverse] != [[h.tokens for h in n] for n in plain]


def test_hand_computed_first_step():
    """k=4, G=2, D=0.5; () -> a .4, b .3, c .2, eos .1, then EOS is certain.
    Step 0: group 0 keeps a, b. Group 1 sees them penalised by 0.5 each: a log .4 - .5 = -1.416,
    c log .2 = -1.609, b log .3 - .5 = -1.704: it keeps a and c.
    Step 1: every hypothesis ends; group 1's `a` keeps its penalty in its score, not in its total."""
    a, b, c = CONTENT[:3]
    table = {(): {a: 0.4, b: 0.3, c: 0.2, EOS: 0.1}}
    [hyps] = decode([table], 4, 2, 0.5, max_steps=3, length_penalty="none", early_stopping="never")
    assert [h.tokens for h in hyps] == [[a], [b], [a], [c]]
    assert [h.score for h in hyps] == pytest.approx([math.log(0.4), math.log(0.3), math.log(0.4) - 0.5, math.log(0.2)])
    assert [h.total for h in hyps] == pytest.approx([math.log(0.4), math.log(0.3), math.log(0.4), math.log(0.2)])


class Grouped(BatchDecoder):
    """Runs DiverseBeamSearch whatever the groups (the CLI asks beam_groups > 1 and a penalty)."""

    groups, diversity = 1, 0.0

    def make_search(self, batch_size, max_steps, line_ids=None, prefixes=None):
        return DiverseBeamSearch(
            batch_size=batch_size,
            beam_size=self.cfg.beam_size,
            groups=self.groups,
            diversity_penalty=self.diversity,
            max_steps=max_steps,
            start_id=self.start_id,
            eos_id=self.eos_id,
            penalty=self.penalty,
            early_stopping=self.cfg.early_stopping,
            device=self.device,
            n_best=self.cfg.n_best,
        )


@pytest.mark.parametrize("early_stopping", ["top", "true", "false", "never"])
@pytest.mark.parametrize("seed", [0, 1])
def test_one_group_is_beam_search(seed, early_stopping):
    model = tiny_transformer(seed, vocab=20, eos_bias=1.0)
    sources = random_sources(8, 20, seed=seed)
    cfg = DecodingConfig(beam_size=4, n_best=4, max_length=12, early_stopping=early_stopping)
    plain = BatchDecoder(model, cfg).decode(sources).nbests
    grouped = Grouped(model, cfg).decode(sources).nbests
    assert [[h.tokens for h in n] for n in grouped] == [[h.tokens for h in n] for n in plain]
    assert [[h.score for h in n] for n in grouped] == [pytest.approx([h.score for h in n]) for n in plain]


@pytest.mark.parametrize("early_stopping", ["top", "true"])
def test_zero_penalty_groups_each_run_beam_search_of_k_over_g(early_stopping):
    """D=0: every group is a beam search of k/G on its own, so each hypothesis comes G times."""
    model = tiny_transformer(2, vocab=20, eos_bias=1.0)
    sources = random_sources(6, 20, seed=2)
    Grouped.groups, Grouped.diversity = 2, 0.0
    try:
        grouped = (
            Grouped(model, DecodingConfig(beam_size=4, n_best=4, max_length=12, early_stopping=early_stopping))
            .decode(sources)
            .nbests
        )
    finally:
        Grouped.groups = 1
    plain = (
        BatchDecoder(model, DecodingConfig(beam_size=2, n_best=2, max_length=12, early_stopping=early_stopping))
        .decode(sources)
        .nbests
    )
    for g, p in zip(grouped, plain):
        assert [h.tokens for h in g] == [h.tokens for h in p for _ in range(2)]


def test_batch_order_and_shrinking_change_nothing():
    model = tiny_transformer(5, vocab=20, eos_bias=1.0)
    sources = random_sources(7, 20, seed=5)
    cfg = DecodingConfig(beam_size=6, n_best=6, max_length=15, beam_groups=3, diversity_penalty=0.8)
    together = BatchDecoder(model, cfg).decode(sources).nbests
    alone = [BatchDecoder(model, cfg).decode([s]).nbests[0] for s in sources]
    kept = BatchDecoder(model, cfg, shrink=False).decode(sources).nbests
    for results in (alone, kept):
        assert [[h.tokens for h in n] for n in results] == [[h.tokens for h in n] for n in together]


def test_reported_totals_are_model_log_probs():
    """`total` and `token_scores` leave the penalties out: forced decoding gives them back."""
    from tests.helpers import forced_total

    model = tiny_transformer(1, vocab=20, eos_bias=1.0)
    sources = random_sources(4, 20, seed=3)
    cfg = DecodingConfig(beam_size=4, n_best=4, max_length=30, beam_groups=2, diversity_penalty=0.3)
    outputs = BatchDecoder(model, cfg).decode(sources).nbests
    for source, hyps in zip(sources, outputs):
        for hyp in hyps:
            assert hyp.ended
            forced = forced_total(model, source, hyp.tokens)
            assert hyp.token_scores + [hyp.eos_score] == pytest.approx(forced, abs=1e-5)
            assert hyp.total == pytest.approx(sum(forced), abs=1e-5)
    # the test can fail: some hypotheses were penalised (score below their plain average)
    assert any(h.score < h.total / (len(h.tokens) + 1) - 1e-3 for hyps in outputs for h in hyps)


def test_forced_first_token_is_not_penalised():
    """transformers applies the diversity penalty before forcing the first token, so no group
    pays for the forced token: every group's scores are as without the step-0 penalty."""
    a, b = CONTENT[:2]
    table = {(): {a: 0.9, b: 0.1}, (a,): {a: 0.6, b: 0.4}}
    cfg = DecodingConfig(
        beam_size=4,
        n_best=4,
        max_length=3,
        beam_groups=2,
        diversity_penalty=1.0,
        length_penalty="none",
        early_stopping="never",
    )
    rules = ModelRules(banned_ids=BANNED, forced_bos_id=a)
    [hyps] = BatchDecoder(TableModel(VOCAB, [table]), cfg, rules).decode([[0, EOS]]).nbests
    # forced a (0), then group 0 keeps a, b; group 1 sees both penalised by 1
    scores = sorted(h.score for h in hyps)
    assert scores == pytest.approx(sorted([math.log(0.6), math.log(0.4), math.log(0.6) - 1, math.log(0.4) - 1]))


def test_prefix_steps_are_not_penalised_per_sentence():
    """A --prefix forces the same tokens in every group, like a forced first token: no group pays
    for them. Sentence 0 has the prefix [a, b], sentence 1 none, in one batch: sentence 0's groups
    are penalised from step 2 on only, sentence 1's from step 0."""
    a, b = CONTENT[:2]
    forced = {(): {a: 0.9, b: 0.1}, (a,): {a: 0.5, b: 0.5}, (a, b): {a: 0.6, b: 0.4}}
    free = {(): {a: 0.6, b: 0.4}}
    cfg = DecodingConfig(
        beam_size=4,
        n_best=4,
        max_length=3,
        beam_groups=2,
        diversity_penalty=1.0,
        length_penalty="none",
        early_stopping="never",
    )
    model = TableModel(VOCAB, [forced, free])
    with_prefix, without = (
        BatchDecoder(model, cfg, ModelRules(banned_ids=BANNED))
        .decode([[0, EOS], [1, EOS]], prefixes=[[a, b], []])
        .nbests
    )
    assert all(h.tokens[:2] == [a, b] for h in with_prefix)
    # the prefix scores 0; then group 0 keeps a, b and group 1 sees both penalised by 1
    expected = sorted([math.log(0.6), math.log(0.4), math.log(0.6) - 1, math.log(0.4) - 1])
    assert sorted(h.score for h in with_prefix) == pytest.approx(expected)
    # sentence 1 chooses at step 0: its group 1 pays there (then EOS is certain)
    assert sorted(h.score for h in without) == pytest.approx(expected)


@pytest.mark.parametrize(
    "values, message",
    [
        (dict(beam_size=5, beam_groups=2, diversity_penalty=1.0), "beam_groups: beam_size (5) is not divisible"),
        (dict(beam_size=4, beam_groups=2), "diversity_penalty: must be > 0"),
        (dict(beam_groups=0), "beam_groups: must be >= 1"),
    ],
)
def test_config_refuses(values, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DecodingConfig(**values).validate()


def hamming_definition(scores, current_tokens, group, num_beams, num_groups, penalty):
    """transformers' HammingDiversityLogitsProcessor, read off its v4.55 source: rows of `scores`
    are group `group`'s beams of each sentence; current_tokens (batch*num_beams,) the tokens
    chosen at this step so far (earlier groups' slots filled)."""
    size = num_beams // num_groups
    out = scores.clone()
    if group == 0:
        return out
    for sentence in range(current_tokens.numel() // num_beams):
        earlier = current_tokens[sentence * num_beams : sentence * num_beams + group * size]
        counts = torch.bincount(earlier, minlength=scores.size(1))
        out[sentence * size : (sentence + 1) * size] -= penalty * counts
    return out


def test_step_candidates_follow_hamming_definition():
    """One step of the batched search, group by group, against the definition on the same tensors."""
    torch.manual_seed(4)
    n, k, groups, vocab, d = 3, 6, 3, 10, 0.9
    search = DiverseBeamSearch(
        batch_size=n,
        beam_size=k,
        groups=groups,
        diversity_penalty=d,
        max_steps=[9] * n,
        start_id=2,
        eos_id=EOS,
        penalty=LengthPenalty("none"),
        early_stopping="never",
        device=torch.device("cpu"),
        n_best=k,
    )
    search.advance(torch.log_softmax(torch.randn(n, vocab), -1), 0)  # widen to k rows
    running = search.alive_scores.clone()
    logprobs = torch.log_softmax(torch.randn(n * k, vocab), -1)
    candidates, alive = search.select_in_groups(logprobs.clone(), penalise=True)
    size = k // groups
    current = torch.zeros(n * k, dtype=torch.long)
    for g in range(groups):
        rows = [s * k + g * size + j for s in range(n) for j in range(size)]
        expected = hamming_definition(logprobs[rows], current, g, k, groups, d) + running[rows, None]
        top = expected.view(n, -1).topk(2 * size, dim=1).values
        units = [s * groups + g for s in range(n)]
        torch.testing.assert_close(candidates.scores[units], top)
        current[rows] = alive.tokens[units].reshape(-1)


def test_hugging_face_generation_config_sets_the_groups():
    from nmtdecode.models.formats.hf_config import generation_settings

    from tests.helpers import tiny_config

    defaults, _ = generation_settings({"num_beams": 6, "num_beam_groups": 3, "diversity_penalty": 0.5}, tiny_config())
    assert (defaults["beam_size"], defaults["beam_groups"], defaults["diversity_penalty"]) == (6, 3, 0.5)
    defaults, _ = generation_settings({"num_beams": 6, "num_beam_groups": 1}, tiny_config())
    assert "beam_groups" not in defaults


def test_alignment_and_coverage_follow_the_groups():
    """Row facts follow each group's hypotheses from the first step on: alignments equal a
    teacher-forced pass's, and asking for them changes no token or score."""
    from tests.test_alignment import attention_by_teacher_forcing

    model = tiny_transformer(2, vocab=20, eos_bias=1.0)
    sources = random_sources(4, 20, seed=4)
    cfg = DecodingConfig(beam_size=4, n_best=4, max_length=12, beam_groups=2, diversity_penalty=0.5, alignment=True)
    plain = (
        BatchDecoder(model, DecodingConfig(beam_size=4, n_best=4, max_length=12, beam_groups=2, diversity_penalty=0.5))
        .decode(sources)
        .nbests
    )
    aligned = BatchDecoder(model, cfg).decode(sources).nbests
    for source, hyps, plain_hyps in zip(sources, aligned, plain):
        assert [(h.tokens, h.score) for h in hyps] == [(h.tokens, h.score) for h in plain_hyps]
        for hyp in hyps:
            weights = attention_by_teacher_forcing(model, source, hyp.tokens, -1, 1)
            assert hyp.alignment == weights[: len(hyp.tokens)].argmax(dim=1).tolist()


def test_ctranslate2s_rule_is_refused_with_groups():
    """CTranslate2's beam search has no groups: its stop rule with them would be a rule of nobody's."""
    with pytest.raises(ConfigError, match="early_stopping: ctranslate2 is CTranslate2's rule for its beam search"):
        Config.from_values(
            {"beam_size": 4, "beam_groups": 2, "diversity_penalty": 0.5, "early_stopping": "ctranslate2"}
        )
