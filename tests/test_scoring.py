"""`score` feeds the decoder what `translate` feeds it, and counts what `translate` counts (issue 19).

The decoder input of a scored target is the decoder start token, then the token
forced at step 0 where the model has one (mBART-50/M2M100/NLLB's target-language
tag, BART's BOS), then the target; EOS is predicted last. The forced token counts
0, as in `translate` (it is forced, not chosen). So, for every family, the score of
the model's own ended translation equals translate's `log_prob`, and equals the sum
of the `transformers` model's log-softmax over the same decoder input.
"""

import json

import pytest
import torch

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.loading import load_model

from tests.models.formats.test_huggingface_parity import EOS, batch, build, ours_generate

# The generation settings that make each family force a first token as its real checkpoints do:
# BART (bart-large-cnn) forces BOS, mBART-50 and M2M100/NLLB the target-language tag. The tags and
# the input batches (seeds) are chosen so that the random models end hypotheses at many lengths.
FORCED = {
    "marian": {},
    "bart": {"forced_bos_token_id": 0},
    "mbart": {"forced_bos_token_id": 60},
    "m2m_100": {"forced_bos_token_id": 30},
    "pegasus": {},
}
BATCH = {"marian": 0, "bart": 3, "mbart": 0, "m2m_100": 2, "pegasus": 0}
MAX_LENGTH = 20


def prefix_of(model, rules) -> list[int]:
    return [model.cfg.decoder_start_id] + ([] if rules.forced_bos_id is None else [rules.forced_bos_id])


@pytest.mark.parity
@pytest.mark.parametrize("family", FORCED)
def test_score_of_own_translations_is_their_log_prob_and_transformers_sum(family, tmp_path):
    hf, ours, defaults, rules = build(family, tmp_path, num_beams=4, max_length=MAX_LENGTH, **FORCED[family])
    assert (rules.forced_bos_id is None) == (family in ("marian", "pegasus"))
    prefix = prefix_of(ours, rules)
    rows, _, _ = batch(BATCH[family])
    nbest = ours_generate(ours, defaults, rules, rows, n_best=4)
    sources, targets, totals, decoder_inputs, hyps_scored = [], [], [], [], []
    for row, hyps in zip(rows, nbest):
        for hyp in hyps:
            # ended with EOS, and before the step limit (where no EOS would be forced)
            if not hyp.ended or len(hyp.tokens) + 1 >= MAX_LENGTH - 1:
                continue
            forced, target = hyp.tokens[: len(prefix) - 1], hyp.tokens[len(prefix) - 1 :]
            assert forced == prefix[1:]  # translate generated the forced token first
            sources.append(row)
            targets.append(target)
            totals.append(hyp.total)
            hyps_scored.append(hyp)
            decoder_inputs.append(prefix + target)
    assert len(sources) >= 6 and len({len(t) for t in targets}) > 2  # padded batch of mixed lengths

    translator = BatchDecoder(ours, DecodingConfig(), rules)
    scores = translator.score(sources, targets)
    assert scores == pytest.approx(totals, abs=1e-4)
    # per token (the JSONL of `score`), as translate's hypotheses: the forced token first, scored 0
    for (tokens, token_scores, eos_score), hyp in zip(translator.score_tokens(sources, targets), hyps_scored):
        assert tokens == hyp.tokens and token_scores == pytest.approx(hyp.token_scores, abs=1e-4)
        assert len(token_scores) == len(tokens) and eos_score == pytest.approx(hyp.eos_score, abs=1e-4)

    expected = []
    with torch.no_grad():
        for source, target, decoder_input in zip(sources, targets, decoder_inputs):
            logits = hf(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([decoder_input])).logits[0]
            logprobs = torch.log_softmax(logits.float(), dim=-1)[len(prefix) - 1 :]  # after the forced token
            gold = torch.tensor(target + [EOS])
            expected.append(logprobs.gather(1, gold[:, None]).sum().item())
    assert scores == pytest.approx(expected, abs=1e-4)


