"""Parity with `transformers` on small seeded random models of every supported family.

Each model is built with transformers, saved with `save_pretrained` (safetensors
and generation_config.json), loaded by our loader, and compared: encoder
output and every decoder-step logit within 1e-4 (fp32), greedy and beam
search (n-best) token for token with sequence scores within 1e-4, on a batch
of mixed lengths with padding. EOS gets a logit bias so hypotheses end at
different steps and the finished-hypothesis logic is exercised.
"""

import json

import pytest
import torch
import transformers
from transformers import GenerationConfig

from nmtdecode.options.config import Config
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import read_json
from nmtdecode.models.formats.huggingface import load_network

pytestmark = pytest.mark.parity  # against a peer library: in make test, not in make test-fast

VOCAB, EOS, PAD = 64, 2, 1
COMMON = dict(
    vocab_size=VOCAB,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=128,
    bos_token_id=0,
    pad_token_id=PAD,
    eos_token_id=EOS,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
)
# transformers' classes by name: looked up when a model is built (importing every family's modules
# costs seconds, which the modules importing `build` would pay at collection).
FAMILIES = {
    "marian": (
        "MarianConfig",
        "MarianMTModel",
        dict(
            pad_token_id=PAD,
            decoder_start_token_id=PAD,
            scale_embedding=True,
            activation_function="swish",
            forced_eos_token_id=None,
        ),
    ),
    "bart": (
        "BartConfig",
        "BartForConditionalGeneration",
        dict(decoder_start_token_id=EOS, activation_function="gelu", forced_eos_token_id=None),
    ),
    "mbart": (
        "MBartConfig",
        "MBartForConditionalGeneration",
        dict(decoder_start_token_id=EOS, scale_embedding=True, activation_function="gelu", forced_eos_token_id=None),
    ),
    "m2m_100": (
        "M2M100Config",
        "M2M100ForConditionalGeneration",
        dict(decoder_start_token_id=EOS, scale_embedding=True, activation_function="relu"),
    ),
    "pegasus": (  # starts decoding with pad, as its checkpoints do
        "PegasusConfig",
        "PegasusForConditionalGeneration",
        dict(decoder_start_token_id=PAD, scale_embedding=True, activation_function="relu", forced_eos_token_id=None),
    ),
}
# Random models fall into repeating one token; these EOS biases (found by a sweep) make greedy
# outputs end at different steps for the batch below. M2M100 has no final_logits_bias: its
# EOS embedding row (tied to the output) is scaled instead.
EOS_BIAS = {"marian": 4.0, "bart": 6.0, "mbart": 4.0, "m2m_100": 1.25, "pegasus": 8.0}
SINUSOIDS = ("marian", "pegasus")  # families whose position table is fixed, not learned


def build(family, tmp_path, seed=0, **generation):
    """A random model of `family` saved to tmp_path; returns (hf_model, our Transformer, defaults, rules)."""
    config_name, model_name, extra = FAMILIES[family]
    config_cls, model_cls = getattr(transformers, config_name), getattr(transformers, model_name)
    torch.manual_seed(seed)
    hf = model_cls(config_cls(**{**COMMON, **extra})).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            elif "embed_positions" not in name or family not in SINUSOIDS:  # fixed sinusoids stay
                p.normal_(0.0, 0.4)
        if family == "m2m_100":
            hf.model.shared.weight[EOS] *= EOS_BIAS[family]
        else:
            hf.final_logits_bias[0, EOS] = EOS_BIAS[family]
    hf.generation_config = GenerationConfig(
        decoder_start_token_id=hf.config.decoder_start_token_id,
        bos_token_id=0,
        eos_token_id=EOS,
        pad_token_id=PAD,
        **generation,
    )
    hf.save_pretrained(tmp_path)
    model, defaults, rules = load_network(str(tmp_path), read_json(str(tmp_path / "config.json")))
    return hf, model, defaults, rules


