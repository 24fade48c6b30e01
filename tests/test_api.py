"""The Python API (`nmtdecode.Translator`, issue 21): the same results as the command line."""

import doctest
import itertools
import json
import subprocess
import sys
import warnings

import pytest

import nmtdecode
from nmtdecode.engine.batching import chunk_size
from nmtdecode.options.config import ConfigError

from tests.helpers import REPO
from tests.test_cli import LINES

OPTIONS = {"max_length": 8, "batch_size": 3, "device": "cpu"}


@pytest.fixture(scope="module")
def translator(model_dir):
    return nmtdecode.Translator.load(str(model_dir), **OPTIONS)


@pytest.fixture()
def src_file(lines_file):
    return lines_file(LINES, "input.txt")


def cli_output(cli, model_dir, src_file, *more):
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        src_file,
        "--max-length",
        8,
        "--batch-size",
        3,
        "--quiet",
        *more,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("beam", [1, 4])
def test_translate_returns_the_command_lines_lines(translator, cli, model_dir, src_file, beam):
    expected = cli_output(cli, model_dir, src_file, "--beam-size", beam).split("\n")[:-1]
    assert translator.translate(LINES, beam_size=beam) == expected
    assert expected[1] == expected[3] == ""  # empty and blank sources give empty outputs


def test_samples_are_the_command_lines_samples(translator, cli, model_dir, src_file):
    expected = cli_output(cli, model_dir, src_file, "--sampling", "--seed", 5, "--temperature", 2).split("\n")[:-1]
    options = {"sampling": True, "seed": 5, "temperature": 2.0}
    assert translator.translate(LINES, **options) == expected  # source i draws as line i of the file
    assert list(translator.translate_iterable(LINES, **options)) == expected


def test_nbest_translations_carry_the_command_lines_scores(translator, cli, model_dir, src_file):
    lines = cli_output(
        cli, model_dir, src_file, "--beam-size", 4, "--n-best", 3, "--format", "jsonl", "--token-scores"
    ).splitlines()
    results = translator.translate_batch(LINES, beam_size=4, n_best=3)
    assert len(results) == len(lines)
    for result, line in zip(results, lines):
        expected = json.loads(line)["hypotheses"]
        assert [(t.text, t.score, t.log_prob, t.tokens, t.token_scores, t.eos_score) for t in result] == [
            (h["text"], h["score"], h["log_prob"], h["tokens"], h["token_scores"], h["eos_score"]) for h in expected
        ]


@pytest.mark.parametrize("options", [{}, {"n_best": 3, "beam_size": 4}, {"alignment": True}])
def test_translate_returns_strings_and_translate_batch_translations_whatever_the_options(translator, options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nmtdecode.IneffectiveOptionWarning)
        texts = translator.translate(LINES, **options)
    results = translator.translate_batch(LINES, **options)
    assert texts == [result[0].text for result in results] and all(type(text) is str for text in texts)
    assert [len(result) for result in results] == [options.get("n_best", 1)] * len(LINES)
    assert all(type(t) is nmtdecode.Translation for result in results for t in result)


def test_scores_true_is_deprecated_and_still_returns_translations(translator):
    with pytest.warns(DeprecationWarning, match="translate_batch"):
        old = translator.translate(["water", "good morning"], scores=True, n_best=2, beam_size=2)
    assert old == translator.translate_batch(["water", "good morning"], n_best=2, beam_size=2)


def test_results_do_not_depend_on_batching(translator):
    assert translator.translate(LINES, batch_size=1) == translator.translate(LINES, batch_size=64)


def test_translate_file_is_the_command_lines_job(translator, cli, model_dir, src_file, tmp_path):
    expected = cli_output(cli, model_dir, src_file, "--format", "nbest", "--n-best", 2)
    summary = translator.translate_file(str(src_file), str(tmp_path / "out.txt"), format="nbest", n_best=2)
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == expected and summary.sentences == len(LINES)
    again = translator.translate_file(str(src_file), str(tmp_path / "out.txt"), resume=True)
    assert again.sentences == 0  # complete: skipped


