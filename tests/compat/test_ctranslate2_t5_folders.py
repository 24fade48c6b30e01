"""CTranslate2 T5 folders, decoded by nmtdecode and by CTranslate2 itself, each on the folder its own
TransformersConverter wrote from a seeded transformers T5 (tests/models/formats/t5_models.py: v1.0,
v1.1, mT5, a MADLAD-like decoder start), as stored and quantized to int8: a CTranslate2 script gets
CTranslate2's n-best lists, float32 scores within 1e-4, and in int8 the same outputs but for the
near-ties of random models (docs/formats.md publishes the shares). Where CTranslate2 and
transformers disagree, a folder is decoded as CTranslate2 decodes it: the model it computes is
transformers' for v1.0, and for v1.1 and mT5 converted under transformers 5 their outputs scaled by
d_model^-0.5 (`decoder/scale_outputs`, which transformers does not apply); the searches differ by
their defaults only (CTranslate2 issue #1918). Text: through the SentencePiece model --tokenizer
names, `</s>` after it, MADLAD's `<2xx>` first for --tgt-lang."""

import json

import pytest
import torch

from nmtdecode.compat import ctranslate2 as compat
from nmtdecode.models.formats.ct2_binary import read_model_bin
from nmtdecode.models.loading import load_model

from tests import peer_ctranslate2
from tests.helpers import WORDS
from tests.models.formats import t5_models
from tests.models.formats.test_huggingface_parity import hf_generate, ours_generate
from tests.peer_ctranslate2 import T5_VARIANTS, sources, t5_pieces

pytestmark = pytest.mark.parity  # against a peer library: in make test, not in make test-fast
ctranslate2 = pytest.importorskip("ctranslate2")  # in the test extra: never skipped by `make test`

STEPS = 20
CASES = [(v, q) for v in T5_VARIANTS for q in (None, "int8")]
# transformers' search, as the parity models' generation_config.json gives it
HF_SEARCH = dict(num_beams=4, max_length=16, early_stopping=False, length_penalty=1.0)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """(variant, quantization) -> the folder CTranslate2's converter wrote; its transformers model
    (saved with HF_SEARCH as its generation_config) in the variant's hf/."""
    root = tmp_path_factory.mktemp("ct2-t5")
    for variant in T5_VARIANTS:
        t5_models.build(variant, root / variant / "hf", **HF_SEARCH)
    return {(v, q): peer_ctranslate2.convert_t5(v, root / v, q) for v in T5_VARIANTS for q in (None, "int8")}


def words(variant: str) -> list[str]:
    return [p for p in t5_pieces(variant) if p.startswith("w")]


@pytest.mark.parametrize("variant, quantization", CASES, ids=[f"{v}-{q or 'float32'}" for v, q in CASES])
def test_a_script_gets_ctranslate2s_outputs_on_a_t5_folder(folders, variant, quantization):
    path = str(folders[variant, quantization])
    batch = sources(words(variant), ["</s>"], count=100)
    if quantization and not peer_ctranslate2.EXACT_INT8:
        peer_ctranslate2.assert_int8_as_faithful_as_theirs(folders[variant, None], path, batch, STEPS)
        return
    theirs = ctranslate2.Translator(path, device="cpu", intra_threads=1)
    ours = compat.Translator(path, device="cpu", intra_threads=1)
    assert ours._slot.api.engine.loaded.format == "ctranslate2/t5"
    peer_ctranslate2.assert_same_outputs(theirs, ours, batch, bool(quantization), STEPS)


@pytest.mark.parametrize("variant", ["t5", "mt5"])
def test_t5_scores_are_ctranslate2s(folders, variant):
    path = str(folders[variant, None])
    batch = sources(words(variant), ["</s>"], seed=1)
    targets = [list(reversed(s[:-1])) for s in batch]
    expected, found = (t.score_batch(batch, targets) for t in (ctranslate2.Translator(path), compat.Translator(path)))
    for a, b in zip(expected, found):
        assert b.tokens == a.tokens and b.log_probs == pytest.approx(a.log_probs, abs=1e-4)


def test_a_v1_0_folder_computes_transformers_model(folders):
    """v1.0 (its output tied to the embeddings, scaled): the folder's model is transformers' (every
    logit within 1e-4), so with transformers' search settings (its generation_config) the outputs
    are transformers' own; CTranslate2's defaults (beam 2, its stop rule, average length penalty)
    are what make its T5 outputs differ from transformers' (CTranslate2 issue #1918)."""
    variant = "t5"
    hf, _, hf_defaults, _ = t5_models.build(variant, folders[variant, None].parent / "hf-again", **HF_SEARCH)
    loaded = load_model(str(folders[variant, None]))
    rows, ids, mask = t5_models.batch(variant)
    target = torch.randint(3, 60, (ids.size(0), 12), generator=torch.Generator().manual_seed(2))
    target[:, 0] = t5_models.config_of(variant)["decoder_start_token_id"]
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask.long(), decoder_input_ids=target).logits
        torch.testing.assert_close(loaded.model(ids, mask, target), expected, rtol=0, atol=1e-4)
    hf_tokens, _ = hf_generate(hf, ids, mask, t5_models.config_of(variant)["eos_token_id"])
    ours = ours_generate(loaded.model, hf_defaults, loaded.rules, rows)
    assert [n[0].tokens for n in ours] == hf_tokens


