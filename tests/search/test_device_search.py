"""The device search (search/device/: beam.py, greedy.py, sampling.py) gives the host search's
hypotheses exactly: tokens, scores, totals, per-token scores, alignment and attention, for
every strategy it holds, every stop rule and penalty, with prefixes, n-best and min length;
with late checks of the done flags (as on a GPU) and without dropping finished sentences. The
rules both share, against oracles: the pools (the host's and the device's) against
`bisect.insort_right`, the backtracking of both against `Beam.get_hyp`, the stop rules
against their definitions on hand-made pool facts. And a step reads nothing on the host
between two checks."""

import bisect
import random

import pytest
import torch

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelRules
from nmtdecode.models.fixed_step import FixedShapeSteps
from nmtdecode.search.beam import Beam, Finished
from nmtdecode.search.device.done_flags import DoneFlags
from nmtdecode.search.device.graphs import Captured, GraphedStep, SearchGraphs
from nmtdecode.search.processors import ForcePrefix
from nmtdecode.search.device.records import KEPT
from nmtdecode.search.finished import Ended, FinishedPool
from nmtdecode.search.history import StepHistory
from nmtdecode.search.penalties import LengthPenalty
from nmtdecode.search.stop_rules import STOP_RULES, PoolFacts

from tests.helpers import random_sources, tiny_transformer

SOURCES = random_sources(19, 20, seed=6)
PREFIXES = [[5 + i % 4] * (i % 3) for i in range(19)]


@pytest.fixture(scope="module")
def model():
    return tiny_transformer(1, vocab=20, eos_bias=1.0)  # EOS favoured: sentences end at different steps


def everything(results):
    return [
        [(h.tokens, h.score, h.total, h.token_scores, h.ended, h.eos_score, h.alignment, h.attention) for h in n]
        for n in results
    ]


def both(model, cfg, prefixes=None, rules=None, check_every=None, **options):
    host = BatchDecoder(model, cfg, rules, **options).decode(SOURCES, prefixes=prefixes).nbests
    device = BatchDecoder(model, cfg, rules, search_on="device", **options)
    assert device.search_on == "device"
    if check_every:
        device.check_every = check_every
    return everything(host), everything(device.decode(SOURCES, prefixes=prefixes).nbests)


@pytest.mark.parametrize("rule", ["top", "true", "false", "never", "ctranslate2"])
@pytest.mark.parametrize("penalty", ["none", "avg", "wu"])
def test_every_stop_rule_and_length_penalty(model, rule, penalty):
    cfg = DecodingConfig(beam_size=4, n_best=2, max_length=14, early_stopping=rule, length_penalty=penalty, alpha=0.7)
    host, device = both(model, cfg)
    assert device == host


OPTIONS = {
    "greedy": dict(beam_size=1),
    "beam_nbest_all": dict(beam_size=3, n_best=3, early_stopping="never"),
    "coverage_alignment_attention": dict(
        beam_size=4, n_best=2, coverage_penalty="wu", beta=0.3, alignment=True, attention=True
    ),
    "summary_coverage": dict(beam_size=4, n_best=4, coverage_penalty="summary", beta=0.5, early_stopping="false"),
    "greedy_coverage_alignment": dict(beam_size=1, coverage_penalty="wu", beta=0.2, alignment=True, attention=True),
    "repetition_blocking_min_length": dict(beam_size=4, repetition_penalty=1.3, block_ngram_repeat=2, min_length=3),
    "no_repeat_min_length": dict(beam_size=3, n_best=3, no_repeat_ngram_size=2, min_length=5),
    "relative_step_limits": dict(beam_size=4, n_best=2, max_len_a=1.0, max_len_b=2, length_penalty="wu"),
    "banned": dict(beam_size=5, n_best=5, ban_unk=True, early_stopping="true"),
    "sampling": dict(sampling=True, n_best=4, temperature=0.8, top_k=10, seed=7),
    "sampling_top_p": dict(sampling=True, n_best=4, temperature=0.8, top_k=10, top_p=0.9, seed=7),
    "sampling_coverage_alignment": dict(
        sampling=True, n_best=3, seed=3, coverage_penalty="wu", beta=0.3, alignment=True, attention=True, min_length=2
    ),
}
RULES = {
    "plain": None,
    "opennmt": ModelRules(opennmt_beam=True, length_offset=1),
    "forced_first_and_last": ModelRules(forced_bos_id=7, forced_eos=True),
}


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("rules", RULES)
@pytest.mark.parametrize("prefixed", [False, True])
def test_every_strategy_and_option(model, options, rules, prefixed):
    cfg = DecodingConfig(max_length=15, **OPTIONS[options])
    host, device = both(model, cfg, PREFIXES if prefixed else None, RULES[rules])
    assert device == host


