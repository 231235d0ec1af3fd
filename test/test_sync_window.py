"""window_id, Window and sample_frames: pure helpers of the sync layer."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.sync import StampedFrame, Window, sample_frames, window_bounds, window_id

ROS_T = 1_700_000_000_000_000_000  # a realistic ROS stamp in ns (2023)


def frames_at(*stamps: int) -> list[StampedFrame]:
    return [StampedFrame(s, image=np.full((2, 2, 3), i, np.uint8)) for i, s in enumerate(stamps)]


def stamps_of(frames: list[StampedFrame]) -> list[int]:
    return [f.stamp_ns for f in frames]


# ------------------------------------------------------------------ window_id


@pytest.mark.parametrize(
    ("t", "expected"),
    [(0, 0), (999, 0), (1000, 1), (-1, -1), (-1000, -1), (-1001, -2), (2500, 2)],
)
def test_window_id_floors_including_negative_times(t: int, expected: int) -> None:
    assert window_id(t, 1000) == expected


def test_window_id_handles_ros_epoch_stamps_exactly() -> None:
    assert window_id(ROS_T, 10**9) == 1_700_000_000
    assert window_id(ROS_T - 1, 10**9) == 1_699_999_999
    assert window_bounds(1_700_000_000, 10**9) == (ROS_T, ROS_T + 10**9)


def test_window_bounds_cover_the_time_that_gives_the_id() -> None:
    for t in (-2001, -1, 0, 1, 999, 1000, 123456):
        t0, t1 = window_bounds(window_id(t, 1000), 1000)
        assert t0 <= t < t1


def test_window_id_rejects_non_positive_length() -> None:
    with pytest.raises(ValueError, match="window_len_ns"):
        window_id(5, 0)


# ------------------------------------------------------------------ sample_frames


def test_sample_frames_picks_the_frame_at_each_uniform_target() -> None:
    # targets of [0, 800) with n=4: 100, 300, 500, 700
    frames = frames_at(0, 100, 200, 300, 400, 500, 600, 700)
    assert stamps_of(sample_frames(frames, 0, 800, 4)) == [100, 300, 500, 700]


def test_sample_frames_takes_the_nearest_stamp() -> None:
    frames = frames_at(90, 280, 330, 520, 799)
    assert stamps_of(sample_frames(frames, 0, 800, 4)) == [90, 280, 520, 799]


def test_sample_frames_tie_goes_to_the_earlier_frame() -> None:
    # target 100 is 50 from both 50 and 150
    assert stamps_of(sample_frames(frames_at(150, 50), 0, 200, 1)) == [50]


def test_sample_frames_ties_are_exact_for_odd_lengths() -> None:
    # n=2 over [0, 3): targets 0.75 and 2.25; 1 is nearer 0.75 (0.25) than 0 (0.75)
    assert stamps_of(sample_frames(frames_at(0, 1, 2), 0, 3, 2)) == [1, 2]


def test_sample_frames_repeats_frames_when_fewer_than_n() -> None:
    frames = frames_at(100, 700)
    picked = sample_frames(frames, 0, 800, 8)
    assert len(picked) == 8
    assert stamps_of(picked) == [100] * 4 + [700] * 4
    assert len({id(f) for f in picked}) == 2


def test_sample_frames_single_frame_fills_all_slots() -> None:
    picked = sample_frames(frames_at(42), 0, 800, 8)
    assert stamps_of(picked) == [42] * 8


def test_sample_frames_window_without_frames_gives_empty_list() -> None:
    assert sample_frames([], 0, 800, 8) == []
    assert sample_frames(frames_at(-1, 800, 900), 0, 800, 8) == []


def test_sample_frames_includes_t0_and_excludes_t1() -> None:
    picked = sample_frames(frames_at(0, 800), 0, 800, 2)
    assert stamps_of(picked) == [0, 0]


def test_sample_frames_first_frame_of_a_duplicated_stamp_wins() -> None:
    first, second = frames_at(300, 300)
    picked = sample_frames([first, second], 0, 800, 2)
    assert picked == [first, first]


def test_sample_frames_is_exact_at_ros_epoch_stamps() -> None:
    # 2n * 1.7e18 overflows int64; a halfway tie must still resolve to the earlier frame
    t0 = ROS_T
    frames = frames_at(t0 + 62_500_000 - 1, t0 + 62_500_000 + 1)
    assert stamps_of(sample_frames(frames, t0, t0 + 10**9, 8))[0] == t0 + 62_500_000 - 1
    frames = frames_at(t0 + 62_500_000 - 7, t0 + 62_500_000 + 7)
    assert stamps_of(sample_frames(frames, t0, t0 + 10**9, 8))[0] == t0 + 62_500_000 - 7


def test_sample_frames_rejects_n_below_one() -> None:
    with pytest.raises(ValueError, match="n must be"):
        sample_frames(frames_at(1), 0, 10, 0)


@settings(max_examples=150, deadline=None)
@given(
    t0=st.integers(-10**6, 10**6),
    length=st.integers(1, 5000),
    n=st.integers(1, 10),
    offsets=st.lists(st.integers(-100, 5100), max_size=12),
)
def test_sample_frames_matches_a_brute_force_reference(
    t0: int, length: int, n: int, offsets: list[int]
) -> None:
    frames = frames_at(*(t0 + o for o in offsets))
    got = sample_frames(frames, t0, t0 + length, n)
    inside = [f for f in frames if t0 <= f.stamp_ns < t0 + length]
    if not inside:
        assert got == []
        return
    expected = []
    for i in range(n):
        target = t0 + Fraction(2 * i + 1, 2 * n) * length
        # nearest, then earlier stamp, then first given
        expected.append(min(inside, key=lambda f, tg=target: (abs(f.stamp_ns - tg), f.stamp_ns)))
    assert got == expected


# ------------------------------------------------------------------ Window


def _window(frames: list[StampedFrame], n_events: int) -> Window:
    ev = EventBatch(np.arange(n_events), np.zeros(n_events), np.zeros(n_events),
                    np.zeros(n_events), 4, 4)
    return Window(id=3, t0=3000, t1=4000, events=ev, frames=frames,
                  n_distinct_frames=len({id(f) for f in frames}), epoch=2)


def test_window_flags_describe_missing_rgb_and_events() -> None:
    w = _window([], 0)
    assert not w.has_rgb and not w.has_events
    assert w.flags == ("no_rgb", "no_events")
    assert w.key == (2, 3)


def test_window_flags_report_repeated_frames() -> None:
    f = frames_at(3100)[0]
    w = _window([f, f], 5)
    assert w.has_rgb and w.has_events
    assert w.flags == ("repeated_frames",)
