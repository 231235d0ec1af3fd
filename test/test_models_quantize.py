"""In-memory NF4 quantization (models/quantize.py): which layers, and that they still run."""

import torch
from torch import nn

from crossspec_ros.models.quantize import quantize_caption_model_4bit, quantize_linear_layers_4bit
from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier


def _linear4bit() -> type:
    import bitsandbytes as bnb

    return bnb.nn.Linear4bit


def test_a_verifier_in_4bit_keeps_only_its_output_head_in_float():
    verifier = tiny_verifier(seed=0, hidden=64, layers=2, image_size=56)
    linears = sum(type(m) is nn.Linear for m in verifier.model.modules())
    replaced = quantize_caption_model_4bit(verifier)
    assert replaced == linears - 1
    assert type(verifier.model.lm_head) is nn.Linear
    quantized = [m for m in verifier.model.modules() if isinstance(m, _linear4bit())]
    assert len(quantized) == replaced
    assert all(m.weight.dtype == torch.uint8 and m.weight.bnb_quantized for m in quantized)


def test_a_drafter_in_4bit_quantizes_its_language_model_and_not_its_vision_side():
    drafter = tiny_eventgpt_drafter(seed=1, hidden=64, layers=2, image_size=56)
    lm = drafter.model.language_model
    in_lm = sum(type(m) is nn.Linear for m in lm.modules()) - 1  # lm_head stays
    assert quantize_caption_model_4bit(drafter) == in_lm
    assert type(drafter.model.visual_projector[0]) is nn.Linear
    assert not any(isinstance(m, _linear4bit()) for m in drafter.model.visual_tower.modules())


def test_4bit_layers_compute_close_to_the_float_ones():
    layer = nn.Linear(64, 128)
    holder = nn.Sequential(layer)
    x = torch.randn(5, 64)
    expected = layer(x)
    assert quantize_linear_layers_4bit(holder) == 1
    got = holder(x)
    assert isinstance(holder[0], _linear4bit())
    # NF4 keeps ~3 significant bits per weight: close, not equal
    assert not torch.equal(got, expected)
    assert torch.allclose(got, expected, atol=0.25 * expected.abs().max().item())