@pytest.mark.parametrize("options", ["beam_nbest_all", "greedy", "sampling", "coverage_alignment_attention"])
@pytest.mark.parametrize("check_every", [3, 4])
def test_late_checks_of_the_done_flags_change_nothing(model, options, check_every):
    """As on a GPU: sentences learnt to be done a few steps late, and the batch dropping them
    then (the steps between record nothing for them)."""
    cfg = DecodingConfig(max_length=15, **OPTIONS[options])
    host, device = both(model, cfg, PREFIXES, check_every=check_every)
    assert device == host


@pytest.mark.parametrize("options", ["beam_nbest_all", "sampling"])
def test_keeping_finished_sentences_in_the_batch_changes_nothing(model, options):
    cfg = DecodingConfig(max_length=15, **OPTIONS[options])
    host, device = both(model, cfg, shrink=False)
    assert device == host


@pytest.mark.parametrize("options", ["beam_nbest_all", "greedy", "coverage_alignment_attention"])
def test_on_the_fixed_shape_step(model, options):
    """The step runner of a GPU (eager here), with late checks: its compaction follows them."""
    cfg = DecodingConfig(max_length=15, **OPTIONS[options])
    host, device = both(model, cfg, PREFIXES, check_every=4, steps=FixedShapeSteps(model, graphs=False))
    assert device == host


def spoiled(value):
    """A tensor's values made wrong in place: NaN, an index out of every range, flipped flags."""
    if value.dtype == torch.bool:
        return value.logical_not_()
    return value.fill_(float("nan") if value.is_floating_point() else -(10**6))


def with_processors(decoder):
    """The decoder, keeping each batch's Processors in `decoder.made` as it makes them."""
    decoder.made, make = [], decoder.make_processors

    def making(*args, **kwargs):
        decoder.made.append(make(*args, **kwargs))
        return decoder.made[-1]

    decoder.make_processors = making
    return decoder


@pytest.mark.parametrize("options", ["beam_nbest_all", "greedy", "coverage_alignment_attention", "banned"])
@pytest.mark.parametrize("rules", ["plain", "opennmt", "forced_first_and_last"])
def test_a_search_handed_new_state_tensors_every_step_decodes_as_before(model, options, rules):
    """What a step replayed as a CUDA graph relies on (search/device/graphs.py): `state()` names
    every tensor a step reads or writes that outlives it, the search's and its processors'. Before
    each step both hand their state over to new tensors (`Captured.adopt`, as when a batch takes
    up a graph's) and the old ones are spoiled: a tensor left out would still be read, and change
    the result."""
    cfg = DecodingConfig(max_length=15, **OPTIONS[options])
    host, _ = both(model, cfg, rules=RULES[rules])
    decoder = with_processors(BatchDecoder(model, cfg, RULES[rules], search_on="device"))
    decoder.check_every = 4
    handed = 0
    for search in decoder.stepwise(SOURCES):
        step = GraphedStep(search, decoder.made[-1])
        with torch.inference_mode():  # the search's tensors are inference tensors
            old = step.state()
            Captured(graph=None, state={name: value.clone() for name, value in old.items()}, chosen=None).adopt(
                step, old
            )
            assert all(step.state()[name] is not value for name, value in old.items())
            for value in old.values():
                spoiled(value)
        handed += 1
    with torch.inference_mode():
        assert handed > 5 and everything(decoder.trimmed(search.results(cfg.n_best), SOURCES)) == host