@pytest.mark.parametrize("variant", ["t5-v1.1", "mt5", "madlad"])
def test_a_v1_1_folder_scales_its_outputs_as_ctranslate2_does(folders, variant):
    """CTranslate2's converter writes decoder/scale_outputs = d_model^-0.5 when the config says
    tie_word_embeddings, which transformers 5 sets for every T5 and mT5 (v1.1, mT5, MADLAD's
    layout included); transformers scales only v1.0's outputs. The folder is decoded as
    CTranslate2 decodes it (its scores: the tests above): transformers' logits times
    d_model^-0.5. Greedy outputs stay transformers' (a positive scale keeps the largest logit);
    scores and beam searches are CTranslate2's."""
    path = folders[variant, None]
    scale = t5_models.config_of(variant)["d_model"] ** -0.5
    assert read_model_bin(str(path / "model.bin")).scalar("decoder/scale_outputs") == pytest.approx(scale)
    hf, _, hf_defaults, _ = t5_models.build(variant, path.parent / "hf-again", **HF_SEARCH)
    loaded = load_model(str(path))
    assert loaded.model.cfg.output_scale == pytest.approx(scale)
    rows, ids, mask = t5_models.batch(variant)
    target = torch.randint(3, 60, (ids.size(0), 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask.long(), decoder_input_ids=target).logits
        torch.testing.assert_close(loaded.model(ids, mask, target), expected * scale, rtol=0, atol=1e-4)
    hf_tokens, _ = hf_generate(hf, ids, mask, t5_models.config_of(variant)["eos_token_id"], num_beams=1)
    ours = ours_generate(loaded.model, hf_defaults, loaded.rules, rows, beam_size=1)
    assert [n[0].tokens for n in ours] == hf_tokens


def _t5_sentencepiece(directory):
    """A SentencePiece model of T5's layout (<pad> </s> <unk> = 0 1 2, no <s>) over 48 pieces."""
    import random

    import sentencepiece as spm

    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(400)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(directory / "spiece"),
        vocab_size=48,
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
        num_threads=1,
    )
    return spm.SentencePieceProcessor(model_file=str(directory / "spiece.model"))


def test_t5_text_through_its_sentencepiece_model(tmp_path, lines_file, cli):
    """--tokenizer spiece.model: each line's pieces and </s> in (as T5's tokenizer gives them), the
    hypothesis's pieces decoded by it out; CTranslate2 fed those pieces gives those outputs."""
    sp = _t5_sentencepiece(tmp_path)
    vocabulary = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    path = peer_ctranslate2.convert_t5("t5", tmp_path / "t5", vocabulary=vocabulary)
    lines = ["the house is red .", "good morning , my friend", "where is the station ?", "water"]
    out = cli(
        "translate", "--model", path, "--tokenizer", tmp_path / "spiece.model", "--src", lines_file(lines),
        "--max-length", STEPS, "--quiet", text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    results = ctranslate2.Translator(str(path)).translate_batch(
        [sp.encode(line, out_type=str) + ["</s>"] for line in lines], max_decoding_length=STEPS
    )
    special = {"<pad>", "</s>", "<unk>"}
    assert out.stdout.splitlines() == [sp.decode([p for p in r.hypotheses[0] if p not in special]) for r in results]
    assert len(set(out.stdout.splitlines())) == len(lines)  # each source its own output


def test_madlad_text_gets_its_target_language_tag(folders, lines_file, cli):
    """MADLAD-400 (its <2xx> pieces): --tgt-lang de puts <2de> before the source; no tokenizer here,
    so a line is its pieces separated by spaces, as CTranslate2's translate_file reads it."""
    path = folders["madlad", None]
    ids = {p: i for i, p in enumerate(t5_pieces("madlad"))}
    tokenizer = load_model(str(path)).tokenizer
    tokenizer.set_languages(None, "de")
    assert tokenizer.encode("w5 w6") == [ids["<2de>"], ids["w5"], ids["w6"], ids["</s>"]]
    assert sorted(tokenizer.language_codes()) == ["de", "fr"]
    batch = sources(words("madlad"), [], seed=4, count=8)
    out = cli(
        "translate", "--model", path, "--tgt-lang", "fr", "--src", lines_file([" ".join(s) for s in batch]),
        "--max-length", STEPS, "--quiet", text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    results = ctranslate2.Translator(str(path)).translate_batch(
        [["<2fr>", *s, "</s>"] for s in batch], max_decoding_length=STEPS
    )
    assert out.stdout.splitlines() == [" ".join(r.hypotheses[0]) for r in results]


def test_the_config_says_where_a_t5_folder_starts(folders):
    """The decoder start is config.json's decoder_start_token (MADLAD's is not <pad>)."""
    config = json.loads((folders["madlad", None] / "config.json").read_text())
    loaded = load_model(str(folders["madlad", None]))
    assert t5_pieces("madlad")[loaded.model.cfg.decoder_start_id] == config["decoder_start_token"] == "<unk>"
    assert loaded.model.cfg.pad_id == t5_pieces("madlad").index("<pad>") == 1
