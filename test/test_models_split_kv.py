"""Attention split along the cache (models/split_kv.py, ``RuntimeOptions.attention``): the same
attention as SDPA up to rounding, transformers' SDPA untouched for every call without
``kv_splits``, and a split_kv runtime exact by construction: the engine's captions the
runtime's own greedy decoding (its verification rows and live prefill: the exactness tests of
test_models_static_runtime.py, parametrized by attention)."""

from __future__ import annotations

import pytest
import torch
from test_models_static_runtime import SPLIT_8, static_twin
from torch.nn.functional import scaled_dot_product_attention

from crossspec_ros.models import split_kv
from crossspec_ros.models.split_kv import padded_length, split_kv_attention
from crossspec_ros.models.static_runtime import RuntimeOptions
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine


def _inputs(dtype: torch.dtype, heads: int = 8, kv_heads: int = 2, rows: int = 5,
            length: int = 64, at: int = 20) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(7)
    query = torch.randn(1, heads, rows, 16, generator=generator).to(dtype)
    key = torch.randn(1, kv_heads, length, 16, generator=generator).to(dtype)
    value = torch.randn(1, kv_heads, length, 16, generator=generator).to(dtype)
    # rows at positions at..at+rows-1 of a static cache: later positions hidden
    mask = torch.ones(length, length, dtype=torch.bool).tril()[at:at + rows][None, None]
    return query, key, value, mask


def _sdpa(query, key, value, mask):
    groups = query.shape[1] // key.shape[1]
    return scaled_dot_product_attention(
        query, key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1),
        attn_mask=mask).transpose(1, 2)


@pytest.mark.parametrize("splits", [1, 2, 4, 8, 16])
def test_split_attention_is_sdpas_over_the_visible_positions_whatever_the_splits(splits):
    # with 16 splits of 4 positions, the blocks after position 24 are hidden from every row
    query, key, value, mask = _inputs(torch.float32)
    out = split_kv_attention(query, key, value, mask, 16 ** -0.5, splits)
    assert out.shape == (1, 5, 8, 16)
    torch.testing.assert_close(out, _sdpa(query, key, value, mask), atol=2e-6, rtol=1e-5)


def test_in_bfloat16_split_attention_is_within_the_dtypes_rounding_of_sdpa():
    query, key, value, mask = _inputs(torch.bfloat16)
    out = split_kv_attention(query, key, value, mask, 16 ** -0.5, 8)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), _sdpa(*(t.float() for t in (query, key, value)),
                                                  mask), atol=3e-2, rtol=2e-2)