def tensors_of(value, path=""):
    """Every tensor reachable from a search's attributes, by path ("ends.pool.entries.score")."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, (dict, list, tuple)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield from tensors_of(item, f"{path}.{key}" if path else str(key))
    elif type(value).__module__.startswith("nmtdecode.search"):
        for key, item in vars(value).items():
            yield from tensors_of(item, f"{path}.{key}" if path else key)


# what a step neither reads nor writes: the first step's tokens, the pools of sentences that left
# the batch, the host's copy of the done flags, the rows' first tokens
NOT_STEP_STATE = ("search.start_tokens", "search.ends.pool.stored.", "search.flags.copy.", "rows.start_tokens")


@pytest.mark.parametrize("options", ["beam_nbest_all", "greedy", "coverage_alignment_attention", "banned"])
@pytest.mark.parametrize("rules", ["plain", "opennmt", "forced_first_and_last"])
def test_the_state_of_a_step_is_every_tensor_its_search_and_processors_hold(model, options, rules):
    """A tensor held outside `state()` would be read by a replayed graph where its capture found
    it, whatever the step or the batch. The rules' own tensors are the bans' ids, the job's (one
    tensor for every batch), and a prefix's, read only before the step its graphs start from."""
    decoder = with_processors(
        BatchDecoder(model, DecodingConfig(max_length=15, **OPTIONS[options]), RULES[rules], search_on="device")
    )
    decoder.check_every = 4
    for number, search in enumerate(decoder.stepwise(SOURCES, prefixes=PREFIXES)):
        processors = decoder.made[-1]
        state = {id(value) for value in GraphedStep(search, processors).state().values()}
        held = [p for p, value in tensors_of({"search": search, "rows": processors.rows}) if id(value) not in state]
        assert [path for path in held if not path.startswith(NOT_STEP_STATE)] == [], number
    rules_with_tensors = [p for p in processors.on_logits_chain + processors.processors if list(tensors_of(p))]
    assert all(p in decoder.ban_rules or isinstance(p, ForcePrefix) for p in rules_with_tensors)
    assert any(isinstance(p, ForcePrefix) for p in rules_with_tensors)  # the walk saw them


def test_a_search_step_that_cannot_be_captured_is_told_once_and_runs_eagerly(model):
    """On a CPU no CUDA graph can be captured: the second sighting of a shape tries, fails, says
    so once, and every step of this job and the next batches runs eagerly, from the graphs' input
    buffer on the first sightings, with the host search's hypotheses."""
    warnings = []
    cfg = DecodingConfig(max_length=15, **OPTIONS["beam_nbest_all"])
    host, _ = both(model, cfg)
    decoder = BatchDecoder(model, cfg, search_on="device")
    decoder.check_every = 4
    decoder.search_graphs = graphs = SearchGraphs(warnings.append)
    for _ in range(2):
        assert everything(decoder.decode(SOURCES).nbests) == host
    assert not graphs.on and graphs.captures == graphs.replays == 0 and len(graphs.seen) > 1
    assert len(warnings) == 1 and "capturing its step failed" in warnings[0]