def batch(seed=0, sizes=(9, 3, 6, 1, 12)):
    """Source ids of mixed lengths (EOS last), right-padded, as HF tokenizers produce."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(4, VOCAB, (n,), generator=g).tolist() + [EOS] for n in sizes]
    ids = torch.full((len(rows), max(map(len, rows))), PAD)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    return rows, ids, ids != PAD


@pytest.mark.parametrize("family", FAMILIES)
def test_encoder_and_every_step_logit_match(family, tmp_path):
    hf, ours, _, _ = build(family, tmp_path)
    rows, ids, mask = batch()
    tgt = torch.randint(3, VOCAB, (len(rows), 8))
    tgt[:, 0] = hf.config.decoder_start_token_id
    with torch.no_grad():
        hf_memory = hf.get_encoder()(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        memory = ours.encode(ids, mask)
        hf_logits = hf(input_ids=ids, attention_mask=mask.long(), decoder_input_ids=tgt).logits
        cache = ours.init_cache(memory, mask)
        steps = torch.stack([ours.decode_step(tgt[:, t], cache) for t in range(tgt.size(1))], dim=1)
    torch.testing.assert_close(memory[mask], hf_memory[mask], rtol=0, atol=1e-4)
    torch.testing.assert_close(steps, hf_logits, rtol=0, atol=1e-4)


def hf_generate(hf, ids, mask, eos=EOS, **kwargs):
    out = hf.generate(
        input_ids=ids, attention_mask=mask.long(), return_dict_in_generate=True, output_scores=True, **kwargs
    )
    sequences = []
    for row in out.sequences[:, 1:].tolist():  # drop the decoder start token
        sequences.append(row[: row.index(eos)] if eos in row else row)
    return sequences, out.get("sequences_scores")


def ours_generate(ours, defaults, rules, rows, **overrides):
    config = Config.from_values(overrides).with_model_defaults(defaults)
    return BatchDecoder(ours, config.decoding, rules).decode(rows).nbests


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_matches(family, tmp_path):
    hf, ours, defaults, rules = build(family, tmp_path, num_beams=1, max_length=20)
    rows, ids, mask = batch(1)
    expected, _ = hf_generate(hf, ids, mask)
    got = ours_generate(ours, defaults, rules, rows)
    assert [n[0].tokens for n in got] == expected
    assert len({len(t) for t in expected}) > 1  # outputs of different lengths: EOS handling exercised


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize(
    "beams, early_stopping, length_penalty",
    [
        (4, False, 1.0),
        (5, True, 1.0),
        (4, "never", 1.0),
        (5, False, 0.0),
        (4, "never", 2.0),
        (5, False, -0.5),
    ],
)
def test_beam_nbest_matches(family, beams, early_stopping, length_penalty, tmp_path):
    hf, ours, defaults, rules = build(
        family, tmp_path, num_beams=beams, max_length=16, early_stopping=early_stopping, length_penalty=length_penalty
    )
    rows, ids, mask = batch(2)
    expected, expected_scores = hf_generate(hf, ids, mask, num_return_sequences=beams)
    got = ours_generate(ours, defaults, rules, rows, n_best=beams)
    assert [h.tokens for n in got for h in n] == expected
    assert any(h.ended for n in got for h in n)  # finished (EOS) hypotheses were part of the search
    # float32 sums: scores near -90 (length penalty -0.5 multiplies by sqrt(length)) differ by ~1e-6 relative
    assert [h.score for n in got for h in n] == pytest.approx(expected_scores.tolist(), rel=1e-5, abs=1e-4)


def test_summarization_settings_match(tmp_path):
    """BART as configured for summarization: min length, no repeated trigrams, length penalty 2,
    early stopping, forced BOS and EOS."""
    hf, ours, defaults, rules = build(
        "bart",
        tmp_path,
        num_beams=4,
        max_length=18,
        min_length=6,
        no_repeat_ngram_size=3,
        length_penalty=2.0,
        early_stopping=True,
        forced_bos_token_id=0,
        forced_eos_token_id=EOS,
    )
    assert defaults["min_length"] == 5 and defaults["max_length"] == 17  # theirs count the start token
    rows, ids, mask = batch(3)
    expected, expected_scores = hf_generate(hf, ids, mask, num_return_sequences=2)
    got = ours_generate(ours, defaults, rules, rows, n_best=2)
    assert [h.tokens for n in got for h in n] == expected
    assert [h.score for n in got for h in n] == pytest.approx(expected_scores.tolist(), abs=1e-4)
    assert all(len(t) >= 5 for t in expected)  # forced BOS + at least 4 more before EOS


@pytest.mark.parametrize("family", ["mbart", "m2m_100"])
def test_forced_target_language_matches(family, tmp_path):
    hf, ours, defaults, rules = build(family, tmp_path, num_beams=4, max_length=14, forced_bos_token_id=60)
    rows, ids, mask = batch(4)
    expected, expected_scores = hf_generate(hf, ids, mask)
    got = ours_generate(ours, defaults, rules, rows)
    assert all(t[0] == 60 for t in expected)
    assert [n[0].tokens for n in got] == expected
    assert [n[0].score for n in got] == pytest.approx(expected_scores.tolist(), abs=1e-4)


def test_marian_bans_pad_through_bad_words(tmp_path):
    hf, ours, defaults, rules = build("marian", tmp_path, num_beams=1, max_length=12, bad_words_ids=[[PAD]])
    assert rules.banned_ids == (PAD,)
    rows, ids, mask = batch(5)
    expected, _ = hf_generate(hf, ids, mask)
    assert [n[0].tokens for n in ours_generate(ours, defaults, rules, rows)] == expected


def test_unsupported_architecture_fails_by_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "umt5", "d_model": 8}))
    from nmtdecode.models.checkpoint import ModelError
    from nmtdecode.models.loading import load_model

    with pytest.raises(ModelError, match="model_type 'umt5' is not supported"):
        load_model(str(tmp_path))


def test_sharded_safetensors_and_pytorch_bin_load_the_same_weights(tmp_path):
    hf, ours, _, _ = build("bart", tmp_path / "single")
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="40KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_text((tmp_path / "single" / "config.json").read_text())
    torch.save(hf.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    reference = dict(ours.state_dict())
    for variant in ("sharded", "bin"):
        model, _, _ = load_network(str(tmp_path / variant), read_json(str(tmp_path / variant / "config.json")))
        for name, tensor in model.state_dict().items():
            torch.testing.assert_close(tensor, reference[name], rtol=0, atol=0, msg=f"{variant}: {name}")


class Exploit:
    """Unpickling this would run code: the loader must refuse it."""

    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path('PWNED').write_text('x')",))


def test_pickled_code_in_pytorch_bin_is_never_run(tmp_path, monkeypatch):
    from nmtdecode.models.checkpoint import ModelError

    hf, _, _, _ = build("bart", tmp_path / "model")
    (tmp_path / "model" / "model.safetensors").unlink()
    torch.save({"weights": Exploit()}, tmp_path / "model" / "pytorch_model.bin")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError) as refused:
        load_network(str(tmp_path / "model"), read_json(str(tmp_path / "model" / "config.json")))
    assert not (tmp_path / "PWNED").exists()
    # one line naming what it would have run, not torch's advice to load with weights_only=False
    assert str(refused.value) == (
        f"cannot read weights {tmp_path / 'model' / 'pytorch_model.bin'}: refused: it holds "
        "pickled code, not only weights (it would load exec)"
    )


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_marian_directory_end_to_end_matches_transformers(tmp_path, cli):
    """A Marian checkpoint with its tokenizer files, through the CLI: same text as transformers."""
    import sentencepiece as spm

    from tests.helpers import WORDS

    lines = [" ".join(WORDS[i : i + 5]) for i in range(0, len(WORDS) - 5, 3)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 20),
        model_prefix=str(tmp_path / "sp"),
        vocab_size=40,
        minloglevel=2,
        num_threads=1,
    )
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
    pieces = [
        sp.id_to_piece(i) for i in range(sp.get_piece_size()) if sp.id_to_piece(i) not in ("<s>", "</s>", "<unk>")
    ]
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}}
    vocab["<pad>"] = len(vocab)
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = transformers.MarianTokenizer(
        str(tmp_path / "sp.model"), str(tmp_path / "sp.model"), str(tmp_path / "vocab.json")
    )
    model_dir = tmp_path / "marian"
    torch.manual_seed(0)  # seed and scale chosen so that the outputs differ between inputs
    config = transformers.MarianConfig(
        **{
            **COMMON,
            "vocab_size": len(vocab),
            "pad_token_id": len(vocab) - 1,
            "eos_token_id": 0,
            "decoder_start_token_id": len(vocab) - 1,
            "forced_eos_token_id": None,
        }
    )
    hf = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "embed_positions" not in name:
                p.normal_(0.0, 1.0)
    hf.generation_config = GenerationConfig(
        decoder_start_token_id=len(vocab) - 1,
        eos_token_id=0,
        pad_token_id=len(vocab) - 1,
        num_beams=3,
        max_length=12,
        bad_words_ids=[[len(vocab) - 1]],
    )
    hf.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    batch = tokenizer(lines[:6], return_tensors="pt", padding=True)
    expected = tokenizer.batch_decode(hf.generate(**batch), skip_special_tokens=True)
    run = cli("translate", "--model", model_dir, "--quiet", stdin="\n".join(lines[:6]) + "\n", text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == expected
    assert len(set(expected)) > 1
    inspect = cli("inspect", model_dir, text=True)
    assert "format:        huggingface/marian" in inspect.stdout
    assert "beam_size=3" in inspect.stdout and "max_length=11" in inspect.stdout
