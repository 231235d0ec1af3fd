"""Event-guided pruning of the verifier's visual tokens (models/pruning.py): which patches
each frame keeps, where an event lands on the patch grid, and that a pruned prompt prefilled
on the static runtime is the language model's own forward over the kept tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.models.preprocess import ClipPreprocess
from crossspec_ros.models.pruning import (
    event_keep_mask,
    frame_slices,
    keep_mask,
    kept_patches,
    patch_counts,
)


def batch(ts: list[int], xs: list[int], ys: list[int], width: int = 80, height: int = 60
          ) -> EventBatch:
    n = len(ts)
    return EventBatch(np.array(ts), np.array(xs), np.array(ys), np.ones(n), width, height)


def test_each_frame_reads_the_events_nearest_its_stamp():
    times = np.array([0, 10, 40, 60, 90, 100])
    parts = frame_slices(times, [20, 50, 95])  # cuts at 35 and 72
    assert [times[p].tolist() for p in parts] == [[0, 10], [40, 60], [90, 100]]


def test_an_event_lands_on_the_patch_that_sees_its_place_after_resize_and_crop():
    # an 80 x 60 sensor and a 320 x 240 frame, resized to 56 high (74 wide) and centre-cropped
    # to 56 x 56 (9 columns cut on the left): 4 x 4 patches of 14 pixels
    prep = ClipPreprocess(56)
    events = batch([0, 0, 0, 0], [40, 0, 79, 47], [30, 0, 59, 10])
    counts = patch_counts(events, slice(0, 4), (240, 320), prep, 4)
    # (40, 30): the frame's centre -> row 2, column 2; (0, 0) and (79, 59): cut by the crop;
    # (47, 10): x = 47.5/80*74.7 - 9 = 35.3 -> column 2, y = 10.5/60*56 = 9.8 -> row 0
    assert counts.sum() == 2 and counts[2 * 4 + 2] == 1 and counts[0 * 4 + 2] == 1


def test_each_frame_keeps_its_cls_and_the_patches_with_the_most_events():
    counts = np.array([[0, 5, 0, 9], [0, 0, 0, 0]])
    mask = keep_mask(counts, 2)
    assert mask[:, 0].all()  # CLS, always
    assert mask[0].tolist() == [True, False, True, False, True]  # patches 3 (9) and 1 (5)
    assert mask[1].sum() == 3  # no events: still 2 patches, spread over the grid
    assert mask[1].tolist() != [True, True, True, False, False]


def test_the_kept_share_rounds_up_and_never_drops_a_frame_to_nothing():
    assert kept_patches(0.5, 16) == 8 and kept_patches(0.01, 16) == 1
    assert kept_patches(1.0, 256) == 256
    with pytest.raises(ValueError, match="visual_keep"):
        kept_patches(0.0, 16)


def test_the_mask_has_a_row_per_frame_with_the_same_count():
    events = batch(list(range(0, 100, 10)), [5] * 10, [5] * 10)
    mask = event_keep_mask(events, [25, 75], (60, 80), ClipPreprocess(56), 4, 0.25)
    assert mask.shape == (2, 17) and mask.sum(1).tolist() == [5, 5]


@pytest.fixture(scope="module")
def static_verifier():
    from crossspec_ros.models.static_runtime import RuntimeOptions, use_static_runtime
    from crossspec_ros.models.tiny import tiny_verifier

    verifier = tiny_verifier(seed=1, init_range=0.3)
    use_static_runtime(verifier, RuntimeOptions(compile=False, step_rows=(8,)), 24)
    return verifier


def test_a_pruned_prompt_prefilled_in_steps_is_the_language_models_own_forward(
        static_verifier):
    from synthetic_windows import random_window

    verifier = static_verifier
    window = random_window(seed=3)
    inputs = verifier.prepare(window, visual_keep=0.5)
    full = verifier.prepare(window)
    assert inputs.keep is not None and inputs.input_ids.shape[1] < full.input_ids.shape[1]
    session, rows = verifier.prefill_with_proposal(inputs, [])
    with torch.inference_mode():
        encoded = verifier._encode(inputs.pixel_values)
        embeds = verifier.merged_embeds(inputs.input_ids, encoded, inputs.keep)
        lm, head, _ = verifier.language_model_parts()
        expected = head(lm(inputs_embeds=embeds).last_hidden_state)[0, -1].float()
    torch.testing.assert_close(rows[-1], expected, atol=1e-4, rtol=1e-4)
    session.close()


def test_pruned_captions_are_marked_and_the_transformers_runtime_refuses_them(
        static_verifier):
    from synthetic_windows import random_window

    from crossspec_ros.models.tiny import tiny_verifier
    from crossspec_ros.speculative.acceptance import AcceptanceRule
    from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine

    window = random_window(seed=4)
    config = EngineConfig(max_new_tokens=8, visual_keep=0.5)
    result = SpeculativeEngine(static_verifier, None, config).run_window(window)
    assert result.stats.acceptance_rule == "visual_keep:0.5" and result.tokens
    assert EngineConfig(acceptance=AcceptanceRule.parse("top_k:3"),
                        visual_keep=0.5).lossy_mode == "top_k:3+visual_keep:0.5"
    assert EngineConfig().lossy_mode == ""
    eager = SpeculativeEngine(tiny_verifier(seed=1), None, config)
    with pytest.raises(ValueError, match="static runtime"):
        eager.run_window(window)
