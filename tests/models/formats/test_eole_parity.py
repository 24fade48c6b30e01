"""Parity with eole 0.6.4 on tiny seeded models built by its own model classes.

Each model is saved by eole's ModelSaver (the model directory `eole train` writes),
loaded by our loader, and compared with eole's own model and inference engine:
teacher-forced logits within 1e-4, greedy and beam search (n-best) token for
token with scores within 1e-4, one sentence at a time (its step limit is per
batch: longest source x max_length_ratio + 5; ours per sentence).
"""

import json
import random
import re
import shutil
from pathlib import Path

import eole as eole_package  # noqa: F401  (installed by `make setup`: these tests never skip)
import pytest
import torch

from nmtdecode.api import Translator  # noqa: E402
from nmtdecode.models import loading  # noqa: E402
from nmtdecode.models.checkpoint import ModelError  # noqa: E402
from nmtdecode.models.detect import model_format  # noqa: E402
from nmtdecode.models.formats import eole  # noqa: E402

from tests import peer_eole as peer  # noqa: E402
from tests.helpers import assert_same_nbest, nbest_of  # noqa: E402

pytestmark = pytest.mark.parity  # against a peer library: in make test, not in make test-fast

# Architecture options our loader maps (keys of eole's `model:` section), each built and compared.
# add_final_linear_bias is given with add_qkvbias: left to its default, eole 0.6.4 builds the
# encoder's output projections without a bias for training and with one when it loads the
# directory again, uninitialised (its default follows add_qkvbias in one place and not the other).
VARIANTS = {
    "defaults": {},
    "shared_embeddings_biases_gelu": {
        "share_embeddings": True,
        "share_decoder_embeddings": True,
        "add_qkvbias": True,
        "add_final_linear_bias": True,
        "add_ffnbias": True,
        "mlp_activation_fn": "gelu",
    },
    "concat_positions_silu_no_final_encoder_norm": {
        "embeddings": {"word_vec_size": 32, "position_encoding_type": "SinusoidalConcat"},
        "mlp_activation_fn": "silu",
        "add_ffnbias": True,
        "norm_eps": 1e-6,
        "encoder": {"final_encoder_layer_norm": False},
    },
}


def sources(seed: int, count: int = 6) -> list[list[str]]:
    rng = random.Random(seed)
    return [[rng.choice(peer.WORDS) for _ in range(rng.randint(1, 8))] for _ in range(count)]


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def built(request, tmp_path_factory):
    return peer.build(tmp_path_factory.mktemp(request.param) / "model", seed=0, **VARIANTS[request.param])


def test_the_directory_is_detected_as_eole(built):
    _, path = built
    assert model_format(str(path)) == "eole" and loading.load_model(str(path)).format == "eole"


