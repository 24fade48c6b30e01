"""T5, MADLAD-400, ByT5 and Pegasus directories as users hold them (a model and its tokenizer
files, saved by transformers), decoded through the command line, the config file and the Python
API: the same text as `transformers` `generate` and `batch_decode` under the model's own
generation_config.json, with the source as its users write it (a task prefix, MADLAD's `<2xx>`)."""

import pytest
import torch
import transformers

import nmtdecode

from tests.models.formats.t5_models import build
from tests.models.formats.test_hf_spiece import MADLAD_TAGS, _pegasus, _t5
from tests.models.formats.test_hf_tokenizers import _sentences

pytestmark = pytest.mark.parity  # against a peer library: in make test, not in make test-fast

LINES = [" ".join(s.split()[:6]) for s in _sentences(3)[:7]]
PREFIX = "translate English to German: "
GENERATION = dict(num_beams=3, max_length=14)
EOS_BIAS = 1.0  # Pegasus's: its outputs end at different steps


def with_tokenizer(tokenizer_dir, model_dir, variant, seed=0, **config):
    """A `variant` model sized to the tokenizer in `tokenizer_dir`, saved with it in `model_dir`."""
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    config = dict(vocab_size=len(hf_tokenizer), pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, **config)
    hf, _, _, _ = build(variant, model_dir, seed=seed, config=config, **GENERATION)
    hf_tokenizer.save_pretrained(model_dir)
    return hf, hf_tokenizer


def expected(hf, tokenizer, sources):
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        return tokenizer.batch_decode(hf.generate(**batch), skip_special_tokens=True)


def translate(cli, model_dir, *options, lines=LINES):
    run = cli("translate", "--model", model_dir, "--quiet", *options, stdin="\n".join(lines) + "\n", text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout.split("\n")[:-1]


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    """A v1.1 T5 with its tokenizer (five sentinels): (directory, transformers model, tokenizer)."""
    root = tmp_path_factory.mktemp("t5")
    saved, _, _ = _t5(root)
    hf, tokenizer = with_tokenizer(saved, root / "model", "t5-v1.1", seed=1)
    return root / "model", hf, tokenizer


def test_a_task_prefix_goes_before_every_source_line(t5, cli, tmp_path):
    model_dir, hf, tokenizer = t5
    wanted = expected(hf, tokenizer, [PREFIX + line for line in LINES])
    assert wanted != expected(hf, tokenizer, LINES)  # the prefix changes the translations
    assert translate(cli, model_dir, "--source-prefix", PREFIX) == wanted
    config = tmp_path / "job.yaml"
    config.write_text(f"source_prefix: '{PREFIX}'\n", encoding="utf-8")
    assert translate(cli, model_dir, "-c", config) == wanted
    translator = nmtdecode.Translator.load(str(model_dir))
    assert translator.translate(LINES, source_prefix=PREFIX) == wanted
    assert len(set(wanted)) > 2


def test_score_with_a_prefix_agrees_with_translate(t5):
    """The hypotheses translate ended, scored (as pieces) with the same prefix: their log-probabilities."""
    model_dir, _, tokenizer = t5
    translator = nmtdecode.Translator.load(str(model_dir))
    nbest = translator.translate_batch(LINES, source_prefix=PREFIX, n_best=3)
    ended = [(line, hyp) for line, hyps in zip(LINES, nbest) for hyp in hyps if hyp.ended]
    assert len(ended) >= 4 and len({len(hyp.tokens) for _, hyp in ended}) > 1
    sources = [line for line, _ in ended]
    targets = [tokenizer.convert_ids_to_tokens(hyp.tokens) for _, hyp in ended]
    scores = translator.score(sources, targets, source_prefix=PREFIX)
    assert scores == pytest.approx([hyp.log_prob for _, hyp in ended], abs=1e-4)
    assert translator.score(sources, targets) != pytest.approx(scores, abs=1e-4)  # without it: other sources


def test_float16_is_refused_for_t5_and_bfloat16_runs(t5, cli):
    """Real T5 checkpoints overflow float16 in their feed-forward layers: one line names bfloat16."""
    model_dir, _, _ = t5
    run = cli("translate", "--model", model_dir, "--dtype", "float16", stdin="a b\n", text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "dtype: float16 overflows in T5's feed-forward layers" in run.stderr and "--dtype bfloat16" in run.stderr
    assert len(translate(cli, model_dir, "--dtype", "bfloat16")) == len(LINES)


def test_madlad_target_language_tag(tmp_path, cli):
    saved, _, _ = _t5(tmp_path, extra_ids=0, user_defined=MADLAD_TAGS)
    hf, tokenizer = with_tokenizer(saved, tmp_path / "model", "madlad", seed=2)
    for code in ("de", "zh_Latn"):
        assert translate(cli, tmp_path / "model", "--tgt-lang", code) == expected(
            hf, tokenizer, [f"<2{code}> {line}" for line in LINES]
        )
    inspect = cli("inspect", tmp_path / "model", text=True)
    assert "languages:     3 (de, fr, zh_Latn)" in inspect.stdout
    assert "target language: none: give --tgt-lang" in inspect.stdout
    wrong = cli("translate", "--model", tmp_path / "model", "--tgt-lang", "it", stdin="a\n", text=True)
    assert wrong.returncode == 2 and "tgt_lang: 'it' is not a language of this model" in wrong.stderr


def test_byt5_reads_and_writes_bytes(tmp_path, cli):
    tokenizer = transformers.ByT5Tokenizer()
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    hf, tokenizer = with_tokenizer(tmp_path / "tokenizer", tmp_path / "model", "byt5", seed=3)
    lines = LINES[:4] + ["Zürich café 漢字"]
    assert translate(cli, tmp_path / "model", lines=lines) == expected(hf, tokenizer, lines)


def pegasus_directory(tmp_path):
    """A Pegasus summarizer with its tokenizer, saved: (directory, transformers model, tokenizer)."""
    saved, _, _ = _pegasus(tmp_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
    config = transformers.PegasusConfig(
        vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        scale_embedding=True, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, forced_eos_token_id=1,
    )  # fmt: skip
    torch.manual_seed(4)
    hf = transformers.PegasusForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "embed_positions" not in name:
                p.normal_(0.0, 0.4)
        hf.final_logits_bias[0, 1] = EOS_BIAS
    hf.generation_config = transformers.GenerationConfig(
        decoder_start_token_id=0, eos_token_id=1, pad_token_id=0, forced_eos_token_id=1,
        num_beams=4, max_length=16, length_penalty=0.6,
    )  # fmt: skip
    hf.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    return tmp_path / "model", hf, tokenizer


def test_pegasus_summarizes_as_transformers_does(tmp_path, cli):
    model_dir, hf, tokenizer = pegasus_directory(tmp_path)
    wanted = expected(hf, tokenizer, LINES)
    assert translate(cli, model_dir) == wanted and len(set(wanted)) > 2
    inspect = cli("inspect", model_dir, text=True)
    assert "decoding defaults: alpha=0.6, beam_size=4, early_stopping=false, length_penalty=avg, max_length=15" in (
        inspect.stdout
    )
