"""Other tools' option names (options/peers.py) answered where they come in: every foreign or
unknown flag of a command line, key of a YAML file and keyword of a Python call is named in one
error, each with nmtdecode's equivalent spelt as that way in spells it, or why it has none."""

import re

import pytest
import yaml

from nmtdecode import Translator
from nmtdecode.cli import cli as nmtdecode, command_flags
from nmtdecode.options.config import KEY_SECTION, OPTIONS, PLAN_KEYS, PLAN_OPTIONS, Config, ConfigError
from nmtdecode.options.foreign import flag_message, spelled
from nmtdecode.options.peers import CTRANSLATE2, FAIRSEQ, MARIAN, OPENNMT, PEERS, TRANSFORMERS

from tests import peer_options


def refused(run) -> str:
    """A usage error: exit 2, nothing written, one line; its `nmtdecode: error: ` cut."""
    assert run.returncode == 2 and run.stdout == "", run.stderr
    assert run.stderr.startswith("nmtdecode: error: ") and run.stderr.count("\n") == 1, run.stderr
    return run.stderr[len("nmtdecode: error: ") :].rstrip("\n")


def named(message: str, header: str) -> list[str]:
    """The items of a one-line error naming several: `HEADER(1) item; (2) item`, numbered 1..N."""
    assert message.startswith(header), message
    items = re.split(r"; \((\d+)\) ", "; " + message[len(header) :])[1:]
    numbers, texts = items[0::2], items[1::2]
    assert numbers == [str(n) for n in range(1, len(texts) + 1)], message
    return texts


def command_line(pieces: list[tuple[list[str], str | None]]) -> list[str]:
    return [word for words, _ in pieces for word in words]


def check_named_at_once(run, pieces: list[tuple[list[str], str | None]]):
    """One line counting the foreign flags, then each in order: the flag, then what to write
    instead; our own flags (expected None) and their values are not named."""
    foreign = [(words[0], expected) for words, expected in pieces if expected is not None]
    items = named(refused(run), f"{len(foreign)} unknown options: ")
    assert len(items) == len(foreign), items
    for item, (flag, expected) in zip(items, foreign):
        assert item.startswith(f"{flag}: ") and expected in item, (flag, item)


ONMT_TRANSLATE = (
    "-model M -src a.en -output o.de -beam_size 5 -n_best 2 -replace_unk -batch_size 16 -alpha 0.6 "
    "-beta 0.2 -length_penalty wu -coverage_penalty wu"
).split()


def test_every_flag_of_an_onmt_translate_command_is_named_at_once(cli):
    """A full onmt_translate command is fixed in one pass: each single-dash flag with ours."""
    flags = [word for word in ONMT_TRANSLATE if word.startswith("-")]
    pieces = [
        ([flag], f"that is OpenNMT-py's spelling; nmtdecode's is --{flag[1:].replace('_', '-')}") for flag in flags
    ]
    check_named_at_once(cli("translate", *ONMT_TRANSLATE, text=True), pieces)


MARIAN_DECODER = [
    (["-m", "model.npz"], None),  # -m is ours too: the model
    (["-v", "vocab.src.yml", "vocab.trg.yml"], "no equivalent, remove it: the vocabularies are the model's"),
    (["--beam-size", "6"], None),
    (["--normalize", "0.6"], "nmtdecode's is --length-penalty A (a number means avg: score / length^A"),
    (["-w", "2000"], "Marian's -w (--workspace); nmtdecode has no equivalent, remove it: nothing is preallocated"),
    (["--mini-batch", "64"], "nmtdecode's is --batch-size N"),
    (["--maxi-batch", "100"], "no equivalent, remove it: lines are read many batches at a time"),
    (["--maxi-batch-sort", "src"], "no equivalent, remove it"),
    (["--max-length-factor", "2"], "nmtdecode's is --max-len-a F with --max-len-b 0"),
    (["--allow-unk"], "decoder.yml says whether <unk> may be written (allow-unk: true there)"),
    (["--cpu-threads", "4"], "nmtdecode's is --inter-threads N with --threads 1"),
    (["-i", "in.txt"], "Marian's -i (--input); nmtdecode's is --src FILE"),
    (["-o", "out.txt"], None),
    (["--quiet-translation"], "nmtdecode's is --quiet"),
    (["-n"], "Marian's -n (--normalize); nmtdecode's is --length-penalty A"),
    (["-d", "0"], "nmtdecode's is --device cuda:N"),
    (["-b", "6"], "Marian's -b (--beam-size); nmtdecode's is --beam-size (or -k)"),
]