def test_the_constructor_and_path_objects_load_as_load_does(translator, model_dir, src_file, tmp_path):
    """`Translator(path, **options)` (CTranslate2's spelling) is `Translator.load`; a pathlib.Path
    goes wherever a path does: the model, an ensemble's models, translate_file's files."""
    expected = translator.translate(LINES)
    assert nmtdecode.Translator(str(model_dir), **OPTIONS).translate(LINES) == expected
    assert nmtdecode.Translator.load(model_dir, **OPTIONS).translate(LINES) == expected
    ensemble = nmtdecode.Translator([model_dir, str(model_dir)], **OPTIONS)
    assert ensemble.translate(LINES) == nmtdecode.Translator.load([str(model_dir)] * 2, **OPTIONS).translate(LINES)
    translator.translate_file(src_file, tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")[:-1] == expected
    with pytest.raises(ConfigError, match=r"src: not an option of Translator\(\)"):
        nmtdecode.Translator(model_dir, src="in.txt")
    with pytest.raises(TypeError, match="options go with a model path, not a loaded engine"):
        nmtdecode.Translator(translator.engine, beam_size=2)


def test_translate_file_refuses_a_beam_dump_that_is_its_output(translator, src_file, tmp_path):
    out = tmp_path / "out.txt"
    with pytest.raises(ConfigError, match="dump_beam: .*out.txt is the job's --output; give it a file of its own"):
        translator.translate_file(str(src_file), str(out), dump_beam=str(out))
    assert not out.exists()


def test_score_is_the_command_lines_score(translator, cli, model_dir, src_file, lines_file):
    targets = [line[::-1] for line in LINES]
    run = cli("score", "--model", model_dir, "--src", src_file, "--tgt", lines_file(targets, "tgt.txt"), text=True)
    assert run.returncode == 0, run.stderr
    expected = [float(x) for x in run.stdout.split()]  # the CLI scores 32 pairs a batch, this 3: rounding
    assert translator.score(LINES, targets) == pytest.approx(expected, abs=1e-4)


def test_options_fixed_at_load_are_refused_per_call(translator, model_dir):
    with pytest.raises(ConfigError, match="device: is fixed when the model loads"):
        translator.translate(["water"], device="cpu")
    with pytest.raises(ConfigError, match="beam_size"):
        translator.translate(["water"], beam_size=0)
    with pytest.raises(ConfigError, match="src"):
        nmtdecode.Translator.load(str(model_dir), src="in.txt")
    with pytest.raises(TypeError, match="list of sources, not one string"):
        translator.translate("water")
    with pytest.raises(TypeError, match="source 1 is NoneType, not a string or a list of pieces"):
        translator.translate(["a", None])
    with pytest.raises(TypeError, match="source 2 has a int at position 1; a list source holds its pieces"):
        translator.translate_batch(["a", ["b"], ["c", 3]])
    with pytest.raises(TypeError, match="prefix 0 is int, not a string"):
        translator.translate(["a"], prefixes=[3])
    with pytest.raises(TypeError, match="target 1 is bytes, not a string"):
        translator.score_batch(["a", "b"], ["x", b"y"])


@pytest.mark.subprocess
def test_import_stays_cheap():
    code = "import sys, nmtdecode; nmtdecode.Translator; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_dir_shows_the_api_and_import_stays_cheap_in_process():
    assert {"Translator", "Translation", "GeneratedToken", "Scored"} <= set(dir(nmtdecode))
    assert set(nmtdecode.__all__) <= set(dir(nmtdecode))


# translate_iterable: lazy, in input order, a window of the command line's size at a time


def counted(lines, read: list):
    """The lines, endlessly, counting in read[0] how many were taken."""
    for line in itertools.cycle(lines):
        read[0] += 1
        yield line


def test_translate_iterable_reads_one_window_of_an_endless_generator(translator):
    read = [0]
    first = list(itertools.islice(translator.translate_iterable(counted(LINES, read), batch_size=1), 3))
    assert first == translator.translate(LINES[:3])
    assert read[0] == chunk_size(1, "sents") == 32  # one window read, not the generator whole


@pytest.mark.parametrize("beam", [1, 4])
def test_translate_iterable_equals_translate_across_windows(translator, beam):
    lines = [f"{line} {i}" if line.strip() else line for i, line in enumerate(LINES * 5)]  # 40: two windows of 32
    prefixes = ["", "Das"] * 20
    out = translator.translate_iterable(iter(lines), prefixes=iter(prefixes), batch_size=1, beam_size=beam)
    assert not isinstance(out, list)
    assert list(out) == translator.translate(lines, prefixes=prefixes, batch_size=1, beam_size=beam)


def test_translate_iterable_checks_each_window(translator):
    lines = ["water"] * 33 + [7]
    texts = translator.translate_iterable(lines, batch_size=1)
    assert next(texts) == translator.translate(["water"])[0]  # the first window decodes
    with pytest.raises(TypeError, match="source 33 is int"):
        list(texts)
    with pytest.raises(ValueError, match="prefixes end before the sources, at source 1"):
        list(translator.translate_iterable(["a", "b"], prefixes=["x"]))
    with pytest.raises(ValueError, match="prefixes end after the sources, at source 2"):
        list(translator.translate_iterable(["a", "b"], prefixes=["x", "y", "z"]))
    with pytest.raises(ValueError, match="prefixes end after the sources, at source 2"):
        list(translator.translate_iterable(["a", "b"], prefixes=["x", "y", None]))  # no prefix is one too
    with pytest.raises(ValueError, match="prefixes end after the sources, at source 0"):
        list(translator.translate_iterable([], prefixes=["x"]))
    with pytest.raises(ConfigError, match="beam_size"):
        translator.translate_iterable(["a"], beam_size=0)  # options: at the call, before any line is read
    with pytest.raises(TypeError, match="not one string"):
        translator.translate_iterable("water")  # would be read a character a line


# generate_tokens: greedy or sampling, a token at a time


@pytest.mark.parametrize("options", [{}, {"sampling": True, "seed": 3, "temperature": 1.5}])
def test_generate_tokens_are_translate_batchs_tokens(translator, options, spm_model):
    for source, prefix in [*zip(LINES, [None] * len(LINES)), ("good morning", "wa"), ("", "water")]:
        [best] = translator.translate_batch([source], [prefix], beam_size=1, **options)[0]
        tokens = list(translator.generate_tokens(source, prefix, **options))
        assert [t.token_id for t in tokens] == best.tokens and [t.step for t in tokens] == list(range(len(tokens)))
        assert [t.piece for t in tokens] == [spm_model.id_to_piece(i) for i in best.tokens]
        assert [t.log_prob for t in tokens] == best.token_scores
        assert (tokens[-1].text if tokens else "") == translator.translate([source], [prefix], beam_size=1, **options)[
            0
        ]


def test_generate_tokens_yields_each_token_after_its_step(translator, monkeypatch):
    """Counted at the step runner the decoder runs (the model's own step, or its traced step on CPU)."""
    steps, runner = [], translator.engine.steps

    class Counted:
        shares_buffers = False

        def init_cache(self, *args):
            return runner.init_cache(*args)

        def decode_step(self, *args):
            steps.append(1)
            return runner.decode_step(*args)

    monkeypatch.setattr(translator.engine, "steps", Counted())
    tokens = translator.generate_tokens(
        "a dog and a cat sleep in the garden .", max_length=6, ban_unk=True, min_length=6
    )
    assert steps == []  # nothing decoded before the first token is asked for
    for n, _ in enumerate(tokens, start=1):
        assert len(steps) == n  # token n came out of step n, before step n + 1 ran
    assert n == 6


def test_generate_tokens_interleaved_with_other_calls_keep_their_own_state(translator, monkeypatch):
    """On CUDA the engine's fixed-shape step (CUDA graphs) decodes every batch in one set of
    buffers; a generator paused mid-sentence must not share them with what runs meanwhile. The
    same step runs eagerly on CPU, so it is installed here to show it."""
    from nmtdecode.models.fixed_step import FixedShapeSteps

    monkeypatch.setattr(translator.engine, "steps", FixedShapeSteps(translator.engine.loaded.model, graphs=False))
    sources = ["a dog and a cat sleep in the garden .", "where is the station ?"]
    first, second = (translator.generate_tokens(s, min_length=4) for s in sources)
    tokens = [[], []]
    for pair in itertools.zip_longest(first, second):
        translator.translate(["the house is red ."])  # a batch of its own in between
        for got, token in zip(tokens, pair):
            got += [] if token is None else [token.token_id]
    assert tokens == [translator.translate_batch([s], beam_size=1, min_length=4)[0][0].tokens for s in sources]


def test_generate_tokens_searches_on_the_host_whatever_search_on(model_dir):
    """generate_tokens reads the host search's records a step at a time: a translator that
    searches on the device (--search-on device) still gives it the host search, and the tokens
    of its greedy translate_batch."""
    translator = nmtdecode.Translator.load(str(model_dir), search_on="device", **OPTIONS)
    source = "a dog and a cat sleep in the garden ."
    tokens = [token.token_id for token in translator.generate_tokens(source, min_length=4)]
    assert tokens == translator.translate_batch([source], beam_size=1, min_length=4)[0][0].tokens


def test_generate_tokens_refuses_a_beam(translator):
    with pytest.raises(ConfigError, match="beam_size: generate_tokens.. decodes greedily or samples"):
        translator.generate_tokens("water", beam_size=4)
    with pytest.raises(ConfigError, match="n_best"):
        translator.generate_tokens("water", sampling=True, n_best=2)
    with pytest.raises(TypeError, match="source 0 is int"):
        translator.generate_tokens(5)


# sources as pieces


@pytest.fixture(scope="module")
def spm_model(model_dir):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=str(model_dir / "spm.model"))


