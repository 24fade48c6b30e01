"""--alignment: each target token's source position, from the cross-attention the model keeps."""

import pytest
import torch

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.checkpoint import ModelRules

from tests.helpers import BOS, EOS, TableModel, random_sources, tiny_transformer

A, B = 4, 5
BAN_SPECIALS = ModelRules(banned_ids=(0, 1, 2))
# "a b": the step that chooses a attends most to position 2, the one that chooses b to 0, EOS's to 1
TABLE = {(): {A: 1.0}, (A,): {B: 1.0}, (A, B): {EOS: 1.0}}
ATTENTION = {(): [0.1, 0.2, 0.7], (A,): [0.6, 0.3, 0.1], (A, B): [0.2, 0.5, 0.3]}


@pytest.mark.parametrize("beam", [1, 4])
def test_alignment_is_the_argmax_of_each_steps_attention(beam):
    model = TableModel(8, [TABLE], [ATTENTION])
    cfg = DecodingConfig(beam_size=beam, n_best=1, max_length=5, alignment=True)
    [[hyp]] = BatchDecoder(model, cfg, BAN_SPECIALS).decode([[0, 7, EOS]]).nbests
    assert hyp.tokens == [A, B] and hyp.ended
    assert hyp.alignment == [2, 0]  # one per token: EOS's (1) is not reported, as its log-prob is apart
    cfg.max_length = 2  # cut before EOS: still one position per token
    [[cut]] = BatchDecoder(model, cfg, BAN_SPECIALS).decode([[0, 7, EOS]]).nbests
    assert cut.tokens == [A, B] and not cut.ended and cut.alignment == [2, 0]


def test_no_alignment_unless_asked():
    [[hyp]] = (
        BatchDecoder(TableModel(8, [TABLE], [ATTENTION]), DecodingConfig(beam_size=2), BAN_SPECIALS)
        .decode([[0, 7, EOS]])
        .nbests
    )
    assert hyp.alignment is None


def attention_by_teacher_forcing(model, source, tokens, layer, heads):
    """The cross-attention of `layer` (mean of its first `heads` heads) at every target position,
    from a full teacher-forced pass, with the layer's input caught by a hook."""
    caught = {}
    block = model.decoder_layers[layer].cross_attn

    def catch(module, args):
        caught["x"] = args[0]  # returns None: the arguments go on unchanged

    handle = block.register_forward_pre_hook(catch)
    src = torch.tensor([source])
    tgt_in = torch.tensor([[BOS] + tokens])
    with torch.no_grad():
        model(src, torch.ones_like(src, dtype=torch.bool), tgt_in)
        handle.remove()
        memory = model.encode(src, torch.ones_like(src, dtype=torch.bool))
        keys, _ = block.project_memory(memory)  # (1, H, S, hd)
        q = block.q(caught["x"]).view(1, -1, model.cfg.heads, keys.size(-1)).transpose(1, 2)  # (1, H, T, hd)
        weights = torch.softmax(q @ keys.transpose(-1, -2) / keys.size(-1) ** 0.5, dim=-1)  # (1, H, T, S)
    return weights[0, :heads].mean(dim=0)  # (T, S)


@pytest.mark.parametrize("layer, heads", [(-1, 1), (0, 0), (1, 2)])
@pytest.mark.parametrize("beam", [1, 3])
def test_transformer_alignment_matches_teacher_forced_attention(layer, heads, beam):
    """Alignments of each hypothesis, through beam reorders and a padded batch, equal the argmax of
    the attention that a teacher-forced pass computes for its tokens; scores are unchanged."""
    model = tiny_transformer(2, vocab=20, eos_bias=1.0, alignment_layer=layer, alignment_heads=heads)
    sources = random_sources(5, 20, seed=4)
    plain = BatchDecoder(model, DecodingConfig(beam_size=beam, n_best=beam, max_length=12)).decode(sources).nbests
    cfg = DecodingConfig(beam_size=beam, n_best=beam, max_length=12, alignment=True)
    aligned = BatchDecoder(model, cfg).decode(sources).nbests
    for source, hyps, plain_hyps in zip(sources, aligned, plain):
        assert [(h.tokens, h.score) for h in hyps] == [(h.tokens, h.score) for h in plain_hyps]
        for hyp in hyps:
            weights = attention_by_teacher_forcing(model, source, hyp.tokens, layer, heads or model.cfg.heads)
            assert len(hyp.alignment) == len(hyp.tokens)
            assert hyp.alignment == weights[: len(hyp.tokens)].argmax(dim=1).tolist()