def test_every_flag_of_a_marian_decoder_command_is_named_at_once(cli):
    check_named_at_once(cli("translate", *command_line(MARIAN_DECODER), text=True), MARIAN_DECODER)


FAIRSEQ_INTERACTIVE = [
    (["data-bin"], None),  # fairseq's data directory: a word, not a flag
    (["--path", "model.pt"], "nmtdecode's is --model PATH for a model nmtdecode reads: not fairseq's .pt"),
    (["--source-lang", "en"], "nmtdecode's is --src-lang LANG for a multilingual model"),
    (["--target-lang", "de"], "nmtdecode's is --tgt-lang LANG"),
    (["--beam", "5"], "nmtdecode's is --beam-size K"),
    (["--nbest", "2"], "nmtdecode's is --n-best N"),
    (["--lenpen", "0.6"], "nmtdecode's is --length-penalty A"),
    (["--sampling"], None),
    (
        ["--sampling-topk", "10"],
        "nmtdecode's is --top-k K with --sampling (their -1, the whole distribution, is --top-k 0)",
    ),
    (["--sampling-topp", "0.9"], "nmtdecode's is --top-p P with --sampling (their -1, no nucleus, is --top-p 1)"),
    (["--temperature", "0.7"], None),
    (["--unkpen", "1"], "no equivalent, remove it: there is no finite <unk> penalty; --ban-unk never writes <unk>"),
    (["--buffer-size", "100"], "no equivalent, remove it: lines are read many batches at a time"),
    (["--remove-bpe", "sentencepiece"], "no equivalent, remove it: the output is text already"),
    (["--max-tokens", "4000"], "nmtdecode's is --batch-size N with --batch-type tokens"),
    (["--cpu"], "nmtdecode's is --device cpu"),
    (["--input", "in.txt"], "that is Marian's and fairseq's; nmtdecode's is --src FILE"),
    (["-t", "de"], "fairseq's -t (--target-lang); nmtdecode's is --tgt-lang LANG"),
]


def test_every_flag_of_a_fairseq_interactive_command_is_named_at_once(cli):
    check_named_at_once(cli("translate", *command_line(FAIRSEQ_INTERACTIVE), text=True), FAIRSEQ_INTERACTIVE)


def test_unknown_flags_are_named_with_the_nearest_of_the_commands_own(cli):
    items = named(
        refused(cli("translate", "--beem-size", "3", "--formta=jsonl", "-x", text=True)), "3 unknown options: "
    )
    assert items[0] == "--beem-size: no such option (did you mean --beam-size or --batch-size?)"
    assert items[1].startswith("--formta: no such option (did you mean --format")
    assert items[2] == "-x: no such option (nmtdecode translate --help lists them)"
    line = refused(cli("score", "--model", "m", "--src", "a", "--tgt", "b", "--beam-size", "4", text=True))
    assert line == "--beam-size: nmtdecode score has no such option (--beam-size is translate's)"


def test_values_and_clicks_own_spellings_are_not_taken_for_flags(cli, tmp_path):
    """A value that starts with a dash (a number, stdin, a prefix) and click's `-qk3` (-q, then -k
    with 3) are the command's own; only words in a flag's place are checked."""
    run = cli(
        "translate", "-qk3", "--alpha", "-0.5", "--source-prefix", "-x ", "--src", "-", "--dump-config", text=True
    )
    assert run.returncode == 0, run.stderr
    assert "beam_size: 3\n" in run.stdout and "alpha: -0.5\n" in run.stdout and "source_prefix: '-x '\n" in run.stdout
    assert "quiet: true\n" in run.stdout