@pytest.fixture(scope="module")
def pieces_of(spm_model):
    return spm_model.encode


@pytest.mark.parametrize("beam", [1, 4])
def test_pieces_translate_as_their_text(translator, pieces_of, beam):
    pieces = [pieces_of(line, out_type=str) for line in LINES]
    assert pieces[1] == pieces[3] == [] and len(pieces[2]) > 5
    assert translator.translate_batch(pieces, beam_size=beam) == translator.translate_batch(LINES, beam_size=beam)
    assert translator.score(pieces, LINES) == translator.score(LINES, LINES)


def test_pieces_report_and_replace_as_their_text(translator, pieces_of):
    """--replace-unk and --report-align read the source's pieces: given as pieces, the line's
    result (the <unk> replaced by the source piece it attends, the Pharaoh pairs) is its text's."""
    from dataclasses import replace

    from nmtdecode.search.base import Hypothesis
    from tests.helpers import UNK

    engine, line = translator.engine, LINES[2]
    cfg = replace(engine.config.decoding, replace_unk=True, report_align=True)
    results = []
    for source in (line, pieces_of(line, out_type=str)):
        example = engine.make_example(0, source, None)
        hyps = [Hypothesis([UNK, 5, UNK], 0.0, 0.0, alignment=[2, 0, 1])]
        results.append(engine.result(example, hyps, cfg))
    by_text, by_pieces = results
    assert by_pieces.source_pieces == by_text.source_pieces == pieces_of(line, out_type=str) + ["</s>"]
    assert by_pieces.pieces == by_text.pieces and by_pieces.pieces[0][0] == by_text.source_pieces[2]
    assert (by_pieces.texts, by_pieces.pharaoh) == (by_text.texts, by_text.pharaoh)


