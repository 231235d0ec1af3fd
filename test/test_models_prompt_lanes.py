"""Prompt lanes (models/prompt_lanes.py): several streams' frames encoded in one vision call
and prefilled as one [S, C] chunk step. A stream's features, chunk rows and cache are
bit-identical whatever the other streams' frames hold or whether they have one; its live and
one-shot prefills give the same cache bit for bit, even when another prefill of the stream ran
in its lane between two of its chunks; its captions are unchanged when other streams run
beside it."""

from __future__ import annotations

import threading

import pytest
import torch
from test_models_lanes import (
    lane_cache,
    lane_twins,
    one_shot_reference,
    run_threads,
    same_cache,
)

from crossspec_ros.models.live_prefill import LivePrefill
from crossspec_ros.models.prompt_lanes import FrameRequest
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine

DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])


def prompt_twins(verifier, lanes=3, dtype=None):
    return lane_twins(verifier, lanes, dtype, batch_prompts=True)


def frame_request(twin, window, frame, slot, pos=None):
    """The request of ``window``'s frame ``frame`` (the prompt's head with frame 0)."""
    inputs = twin.prepare(window)
    chunks = twin.prompt_chunks(inputs.input_ids[0].tolist())
    start = sum(chunks[:frame]) if pos is None else pos
    ids = inputs.input_ids[:, start:start + chunks[frame]]
    pixels = inputs.pixel_values[:, frame:frame + 1].to(twin.vision_dtype)
    return FrameRequest(twin, slot, start, ids, pixels)


def slot_cache(slot, end):
    return [(layer.keys[0, :, :end].clone(), layer.values[0, :, :end].clone())
            for layer in slot.cache.layers]


@DTYPES
def test_a_streams_chunk_rows_and_cache_do_not_depend_on_the_other_streams_frames(
        bundled, windows, dtype):
    twins = prompt_twins(bundled[0], 4, dtype)
    prompt = twins[1].runtime.prompt_batcher.laned
    pool = prompt.pool
    slots = {lane: pool.acquire() for lane in range(4)}
    mine = frame_request(twins[1], windows[0], 0, slots[1])
    end = mine.pos + mine.rows
    with torch.inference_mode():
        alone = prompt.step({1: mine})
        cache = slot_cache(slots[1], end)
        g = torch.Generator().manual_seed(0)
        noise = FrameRequest(twins[0], slots[0], 0, mine.ids,
                             torch.rand(mine.pixels.shape, generator=g).to(dtype))
        variants = {
            "other windows": {0: frame_request(twins[0], windows[1], 0, slots[0]),
                              3: frame_request(twins[3], windows[2], 0, slots[3])},
            "random frame": {0: noise},
            "a later chunk beside": {2: frame_request(twins[2], windows[2], 3, slots[2], 0)},
            "alone": {},
        }
        for name, others in variants.items():
            out = prompt.step({1: mine, **others})
            assert torch.equal(out[1][0], alone[1][0]), name
            assert torch.equal(out[1][1], alone[1][1]), name
            assert same_cache(slot_cache(slots[1], end), cache), name
    assert prompt.frames_per_step == {1: 2, 2: 2, 3: 1}


@DTYPES
def test_a_live_prefill_through_prompt_lanes_gives_the_one_shot_prefills_cache_bit_for_bit(
        bundled, windows, dtype):
    """With a one-shot prefill of another window run in the stream's lane between two of the
    live prefill's frames: the live prefill's positions are copied back in (a swap)."""
    twin = prompt_twins(bundled[0], 2, dtype)[1]
    prompt = twin.runtime.prompt_batcher.laned
    window = windows[1]
    token, first, cache, fed = one_shot_reference(twin, window)
    live = LivePrefill(twin)
    for i, frame in enumerate(window.frames):
        if i == 3:  # another window's whole prefill in the same prompt lane
            twin.prefill(twin.prepare(windows[0])).close()
        live.add_frame(frame.image, frame.stamp_ns)
    session, _ = live.finish(())
    assert prompt.swaps == 1
    assert torch.equal(session.last_logits, first)
    assert same_cache(lane_cache(twin, session.pos), cache)
    assert torch.equal(session.feed([token]), fed)
    assert live.timing.vision_ms == 0.0 and live.timing.prefill_ms > 0  # vision inside