def test_native_score_of_own_translations_is_their_log_prob(model_dir, lines_file, cli):
    """translate's JSONL tokens and log_prob from the command line, scored through the decoder that
    `score` runs (the random model's text does not re-tokenize to the same ids, so ids are scored)."""
    from tests.test_cli import LINES

    lines = [line for line in LINES if line.strip()] + ["the dog is in the house .", "a red cat"]
    run = cli(
        "translate",
        "--model",
        model_dir,
        "--src",
        lines_file(lines),
        "--beam-size",
        4,
        "--n-best",
        4,
        "--max-length",
        30,
        "--format",
        "jsonl",
        "--token-scores",
        "--quiet",
        text=True,
    )
    assert run.returncode == 0, run.stderr
    loaded = load_model(str(model_dir))
    sources, targets, totals = [], [], []
    for line, record in zip(lines, run.stdout.splitlines()):
        for hyp in json.loads(record)["hypotheses"]:
            if hyp["ended"]:
                sources.append(loaded.tokenizer.encode(line))
                targets.append(hyp["tokens"])
                totals.append(hyp["log_prob"])
    assert len(sources) >= 8 and len({len(t) for t in targets}) > 1
    assert loaded.rules.forced_bos_id is None  # native models force nothing
    scores = BatchDecoder(loaded.model, DecodingConfig(), loaded.rules).score(sources, targets)
    assert scores == pytest.approx(totals, abs=1e-4)


def m2m100_directory(root):
    """A seeded random M2M100 model with its tokenizer files (SentencePiece, vocab.json, language codes)."""
    import transformers

    from tests.models.formats.test_hf_tokenizers import _quiet, _train

    root.mkdir()
    sp = _train(root / "sentencepiece.bpe.model", "bpe")
    pieces = sorted(sp.id_to_piece(i) for i in range(3, sp.get_piece_size()))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{p: 4 + i for i, p in enumerate(pieces)}}
    (root / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = transformers.M2M100Tokenizer(
        str(root / "vocab.json"), str(root / "sentencepiece.bpe.model"), src_lang="en", language_codes="m2m100"
    )
    _quiet(lambda: tokenizer.save_pretrained(str(root)))
    torch.manual_seed(0)
    vocab_size = max(tokenizer.get_lang_id(code) for code in tokenizer.lang_code_to_id) + 9  # + 8 "madeupword"s
    config = transformers.M2M100Config(
        vocab_size=vocab_size,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        dropout=0.0,
        forced_eos_token_id=None,
    )
    hf = transformers.M2M100ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, 0.4)
    hf.generation_config = transformers.GenerationConfig(decoder_start_token_id=2, eos_token_id=2, pad_token_id=1)
    hf.save_pretrained(root)
    return root, hf, tokenizer


@pytest.mark.parity
def test_cli_score_forces_the_tgt_lang_tag(tmp_path, lines_file, cli):
    """`score --tgt-lang` scores after the target-language tag, as translate decodes; the tag's own
    probability is not counted, and the score is transformers' sum over the same decoder input."""
    root, hf, tokenizer = m2m100_directory(tmp_path / "m2m")
    sources, targets = ["The small cat walks.", "Hello world."], ["A green river!", "Bread and water"]
    src, tgt = lines_file(sources, "src.txt"), lines_file(targets, "tgt.txt")
    scores = {}
    for lang in ("fr", "de"):
        run = cli(
            "score",
            "-m",
            root,
            "-s",
            src,
            "-t",
            tgt,
            "--tgt-lang",
            lang,
            "--src-lang",
            "en",
            "--batch-size",
            1,
            "--device",
            "cpu",
            text=True,
        )
        assert run.returncode == 0, run.stderr
        scores[lang] = [float(x) for x in run.stdout.split()]
        expected = []
        tokenizer.tgt_lang = lang
        with torch.no_grad():
            for source, target in zip(sources, targets):
                ids = tokenizer(source).input_ids  # __en__ ... </s>
                labels = tokenizer(text_target=target).input_ids[1:]  # __fr__ ... </s> without the tag
                decoder_input = [2, tokenizer.get_lang_id(lang)] + labels[:-1]
                logits = hf(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([decoder_input])).logits[0]
                logprobs = torch.log_softmax(logits, dim=-1)[1:]
                expected.append(logprobs.gather(1, torch.tensor(labels)[:, None]).sum().item())
        assert scores[lang] == pytest.approx(expected, abs=1e-4)
    assert all(abs(a - b) > 1e-3 for a, b in zip(scores["fr"], scores["de"]))  # the tag is fed