def test_a_marian_decoder_yml_given_to_c_points_to_model(tmp_path, cli):
    """marian-decoder -c decoder.yml: one line saying where the file goes (--model), not its eight
    keys with the nearest spellings of unrelated options."""
    decoder = tmp_path / "decoder.yml"
    decoder.write_text(
        "models:\n  - opus.npz\nvocabs:\n  - opus.vocab.yml\n  - opus.vocab.yml\nbeam-size: 6\nnormalize: 0.6\n"
        "word-penalty: 0\nmini-batch: 16\nmaxi-batch: 100\nrelative-paths: true\n"
    )
    line = refused(cli("translate", "-c", decoder, "--src", "a.en", text=True))
    assert f"config file {decoder} is Marian's decoder.yml" in line and f"give --model {tmp_path}," in line
    assert "did you mean" not in line
    npz_yml = tmp_path / "model.npz.decoder.yml"
    npz_yml.write_text(decoder.read_text())
    line = refused(cli("translate", "-c", npz_yml, text=True))
    assert f"give --model {tmp_path / 'model.npz'}," in line


def test_a_yaml_files_foreign_keys_are_answered_in_yaml(tmp_path, cli):
    config = tmp_path / "job.yaml"
    config.write_text("num_beams: 4\nnormalize: 0.6\nsampling-topk: 5\nunkpen: 1\nbeam_size: 4\n")
    items = named(
        refused(cli("translate", "-c", config, "--dump-config", text=True)),
        f"config file {config}: 4 unknown options: ",
    )
    assert items == [
        "line 1: unknown option 'num_beams' (a transformers name): nmtdecode's is beam_size: K",
        "line 2: unknown option 'normalize' (a Marian name): nmtdecode's is length_penalty: A (a number means "
        "avg: score / length^A, </s> counted, as Marian's; its --normalize alone is 1)",
        "line 3: unknown option 'sampling_topk' (a fairseq name): nmtdecode's is top_k: K with sampling: true "
        "(their -1, the whole distribution, is top_k: 0)",
        "line 4: unknown option 'unkpen' (a fairseq name): nmtdecode has no equivalent, remove it: there is no "
        "finite <unk> penalty; ban_unk: true never writes <unk>",
    ]


def test_transformers_names_in_python_are_answered_with_ours(model_dir, tmp_path):
    """Before any model loads (load() of a missing path), and on a call: every name at once."""
    with pytest.raises(ConfigError) as error:
        Translator.load(str(tmp_path / "missing"), num_beams=4)
    assert str(error.value) == "load(): unknown option 'num_beams' (a transformers name): nmtdecode's is beam_size=K"
    translator = Translator.load(str(model_dir))
    with pytest.raises(ConfigError) as error:
        translator.translate(["good morning"], num_beams=4, max_new_tokens=9, do_sample=True, num_return_sequences=2)
    items = named(str(error.value), "translate(): 4 unknown options: ")
    assert [item.split(":")[0] for item in items] == [
        f"unknown option '{name}' (a transformers name)"
        for name in ("do_sample", "max_new_tokens", "num_beams", "num_return_sequences")
    ]
    for item, ours in zip(items, ("sampling=True", "max_length=N", "beam_size=K", "n_best=N")):
        assert f"nmtdecode's is {ours}" in item
    with pytest.raises(ConfigError, match=r"^translate_batch\(\): unknown option 'typical_p' .*no equivalent"):
        translator.translate_batch(["good morning"], typical_p=0.9)


@pytest.mark.parametrize("given, ours", [("True", "true"), ("False", "false"), ("Never", "never"), ("TOP", "top")])
def test_early_stopping_as_python_writes_it(given, ours, tmp_path, cli):
    """`--early-stopping True` (as transformers' users write it) is `true`, on the command line, in
    YAML and in a call; a Python bool too."""
    run = cli("translate", "--early-stopping", given, "--dump-config", text=True)
    assert run.returncode == 0 and yaml.safe_load(run.stdout)["early_stopping"] == ours, run.stderr
    config = tmp_path / "job.yaml"
    config.write_text(f"early_stopping: '{given}'\n")
    run = cli("translate", "-c", config, "--dump-config", text=True)
    assert run.returncode == 0 and yaml.safe_load(run.stdout)["early_stopping"] == ours, run.stderr
    assert Config.from_values({"early_stopping": given}).decoding.early_stopping == ours
    assert (
        Config.from_values({"early_stopping": given == "True"}).decoding.early_stopping == str(given == "True").lower()
    )