def test_a_streams_captions_with_batched_prompts_are_unchanged_when_other_streams_run_beside(
        bundled, windows):
    """Three engines on three threads over rotations of the windows: each one's captions
    equal its own with the other streams idle; prompt steps carried several streams' frames
    whenever they met (how often is timing: printed with -s, not asserted)."""
    twins = prompt_twins(bundled[0], 3, torch.bfloat16)
    engines = [SpeculativeEngine(t, None, EngineConfig(max_new_tokens=24)) for t in twins]
    alone = [[e.verifier_only(w) for w in windows] for e in engines]
    plans = [[0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1, 2]]
    results: dict[int, list] = {}
    errors: list[BaseException] = []

    def drive(k):
        try:
            results[k] = [engines[k].run_window(windows[i]).tokens for i in plans[k]]
        except BaseException as err:  # reported below
            errors.append(err)

    run_threads([threading.Thread(target=drive, args=(k,)) for k in range(3)])
    assert not errors and sorted(results) == [0, 1, 2], errors
    for k, captions in results.items():
        assert captions == [alone[k][i] for i in plans[k]], k
    prompt = twins[0].runtime.prompt_batcher
    assert not prompt.counters.failed_steps and prompt.active == set()
    print("frames per prompt step:", dict(prompt.laned.frames_per_step))


def test_batched_prompts_need_one_prompt_chunk_per_frame(bundled):
    from crossspec_ros.models.lanes import _prompt_batcher

    class OneChunk:
        info = bundled[0].info
        num_frames = 8

        def prompt_layout(self):
            return 50, [40]

    with pytest.raises(ValueError, match="one prompt chunk per frame"):
        _prompt_batcher(OneChunk(), 2, lambda: 0.0, None)


def test_a_stream_without_batched_prompts_refuses_a_prompt_frame(bundled, windows):
    twin = lane_twins(bundled[0], 2)[0]
    assert not twin.runtime.batches_prompts
    with pytest.raises(RuntimeError, match="not batched"):
        twin.runtime.prefill_frame(twin, None, 0, None, None)


def test_a_prompt_step_waits_for_the_streams_whose_frame_of_that_moment_has_not_come(bundled):
    """A triggered rig: a step of frames stamped T waits for the streams that sent a frame
    lately but none at T yet; not for a stream long silent, one that has never sent one,
    one already at T, or anyone when the frames are a one-shot prefill's (unstamped)."""
    from crossspec_ros.models.prompt_lanes import RECENT_NS

    prompt = prompt_twins(bundled[0], 5)[0].runtime.prompt_batcher.laned
    t = 10_000_000_000
    frame = 125_000_000
    prompt._last_stamp = [t - frame, t, t - RECENT_NS - 1, None, t - 2 * frame]
    at_t = {1: FrameRequest(None, None, 0, torch.zeros(1, 1), torch.zeros(1), t + 1000)}
    assert prompt.expected_lanes(at_t) == {0, 4}
    unstamped = {1: FrameRequest(None, None, 0, torch.zeros(1, 1), torch.zeros(1))}
    assert prompt.expected_lanes(unstamped) == set()


@pytest.mark.slow
def test_a_compiled_prompt_step_is_warmed_up_once_and_stays_exact_whatever_the_others_do(
        bundled, windows):
    from torch._dynamo.utils import counters

    twins = prompt_twins(bundled[0], 3, torch.bfloat16)
    prompt = twins[0].runtime.prompt_batcher.laned
    prompt.laned.warm_up(compile=True)
    assert prompt.laned.compiled and prompt.laned.compile_failed is None
    graphs = counters["stats"]["unique_graphs"]
    slots = [prompt.pool.acquire() for _ in range(3)]
    mine = frame_request(twins[0], windows[0], 0, slots[0])
    with torch.inference_mode():
        alone = prompt.step({0: mine})
        beside = prompt.step({0: mine, 2: frame_request(twins[2], windows[1], 0, slots[2])})
    assert torch.equal(alone[0][1], beside[0][1]) and torch.equal(alone[0][0], beside[0][0])
    assert counters["stats"]["unique_graphs"] == graphs and prompt.laned.eager_steps == 0
