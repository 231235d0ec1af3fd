"""EventGPT: pooling order, prompt layout, released checkpoint layout round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.models.errors import CheckpointLayoutError
from crossspec_ros.models.eventgpt import EVENT_TOKEN_INDEX, spatio_temporal_pool
from crossspec_ros.models.eventgpt_checkpoint import (
    config_from_json,
    load_eventgpt,
    save_eventgpt,
)
from crossspec_ros.models.eventgpt_drafter import EventGPTDrafter, add_event_tokens
from crossspec_ros.models.loading import accelerate_available, bitsandbytes_available
from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_tokenizer
from crossspec_ros.sync.window import Window


def _window(seed: int = 0, n: int = 300) -> Window:
    rng = np.random.default_rng(seed)
    events = EventBatch(np.sort(rng.integers(0, 10**9, n)), rng.integers(0, 40, n),
                        rng.integers(0, 30, n), rng.integers(0, 2, n), 40, 30)
    return Window(0, 0, 10**9, events, [], n_distinct_frames=0)


@pytest.fixture(scope="module")
def drafter() -> EventGPTDrafter:
    return tiny_eventgpt_drafter(seed=7, init_range=0.3)


def test_pooling_puts_five_temporal_tokens_before_the_spatial_tokens():
    features = torch.arange(5 * 4 * 2, dtype=torch.float32).reshape(5, 4, 2)
    pooled = spatio_temporal_pool(features)
    assert pooled.shape == (5 + 4, 2)
    assert torch.equal(pooled[:5], features.mean(dim=1))   # one per image
    assert torch.equal(pooled[5:], features.mean(dim=0))   # one per patch position


def test_event_encoding_yields_five_plus_patches_plus_cls_tokens(drafter):
    inputs = drafter.prepare(_window())
    assert inputs.pixel_values.shape == (5, 3, 28, 28)
    with torch.inference_mode():
        tokens = drafter.model.encode_events(inputs.pixel_values)
    assert tokens.shape == (5 + 2 * 2 + 1, 32) == (drafter.info.extra["event_tokens"], 32)


def test_prompt_follows_the_reference_template_and_tokenization(drafter):
    text = drafter.prompt("What is ahead ?")
    assert text.startswith("A chat between a curious human and an artificial intelligence "
                           "assistant. The assistant gives helpful, detailed, and polite "
                           "answers to the human's questions. USER: <ev_start><event><ev_end>\n")
    assert text.endswith("What is ahead ? ASSISTANT:")
    ids = drafter.prompt_ids("What is ahead ?").tolist()
    tok = drafter.tokenizer
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1
    at = ids.index(EVENT_TOKEN_INDEX)
    assert ids.count(EVENT_TOKEN_INDEX) == 1
    assert ids[at - 1] == tok.convert_tokens_to_ids("<ev_start>")
    assert ids[at + 1] == tok.convert_tokens_to_ids("<ev_end>")


def test_event_tokens_replace_the_placeholder_in_place(drafter):
    inputs = drafter.prepare(_window())
    with torch.inference_mode():
        events = drafter.model.encode_events(inputs.pixel_values)
        embeds = drafter.model.embed_prompt(inputs.input_ids, events)
        text = drafter.model.language_model.get_input_embeddings()(inputs.input_ids.clamp(min=0))
    at = inputs.input_ids.tolist().index(EVENT_TOKEN_INDEX)
    n = events.shape[0]
    assert embeds.shape[1] == len(inputs.input_ids) - 1 + n
    assert torch.equal(embeds[0, at:at + n], events)
    assert torch.equal(embeds[0, :at], text[:at])
    assert torch.equal(embeds[0, at + n:], text[at + 1:])


RELEASE_KEYS = (
    "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.norm.weight",
    "lm_head.weight", "model.visual_projector.0.weight", "model.visual_projector.2.bias",
    "model.feature_adaptor.weight",
    "model.visual_tower.visual_tower.vision_model.embeddings.patch_embedding.weight",
    "model.visual_tower.visual_tower.vision_model.encoder.layers.1.mlp.fc2.weight",
)


def test_save_writes_the_released_layout(drafter, tmp_path):
    save_eventgpt(drafter.model, tmp_path, drafter.tokenizer)
    keys = set(load_file(tmp_path / "model.safetensors"))
    assert set(RELEASE_KEYS) <= keys
    assert all(k.startswith(("model.", "lm_head.")) for k in keys)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "EventChat_llama"
    assert config["mm_visual_tower"] == "tiny-clip"
    assert config["event_feature_adaptor"] is True and config["mm_use_im_start_end"] is True
    assert config["hidden_size"] == 32 and config["vocab_size"] == len(drafter.tokenizer)


def test_safetensors_round_trip_gives_identical_logits(drafter, tmp_path):
    save_eventgpt(drafter.model, tmp_path, drafter.tokenizer)
    loaded = EventGPTDrafter.load(tmp_path, dtype="fp32")
    inputs = drafter.prepare(_window(3))
    a, b = drafter.prefill(inputs), loaded.prefill(inputs)
    assert torch.allclose(a.last_logits, b.last_logits, atol=1e-6)
    tokens = drafter.generate_greedy(inputs, 8)
    assert loaded.generate_greedy(inputs, 8) == tokens
    assert torch.allclose(a.feed(tokens), b.feed(tokens), atol=1e-6)
    assert loaded.info == drafter.info


def test_bin_checkpoint_loads_through_weights_only(drafter, tmp_path, monkeypatch):
    save_eventgpt(drafter.model, tmp_path, fmt="bin")
    calls = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    model = load_eventgpt(tmp_path, dtype="fp32")
    assert calls == [True]
    inputs = drafter.prepare(_window(4))
    with torch.inference_mode():
        ours = model.encode_events(inputs.pixel_values)
        theirs = drafter.model.encode_events(inputs.pixel_values)
    assert torch.allclose(ours, theirs, atol=1e-6)


def test_key_layout_mismatch_names_the_first_missing_and_unexpected_keys(drafter, tmp_path):
    save_eventgpt(drafter.model, tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["model.event_qformer.weight"] = state.pop("model.feature_adaptor.weight")
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointLayoutError) as err:
        load_eventgpt(tmp_path, dtype="fp32")
    message = str(err.value)
    assert "missing key(s), first: model.feature_adaptor.weight" in message
    assert "unexpected key(s), first: model.event_qformer.weight" in message
    assert str(tmp_path) in message


def test_shape_mismatch_is_reported_with_both_shapes(drafter, tmp_path):
    save_eventgpt(drafter.model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["intermediate_size"] = 48
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointLayoutError, match=r"mlp\.gate_proj\.weight \(64, 32\) != "
                                                    r"\(48, 32\)"):
        load_eventgpt(tmp_path, dtype="fp32")


def test_old_checkpoint_buffers_are_ignored(drafter, tmp_path):
    save_eventgpt(drafter.model, tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(4)
    state["model.visual_tower.visual_tower.vision_model.embeddings.position_ids"] = \
        torch.arange(5)[None]
    save_file(state, tmp_path / "model.safetensors")
    assert load_eventgpt(tmp_path, dtype="fp32").config.text.hidden_size == 32


def test_release_config_without_vision_config_means_clip_l14_336():
    config = config_from_json({
        "model_type": "EventChat_llama", "architectures": ["EventChatModel"],
        "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "vocab_size": 32001, "torch_dtype": "bfloat16",
        "mm_visual_tower": "openai/clip-vit-large-patch14-336", "event_feature_adaptor": True,
    })
    assert (config.vision.image_size, config.vision.patch_size) == (336, 14)
    assert config.vision.hidden_size == 1024 and config.event_tokens == 582
    assert config.feature_adaptor and not config.mm_use_im_start_end
    assert config.text.vocab_size == 32001


def test_missing_event_tokens_are_added_above_the_vocabulary_and_embeddings_grow():
    tok = tiny_tokenizer("llava")  # no <ev_*> tokens
    before = len(tok)
    add_event_tokens(tok, mm_use_im_start_end=True)
    assert [tok.convert_tokens_to_ids(t) for t in ("<ev_patch>", "<ev_start>", "<ev_end>")] \
        == [before, before + 1, before + 2]
    from crossspec_ros.models.tiny import tiny_eventgpt

    model = tiny_eventgpt(tiny_tokenizer("llava"), seed=0)
    drafter = EventGPTDrafter(model, tiny_tokenizer("llava"))
    assert drafter.info.vocab_size == before + 3 and drafter.info.proposable_ids == before


@pytest.mark.skipif(not (bitsandbytes_available() and accelerate_available()),
                    reason="bitsandbytes/accelerate not installed")
def test_four_bit_language_model_decodes_like_its_own_generate(tmp_path):
    import bitsandbytes as bnb

    source = tiny_eventgpt_drafter(seed=8, init_range=0.3, hidden=64, vision_hidden=64)
    save_eventgpt(source.model, tmp_path, source.tokenizer)
    drafter = EventGPTDrafter.load(tmp_path, dtype="fp32", quantization="4bit")
    layer = drafter.model.language_model.model.layers[0].mlp.down_proj
    assert isinstance(layer, bnb.nn.Linear4bit)
    inputs = drafter.prepare(_window(5))
    assert drafter.generate_greedy(inputs, 6) == drafter.reference_generate(inputs, 6)


def test_tower_weights_can_come_from_the_clip_directory(drafter, tmp_path):
    ckpt, tower_dir = tmp_path / "eventgpt", tmp_path / "clip"
    save_eventgpt(drafter.model, ckpt)
    drafter.model.visual_tower.save_pretrained(tower_dir)
    state = load_file(ckpt / "model.safetensors")
    state = {k: v for k, v in state.items() if "visual_tower" not in k}
    save_file(state, ckpt / "model.safetensors")
    with pytest.raises(CheckpointLayoutError, match="missing key"):
        load_eventgpt(ckpt, dtype="fp32")
    model = load_eventgpt(ckpt, dtype="fp32", vision_tower_dir=tower_dir)
    pixels = drafter.prepare(_window(6)).pixel_values
    with torch.inference_mode():
        assert torch.allclose(model.encode_events(pixels),
                              drafter.model.encode_events(pixels), atol=1e-6)