@pytest.mark.parity
@pytest.mark.slow  # transformers' import, when it runs alone
def test_transformers_names_decode_as_generate_does(tmp_path):
    """The table's answers for num_beams, num_return_sequences, max_new_tokens and min_new_tokens,
    given to nmtdecode, give generate()'s tokens and scores: the lengths count alike."""
    from tests.models.formats.test_huggingface_parity import batch, build, hf_generate, ours_generate

    hf, ours, defaults, rules = build("marian", tmp_path)
    rows, ids, mask = batch(1)
    theirs = dict(num_beams=4, num_return_sequences=2, max_new_tokens=6, min_new_tokens=3)
    ours_options = {first_key(TRANSFORMERS.ours[name]): value for name, value in theirs.items()}
    assert ours_options == dict(beam_size=4, n_best=2, max_length=6, min_length=3)
    expected, scores = hf_generate(hf, ids, mask, early_stopping=True, **theirs)
    got = ours_generate(ours, defaults, rules, rows, early_stopping="true", **ours_options)
    assert [h.tokens for n in got for h in n] == expected
    assert [h.score for n in got for h in n] == pytest.approx(scores.tolist(), abs=1e-4)
    assert max(map(len, expected)) == 6 and not all(h.ended for n in got for h in n)  # the limit was reached
    assert min(len(t) for t in expected) >= 3  # EOS comes after 3 tokens at least: min_new_tokens 3 ...
    unbounded, _ = hf_generate(hf, ids, mask, early_stopping=True, **{**theirs, "min_new_tokens": 0})
    assert min(len(t) for t in unbounded) < 3  # ... which changed some output
    from transformers import GenerationConfig

    assert GenerationConfig._get_default_generation_params()["top_k"] == 50  # do_sample's answer says so


def first_key(text: str) -> str:
    return re.match(r"\{([a-z_]+)", text).group(1)


# The tables themselves.
NOTATION = re.compile(r"\{([a-z_]+)(?:=[^}]*)?\}")
ANSWERS = [(peer, name, text) for peer in PEERS for table in (peer.ours, peer.without) for name, text in table.items()]


def test_no_other_tools_name_is_ours():
    """A name of the tables that is ours would never be looked up (ours is read first)."""
    assert not {name for _, name, _ in ANSWERS} & {*KEY_SECTION, *PLAN_KEYS}


def test_a_name_two_tools_share_means_the_same():
    texts: dict[str, set[str]] = {}
    for _, name, text in ANSWERS:
        texts.setdefault(name, set()).add(text)
    assert {name: found for name, found in texts.items() if len(found) > 1} == {}


def test_every_answer_names_options_that_exist():
    named = {key for _, _, text in ANSWERS for key in NOTATION.findall(text)}
    assert named <= {*KEY_SECTION, *PLAN_OPTIONS}
    assert all(text.count("{") == len(NOTATION.findall(text)) for _, _, text in ANSWERS)  # no stray brace


def test_every_answer_on_the_command_line_names_flags_translate_has():
    flags = set(command_flags(nmtdecode, "translate"))
    written = {flag for _, _, text in ANSWERS for flag in re.findall(r"--[a-z][a-z-]*", spelled(text, "flag"))}
    assert written - flags <= {"--tgt", "--normalize"}  # score's --tgt; Marian's own --normalize, named


def test_each_short_flag_is_anothers_long_one_and_not_translates():
    for peer in PEERS:
        for short, theirs in peer.shorts.items():
            assert theirs in peer.ours or theirs in peer.without or theirs in KEY_SECTION, (peer.name, short)
            assert short not in {o.short for o in OPTIONS.values()} | {"-c", "-h"}, (peer.name, short)