def test_alignment_follows_the_beam_reorder_with_coverage_penalty():
    """The table of test_coverage's reorder test: at step 1 "b b" moves from slot 1 to slot 0, and
    "a eos" ends ranked first. Positions: () -> 2, (a) -> 2, (b) -> 0, then EOS's not reported."""
    table = {(): {A: 0.6, B: 0.4}, (A,): {EOS: 0.7, A: 0.3}, (B,): {B: 0.9, EOS: 0.1}}
    attention = {
        (): [0.2, 0.3, 0.5],
        (A,): [0.1, 0.1, 0.8],
        (B,): [0.8, 0.1, 0.1],
        (A, A): [0.1, 0.1, 0.8],
        (B, B): [0.1, 0.8, 0.1],
    }
    cfg = DecodingConfig(
        beam_size=2, n_best=2, max_length=5, length_penalty="none", coverage_penalty="wu", beta=1.0, alignment=True
    )
    [hyps] = BatchDecoder(TableModel(8, [table], [attention]), cfg, BAN_SPECIALS).decode([[0, 7, EOS]]).nbests
    assert [h.tokens for h in hyps] == [[B, B], [A]]
    assert [h.alignment for h in hyps] == [[2, 0], [2]]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"alignment_layer": 2}, "alignment_layer: 2"),
        ({"alignment_layer": -3}, "alignment_layer: -3"),
        ({"alignment_heads": 5}, "alignment_heads: must be in [0, heads=4]"),
    ],
)
def test_alignment_layer_and_heads_are_checked(overrides, message):
    from tests.helpers import tiny_config

    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        tiny_config(**overrides)  # 2 decoder layers, 4 heads


@pytest.mark.parametrize("beam", [1, 3])
def test_attention_rows_are_the_teacher_forced_weights(beam):
    """--attention: per token the alignment layer's weights over its own source (the padding of
    the batch cut off), equal to a teacher-forced pass; their argmax is the alignment."""
    model = tiny_transformer(2, vocab=20, eos_bias=1.0)
    sources = random_sources(4, 20, seed=6)
    cfg = DecodingConfig(beam_size=beam, n_best=beam, max_length=10, alignment=True, attention=True)
    for source, hyps in zip(sources, BatchDecoder(model, cfg).decode(sources).nbests):
        for hyp in hyps:
            weights = attention_by_teacher_forcing(model, source, hyp.tokens, -1, 1)[: len(hyp.tokens)]
            assert torch.tensor(hyp.attention).shape == weights.shape == (len(hyp.tokens), len(source))
            torch.testing.assert_close(torch.tensor(hyp.attention), weights, atol=1e-5, rtol=1e-4)
            assert hyp.alignment == weights.argmax(dim=1).tolist()


def test_attention_follows_the_beam_reorder():
    table = {(): {A: 0.6, B: 0.4}, (A,): {EOS: 0.7, A: 0.3}, (B,): {B: 0.9, EOS: 0.1}}
    attention = {
        (): [0.2, 0.3, 0.5],
        (A,): [0.1, 0.1, 0.8],
        (B,): [0.8, 0.1, 0.1],
        (A, A): [0.1, 0.1, 0.8],
        (B, B): [0.1, 0.8, 0.1],
    }
    cfg = DecodingConfig(beam_size=2, n_best=2, max_length=5, length_penalty="none", attention=True)
    [hyps] = BatchDecoder(TableModel(8, [table], [attention]), cfg, BAN_SPECIALS).decode([[0, 7, EOS]]).nbests
    assert [h.tokens for h in hyps] == [[A], [B, B]]
    assert hyps[0].attention == [pytest.approx([0.2, 0.3, 0.5])]
    assert hyps[1].attention == [pytest.approx([0.2, 0.3, 0.5]), pytest.approx([0.8, 0.1, 0.1])]
    assert hyps[0].alignment is None