def test_teacher_forced_logits_match_eole(built):
    net, path = built
    ours = eole.load(str(path)).model
    src = torch.tensor([[4, 9, 12, 5, 6], [7, 8, 10, 1, 1]])  # the second padded with <blank>
    tgt = torch.tensor([[2, 11, 13, 14, 3], [2, 15, 16, 3, 1]])
    with torch.no_grad():
        theirs = net.generator(net(src, tgt, torch.tensor([5, 3])).dec_out)
        mine = ours(src, src != peer.VOCAB.index("<blank>"), tgt[:, :-1])
    torch.testing.assert_close(mine[0], theirs[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(mine[1, :3], theirs[1, :3], atol=1e-4, rtol=0)  # rows past the target's EOS differ


@pytest.mark.parametrize("beam_size", [1, 5])
def test_greedy_and_beam_outputs_match_eole_predict(built, beam_size):
    _, path = built
    theirs, ours = peer.engine(path, beam_size=beam_size), Translator.load(str(path))  # eole predict's defaults
    for tokens in sources(1):
        assert_same_nbest(peer.predict(theirs, tokens), nbest_of(ours, tokens, beam_size=beam_size))


@pytest.mark.parametrize("seed", [1, 2])
def test_n_best_matches_eole_predict(tmp_path, seed):
    _, path = peer.build(tmp_path / "model", seed=seed)
    theirs, ours = peer.engine(path, n_best=3), Translator.load(str(path))
    for tokens in sources(seed):
        assert_same_nbest(peer.predict(theirs, tokens), nbest_of(ours, tokens, n_best=3))


def test_rotary_positions_are_refused_by_name(built):
    _, path = built
    config = json.loads((path / "config.json").read_text())
    for side in ("encoder", "decoder"):
        config["model"][side]["position_encoding_type"] = "Rotary"
    (path.parent / "rotary").mkdir()
    for name in ("vocab.json", "model.00.safetensors"):
        (path.parent / "rotary" / name).write_bytes((path / name).read_bytes())
    (path.parent / "rotary" / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        ModelError, match=re.escape("eole option encoder.position_encoding_type = 'Rotary' is not supported")
    ):
        eole.load(str(path.parent / "rotary"))


@pytest.mark.parametrize(
    "options, named",
    [
        ({"layer_norm": "rms"}, "encoder.layer_norm = 'rms'"),
        ({"mlp_activation_fn": "gated-silu"}, "encoder.mlp_activation_fn = 'gated-silu'"),
        ({"heads_kv": 2}, "encoder.heads_kv = 2"),
    ],
)
def test_options_the_transformer_cannot_compute_are_refused_by_name(tmp_path, options, named):
    _, path = peer.build(tmp_path / "model", **options)
    with pytest.raises(ModelError, match=re.escape(f"eole option {named} is not supported")):
        eole.load(str(path))


def test_eole_defaults_and_rules(built):
    _, path = built
    loaded = eole.load(str(path))
    assert loaded.defaults["max_len_a"] == 2.0 and loaded.defaults["max_len_b"] == 5  # max_length_ratio 2
    assert loaded.rules.opennmt_beam and loaded.rules.length_offset == 1
    config = json.loads((path / "config.json").read_text())
    assert "transforms" not in config or not config["transforms"]
    assert loaded.tokenizer.encode("w1 w2 nope") == [peer.VOCAB.index("w1"), peer.VOCAB.index("w2"), 0]


def test_inspect_describes_an_eole_directory(built, cli):
    _, path = built
    result = cli("inspect", path, text=True)
    assert result.returncode == 0, result.stderr
    assert "format:        eole" in result.stdout
    assert "Transformer 2+2 layers, d_model 32, 4 heads, ffn 64" in result.stdout
    assert "max_len_a=2.0" in result.stdout


@pytest.mark.parametrize(
    "missing, message",
    [("vocab.json", "vocab.json is missing"), ("model.00.safetensors", "no model.*.safetensors weights")],
)
def test_a_directory_missing_a_file_names_it(built, cli, tmp_path, missing, message):
    _, path = built
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("config.json", "vocab.json", "model.00.safetensors"):
        if name != missing:
            (copy / name).write_bytes((path / name).read_bytes())
    result = cli("inspect", copy, text=True)
    assert result.returncode == 1
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_the_sentencepiece_transform_is_found_in_the_directory(tmp_path):
    """eole records the transform's models as ${MODEL_PATH}/NAME, copied into the directory."""
    import sentencepiece as spm

    from tests.helpers import train_sentencepiece

    _, path = peer.build(tmp_path / "model")
    copy = tmp_path / "with_spm"
    copy.mkdir()
    for name in ("vocab.json", "model.00.safetensors"):
        (copy / name).write_bytes((path / name).read_bytes())
    (copy / "spm.model").write_bytes(Path(train_sentencepiece(tmp_path, vocab_size=40)).read_bytes())
    config = json.loads((path / "config.json").read_text())
    config["transforms"] = ["sentencepiece"]
    config["transforms_configs"] = {
        "sentencepiece": {
            "src_subword_model": "${MODEL_PATH}/spm.model",
            "tgt_subword_model": "${MODEL_PATH}/spm.model",
        }
    }
    (copy / "config.json").write_text(json.dumps(config))
    tokenizer = eole.load(str(copy)).tokenizer
    pieces = spm.SentencePieceProcessor(model_file=str(copy / "spm.model")).encode("the fox", out_type=str)
    assert tokenizer.encode("the fox") == [0] * len(pieces)  # pieces, looked up in the w0..w27 vocabulary
    assert tokenizer.decode([peer.VOCAB.index("w3"), peer.EOS]) == "w3"


def test_a_config_with_fewer_layers_than_the_weights_is_refused_naming_an_extra_weight(built, tmp_path):
    """Before: the layers beyond the config's count were left out, and the model decoded as another
    network (exit 0)."""
    _, path = built
    fewer = tmp_path / "fewer"
    fewer.mkdir()
    config = json.loads((path / "config.json").read_text())
    config["model"]["layers"] = config["model"]["decoder"]["layers"] = 1
    (fewer / "config.json").write_text(json.dumps(config))
    for name in ("vocab.json", "model.00.safetensors"):
        (fewer / name).write_bytes((path / name).read_bytes())
    with pytest.raises(
        ModelError,
        match=r"decoder_layers: the config asks for 1 layers, the weights hold more \(decoder\.transformer_layers\.1\.",
    ):
        eole.load(str(fewer))


def test_a_vocab_json_larger_than_the_embeddings_need_is_refused_before_it_is_parsed(built, tmp_path):
    _, path = built
    big = tmp_path / "big"
    shutil.copytree(path, big)
    vocab = json.loads((big / "vocab.json").read_text())
    vocab["padding"] = list(range(1_000_000))
    (big / "vocab.json").write_text(json.dumps(vocab))
    with pytest.raises(ModelError, match=r"vocab.json cannot be read: it holds [\d,]+ bytes; no such file needs more"):
        eole.load(str(big))
