"""`crossspec bench streams` (crossspec_ros/bench/streams.py): several streams' drives replayed
into one verifier through the product's loops, batched in lanes and separate, every stream's
captions lossless."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from crossspec_ros.bench.streams import (
    frame_interval_ns,
    stream_messages,
    stream_windows,
    window_frames,
)
from crossspec_ros.bench.streams_cmd import graph_names, stream_counts
from crossspec_ros.paths import sample_bag


@pytest.fixture(scope="module")
def four():
    """The sample bag's first four windows."""
    from crossspec_ros.bench.engine import bag_windows
    from crossspec_ros.paths import sample_bag

    return bag_windows(sample_bag(), 4)


def test_every_stream_replays_the_bags_windows_rotated_onto_the_same_grid(four):
    few = four
    per_stream = stream_windows(few, 2)
    assert [[w.key for w in ws] for ws in per_stream] == [[w.key for w in few]] * 2
    for i, (w0, w1) in enumerate(zip(*per_stream, strict=True)):
        source = few[(i + 2) % 4]  # stream 1 starts half-way through the bag
        assert w0.frames[0].image is few[i].frames[0].image
        assert w1.frames[0].image is source.frames[0].image
        shift = few[i].t0 - source.t0
        assert [f.stamp_ns for f in w1.frames] == [f.stamp_ns + shift for f in source.frames]
        assert np.array_equal(w1.events.t, source.events.t + shift)
        assert all(w1.t0 <= f.stamp_ns < w1.t1 for f in w1.frames)
    messages = stream_messages(few, 2)
    assert [m[0] for m in messages] == sorted(m[0] for m in messages)
    assert {m[1] for m in messages} == {0, 1}
    assert len(messages) == 2 * (sum(len(w.frames) for w in few) + 1)  # + each closing frame
    every = window_frames(sample_bag(), few)  # a camera's every frame, not only the chosen
    assert all(len(all_of) >= len(w.frames) for all_of, w in zip(every, few, strict=True))
    assert all(w.t0 <= f.stamp_ns < w.t1 for all_of, w in zip(every, few, strict=True)
               for f in all_of)
    rear = [m for m in stream_messages(few, 2, every, "free-running") if m[1] == 1]
    assert len(rear) == sum(map(len, every)) + 1
    assert rear[0][2].image is every[2][0].image  # slot 0 of stream 1: window 2's frames
    # free-running: stream 1 of 2 fires half a frame interval after stream 0
    half = frame_interval_ns(every) // 2
    assert half > 0 and rear[0][0] == every[2][0].stamp_ns - (few[2].t0 - few[0].t0) + half


def test_a_triggered_rigs_streams_send_their_frames_at_the_same_stamps(four):
    """Every stream's frames of slot i at slot i's own frame stamps (the cameras fire
    together), each the rotated window's frame nearest in the window."""
    every = window_frames(sample_bag(), four)
    messages = stream_messages(four, 3, every)  # triggered: the default
    by_stream = [[m for m in messages if m[1] == k] for k in range(3)]
    stamps = [[m[0] for m in ms] for ms in by_stream]
    assert stamps[0] == stamps[1] == stamps[2]
    assert stamps[0][:-1] == [f.stamp_ns for frames in every for f in frames]
    assert all(m[2].stamp_ns == m[0] for m in messages)
    # stream 2 in slot 0 replays window 2's frames (rotated by 2 * 4 // 3), moved to slot 0
    shift = four[0].t0 - four[2].t0
    for (stamp, _, frame) in by_stream[2][:len(every[0])]:
        nearest = min(every[2], key=lambda f: abs(f.stamp_ns + shift - stamp))
        assert frame.image is nearest.image
    with pytest.raises(ValueError, match="rig 'loose'"):
        stream_messages(four, 2, every, "loose")


def test_a_runs_counters_are_its_rounds_not_the_warm_up_or_the_references():
    from crossspec_ros.bench.streams import counters_since, summed_counters

    before = {"lane_steps": 5, "lanes_per_step": {1: 5}, "gather_wait_ms": 1.5}
    after = {"lane_steps": 9, "lanes_per_step": {1: 6, 2: 3}, "gather_wait_ms": 4.0}
    one = counters_since(before, after)
    assert one == {"lane_steps": 4, "lanes_per_step": {1: 1, 2: 3}, "gather_wait_ms": 2.5}
    assert summed_counters([one, one]) == {"lane_steps": 8, "lanes_per_step": {1: 2, 2: 6},
                                           "gather_wait_ms": 5.0}


def test_stream_counts_and_graphs_are_refused_in_one_line_when_they_make_no_sense():
    assert stream_counts("1,2,4") == [1, 2, 4]
    for bad in ("0,1", "2,1", "1,1", "a", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            stream_counts(bad)
    assert graph_names("separate,batched") == ["separate", "batched"]
    for bad in ("batched,batched", "lanes", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            graph_names(bad)


def test_batched_and_separate_streams_each_caption_every_window_losslessly(bundled, four):
    from crossspec_ros.bench.streams import run_streams_bench
    from crossspec_ros.comparison import BY_NAME
    from crossspec_ros.params import VERIFIER_NODE_PARAMS, validate

    verifier, _drafter = bundled
    p = validate({**BY_NAME["text_only"].verifier_params, "max_new_tokens": 16,
                  "compile": False}, VERIFIER_NODE_PARAMS)
    report = run_streams_bench(verifier, four, p, counts=[2],
                               graphs=["batched", "separate"], rounds=1, warmup=1,
                               log=lambda _line: None)
    runs = {r["graph"]: r for r in report["runs"]}
    assert set(runs) == {"batched", "separate"}
    for graph, run in runs.items():
        # issue 57's JSON, names as written
        assert run["streams"] == 2 and run["emulated"] is None
        assert run["dropped"] == 0 and run["lossless"] and run["lossless_checked"] == 6, graph
        assert [s["final"] for s in run["per_stream"]] == [3, 3]
        assert run["confirmed_ms_median"] is not None and run["confirmed_ms_p95"] is not None
        assert not run["rounds"][0]["errors"]
    batched = runs["batched"]
    assert batched["lane_steps"] > 0 and batched["lane_copies"] >= 6
    assert sum(batched["lanes_per_step"].values()) == batched["lane_steps"]
    # the streams' frames prefilled in prompt steps (stream_prompts auto: batched with lanes):
    # every frame of the round's windows in one of them
    assert sum(batched["frames_per_prompt_step"].values()) == batched["prompt_steps"] > 0
    assert sum(k * v for k, v in batched["frames_per_prompt_step"].items()) >= 2 * 4 * 8
    assert batched["failed_prompt_steps"] == 0
    assert "lane_steps" not in runs["separate"] and "prompt_steps" not in runs["separate"]
    assert set(report["most_streams_holding_target"]) == {"batched", "separate"}
