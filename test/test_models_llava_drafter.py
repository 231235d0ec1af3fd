"""Generic LLaVA drafter on event images."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.representations import event_image_chunks
from crossspec_ros.models.llava_drafter import LlavaEventDrafter
from crossspec_ros.models.tiny import tiny_llava_drafter
from crossspec_ros.sync.window import Window


def _window(seed: int = 0) -> Window:
    rng = np.random.default_rng(seed)
    n = 200
    events = EventBatch(np.sort(rng.integers(0, 10**9, n)), rng.integers(0, 32, n),
                        rng.integers(0, 24, n), rng.integers(0, 2, n), 32, 24)
    return Window(0, 0, 10**9, events, [], n_distinct_frames=0)


@pytest.mark.parametrize("n_images", [1, 5])
def test_each_event_image_gets_one_placeholder_block(n_images):
    drafter = tiny_llava_drafter(seed=1, n_images=n_images, init_range=0.3)
    window = _window()
    inputs = drafter.prepare(window)
    assert inputs.pixel_values.shape == (n_images, 3, 28, 28)
    image_id = drafter.model.config.image_token_id
    assert int((inputs.input_ids == image_id).sum()) == n_images * 4  # CLS dropped
    expected = drafter.preprocess(event_image_chunks(window.events, n_images))
    assert torch.equal(inputs.pixel_values, expected)
    assert drafter.generate_greedy(inputs, 8) == drafter.reference_generate(inputs, 8)


def test_prompt_uses_the_llava_template():
    drafter = tiny_llava_drafter(seed=0)
    assert drafter.prompt("Describe the driving scene .") == \
        "USER: <image>\nDescribe the driving scene . ASSISTANT:"


def test_events_without_sensor_size_are_refused():
    drafter = tiny_llava_drafter(seed=0)
    with pytest.raises(ValueError, match="no sensor size"):
        drafter.prepare(Window(0, 0, 1, EventBatch.empty(0, 0), [], 0))


def test_directory_round_trip_keeps_logits(tmp_path):
    drafter = tiny_llava_drafter(seed=2, init_range=0.3)
    drafter.model.save_pretrained(tmp_path)
    drafter.tokenizer.save_pretrained(tmp_path)
    loaded = LlavaEventDrafter.load(tmp_path, dtype="fp32")
    inputs = drafter.prepare(_window(1))
    assert torch.allclose(loaded.prefill(inputs).last_logits,
                          drafter.prefill(inputs).last_logits, atol=1e-5)
    assert loaded.info.proposable_ids == drafter.info.proposable_ids


def test_a_llava_drafter_directory_loads_from_parameters(tmp_path):
    from crossspec_ros.models.pair import load_drafter

    drafter = tiny_llava_drafter(seed=2, init_range=0.3)
    drafter.model.save_pretrained(tmp_path)
    drafter.tokenizer.save_pretrained(tmp_path)
    loaded = load_drafter(str(tmp_path))  # what drafter_model:=DIR does
    assert isinstance(loaded, LlavaEventDrafter)
    inputs = drafter.prepare(_window(1))
    assert torch.allclose(loaded.prefill(inputs).last_logits,
                          drafter.prefill(inputs).last_logits, atol=1e-5)