def test_the_notation_as_each_way_in_spells_it():
    text = "{top_k=K} with {sampling} ({device=cuda:N}, {ban_unk=false}, {alpha=0.6}, {model})"
    assert spelled(text, "flag") == "--top-k K with --sampling (--device cuda:N, --no-ban-unk, --alpha 0.6, --model)"
    assert spelled(text, "key") == "top_k: K with sampling: true (device: cuda:N, ban_unk: false, alpha: 0.6, model)"
    assert spelled(text, "call") == "top_k=K with sampling=True (device='cuda:N', ban_unk=False, alpha=0.6, model)"


# The tables against the tools' own definitions: each name is one of the tool's options (read
# from the installed tool, or from tests/peer_options.py, which cites where each tool defines
# them), each one-letter flag is the tool's spelling of that option, and every decoding option of
# marian-decoder and fairseq-interactive is answered on the command line: ours, or the table's.
def tabled(peer) -> set[str]:
    return {*peer.ours, *peer.without}


@pytest.mark.parametrize(
    "peer, defined", [(MARIAN, peer_options.MARIAN_DECODER), (FAIRSEQ, peer_options.FAIRSEQ_INTERACTIVE)]
)
def test_a_tools_names_and_short_flags_are_its_own(peer, defined):
    longs = [spelling for name, others in defined.items() for spelling in ("--" + name, *others)]
    assert tabled(peer) <= {flag[2:].replace("-", "_") for flag in longs if flag.startswith("--")}
    their_shorts = {short: name.replace("-", "_") for name, others in defined.items() for short in others}
    assert {short: their_shorts.get(short) for short in peer.shorts} == peer.shorts


# Options of theirs left to the nearest spelling: none changes what is decoded.
NOT_ANSWERED = {
    "--authors", "--cite", "--build-info", "--check-nan",  # Marian's about-the-program and debugging switches
    "--interpolate-env-vars",  # Marian's ${VAR} in paths: the shell expands them here
    "--no-beamable-mm",  # fairseq's switch for an implementation detail of its beam's attention
}  # fmt: skip


@pytest.mark.parametrize(
    "defined", [peer_options.MARIAN_DECODER, peer_options.FAIRSEQ_INTERACTIVE], ids=["marian-decoder", "fairseq"]
)
def test_every_decoding_option_of_marian_and_fairseq_is_answered(defined):
    ours = command_flags(nmtdecode, "translate")
    guessed = []
    for name, others in defined.items():
        for flag in ("--" + name, *others):
            message = flag_message(flag, ours, "translate")
            if message is None:
                assert flag in ours, flag  # a flag of ours (same spelling)
            elif "no such option" in message and flag not in NOT_ANSWERED:
                guessed.append(message)
    assert guessed == []


@pytest.mark.slow  # OpenNMT-py's import
def test_opennmt_names_are_onmt_translates_options():
    """Read from the installed OpenNMT-py's own parser; eole's compute_dtype (its predict config:
    tests/peer_eole.py writes it) is the one name it lacks."""
    from tests.peer_opennmt import ArgumentParser, opts

    parser = ArgumentParser()
    opts.translate_opts(parser)
    assert tabled(OPENNMT) - {action.dest for action in parser._actions} == {"compute_dtype"}


def test_ctranslate2_names_are_its_translators_keywords():
    import ctranslate2

    signatures = ctranslate2.Translator.__init__.__doc__ + ctranslate2.Translator.translate_batch.__doc__
    keywords = set(re.findall(r"(\w+): ", signatures.split("\n\n")[0] + signatures))
    assert tabled(CTRANSLATE2) <= keywords


@pytest.mark.slow  # transformers' import
def test_transformers_names_are_generates_or_from_pretrained():
    """GenerationConfig's fields and generate()'s parameters, from the installed transformers;
    torch_dtype (now also spelt dtype, as ours) and device_map are keywords from_pretrained() reads."""
    import inspect

    from transformers import GenerationConfig, GenerationMixin, PreTrainedModel

    generate = set(GenerationConfig().to_dict()) | set(inspect.signature(GenerationMixin.generate).parameters)
    loading = tabled(TRANSFORMERS) - generate
    assert loading == {"torch_dtype", "device_map"}
    assert loading <= set(re.findall(r'kwargs\.pop\("(\w+)"', inspect.getsource(PreTrainedModel.from_pretrained)))
