"""Marian's own checkpoints against readers we did not write, on the same weights.

A seeded Hugging Face Marian model (transformers) is written in Marian's layout (marian_files.py:
the .npz with its options, decoder.yml, the vocabulary .yml, source.spm/target.spm);
CTranslate2's own Marian converter (`ct2-marian-converter`, the command the ctranslate2 package
installs) reads the .npz; nmtdecode decodes the Marian directory. Greedy and beam search (n-best)
give the same tokens as CTranslate2 on the converted model (its rule at length_penalty 1 is
nmtdecode's `true`, Marian's default here) and as transformers' `generate` on the original model
(early_stopping=True), with scores to 1e-4 of transformers' and 1e-2 of CTranslate2's (told to
suppress <unk>, CTranslate2 masks its logit and renormalises; Marian and nmtdecode ban it after the
softmax: up to 4e-3 apart here).

Marian's sinusoids are not the peers': Marian (src/tensors/cpu/tensor_operators.cpp) uses the
frequencies 10000^(-i/(d/2 - 1)), transformers' MarianSinusoidalPositionalEmbedding and
CTranslate2's converter 10000^(-2i/d). Both peers are given Marian's table (the Hugging Face
model's position weights; `Wpos`, which CTranslate2's converter takes as the positions, in its
copy of the .npz), so that all three compute what Marian computes.

The pad row Hugging Face adds to Marian's vocabulary is zero (the decoder's zero start
embedding) with an output bias of -1e9 (no share of the softmax: Marian's distribution over its
own vocabulary); <pad> and <unk> are banned in the peers as Marian bans <unk>.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from nmtdecode.options.config import Config
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.loading import load_model
from tests.models.formats.marian_files import OPTIONS, random_hf_state, to_marian, train_spm, vocabulary, write_model

pytestmark = pytest.mark.parity  # against peer libraries: in make test, not in make test-fast

transformers = pytest.importorskip("transformers")  # the test extra has both: never skipped by `make test`
ctranslate2 = pytest.importorskip("ctranslate2")

EOS, UNK = 0, 1  # Marian's </s> and <unk>
LAYERS, D, POSITIONS = (2, 2), 32, 256
STEPS = 20
CONVERTER = Path(sys.executable).parent / "ct2-marian-converter"
# name -> (shared embeddings, tied output, untransposed legacy output weight, EOS bias): random models
# repeat one token; these biases (a sweep's) end outputs at different steps, with no near-tie between
# the n-best (CTranslate2's beam scores are off by up to 2e-3)
VARIANTS = {"opus-mt": (True, True, False, 2.5), "separate-vocabularies-untied-output": (False, False, True, 9.0)}


def marian_positions(length: int, dim: int) -> np.ndarray:
    """Marian's sinusoids: sin | cos halves at frequencies exp(-i log(10000) / (dim/2 - 1))."""
    half = dim // 2
    angles = np.arange(length)[:, None] * np.exp(np.arange(half) * -(np.log(10000.0) / (half - 1)))[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1).astype(np.float32)


def test_the_peers_own_sinusoids_are_not_marians():
    """Why the peers are given Marian's table: their own (transformers' Marian port, CTranslate2's
    Marian converter) have other frequencies, off by more than a tenth at position 100 for d 512."""
    from ctranslate2.converters.marian import _make_sinusoidal_position_encodings

    hf = transformers.models.marian.modeling_marian.MarianSinusoidalPositionalEmbedding(128, 512)
    marian = marian_positions(128, 512)
    for theirs in (hf.create_weight().numpy(), _make_sinusoidal_position_encodings(512, 128)):
        assert np.abs(theirs[100] - marian[100]).max() > 0.1
        np.testing.assert_allclose(theirs[:, [0, 256]], marian[:, [0, 256]], atol=1e-5)  # the first frequency agrees


