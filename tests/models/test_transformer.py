"""The model: cached incremental decoding equals the full pass; position tables are the published ones."""

import math

import pytest
import torch

from nmtdecode.models.transformer import Transformer, sinusoidal_table
from nmtdecode.search.base import StepOutput

from tests.helpers import tiny_config


@pytest.mark.parametrize("pre_norm", [True, False], ids=["pre-norm", "post-norm"])
@pytest.mark.parametrize("positions", ["sinusoidal", "sinusoidal_interleaved", "sinusoidal_fairseq", "learned"])
def test_cached_steps_equal_teacher_forced_pass(pre_norm, positions):
    torch.manual_seed(0)
    cfg = tiny_config(
        50,
        pre_norm=pre_norm,
        positions=positions,
        position_offset=2,
        layernorm_embedding=not pre_norm,
        final_logits_bias=True,
        embed_scale=2.0,
    )
    model = Transformer(cfg).eval()
    src = torch.randint(4, 50, (3, 7))
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1, 4:] = False  # a padded row
    tgt = torch.randint(4, 50, (3, 6))
    with torch.no_grad():
        full = model(src, mask, tgt)
        cache = model.init_cache(model.encode(src, mask), mask)
        steps = torch.stack([model.decode_step(tgt[:, t], cache) for t in range(tgt.size(1))], dim=1)
    assert full.abs().max() > 1.0  # logits of a real size, so 1e-5 is a tight bound
    torch.testing.assert_close(steps, full, rtol=1e-5, atol=1e-5)


