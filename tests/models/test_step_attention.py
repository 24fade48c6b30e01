"""A decoding step's attention (models/attention.py `step_attend`): the fused kernel on a GPU (tests/test_cuda.py),
two products on a CPU. The fused kernel reads the step's masks as the two products do."""

import pytest
import torch

from nmtdecode.options.config import DecodingConfig
from nmtdecode.engine.decoding import BatchDecoder
from nmtdecode.models.attention import attend, fused_attention
from nmtdecode.models.fixed_step import FixedShapeSteps
from nmtdecode.models.state import ancestry_mask

from tests.helpers import random_sources, tiny_transformer


def step_inputs(sentences=3, heads=2, width=4, positions=5, hd=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sentences, heads, width, hd, generator=g)
    keys, values = (torch.randn(sentences, heads, positions * width, hd, generator=g) for _ in range(2))
    ancestry = torch.rand(sentences * width, positions, width, generator=g) > 0.5
    ancestry[:, -1] = torch.eye(width, dtype=torch.bool).repeat(sentences, 1)  # each row's own slot, as a step has
    return q, keys, values, ancestry_mask(ancestry, positions)


@pytest.mark.parametrize("mask", ["ancestry", "padding", "none"])
def test_the_fused_kernel_reads_the_step_masks_as_the_two_products(mask):
    q, keys, values, ancestry = step_inputs()
    masks = {
        "ancestry": ancestry,
        "padding": torch.arange(20)[None, None, None, :] < torch.tensor([20, 13, 7])[:, None, None, None],
        "none": None,
    }
    torch.testing.assert_close(
        fused_attention(q, keys, values, masks[mask]), attend(q, keys, values, masks[mask]), atol=1e-5, rtol=1e-5
    )


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
def test_a_cpu_step_runs_the_two_products():
    """Faster there for a step's few queries (docs/speed.md): no fused kernel in a CPU's step."""
    model = tiny_transformer(1, vocab=20, eos_bias=1.0)
    decoder = BatchDecoder(model, DecodingConfig(beam_size=3, max_length=4), steps=FixedShapeSteps(model, False))
    with torch.profiler.profile() as prof:
        decoder.decode(random_sources(3, 20, seed=2))
    names = {event.key for event in prof.key_averages()}
    assert "aten::softmax" in names and "aten::scaled_dot_product_attention" not in names