def hf_marian(vocab: int, shared: bool, tied: bool, eos_bias: float):
    """A seeded Hugging Face Marian with `vocab` pieces and <pad> last, set up as Marian computes."""
    pad = vocab
    config = transformers.MarianConfig(
        vocab_size=vocab + 1,
        decoder_vocab_size=vocab + 1,
        share_encoder_decoder_embeddings=shared,
        tie_word_embeddings=tied,
        d_model=D,
        encoder_layers=LAYERS[0],
        decoder_layers=LAYERS[1],
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=POSITIONS,
        pad_token_id=pad,
        eos_token_id=EOS,
        decoder_start_token_id=pad,
        forced_eos_token_id=None,
        scale_embedding=True,
        activation_function="swish",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    torch.manual_seed(0)
    hf = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            elif "embed_positions" not in name:
                p.normal_(0.0, 0.4)
        for table in (hf.get_encoder().embed_tokens, hf.get_decoder().embed_tokens, hf.lm_head):
            table.weight[pad] = 0
        hf.final_logits_bias.normal_(0.0, 0.5)
        hf.final_logits_bias[0, EOS], hf.final_logits_bias[0, pad] = eos_bias, -1e9
        for side in (hf.get_encoder(), hf.get_decoder()):
            side.embed_positions.weight.copy_(torch.from_numpy(marian_positions(POSITIONS, D)))
    return hf


def convert(npz: Path, vocabs: list[Path], out: Path):
    """CTranslate2's converter on a copy of the .npz with Marian's positions as `Wpos`."""
    with np.load(npz) as stored:
        arrays = {name: stored[name] for name in stored.files if not name.startswith("special:")}
        options = stored["special:model.yml"]
    copy = out.parent / "for-ctranslate2.npz"
    np.savez(copy, **arrays, Wpos=marian_positions(POSITIONS, D), **{"special:model.yml": options})
    run = subprocess.run(
        [str(CONVERTER), "--model_path", str(copy), "--vocab_paths", *map(str, vocabs), "--output_dir", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    return ctranslate2.Translator(str(out), device="cpu", intra_threads=1)


@pytest.fixture(scope="module", params=list(VARIANTS))
def models(request, tmp_path_factory):
    shared, tied, legacy, eos_bias = VARIANTS[request.param]
    root = tmp_path_factory.mktemp(request.param)
    source_sp = train_spm(root / "source.spm", seed=0)
    target_sp = train_spm(root / "target.spm", seed=0 if shared else 1)
    source, target = vocabulary(source_sp), vocabulary(target_sp)
    assert len(source) == len(target)  # one <pad> id for both sides, as Hugging Face has it
    hf = hf_marian(len(source), shared, tied, eos_bias)
    state = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    options = {**OPTIONS, "tied-embeddings-all": shared, "tied-embeddings": tied}
    write_model(
        root,
        to_marian(state, len(source), LAYERS, shared=shared, tied_output=tied, legacy_output=legacy),
        options,
        source,
        None if shared else target,
    )
    vocabs = [root / "vocab.yml"] * 2 if shared else [root / "source.vocab.yml", root / "target.vocab.yml"]
    return hf, load_model(str(root)), convert(root / "model.npz", vocabs, root / "ct2"), source, target


def sources(vocab: int, seed: int = 2, sizes=(9, 3, 6, 1, 12, 7, 4, 10)) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(2, vocab, (n,), generator=g).tolist() + [EOS] for n in sizes]


def ours(loaded, rows, beam: int, n_best: int):
    overrides = {"beam_size": beam, "n_best": n_best, "max_length": STEPS, "max_len_a": 0, "max_len_b": STEPS}
    config = Config.from_values(overrides).with_model_defaults(loaded.defaults)  # decoder.yml's: normalize 1, true
    found = BatchDecoder(loaded.model, config.decoding, loaded.rules).decode(rows).nbests
    return [[h.tokens for h in n] for n in found], [[h.score for h in n] for n in found]


def theirs_ctranslate2(ct2, rows, source, target, beam: int, n_best: int):
    results = ct2.translate_batch(
        [[source[i] for i in row[:-1]] for row in rows],
        beam_size=beam,
        num_hypotheses=n_best,
        length_penalty=1.0,
        max_decoding_length=STEPS,
        min_decoding_length=0,
        suppress_sequences=[["<unk>"]],
        return_scores=True,
    )
    index = {t: i for i, t in enumerate(target)}
    return [[[index[t] for t in h] for h in r.hypotheses] for r in results], [r.scores for r in results]


def theirs_transformers(hf, rows, beam: int, n_best: int):
    pad = hf.config.pad_token_id
    ids = torch.full((len(rows), max(map(len, rows))), pad)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    out = hf.generate(
        input_ids=ids,
        attention_mask=(ids != pad).long(),
        num_beams=beam,
        num_return_sequences=n_best,
        do_sample=False,
        early_stopping=True,
        length_penalty=1.0,
        max_length=STEPS + 1,
        bad_words_ids=[[pad], [UNK]],
        return_dict_in_generate=True,
        output_scores=True,
    )
    tokens = [row[: row.index(EOS)] if EOS in row else row for row in out.sequences[:, 1:].tolist()]
    scores = out.sequences_scores.tolist() if beam > 1 else None
    return [tokens[i * n_best : (i + 1) * n_best] for i in range(len(rows))], scores


@pytest.mark.parametrize("beam, n_best", [(1, 1), (4, 1), (4, 2)])
def test_decoding_a_marian_npz_matches_ctranslate2_and_transformers(models, beam, n_best):
    hf, loaded, ct2, source, target = models
    rows = sources(len(source))
    tokens, scores = ours(loaded, rows, beam, n_best)
    ct2_tokens, ct2_scores = theirs_ctranslate2(ct2, rows, source, target, beam, n_best)
    hf_tokens, hf_scores = theirs_transformers(hf, rows, beam, n_best)
    assert tokens == ct2_tokens
    assert tokens == hf_tokens
    assert len({len(n[0]) for n in tokens}) > 1  # outputs of different lengths: EOS handled
    np.testing.assert_allclose(scores, ct2_scores, atol=1e-2)
    if hf_scores is not None:
        np.testing.assert_allclose([s for n in scores for s in n], hf_scores, atol=1e-4)


def test_prenorm_marian_with_embedding_and_top_norms_matches_ctranslate2(tmp_path):
    """Marian's pre-norm layout (`transformer-preprocess: n`, `da`, a norm on top of each stack
    and after the embeddings, relu): no Hugging Face Marian computes it; CTranslate2 does."""
    sp = train_spm(tmp_path / "source.spm", seed=2)
    shutil.copy(tmp_path / "source.spm", tmp_path / "target.spm")
    tokens = vocabulary(sp)
    state = random_hf_state(3, len(tokens), d=D, layers=LAYERS)
    state["final_logits_bias"][0, EOS] = 5.0  # outputs of different lengths (a sweep's)
    arrays = to_marian(state, len(tokens), LAYERS, pre_norm=True)
    rng = np.random.default_rng(4)
    for name in ("encoder_top", "decoder_top", "encoder_emb", "decoder_emb"):
        suffix = "_pre" if name.endswith("emb") else ""
        arrays[f"{name}_ln_scale{suffix}"] = rng.normal(1, 0.1, (1, D)).astype(np.float32)
        arrays[f"{name}_ln_bias{suffix}"] = rng.normal(0, 0.1, (1, D)).astype(np.float32)
    options = {
        **OPTIONS,
        "transformer-preprocess": "n",
        "transformer-postprocess": "da",
        "transformer-postprocess-top": "n",
        "transformer-postprocess-emb": "nd",
        "transformer-ffn-activation": "relu",
    }
    write_model(tmp_path, arrays, options, tokens)
    loaded = load_model(str(tmp_path))
    assert (loaded.model.cfg.pre_norm, loaded.model.cfg.layernorm_embedding, loaded.model.cfg.encoder_final_norm) == (
        True,
        True,
        True,
    )
    ct2 = convert(tmp_path / "model.npz", [tmp_path / "vocab.yml"] * 2, tmp_path / "ct2")
    rows = sources(len(tokens), seed=5)
    for beam, n_best in ((1, 1), (4, 2)):
        found, _ = ours(loaded, rows, beam, n_best)
        assert found == theirs_ctranslate2(ct2, rows, tokens, tokens, beam, n_best)[0]
    assert len({len(n[0]) for n in found}) > 1


def test_translating_text_with_decoder_yml_defaults_matches_ctranslate2(models, lines_file, cli):
    """The whole command on text: decoder.yml's beam size 4, normalize 1 and max-length-factor 3
    (CTranslate2's max_decoding_length: 3 x the source with </s>, sentence by sentence), <unk>
    banned; the pieces of OPUS-MT's source.spm in, target.spm's out."""
    hf, loaded, ct2, source, target = models
    lines = ["the cat walks over the river .", "Hello world!", "small fish", "a", "Green trees see blue water"]
    out = cli("translate", "--model", loaded.path, "--src", lines_file(lines), "--quiet", text=True)
    assert out.returncode == 0, out.stderr
    expected = []
    for line in lines:
        ids = loaded.tokenizer.encode(line)
        pieces = [source[i] for i in ids[:-1]]
        result = ct2.translate_batch(
            [pieces],
            beam_size=4,
            length_penalty=1.0,
            min_decoding_length=0,
            max_decoding_length=3 * len(ids),
            suppress_sequences=[["<unk>"]],
        )
        index = {t: i for i, t in enumerate(target)}
        expected.append(loaded.tokenizer.decode([index[t] for t in result[0].hypotheses[0]]))
    assert out.stdout.splitlines() == expected