def test_cache_follows_the_search():
    """A cache that widened, reordered and dropped rows equals decoding the resulting rows from the start."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(30)).eval()
    src = torch.randint(4, 30, (2, 5))
    mask = torch.ones_like(src, dtype=torch.bool)
    tgt = torch.randint(4, 30, (4, 3))  # final rows: sentence 0 x 2 beams, sentence 1 x 2 beams
    tgt[:, 0] = 2  # every row of a sentence starts from the same token
    with torch.no_grad():
        cache = model.init_cache(model.encode(src, mask), mask)
        model.decode_step(tgt[[0, 2], 0], cache)  # step 0: one row per sentence
        cache.follow(StepOutput(tokens=tgt[:, 1], origin=torch.tensor([0, 0, 1, 1])))  # widen to 2 rows each
        model.decode_step(tgt[:, 1], cache)
        cache.follow(StepOutput(tokens=tgt[[1, 0, 3, 3], 2], origin=torch.tensor([1, 0, 3, 3])))  # reorder
        reordered = model.decode_step(tgt[[1, 0, 3, 3], 2], cache)
        # sentence 0 finishes: keep sentence 1 (position 1), whose rows are 2 and 3
        cache.follow(StepOutput(tokens=torch.tensor([5, 6]), origin=torch.tensor([2, 3]), keep=torch.tensor([1])))
        after_drop = model.decode_step(torch.tensor([5, 6]), cache)
        full = model(src.repeat_interleave(2, 0), mask.repeat_interleave(2, 0), tgt[[1, 0, 3, 3]])
        full2 = model(src[[1, 1]], mask[[1, 1]], torch.cat([tgt[[3, 3]], torch.tensor([[5], [6]])], 1))
    torch.testing.assert_close(reordered, full[:, 2], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(after_drop, full2[:, 3], rtol=1e-5, atol=1e-5)


def test_sinusoidal_layouts_match_their_formulas():
    dim, pos = 8, 5
    concat = sinusoidal_table(10, dim, "sinusoidal")
    interleaved = sinusoidal_table(10, dim, "sinusoidal_interleaved")
    fairseq = sinusoidal_table(10, dim, "sinusoidal_fairseq")
    for i in range(dim // 2):
        freq = 10000 ** (-2 * i / dim)
        assert concat[pos, i] == pytest.approx(math.sin(pos * freq), abs=1e-6)
        assert concat[pos, dim // 2 + i] == pytest.approx(math.cos(pos * freq), abs=1e-6)
        assert interleaved[pos, 2 * i] == pytest.approx(math.sin(pos * freq), abs=1e-6)
        assert interleaved[pos, 2 * i + 1] == pytest.approx(math.cos(pos * freq), abs=1e-6)
        freq_fs = math.exp(-i * math.log(10000) / (dim // 2 - 1))
        assert fairseq[pos, i] == pytest.approx(math.sin(pos * freq_fs), abs=1e-6)


def test_too_long_input_fails_clearly():
    model = Transformer(tiny_config(20, max_positions=8)).eval()
    src = torch.full((1, 9), 5)
    with pytest.raises(ValueError, match="longer than the model's 8 positions"):
        model.encode(src, torch.ones_like(src, dtype=torch.bool))


def test_cache_paths_follow_many_reorders():
    """Six steps of random within-sentence reorders (and a dropped sentence): every row's logits
    equal a teacher-forced pass over that row's own history."""
    torch.manual_seed(1)
    model = Transformer(tiny_config(30)).eval()
    src = torch.randint(4, 30, (3, 6))
    mask = torch.ones_like(src, dtype=torch.bool)
    mask[2, 4:] = False  # a padded sentence
    k, g = 3, torch.Generator().manual_seed(2)
    histories = [[2] for _ in range(3)]  # one row per sentence at step 0
    sentences = [0, 1, 2]
    with torch.no_grad():
        cache = model.init_cache(model.encode(src, mask), mask)
        tokens = torch.tensor([2, 2, 2])
        for step in range(6):
            logits = model.decode_step(tokens, cache)
            width = len(histories) // len(sentences)
            for row, history in enumerate(histories):
                b = sentences[row // width]
                full = model(src[b : b + 1], mask[b : b + 1], torch.tensor([history]))[0, -1]
                torch.testing.assert_close(logits[row], full, rtol=1e-5, atol=1e-5)
            keep = None
            if step == 3:  # sentence at position 1 finishes
                keep = torch.tensor([0, 2])
                sentences = [sentences[0], sentences[2]]
            kept = keep.tolist() if keep is not None else list(range(len(sentences)))  # positions before the drop
            origin = torch.tensor(
                [p * width + int(torch.randint(0, width, (1,), generator=g)) for p in kept for _ in range(k)]
            )
            tokens = torch.randint(4, 30, (origin.numel(),), generator=g)
            histories = [histories[o] + [t] for o, t in zip(origin.tolist(), tokens.tolist())]
            cache.follow(StepOutput(tokens=tokens, origin=origin, keep=keep))


@pytest.mark.parametrize("tied", [True, False])
def test_an_uninitialised_model_is_the_same_model_once_filled(tied):
    """The loaders' `Transformer.uninitialised`: the same parameters, ties and buffers as a model
    built normally, and the same outputs once a state dict fills it; torch's initialisers are
    themselves again afterwards, also when the construction fails."""
    cfg = tiny_config(50, share_embeddings=tied, tie_output=tied, final_logits_bias=True)
    torch.manual_seed(0)
    reference = Transformer(cfg).eval()
    empty = Transformer.uninitialised(cfg).eval()
    assert [(n, p.shape) for n, p in empty.named_parameters()] == [
        (n, p.shape) for n, p in reference.named_parameters()
    ]
    assert (empty.output.weight is empty.tgt_embed.tokens.weight) == tied
    assert torch.equal(empty.src_embed.sinusoids, reference.src_embed.sinusoids)
    empty.load_state_dict(reference.state_dict())
    src, mask, tgt = torch.randint(4, 50, (2, 5)), torch.ones(2, 5, dtype=torch.bool), torch.randint(4, 50, (2, 4))
    with torch.no_grad():
        assert torch.equal(empty(src, mask, tgt), reference(src, mask, tgt))
    with pytest.raises(ValueError, match="must be divisible by heads"):
        Transformer.uninitialised(tiny_config(50, heads=5))  # d_model 32 is not divisible by 5 heads
    weights = torch.empty(3, 4)
    torch.nn.init.ones_(weights)
    assert torch.equal(weights, torch.ones(3, 4))  # the initialisers work again


def test_load_weights_gives_the_model_the_tensors_themselves_and_keeps_ties():
    """No copy (so a checkpoint is held once while it loads): each parameter is the given tensor,
    converted where its dtype differs; tied parameters are one tensor again afterwards."""
    from nmtdecode.models.placement import load_weights

    cfg = tiny_config(50, share_embeddings=True, tie_output=True, final_logits_bias=True)
    torch.manual_seed(1)
    source = Transformer(cfg).eval()
    tensors = {
        n: t.clone() for n, t in source.state_dict().items() if n not in ("tgt_embed.tokens.weight", "output.weight")
    }
    tensors["output.bias"] = tensors["output.bias"].double()  # another dtype: converted
    model = Transformer.uninitialised(cfg).eval()
    load_weights(model, tensors, "test")
    assert model.encoder_layers[0].ffn.up.weight.data_ptr() == tensors["encoder_layers.0.ffn.up.weight"].data_ptr()
    assert model.output.bias.dtype == torch.float32
    assert model.output.weight is model.tgt_embed.tokens.weight is model.src_embed.tokens.weight
    src, mask, tgt = torch.randint(4, 50, (2, 5)), torch.ones(2, 5, dtype=torch.bool), torch.randint(4, 50, (2, 4))
    with torch.no_grad():
        torch.testing.assert_close(model(src, mask, tgt), source(src, mask, tgt))


def test_every_activation_a_config_accepts_has_a_function():
    from nmtdecode.models.architecture import ACTIVATION_NAMES
    from nmtdecode.models.transformer import ACTIVATIONS

    assert set(ACTIVATIONS) == set(ACTIVATION_NAMES)


@pytest.mark.parametrize("pre_norm", [True, False])
@pytest.mark.parametrize("relative", [False, True])
def test_a_padded_batch_encodes_each_sentence_as_alone_and_multiplies_only_real_rows(pre_norm, relative):
    """The encoder holds a padded batch's real positions only (as CTranslate2's encoder does): each
    sentence's memory is what it gets encoded alone, and the layers' products see no padding row."""
    from tests.helpers import tiny_transformer

    extra = dict(positions="relative", relative_buckets=8, relative_max_distance=16) if relative else {}
    model = tiny_transformer(3, vocab=40, pre_norm=pre_norm, **extra)
    lengths = [7, 2, 5, 1]
    src = torch.randint(4, 40, (len(lengths), max(lengths)), generator=torch.Generator().manual_seed(1))
    mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    rows_seen = []
    hook = model.encoder_layers[0].ffn.up.register_forward_hook(lambda m, args, out: rows_seen.append(args[0].shape))
    with torch.no_grad():
        memory = model.encode(src, mask)
        hook.remove()
        alone = [model.encode(src[i : i + 1, :n], mask[i : i + 1, :n])[0] for i, n in enumerate(lengths)]
    assert rows_seen == [torch.Size([sum(lengths), model.cfg.d_model])]
    for i, n in enumerate(lengths):
        torch.testing.assert_close(memory[i, :n], alone[i], rtol=1e-5, atol=1e-5)