def test_cli_score_options(model_dir, tmp_path, lines_file, cli):
    """--batch-size does not change a score; -c gives the model and options (a translate config's
    other keys are left to translate); --dtype computes in that precision; flags win over the file."""
    sources = ["the house is red .", "good morning", "a dog and a cat sleep in the garden .", "water"]
    src, tgt = lines_file(sources, "src.txt"), lines_file(["a dog .", "thank you", "the cat", "red"], "tgt.txt")

    def score(*args):
        run = cli("score", "-s", src, "-t", tgt, "--device", "cpu", *args, text=True)
        assert run.returncode == 0, run.stderr
        return [float(x) for x in run.stdout.split()]

    base = score("-m", model_dir)
    assert len(base) == 4
    assert score("-m", model_dir, "--batch-size", 1) == pytest.approx(base, abs=1e-5)
    config = tmp_path / "sub" / "c.yaml"
    config.parent.mkdir()
    config.write_text(f"model: ../{model_dir.name}\nbeam_size: 4\nsrc: in.en\nbatch_size: 3\n")
    (tmp_path / model_dir.name).symlink_to(model_dir)
    assert score("-c", config) == pytest.approx(base, abs=1e-5)
    half = score("-c", config, "--dtype", "bf16", "--batch-size", 2)
    assert half == pytest.approx(base, abs=0.1) and half != base


def test_cli_score_usage_errors(model_dir, tmp_path, lines_file, cli):
    src, tgt = lines_file(["good morning"], "src.txt"), lines_file(["thank you"], "tgt.txt")
    run = cli("score", "-s", src, "-t", tgt, text=True)
    assert run.returncode == 2 and "give the model" in run.stderr
    run = cli("score", "-m", model_dir, "-s", src, "-t", tgt, "--tgt-lang", "de", text=True)
    assert run.returncode == 2 and "has no language tags" in run.stderr
    (tmp_path / "bad.yaml").write_text("modle: x\n")
    run = cli("score", "-c", tmp_path / "bad.yaml", "-m", model_dir, "-s", src, "-t", tgt, text=True)
    assert run.returncode == 2 and "unknown option 'modle'" in run.stderr