def test_a_piece_not_in_the_vocabulary_is_unk(translator):
    from tests.helpers import UNK

    assert translator.engine.make_example(0, ["no-such-piece", "\u2581water"], None).ids[0] == UNK


# score_batch: per-token log-probs


def test_score_batch_is_the_command_lines_jsonl(translator, cli, model_dir, src_file, lines_file):
    targets = [line[::-1] for line in LINES]
    run = cli(
        "score",
        "--model",
        model_dir,
        "--src",
        src_file,
        "--tgt",
        lines_file(targets, "tgt.txt"),
        "--format",
        "jsonl",
        text=True,
    )
    assert run.returncode == 0, run.stderr
    expected = [json.loads(line) for line in run.stdout.splitlines()]
    scored = translator.score_batch(LINES, targets)
    for ours, theirs in zip(scored, expected, strict=True):
        assert ours.tokens == theirs["tokens"]
        assert ours.token_scores + [ours.eos_score] == pytest.approx(
            theirs["token_scores"] + [theirs["eos_score"]], abs=1e-4
        )
        assert ours.log_prob == pytest.approx(theirs["log_prob"], abs=1e-4)
        assert ours.mean_log_prob == pytest.approx(ours.log_prob / (len(ours.tokens) + 1))  # no forced token here
    assert [s.log_prob for s in scored] == pytest.approx(translator.score(LINES, targets), abs=1e-4)