def test_a_graph_captures_from_the_step_where_every_processor_acts_alike(model):
    """Processors.steady_from: the first step from which a captured step may replay them."""
    decoder = BatchDecoder(model, DecodingConfig(beam_size=2, min_length=3), ModelRules(forced_bos_id=7))
    search = decoder.make_device_search(2, [10, 10])
    assert decoder.make_processors(search, [10, 10]).steady_from == 3  # MinLength's, after ForceFirstToken's 1
    assert decoder.make_processors(search, [10, 10], [[5, 6, 7, 8], []]).steady_from == 5  # the prefix: 1 + 4
    blocking = BatchDecoder(model, DecodingConfig(beam_size=2, no_repeat_ngram_size=2))
    assert blocking.make_processors(search, [10, 10]).steady_from is None  # it reads the growing history
    forced_eos = BatchDecoder(model, DecodingConfig(beam_size=2), ModelRules(forced_eos=True))
    assert forced_eos.make_processors(search, [10, 10]).steady_from == 0  # it compares the rows' step on the device
    assert BatchDecoder(model, DecodingConfig(beam_size=2)).make_processors(search, [10, 10]).steady_from == 0


@pytest.mark.parametrize("options", ["coverage_alignment_attention", "greedy_coverage_alignment", "sampling"])
def test_a_step_reads_nothing_on_the_host_between_checks(model, monkeypatch, options):
    """Between two checks of the done flags, a step converts no tensor to a host value."""
    reads = []
    for name in ("tolist", "item", "__bool__", "cpu", "__int__", "__float__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            reads.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    decoder = BatchDecoder(model, DecodingConfig(max_length=15, **OPTIONS[options]), search_on="device")
    decoder.check_every = 100  # never within the 15 steps
    steps = []
    for _ in decoder.stepwise(SOURCES):
        steps.append(len(reads))
    assert len(steps) == 15 and steps[-1] == steps[0]  # the first step's reads are the loop's (encoding, masks)


def test_an_option_it_does_not_hold_runs_on_the_host_with_one_warning(model):
    warnings = []
    diverse = DecodingConfig(beam_size=4, beam_groups=2, diversity_penalty=0.5, max_length=10)
    decoder = BatchDecoder(model, diverse, search_on="device", warn=warnings.append)
    assert decoder.search_on == "host" and len(warnings) == 1 and "--beam-groups" in warnings[0]
    traced = BatchDecoder(model, DecodingConfig(max_length=10), search_on="device", trace=True, warn=warnings.append)
    assert traced.search_on == "host" and len(warnings) == 2 and "--dump-beam" in warnings[1]
    BatchDecoder(model, diverse, warn=warnings.append)  # the host search asked for: nothing to say
    assert len(warnings) == 2


def test_auto_searches_on_a_gpu_from_64_sentences_where_the_device_search_holds_the_options(model, monkeypatch):
    """--search-on auto: the host on a CPU; on a GPU (here the CPU counted as one), the device for
    batches of 64 sentences or more, silently the host for an option the device search lacks."""
    import nmtdecode.engine.decoding as decoding

    warnings = []
    auto = BatchDecoder(model, DecodingConfig(max_length=10), search_on="auto", warn=warnings.append)
    assert not auto.on_device(32) and not auto.on_device(128)  # a CPU
    monkeypatch.setattr(decoding, "AUTO_DEVICE_SEARCH_ON", ("cpu",))
    assert [auto.on_device(n) for n in (1, 32, 63, 64, 128, 500)] == [False, False, False, True, True, True]
    diverse = DecodingConfig(beam_size=4, beam_groups=2, diversity_penalty=0.5, max_length=10)
    held_back = BatchDecoder(model, diverse, search_on="auto", warn=warnings.append)
    assert not held_back.on_device(128) and warnings == []
    host = BatchDecoder(model, DecodingConfig(max_length=10), search_on="host")
    device = BatchDecoder(model, DecodingConfig(max_length=10), search_on="device")
    assert not host.on_device(128) and device.on_device(1)


@pytest.mark.parametrize(
    "options, graphed",
    [
        (dict(beam_size=4), True),
        (dict(beam_size=1, min_length=3, ban_unk=True), True),  # replayed once the min length is passed
        (dict(sampling=True, top_k=5), False),
        (dict(beam_size=4, coverage_penalty="wu", beta=0.2), False),
        (dict(beam_size=4, no_repeat_ngram_size=2), False),
        (dict(beam_size=4, repetition_penalty=1.2), False),
    ],
)
def test_auto_searches_on_a_gpu_at_every_size_where_its_steps_replay_as_graphs(model, monkeypatch, options, graphed):
    """Where the device search's steps replay as CUDA graphs (a GPU with graphs on, which makes
    SearchGraphs where the options allow them: here the CPU counted as one, with an unused
    SearchGraphs) it led at every batch size measured; with options the graphs do not hold, auto
    keeps the 64-sentence rule."""
    import nmtdecode.engine.decoding as decoding

    monkeypatch.setattr(decoding, "AUTO_DEVICE_SEARCH_ON", ("cpu",))
    auto = BatchDecoder(model, DecodingConfig(max_length=10, **options), search_on="auto")
    assert auto.search_graphs is None  # a CPU: no graphs
    assert auto.graphs_hold_the_options() == graphed
    auto.search_graphs = SearchGraphs() if auto.graphs_hold_the_options() else None  # as on a GPU
    assert [auto.on_device(n) for n in (1, 32, 64)] == [graphed, graphed, True]


def test_auto_decodes_each_batch_with_the_search_its_size_chooses(model, monkeypatch):
    """The choice is per batch: with the CPU counted as a GPU and the threshold at 10 sentences,
    a batch of 19 takes the device search and one of 5 the host's, each giving the host search's
    hypotheses."""
    import nmtdecode.engine.decoding as decoding

    monkeypatch.setattr(decoding, "AUTO_DEVICE_SEARCH_ON", ("cpu",))
    monkeypatch.setattr(decoding, "DEVICE_SEARCH_FROM", 10)
    cfg = DecodingConfig(beam_size=3, max_length=12, n_best=2)
    auto, host, made = BatchDecoder(model, cfg, search_on="auto"), BatchDecoder(model, cfg), []
    for name in ("make_search", "make_device_search"):
        make = getattr(auto, name)
        monkeypatch.setattr(auto, name, lambda *a, make=make, name=name, **k: made.append(name) or make(*a, **k))
    for sources in (SOURCES, SOURCES[:5]):
        assert everything(auto.decode(sources).nbests) == everything(host.decode(sources).nbests)
    assert made == ["make_device_search", "make_search"]


# The parts, against oracles ------------------------------------------------------------------------


def test_the_host_and_device_pools_hold_what_insort_right_keeps():
    """Random steps of ended candidates, ties included (scores on a coarse grid, -inf among
    them: a hypothesis under an infinite coverage penalty), some not hypotheses; a sentence
    leaves the batch half-way. The device's pools (every fact kept, stored by the batch's first
    numbering) and the host's (scores only, each Beam ordering its records by its row) both hold
    what `bisect.insort_right` on the score, cut to the pool's size, keeps, entry for entry."""
    rng, sentences, size = random.Random(0), 3, 4
    device = FinishedPool(sentences, size, "cpu", kept=KEPT)
    host = FinishedPool(sentences, size, "cpu")
    beams = [Beam(size, 50) for _ in range(sentences)]
    expected: list[list[tuple[float, int]]] = [[] for _ in range(sentences)]  # (score, token), best first
    rows = [0, 1, 2]
    for step in range(12):
        if step == 6:  # sentence 1 leaves
            device.store(torch.tensor(rows))
            for pool in (device, host):
                pool.keep(torch.tensor([0, 2]))
            rows = [0, 2]
        scores = [[rng.choice([-1.0, -1.5, -2.0, float("-inf")]) for _ in range(3)] for _ in rows]
        valid = [[rng.random() < 0.7 for _ in range(3)] for _ in rows]
        tokens = [[step * 10 + j for j in range(3)] for _ in rows]
        score, ok = torch.tensor(scores, dtype=torch.float64), torch.tensor(valid)
        prev = torch.tensor([[0, 1, 2]] * len(rows))
        device.add(
            score, ok, total=score.float(), step=torch.full_like(prev, step), prev=prev, token=torch.tensor(tokens)
        )
        order = host.add(score, ok).tolist()
        for i, row in enumerate(rows):
            new = [Finished(scores[i][j], 0.0, step, j, tokens[i][j]) if valid[i][j] else None for j in range(3)]
            beams[row].rank(order[i], new)
            for j in range(3):
                if valid[i][j]:
                    bisect.insort_right(expected[row], (scores[i][j], tokens[i][j]), key=lambda e: -e[0])
            del expected[row][size:]
    stored = device.store(torch.tensor(rows))
    for row, beam in enumerate(beams):
        count = int(stored.valid[row].sum())
        assert list(zip(stored.score[row, :count].tolist(), stored.token[row, :count].tolist())) == expected[row]
        assert [(f.score, f.token) for f in beam.finished] == expected[row]
    assert any(len(set(s for s, _ in pool)) < len(pool) for pool in expected)  # ties were met


def test_a_pool_of_one_filled_once_is_the_merged_pool():
    """`FinishedPool.first` (greedy search) keeps what `add` would: the one hypothesis."""
    once, merged = FinishedPool(3, 1, "cpu"), FinishedPool(3, 1, "cpu")
    for valid in ([False, True, False], [True, False, False], [False, False, True]):
        score, ok = torch.tensor([[-1.0], [-2.0], [-3.0]], dtype=torch.float64), torch.tensor(valid)[:, None]
        once.first(score, ok & ~once.entries["valid"])
        merged.add(score, ok & ~merged.entries["valid"])
    assert once.entries["score"].tolist() == merged.entries["score"].tolist() == [[-1.0], [-2.0], [-3.0]]


def test_paths_walk_the_backpointers_as_get_hyp_does():
    rng, steps, sentences, slots = random.Random(1), 7, 2, 3
    history = StepHistory(steps, sentences, slots, "cpu")
    beams = [Beam(slots, steps) for _ in range(sentences)]
    for t in range(steps):
        tokens = [[rng.randrange(100) for _ in range(slots)] for _ in range(sentences)]
        prev = [[rng.randrange(slots) for _ in range(slots)] for _ in range(sentences)]
        totals = [[-float(rng.randrange(1, 50)) for _ in range(slots)] for _ in range(sentences)]
        history.write(
            torch.tensor([t]),
            torch.arange(sentences),
            torch.tensor(tokens),
            torch.tensor(prev),
            torch.tensor(totals),
            {},
        )
        for b, beam in enumerate(beams):
            beam.extend(tokens[b], prev[b], totals[b])
    ends = [[(3, 2), (6, 0)], [(1, 1), (0, 2)]]  # per sentence: (step, prev) of two hypotheses
    ended = Ended(
        torch.zeros(2, 2, dtype=torch.float64),
        torch.tensor([[-60.0, -61.0]] * 2),
        torch.tensor([[s for s, _ in e] for e in ends]),
        torch.tensor([[p for _, p in e] for e in ends]),
        torch.tensor([[7, 8]] * 2),
        torch.ones(2, 2, dtype=torch.bool),
    )
    paths = history.paths(ended, steps)
    for b, beam in enumerate(beams):
        for j, (step, prev) in enumerate(ends[b]):
            tokens, totals = beam.get_hyp(step - 1, prev) if step else ([], [])
            assert paths["tokens"][b, j, : step + 1].tolist() == tokens + [7 + j]
            assert paths["totals"][b, j, : step + 1].tolist() == totals + [-60.0 - j]


def stop_by_definition(rule, finished, best, top_ended, penalty, length, limit, size=2, n_best=1):
    """Each rule as docs/search.md states it, for one sentence: `finished` its pool's scores,
    best first; `best` the best alive total; hypotheses of `length` tokens, its step limit `limit`."""
    if rule == "top":
        return top_ended and len(finished) >= n_best
    if len(finished) < size:
        return False
    if rule == "true":
        return True
    bound = penalty(best, length)
    if rule == "never":
        bound = max(bound, penalty(best, limit))
    return bound <= finished[-1]


@pytest.mark.parametrize("rule", ["top", "true", "false", "never"])
@pytest.mark.parametrize("penalty", ["none", "avg", "wu"])
def test_the_stop_rules_decide_by_their_definitions(rule, penalty):
    """Every combination of a full or partial pool, an alive total above or below the worst
    finished score at the current length and at the step limit, and the top candidate ended."""
    length_penalty = LengthPenalty(penalty, 0.8)
    cases = []
    for totals in ([-4.0], [-3.0, -5.0]):
        finished = [length_penalty(total, 1) for total in totals]
        for best in (-1.0, -2.4, -3.2, -6.0, -12.0, float("-inf")):
            for top_ended in (False, True):
                stops = stop_by_definition(rule, finished, best, top_ended, length_penalty, length=3, limit=9)
                cases.append((finished, best, top_ended, stops))
    divisors = length_penalty.divisors(9, "cpu")
    facts = PoolFacts(
        full=torch.tensor([len(finished) == 2 for finished, *_ in cases]),
        has_n_best=torch.tensor([len(finished) >= 1 for finished, *_ in cases]),
        worst=torch.tensor([finished[-1] for finished, *_ in cases], dtype=torch.float64),
        best=torch.tensor([best for _, best, *_ in cases], dtype=torch.float64),
        divisor_now=divisors[3].expand(len(cases)),
        divisor_limit=divisors[9].expand(len(cases)),
        top_ended=torch.tensor([t for _, _, t, _ in cases]),
    )
    assert STOP_RULES[rule](facts).tolist() == [expected for *_, expected in cases]
    assert len(set(STOP_RULES[rule](facts).tolist())) == 2  # the cases tell the rule's two answers apart


def test_the_divisors_are_the_penalties_own():
    for name in ("none", "avg", "wu"):
        penalty = LengthPenalty(name, 0.6, offset=1)
        table = penalty.divisors(30, "cpu")
        assert [(-7.3 / d) for d in table[1:].tolist()] == [penalty(-7.3, n) for n in range(1, 31)]


def test_the_done_flags_are_read_every_few_steps_on_a_cpu():
    done = torch.tensor([False, True, False])
    flags = DoneFlags(3, every=3, device="cpu")
    assert [flags.check(s, done) for s in (1, 2)] == [None, None]
    assert flags.check(3, done) == [False, True, False]


# The option ---------------------------------------------------------------------------------------

LINES = ["the house is red .", "", "a dog and a cat sleep in the garden .", "good morning", "water"]


def test_the_command_line_searches_on_the_device_when_asked(model_dir, lines_file, cli):
    src = lines_file(LINES)
    common = (
        "translate",
        "--model",
        model_dir,
        "--src",
        src,
        "--max-length",
        8,
        "-k",
        4,
        "--n-best",
        2,
        "--format",
        "jsonl",
        "--token-scores",
    )
    host = cli(*common, "--search-on", "host", text=True)
    device = cli(*common, "--search-on", "device", text=True)
    assert host.returncode == device.returncode == 0, device.stderr
    assert device.stdout == host.stdout and "warning" not in device.stderr


def test_the_command_line_warns_once_when_the_device_search_cannot_hold_an_option(model_dir, lines_file, cli):
    src = lines_file(LINES)
    common = (
        "translate",
        "--model",
        model_dir,
        "--src",
        src,
        "--max-length",
        8,
        "-k",
        4,
        "--beam-groups",
        2,
        "--diversity-penalty",
        0.5,
    )
    device = cli(*common, "--search-on", "device", text=True)
    auto = cli(*common, text=True)  # on a CPU the host search is the default: nothing to say
    assert device.returncode == auto.returncode == 0, device.stderr
    assert device.stdout == auto.stdout
    warnings = [line for line in device.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "--beam-groups" in warnings[0], device.stderr
    assert "warning" not in auto.stderr