@pytest.mark.parity
def test_cli_score_jsonl_per_token_and_output_file(tmp_path, lines_file, cli):
    """--format jsonl: tokens (the forced tag first, no EOS), token_scores one per token (the tag's 0
    first) and eos_score apart, the shape of translate's JSONL hypotheses; each token's log-prob is
    transformers'; --output writes the file (through OUTPUT.tmp) and nothing to stdout."""
    root, hf, tokenizer = m2m100_directory(tmp_path / "m2m")
    sources, targets = ["The small cat walks.", "Hello world.", "Green tree!"], ["A green river!", "Bread", ""]
    common = (
        "-m",
        root,
        "-s",
        lines_file(sources, "src.txt"),
        "-t",
        lines_file(targets, "tgt.txt"),
        "--tgt-lang",
        "fr",
        "--device",
        "cpu",
    )
    out = tmp_path / "scores.jsonl"
    run = cli("score", *common, "--format", "jsonl", "--output", out, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "" and not (tmp_path / "scores.jsonl.tmp").exists()
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["index"] for r in records] == [0, 1, 2]
    tag = tokenizer.get_lang_id("fr")
    tokenizer.tgt_lang = "fr"
    with torch.no_grad():
        for record, source, target in zip(records, sources, targets):
            labels = tokenizer(text_target=target).input_ids[1:]  # __fr__ ... </s> without the tag
            assert record["tokens"] == [tag] + labels[:-1]
            assert len(record["token_scores"]) == len(record["tokens"]) and record["token_scores"][0] == 0.0
            total = sum(record["token_scores"]) + record["eos_score"]
            assert total == pytest.approx(record["log_prob"], abs=1e-9)
            logits = hf(
                input_ids=torch.tensor([tokenizer(source).input_ids]),
                decoder_input_ids=torch.tensor([[2] + record["tokens"]]),
            ).logits[0]
            expected = torch.log_softmax(logits, dim=-1)[1:].gather(1, torch.tensor(labels)[:, None])[:, 0]
            assert record["token_scores"][1:] + [record["eos_score"]] == pytest.approx(expected.tolist(), abs=1e-4)
    text = cli("score", *common, text=True)
    assert [float(x) for x in text.stdout.split()] == pytest.approx([r["log_prob"] for r in records], abs=1e-5)


def test_cli_score_cuts_long_sources_as_translate_and_names_the_lines(model_dir, lines_file, cli):
    """A source longer than the model's positions (or --max-src-length) is cut as translate cuts
    it (its first pieces, then EOS): the score is that of the cut ids, and a warning names the
    lines. A target the decoder has no positions for fails, naming its line (exit 1)."""
    loaded = load_model(str(model_dir))
    long_line = " ".join(["the dog is in the house ."] * 40)  # > 128 pieces
    sources, targets = ["hi", long_line, long_line], ["a dog .", "the cat", "red house"]
    src, tgt = lines_file(sources, "src.txt"), lines_file(targets, "tgt.txt")
    translator = BatchDecoder(loaded.model, DecodingConfig(), loaded.rules)
    eos = loaded.model.cfg.eos_id
    target_ids = [loaded.tokenizer.encode_target(t) for t in targets]
    for limit, flags in ((128, ()), (9, ("--max-src-length", 9))):
        run = cli("score", "-m", model_dir, "-s", src, "-t", tgt, "--device", "cpu", *flags, text=True)
        assert run.returncode == 0, run.stderr
        assert "source lines 2, 3 longer than" in run.stderr
        ids = [loaded.tokenizer.encode(s) for s in sources]
        assert len(ids[0]) <= limit < len(ids[1])
        cut = [i if len(i) <= limit else i[: limit - 1] + [eos] for i in ids]
        assert [float(x) for x in run.stdout.split()] == pytest.approx(translator.score(cut, target_ids), abs=1e-4)
    long_target = lines_file(["a dog .", long_line, "red"], "long.txt")
    run = cli("score", "-m", model_dir, "-s", src, "-t", long_target, "--device", "cpu", text=True)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "target line 2 has" in run.stderr