def test_a_cache_that_does_not_divide_into_the_splits_is_refused():
    query, key, value, mask = _inputs(torch.float32, length=60)
    with pytest.raises(ValueError, match="60 positions in 8 splits"):
        split_kv_attention(query, key, value, mask, 0.25, 8)
    assert padded_length(60) == 64 and padded_length(2195) == 2240
    assert padded_length(2195) % split_kv.KV_SPLITS == 0
    assert (padded_length(2195) // split_kv.KV_SPLITS) % split_kv.ALIGN == 0


def test_without_kv_splits_a_models_attention_is_transformers_sdpa_bit_for_bit(bundled,
                                                                               windows):
    """install() routes "sdpa" through crossspec's function: a call without ``kv_splits``
    (HF generate, lanes, the default runtime) is transformers' own SDPA call."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    split_kv.install()
    split_kv.install()  # once: not wrapped twice
    routed = AttentionInterface._global_mapping["sdpa"]
    assert routed.crossspec_split_kv
    query, key, value, mask = _inputs(torch.bfloat16, heads=2, kv_heads=2)
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal, module.scaling = 1, True, 0.25
    ours, _ = routed(module, query, key, value, mask, scaling=0.25)
    theirs, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.25)
    assert torch.equal(ours, theirs)
    split, _ = routed(module, query, key, value, mask, scaling=0.25, kv_splits=4)
    assert not torch.equal(split, theirs)  # the kwarg takes the split path
    torch.testing.assert_close(split.float(), theirs.float(), atol=3e-2, rtol=2e-2)


def test_a_split_kv_runtimes_engine_captions_are_its_own_greedy_decoding(bundled, windows):
    """Its verification rows and its live prefill: test_models_static_runtime.py's exactness
    tests, parametrized by attention."""
    verifier = static_twin(bundled[0], SPLIT_8, dtype=torch.bfloat16)
    runtime = verifier.runtime
    assert runtime.max_len % split_kv.KV_SPLITS == 0
    assert f"attention split over {split_kv.KV_SPLITS} blocks" in runtime.describe()
    engine = SpeculativeEngine(verifier, None, EngineConfig())
    for window in windows:
        assert engine.run_window(window).tokens == engine.verifier_only(window)


def test_split_kv_in_float32_decodes_what_the_sdpa_runtime_decodes(bundled, windows):
    """In float32 the two attentions differ by rounding alone: the same greedy captions."""
    split = static_twin(bundled[0], SPLIT_8)
    default = static_twin(bundled[0], RuntimeOptions(compile=False, step_rows=(8,)))
    for window in windows:
        ours = SpeculativeEngine(split, None, EngineConfig()).verifier_only(window)
        theirs = SpeculativeEngine(default, None, EngineConfig()).verifier_only(window)
        assert ours == theirs and len(ours) > 3


def test_an_unknown_attention_or_split_lanes_are_refused_with_what_to_use():
    with pytest.raises(ValueError, match="attention must be one of sdpa, split_kv"):
        RuntimeOptions(attention="flash")
    with pytest.raises(ValueError, match="not built for lane steps"):
        RuntimeOptions(step_rows=(32,), lanes=4, attention="split_kv")


def test_split_kv_on_a_model_without_sdpa_attention_is_refused(bundled):
    verifier = bundled[0]
    lm = verifier.language_model_parts()[0]
    before = lm.config._attn_implementation
    lm.config._attn_implementation = "eager"
    try:
        with pytest.raises(ValueError, match="needs the model's attention implementation "
                                             "'sdpa', it has 'eager'"):
            static_twin(verifier, SPLIT_8)
    finally:
        lm.config._attn_implementation = before


def _node_params(**given):
    from crossspec_ros.params import MODEL_PARAMS, RUNTIME_PARAMS, validate

    return validate(given, [*MODEL_PARAMS, *RUNTIME_PARAMS])


@pytest.mark.parametrize(("given", "role", "expected"), [
    # auto: split_kv where the H200 measured it (a compiled verifier on a GPU), sdpa elsewhere
    ({"device": "cuda"}, "verifier", "split_kv"),
    ({"device": "cuda:1"}, "verifier", "split_kv"),
    ({"device": "cuda"}, "drafter", "sdpa"),
    ({"device": "cpu"}, "verifier", "sdpa"),
    ({"device": "cuda", "compile": False}, "verifier", "sdpa"),
    ({"device": "cuda", "emulate": "h100-bf16-limit"}, "verifier", "sdpa"),
    # by name: what was asked, on any device
    ({"device": "cpu", "attention": "split_kv"}, "verifier", "split_kv"),
    ({"device": "cuda", "attention": "sdpa"}, "verifier", "sdpa"),
])
def test_the_attention_parameter_picks_split_kv_for_a_compiled_verifier_on_a_gpu_only(
        given, role, expected, monkeypatch):
    from crossspec_ros.models.runtime_setup import runtime_options

    monkeypatch.delenv("CROSSSPEC_NO_COMPILE", raising=False)  # the suite's eager default
    assert runtime_options(_node_params(**given), role).attention == expected


def test_an_unknown_attention_parameter_is_refused_with_the_choices():
    from crossspec_ros.params import ParameterError

    with pytest.raises(ParameterError, match="auto, sdpa or split_kv"):
        _node_params(attention="flash")


def test_batched_streams_fall_back_to_sdpa_under_auto_and_refuse_split_kv_by_name():
    from crossspec_ros.composition import _lane_attention
    from crossspec_ros.param_files import ParameterError

    split = RuntimeOptions(step_rows=(32,), attention="split_kv")
    assert _lane_attention(split, {"attention": "auto"}, "verifier").attention == "sdpa"
    plain = RuntimeOptions(step_rows=(32,))
    assert _lane_attention(plain, {"attention": "sdpa"}, "verifier") is plain
    with pytest.raises(ParameterError, match=r"verifier: attention split_kv is not built for "
                                             r"batched streams.*auto or sdpa"):
        _lane_attention(split, {"attention": "split_kv"}, "verifier")