def test_targets_and_prefixes_may_be_pieces(translator, pieces_of):
    """score_batch's targets and translate_batch's prefixes as target pieces (CTranslate2's
    `target`, `target_prefix`) give what their text gives; a piece the vocabulary lacks is <unk>."""
    from tests.helpers import UNK

    targets = ["the house is red .", "good morning", ""]
    as_pieces = [pieces_of(t, out_type=str) for t in targets]
    by_text, by_pieces = translator.score_batch(LINES[:3], targets), translator.score_batch(LINES[:3], as_pieces)
    assert [(s.tokens, s.token_scores, s.log_prob) for s in by_pieces] == [
        (s.tokens, s.token_scores, s.log_prob) for s in by_text
    ]
    assert translator.score_batch(["water"], [["no-such-piece"]])[0].tokens == [UNK]
    prefixes = ["the", "", "good"]
    assert translator.translate_batch(
        LINES[:3], [pieces_of(p, out_type=str) for p in prefixes], beam_size=3
    ) == translator.translate_batch(LINES[:3], prefixes, beam_size=3)
    with pytest.raises(TypeError, match="target 1 has a int at position 0; a list target holds its pieces"):
        translator.score_batch(["a", "b"], ["a", [3]])


# warnings in the API's terms


def test_options_that_show_in_the_result_are_not_warned_about(translator, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        translator.translate_batch(["water"], n_best=3, beam_size=3, alignment=True, attention=True, token_scores=True)
    assert capsys.readouterr().err == ""  # not the command line's "has no effect with --format text"


def test_options_a_call_cannot_show_are_warned_about_by_keyword(translator, capsys):
    with pytest.warns(nmtdecode.IneffectiveOptionWarning) as caught:
        translator.translate(
            ["water"], n_best=3, beam_size=3, alignment=True, beta=0.5, format="jsonl", report_align=True
        )
    notes = [str(w.message) for w in caught]
    assert any(n.startswith("n_best=3 has no effect on translate()") and "translate_batch()" in n for n in notes)
    assert any(n.startswith("alignment=True has no effect on translate()") for n in notes)
    assert "beta: 0.5 has no effect without coverage_penalty='wu' or 'summary'" in notes
    assert any(n.startswith("format='jsonl' has no effect on translate()") for n in notes)
    assert any(n.startswith("report_align=True has no effect on translate()") for n in notes)
    assert not any("--" in n for n in notes) and capsys.readouterr().err == ""
    assert {w.filename for w in caught} == {__file__}  # pointing at the call


# the documentation's examples


def python_blocks(page) -> list[tuple[int, str]]:
    """The ```python blocks of a markdown page: (line of the opening fence, the block's text)."""
    blocks, start, lines = [], None, []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if start is None and line.strip() == "```python":
            start, lines = number, []
        elif start is not None and line.strip() == "```":
            blocks.append((start, "\n".join(lines) + "\n"))
            start = None
        elif start is not None:
            lines.append(line)
    return blocks


PAGES = [page for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))] if python_blocks(page)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_the_documented_python_examples_run(page, monkeypatch):
    """Every ```python block is a doctest, run from the repository root (the demo model), a
    page's blocks in order in one namespace: each statement runs and each shown result is checked."""
    monkeypatch.chdir(REPO)
    namespace, parser, report = {}, doctest.DocTestParser(), []
    for line, block in python_blocks(page):
        test = parser.get_doctest(block, namespace, f"{page.name}:{line}", str(page), line)
        assert test.examples, f"{page.name}:{line}: a python block without >>> examples runs nothing"
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test, out=report.append, clear_globs=False)
        assert runner.failures == 0, "".join(report)
        namespace = test.globs  # a DocTest runs in a copy: the next block continues this one's


def test_config_shows_the_decoding_options_as_they_apply(cli):
    """Translator.config holds the model's own defaults under the options given to load (the demo
    model's step limit 2*|src|+10), as --dump-config shows them, not the built-in max_len_b: None."""
    import dataclasses

    import yaml

    demo = str(REPO / "data" / "demo")
    decoding = nmtdecode.Translator.load(demo, beam_size=3).config.decoding
    assert (decoding.max_len_a, decoding.max_len_b, decoding.beam_size) == (2.0, 10, 3)
    dumped = yaml.safe_load(cli("translate", "-m", demo, "--beam-size", 3, "--dump-config", text=True).stdout)
    assert {f.name: getattr(decoding, f.name) for f in dataclasses.fields(decoding)} == {
        k: v for k, v in dumped.items() if k in {f.name for f in dataclasses.fields(decoding)}
    }