def test_cli_score_batches_as_translate_writes_in_input_order_and_reports_perplexity(
    model_dir, lines_file, cli, monkeypatch
):
    """Pairs are sorted by source length and cut into batches as translate cuts its lines (here a
    token budget), each score is the pair's own, written in input order; the summary gives the
    pairs, the target tokens (EOS included) and the mean log-prob per token with its perplexity."""
    import math
    import re

    loaded = load_model(str(model_dir))
    sources = ["water", "a dog and a cat sleep in the garden .", "good morning", "", "the house is red .", "thank you"]
    targets = ["red", "the cat", "", "a dog .", "good", "my friend reads a book ."]
    src, tgt = lines_file(sources, "src.txt"), lines_file(targets, "tgt.txt")
    seen, original = [], BatchDecoder.score

    def recording(self, batch_sources, batch_targets):
        seen.append([len(s) for s in batch_sources])
        return original(self, batch_sources, batch_targets)

    monkeypatch.setattr(BatchDecoder, "score", recording)
    run = cli(
        "score",
        "-m",
        model_dir,
        "-s",
        src,
        "-t",
        tgt,
        "--batch-type",
        "tokens",
        "--batch-size",
        24,
        "--threads",
        1,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    lengths = [len(loaded.tokenizer.encode(s)) for s in sources]
    assert [n for batch in seen for n in batch] == sorted(lengths, reverse=True)  # longest first, as translate
    assert len(seen) > 1 and all(len(b) * b[0] <= 24 for b in seen)  # the budget counts padding
    alone = BatchDecoder(loaded.model, DecodingConfig())
    expected = [
        original(alone, [loaded.tokenizer.encode(s)], [loaded.tokenizer.encode_target(t)])[0]
        for s, t in zip(sources, targets)
    ]
    scores = [float(x) for x in run.stdout.split()]
    assert scores == pytest.approx(expected, abs=1e-5)
    tokens = sum(len(loaded.tokenizer.encode_target(t)) + 1 for t in targets)
    summary = re.search(
        r"nmtdecode: 6 pairs, (\d+) target tokens in .* s \(.* tokens/s\); log-prob per token "
        r"(-?[\d.]+), perplexity ([\d.]+)",
        run.stderr,
    )
    assert summary and int(summary[1]) == tokens
    assert float(summary[2]) == pytest.approx(sum(scores) / tokens, abs=1e-4)
    assert float(summary[3]) == pytest.approx(math.exp(-sum(scores) / tokens), rel=1e-3)
    quiet = cli("score", "-m", model_dir, "-s", src, "-t", tgt, "-q", text=True)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert [float(x) for x in quiet.stdout.split()] == pytest.approx(scores, abs=1e-5)  # other batches: rounding


def test_cli_score_dump_config_and_refused_formats(model_dir, lines_file, cli, tmp_path):
    src = lines_file(["good morning"], "src.txt")
    (tmp_path / "c.yaml").write_text(f"model: {model_dir}\nbatch_size: 4096\nbatch_type: tokens\nformat: nbest\n")
    dumped = cli("score", "-c", tmp_path / "c.yaml", "--dump-config", text=True)
    assert dumped.returncode == 0 and "batch_size: 4096\nbatch_type: tokens\n" in dumped.stdout
    run = cli("score", "-m", model_dir, "-s", src, "-t", src, "--format", "nbest", text=True)
    assert run.returncode == 2 and "'nbest' is not one of 'text', 'jsonl'" in run.stderr


def test_cli_score_normalize_gives_each_lines_mean_per_scored_token(model_dir, lines_file, cli):
    """marian-scorer's --normalize: each line's log-probability divided by the tokens scored (the
    target's and its EOS), in text and as mean_log_prob in jsonl; the totals stay in log_prob."""
    sources, targets = (
        lines_file(["good morning", "the house is red .", ""], "s.txt"),
        lines_file(["thank you", "a dog", "x y z"], "t.txt"),
    )
    common = ["score", "--model", model_dir, "--src", sources, "--tgt", targets, "-q"]
    records = [json.loads(line) for line in cli(*common, "--format", "jsonl", text=True).stdout.splitlines()]
    means = [r["log_prob"] / (len(r["tokens"]) + 1) for r in records]
    normalized = cli(*common, "--normalize", text=True)
    assert normalized.returncode == 0, normalized.stderr
    assert [float(x) for x in normalized.stdout.split()] == pytest.approx(means, abs=2e-6)
    assert [float(x) for x in cli(*common, text=True).stdout.split()] == pytest.approx(
        [r["log_prob"] for r in records], abs=2e-6
    )
    with_mean = [
        json.loads(line) for line in cli(*common, "--format", "jsonl", "--normalize", text=True).stdout.splitlines()
    ]
    assert [r.pop("mean_log_prob") for r in with_mean] == pytest.approx(means) and with_mean == records
