"""Frame selection decided while the window is open (live prefill's input): every announced
slot is the one the closed window will have, as long as frames keep to the reorder slack."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from crossspec_ros.sync import StampedFrame, sample_frames
from crossspec_ros.sync.synchronizer import WindowSynchronizer
from crossspec_ros.sync.window import decided_frames

MS = 1_000_000
T0, T1, N = 0, 1000 * MS, 8  # targets at 62.5, 187.5, ... 937.5 ms


def frames_at(*ms: float) -> list[StampedFrame]:
    return [StampedFrame(int(m * MS), None) for m in ms]


def stamps(frames) -> list[float]:
    return [f.stamp_ns / MS for f in frames]


def test_a_slot_is_decided_once_no_frame_to_come_can_be_nearer():
    seen = frames_at(50, 100)
    # slot 0 (62.5 ms) has 50 ms at 12.5 ms; a frame at >= 74 ms could be nearer, not >= 75
    assert decided_frames(seen, T0, T1, N, 74 * MS) == []
    assert stamps(decided_frames(seen, T0, T1, N, 75 * MS)) == [50]
    # slot 1 (187.5 ms) has 100 ms at 87.5 ms: undecided until the watermark reaches 275 ms
    assert stamps(decided_frames(seen, T0, T1, N, 274 * MS)) == [50]


def test_a_frame_exactly_on_its_target_is_decided_at_once():
    assert stamps(decided_frames(frames_at(62.5), T0, T1, N, 0)) == [62.5]


def test_only_a_leading_run_of_slots_is_announced():
    # slot 1 has its frame exactly on target, slot 0 is still open: nothing yet
    assert decided_frames(frames_at(10, 187.5), T0, T1, N, 20 * MS) == []


def test_past_the_window_it_is_sample_frames():
    seen = frames_at(5, 400, 990)
    assert decided_frames(seen, T0, T1, N, T1) == sample_frames(seen, T0, T1, N)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 999), min_size=1, max_size=30, unique=True),
       st.integers(0, 40), st.randoms(use_true_random=False))
def test_announcements_are_a_prefix_of_the_final_selection(ms, slack_ms, rnd):
    """Frames arrive in any order that keeps to the slack: each arrives at most ``slack``
    behind the newest seen so far. Every decided prefix is a prefix of the final selection."""
    order = sorted(ms)
    # shuffle locally: swap neighbours when the later one stays within the slack
    for i in range(len(order) - 1):
        if rnd.random() < 0.5 and order[i + 1] - order[i] <= slack_ms:
            order[i], order[i + 1] = order[i + 1], order[i]
    frames = [StampedFrame(m * MS, None) for m in order]
    final = sample_frames(frames, T0, T1, N)
    seen, newest = [], -1
    for frame in frames:
        seen.append(frame)
        newest = max(newest, frame.stamp_ns)
        decided = decided_frames(seen, T0, T1, N, newest - slack_ms * MS)
        assert [f.stamp_ns for f in decided] == [f.stamp_ns for f in final[:len(decided)]]


def test_the_synchronizer_announces_slots_in_order_before_the_window_closes():
    sync = WindowSynchronizer(window_len_ns=1000 * MS, frames_per_window=8,
                              reorder_slack_ns=20 * MS, streams=("rgb",),
                              announce_frames=True)
    timeline = []  # (kind, window, slot or None) in the order they happened
    for t in np.arange(0, 2100, 50):  # 20 Hz
        closed = sync.add_frame(StampedFrame(int(t * MS), f"frame {t}"))
        timeline += [("slot", s.window_id, s.slot) for s in sync.take_frame_selections()]
        timeline += [("window", w.id, None) for w in closed]
        for window in closed:
            announced = [e for e in timeline if e[0] == "slot" and e[1] == window.id]
            assert [e[2] for e in announced] == list(range(8))
    first_close = timeline.index(("window", 0, None))
    assert [e[2] for e in timeline[:first_close] if e[1] == 0] == list(range(8))
    # the slots came frame by frame, not all at the close: slot 0 after the frame at 100 ms
    assert timeline[0] == ("slot", 0, 0)


def test_announced_frames_are_the_closed_windows_frames():
    sync = WindowSynchronizer(window_len_ns=1000 * MS, frames_per_window=8,
                              reorder_slack_ns=20 * MS, streams=("rgb",),
                              announce_frames=True)
    announced, windows = {}, []
    for t in range(0, 3000, 33):  # 30 Hz, not aligned with the targets
        windows += sync.add_frame(StampedFrame(t * MS, t))
        for s in sync.take_frame_selections():
            announced[(s.window_id, s.slot)] = s.frame
    windows += sync.flush()
    for window in windows:
        got = [announced.get((window.id, k)) for k in range(8)]
        assert [f.image if f else None for f in got] == [f.image for f in window.frames]
