"""WindowSynchronizer behaviour: emission, lateness, late data, resets, bounds, timeouts."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.sync import StampedFrame, Window, WindowSynchronizer

L = 1000  # window length in ns: small numbers keep the tests readable


def ev(*times: int, width: int = 8, height: int = 6) -> EventBatch:
    n = len(times)
    idx = np.arange(n)
    return EventBatch(np.array(times, np.int64), idx % width, idx % height, idx % 2,
                      width, height)


def fr(t: int) -> StampedFrame:
    return StampedFrame(t, image=np.zeros((2, 2, 3), np.uint8))


def sync(**kw: int | None) -> WindowSynchronizer:
    params: dict = dict(window_len_ns=L, frames_per_window=4, max_lateness_ns=2000,
                        reorder_slack_ns=0, reset_threshold_ns=5000, max_pending_windows=16,
                        idle_timeout_ns=10_000)
    params.update(kw)
    return WindowSynchronizer(**params)


def ids(windows: list[Window]) -> list[int]:
    return [w.id for w in windows]


def feed_steady(s: WindowSynchronizer, t_from: int, t_to: int, step: int = 100) -> list[Window]:
    """Both streams in order: one event and one frame every ``step`` ns."""
    out = []
    for t in range(t_from, t_to, step):
        out += s.add_events(ev(t, t + step // 2))
        out += s.add_frame(fr(t))
    return out


# ------------------------------------------------------------------ normal emission


def test_window_emitted_once_both_watermarks_pass_t1() -> None:
    s = sync()
    assert feed_steady(s, 0, 1000) == []
    assert s.add_events(ev(1000)) == []      # events passed t1, RGB not yet
    out = s.add_frame(fr(1000))              # now both have
    assert ids(out) == [0]
    w = out[0]
    assert (w.t0, w.t1, w.epoch, w.closed_by) == (0, 1000, 0, "watermark")
    assert len(w.events) == 20 and w.events.is_sorted()
    # targets 125, 375, 625, 875 -> nearest of the frames at 0, 100, ..., 900
    assert [f.stamp_ns for f in w.frames] == [100, 400, 600, 900]
    assert w.n_distinct_frames == 4 and w.has_rgb


def test_reorder_slack_delays_emission_by_the_slack() -> None:
    s = sync(reorder_slack_ns=50)
    feed_steady(s, 0, 1000)
    s.add_events(ev(1049))
    assert s.add_frame(fr(1049)) == []
    s.add_events(ev(1050))
    assert ids(s.add_frame(fr(1050))) == [0]


def test_data_exactly_at_t1_belongs_to_the_next_window() -> None:
    s = sync()
    out = s.add_events(ev(0, 999, 1000)) + s.add_frame(fr(500)) + s.add_frame(fr(1000))
    first, second = out + s.flush()
    assert first.events.t.tolist() == [0, 999]
    assert [f.stamp_ns for f in first.frames] == [500] * 4
    assert second.events.t.tolist() == [1000]
    assert [f.stamp_ns for f in second.frames] == [1000] * 4


def test_unsorted_batch_spanning_windows_is_split_and_sorted() -> None:
    s = sync(max_lateness_ns=100_000)
    out = s.add_events(ev(2500, 10, 1999, 0, 2000, 999, 1000, -1))
    out += s.add_frame(fr(0)) + s.flush()
    assert [(w.id, w.events.t.tolist()) for w in out] == [
        (-1, [-1]), (0, [0, 10, 999]), (1, [1000, 1999]), (2, [2000, 2500])]
    assert [w.has_rgb for w in out] == [False, True, False, False]


def test_negative_and_zero_times_use_floor_ids() -> None:
    s = sync()
    out = feed_steady(s, -3000, 0) + s.add_events(ev(0)) + s.add_frame(fr(0))
    assert ids(out) == [-3, -2, -1]
    assert [(w.t0, w.t1) for w in out] == [(-3000, -2000), (-2000, -1000), (-1000, 0)]
    assert all(((w.events.t >= w.t0) & (w.events.t < w.t1)).all() for w in out)
    assert ids(s.flush()) == [0]


def test_default_parameters_give_eight_frames_from_a_20hz_camera_at_ros_stamps() -> None:
    t0 = 1_700_000_000_000_000_000
    s = WindowSynchronizer()
    out = []
    for k in range(40):  # 2 s at 20 Hz
        t = t0 + k * 50_000_000
        out += s.add_events(ev(t, t + 25_000_000))
        out += s.add_frame(fr(t))
    assert ids(out) == [1_700_000_000]
    w = out[0]
    assert len(w.frames) == 8 and w.n_distinct_frames == 8
    # targets t0 + 62.5 ms + k*125 ms; 20 Hz frames are 50 ms apart -> nearest is 50 ms or 100 ms
    assert [f.stamp_ns - t0 for f in w.frames[:2]] == [50_000_000, 200_000_000]
    assert len(w.events) == 40


def test_gap_without_any_data_is_skipped_and_ids_stay_from_time() -> None:
    s = sync()
    out = feed_steady(s, 0, 1000) + feed_steady(s, 5000, 6100)
    assert ids(out) == [0, 5]
    assert s.stats.windows_emitted == 2


def test_emitted_windows_release_their_buffers() -> None:
    s = sync()
    feed_steady(s, 0, 3000)
    st = s.stats
    assert st.windows_emitted == 2
    assert st.pending_windows == 1  # only the open window [2000, 3000) stays buffered
    assert st.pending_events == 20


# ------------------------------------------------------------------ a silent stream


def test_rgb_silent_windows_still_come_out_flagged_after_the_lateness_bound() -> None:
    s = sync(max_lateness_ns=2000)
    out = feed_steady(s, 0, 1000)
    for t in range(1000, 4000, 100):  # RGB went silent at t=900
        out += s.add_events(ev(t))
        if t == 1000:
            assert ids(out) == []
    # window 0 (with RGB) came out when events reached its t1 + 2000; window 1 needs 4000
    assert ids(out) == [0]
    assert out[0].closed_by == "lateness" and out[0].has_rgb
    out = s.add_events(ev(4000))
    assert ids(out) == [1]
    assert not out[0].has_rgb and out[0].frames == [] and out[0].flags == ("no_rgb",)
    assert len(out[0].events) == 10
    assert s.stats.windows_without_rgb == 1


def test_events_before_any_frame_come_out_without_rgb_after_the_lateness_bound() -> None:
    s = sync(max_lateness_ns=500)
    out = []
    for t in range(0, 1500, 100):
        out += s.add_events(ev(t))
    assert ids(out) == [] and s.stats.pending_windows == 2
    out = s.add_events(ev(1500))
    assert ids(out) == [0] and not out[0].has_rgb and len(out[0].events) == 10
    # RGB starts later: window 1 and on get frames normally
    out = s.add_frame(fr(1200)) + s.add_events(ev(2000)) + s.add_frame(fr(2000))
    assert ids(out) == [1] and out[0].has_rgb


def test_events_silent_windows_come_out_with_empty_events() -> None:
    s = sync(max_lateness_ns=1000)
    feed_steady(s, 0, 500)  # sensor 8x6 seen
    out = []
    for t in range(500, 4100, 100):  # events went silent at 450
        out += s.add_frame(fr(t))
    assert ids(out) == [0, 1, 2]
    assert len(out[0].events) == 10 and out[0].events.width == 8
    for w in out[1:]:
        assert len(w.events) == 0 and w.has_rgb and w.flags == ("no_events",)
        assert (w.events.width, w.events.height) == (8, 6)
    assert s.stats.windows_without_events == 2


# ------------------------------------------------------------------ late data


def test_late_events_are_dropped_counted_and_never_reemit_a_window() -> None:
    s = sync()
    out = feed_steady(s, 0, 2000)
    assert ids(out) == [0]
    assert s.add_events(ev(5, 999, 1500)) == []  # two late, one on time
    assert s.stats.late_events == 2
    out = s.flush()
    assert ids(out) == [1]
    assert 1500 in out[0].events.t.tolist()
    assert s.stats.windows_emitted == 2


def test_late_frames_are_dropped_and_counted() -> None:
    s = sync()
    feed_steady(s, 0, 2000)
    assert s.add_frame(fr(999)) == []
    assert s.stats.late_frames == 1
    assert all(f.stamp_ns != 999 for w in s.flush() for f in w.frames)


def test_data_for_a_skipped_gap_window_is_late() -> None:
    s = sync()
    feed_steady(s, 0, 1000)
    feed_steady(s, 5000, 6100)  # windows 1..4 closed empty (skipped)
    assert s.add_events(ev(3000)) == [] and s.add_frame(fr(3000)) == []
    assert (s.stats.late_events, s.stats.late_frames) == (1, 1)


def test_reordering_within_the_slack_loses_nothing() -> None:
    s = sync(reorder_slack_ns=300)
    out = feed_steady(s, 0, 1200)
    out += s.add_events(ev(950)) + s.add_frame(fr(880))  # >200 ns behind the frontiers
    out += feed_steady(s, 1200, 1400) + s.flush()
    assert s.stats.late_events == 0 and s.stats.late_frames == 0
    assert 950 in out[0].events.t.tolist()
    assert 880 in [f.stamp_ns for f in out[0].frames]  # nearest to the target 875


def test_equal_time_events_of_different_batches_come_out_in_one_order() -> None:
    def batch(x: int) -> EventBatch:  # same first/last time and length, different pixels
        return EventBatch(np.array([100, 200]), np.array([x, x]), np.array([0, 0]),
                          np.array([1, 1]), 8, 6)

    outs = []
    for order in ((1, 2, 3), (3, 1, 2), (2, 3, 1)):
        s = sync()
        for x in order:
            s.add_events(batch(x))
        outs.append(s.flush()[0].events)
    assert outs[0].t.tolist() == [100] * 3 + [200] * 3
    assert all(o.equals(outs[0]) for o in outs[1:])


def test_duplicate_frame_stamps_keep_the_first_and_count_the_rest() -> None:
    s = sync()
    first, dup = fr(500), fr(500)
    s.add_events(ev(10))
    s.add_frame(first)
    s.add_frame(dup)
    w = s.flush()[0]
    assert w.frames == [first] * 4 and w.n_distinct_frames == 1
    assert s.stats.duplicate_frames == 1


def test_event_batch_of_another_sensor_size_is_rejected_while_pending(caplog) -> None:
    s = sync()
    s.add_events(ev(10, width=8, height=6))
    with caplog.at_level(logging.WARNING, logger="crossspec_ros.sync"):
        assert s.add_events(ev(20, 30, width=640, height=480)) == []
    assert s.stats.rejected_events == 2
    assert "640x480" in caplog.text
    assert s.flush()[0].events.t.tolist() == [10]
    # nothing pending any more: a new sensor size is adopted
    s.add_events(ev(5000, width=640, height=480))
    assert s.flush()[0].events.width == 640


def test_empty_event_batch_changes_nothing() -> None:
    s = sync()
    assert s.add_events(EventBatch.empty(8, 6)) == []
    assert s.stats.pending_windows == 0 and s.flush() == []


# ------------------------------------------------------------------ time going backwards


def test_backwards_jump_flushes_old_windows_starts_a_new_epoch_and_logs_once(caplog) -> None:
    s = sync(reset_threshold_ns=5000)
    first = feed_steady(s, 0, 10_000)
    with caplog.at_level(logging.WARNING, logger="crossspec_ros.sync"):
        again = feed_steady(s, 0, 10_000)  # the bag looped
    records = [r for r in caplog.records if "backwards" in r.getMessage()]
    assert len(records) == 1
    msg = records[0].getMessage()
    assert "from 9950 ns to 50 ns" in msg and "epoch 1" in msg
    flushed = again.pop(0)
    assert flushed.key == (0, 9) and flushed.closed_by == "reset"
    assert s.epoch == 1 and s.stats.resets == 1
    # the second pass of the loop gives the same windows, keyed (1, id)
    assert [w.key for w in first] == [(0, i) for i in range(9)]
    assert [w.key for w in again] == [(1, i) for i in range(9)]
    for a, b in zip(first, again, strict=True):
        assert a.frames == b.frames or [f.stamp_ns for f in a.frames] == [
            f.stamp_ns for f in b.frames]
        assert a.events.equals(b.events)


def test_old_timeline_data_in_flight_after_a_reset_is_late_not_a_second_reset() -> None:
    s = sync(reset_threshold_ns=5000)
    feed_steady(s, 0, 10_000)
    s.add_events(ev(0, 50))            # events looped first (held: it could be an outlier)
    s.add_events(ev(100, 150))         # the stream's next batch confirms the jump
    assert s.add_frame(fr(9900)) == []  # RGB of the old pass still in flight
    assert s.epoch == 1 and s.stats.resets == 1 and s.stats.late_frames == 1
    # an old-timeline batch after the events stream has joined the new one is, on that stream,
    # an isolated outlier: dropped and counted, not a second reset
    s.add_events(ev(9990))
    out = feed_steady(s, 200, 3000)
    assert (s.stats.outlier_events, s.stats.resets) == (1, 1)
    assert ids(out) == [0, 1] and all(w.epoch == 1 for w in out)


def test_small_backwards_step_is_late_data_not_a_reset() -> None:
    s = sync(reset_threshold_ns=5000)
    feed_steady(s, 0, 6000)
    s.add_events(ev(2000))
    assert s.stats.resets == 0 and s.stats.late_events == 1


# ------------------------------------------------------------------ memory bounds


def test_pending_window_cap_drops_the_oldest_and_warns_once(caplog) -> None:
    s = sync(max_pending_windows=3, max_lateness_ns=100_000)
    with caplog.at_level(logging.WARNING, logger="crossspec_ros.sync"):
        out = []
        for t in range(0, 6000, 500):  # RGB never starts; lateness is huge
            out += s.add_events(ev(t))
    assert out == []
    st = s.stats
    assert (st.dropped_windows, st.dropped_events, st.pending_windows) == (3, 6, 3)
    assert len([r for r in caplog.records if "dropping the oldest" in r.getMessage()]) == 1
    assert s.add_events(ev(2100)) == [] and s.stats.late_events == 1  # dropped = closed
    assert ids(s.flush()) == [3, 4, 5]


def test_pending_event_cap_drops_the_oldest_windows() -> None:
    s = sync(max_pending_events=25, max_lateness_ns=100_000)
    s.add_events(ev(*range(0, 1000, 100)))     # 10 events in window 0
    s.add_events(ev(*range(1000, 2000, 100)))  # 10 in window 1
    assert s.stats.dropped_windows == 0
    s.add_events(ev(*range(2000, 3000, 100)))  # 30 > 25: window 0 goes
    st = s.stats
    assert (st.dropped_windows, st.dropped_events, st.pending_events) == (1, 10, 20)
    assert ids(s.flush()) == [1, 2]


# ------------------------------------------------------------------ never waiting forever


def test_poll_emits_pending_windows_after_the_idle_timeout() -> None:
    s = sync(idle_timeout_ns=10_000)
    feed_steady(s, 0, 1500)
    assert s.poll(now_ns=1_000_000) == []  # first poll after data starts the idle timer
    assert s.poll(now_ns=1_009_999) == []
    out = s.poll(now_ns=1_010_000)
    assert ids(out) == [1] and out[0].closed_by == "timeout"
    assert s.stats.pending_windows == 0
    assert s.poll(now_ns=2_000_000) == []


def test_poll_waits_while_data_keeps_arriving() -> None:
    s = sync(idle_timeout_ns=10_000)
    now = 0
    for t in range(0, 1500, 100):
        s.add_events(ev(t))
        now += 9_000
        assert s.poll(now) == []
    assert s.stats.pending_windows == 2


def test_poll_survives_a_caller_clock_going_backwards() -> None:
    s = sync(idle_timeout_ns=10_000)
    s.add_events(ev(10))
    s.poll(now_ns=50_000)
    assert s.poll(now_ns=1_000) == []     # sim clock looped: timer restarts at 1000
    assert ids(s.poll(now_ns=11_000)) == [0]


def test_flush_emits_everything_in_order_and_later_data_for_it_is_late() -> None:
    s = sync(max_lateness_ns=100_000)
    s.add_events(ev(2500, 500, 1500))
    s.add_frame(fr(600))
    out = s.flush()
    assert ids(out) == [0, 1, 2] and all(w.closed_by == "flush" for w in out)
    assert s.flush() == []
    s.add_events(ev(2999))
    assert s.stats.late_events == 1


# ------------------------------------------------------------------ parameters


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"window_len_ns": 0}, "window_len_ns"),
        ({"frames_per_window": 0}, "frames_per_window"),
        ({"max_lateness_ns": -1}, "max_lateness_ns"),
        ({"reorder_slack_ns": 6000}, "reset_threshold_ns"),
        ({"max_pending_windows": 0}, "max_pending_windows"),
        ({"max_pending_events": 0}, "max_pending_events"),
        ({"idle_timeout_ns": 0}, "idle_timeout_ns"),
    ],
)
def test_constructor_rejects_bad_parameters_with_a_clear_message(kw: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        sync(**kw)


# ------------------------------------------------------------------ single-stream nodes


def test_events_only_synchronizer_closes_windows_on_the_event_watermark() -> None:
    # a draft node never sees RGB: it must not wait out the lateness bound for it
    s = sync(streams=("events",))
    assert s.add_events(ev(100, 900)) == []
    out = s.add_events(ev(1000))
    assert ids(out) == [0] and out[0].closed_by == "watermark" and not out[0].has_rgb
    assert s.closed_before == 1 and s.pending_ids() == [1]


def test_rgb_only_synchronizer_closes_windows_on_the_frame_watermark() -> None:
    s = sync(streams=("rgb",))
    for t in range(0, 1000, 100):
        assert s.add_frame(fr(t)) == []
    out = s.add_frame(fr(1000))
    assert ids(out) == [0] and out[0].closed_by == "watermark" and out[0].has_rgb


def test_unknown_stream_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="streams"):
        sync(streams=("lidar",))


@pytest.mark.parametrize("case", ["in order", "ties at the seams", "one late chunk"])
def test_a_windows_events_equal_the_merge_of_its_chunks_however_they_were_buffered(
        case: str) -> None:
    from crossspec_ros.sync.synchronizer import _merge_chunks

    rng = np.random.default_rng(5)
    chunks = []
    for start in range(30, 930, 30):  # 30 chunks in one window [0, 1000), 3 ns each
        t = np.sort(rng.integers(start, start + 3, 40))
        if case == "ties at the seams" and chunks and start % 60 == 0:
            t[0] = chunks[-1].t[-1]  # starts where the last one ended: the list, merged
        chunks.append(EventBatch(t, rng.integers(0, 8, 40), rng.integers(0, 6, 40),
                                 rng.integers(0, 2, 40), 8, 6))
    if case == "one late chunk":
        chunks.insert(20, chunks.pop(5))
    s = sync()
    s._last_window_events = 50  # a small first buffer: it has to grow
    for chunk in chunks:
        s.add_events(chunk)
    # buffered as one run only while every chunk began after the last one ended
    assert (s._pending[0].run is not None) == (case == "in order")
    window = s.flush()[0]
    assert window.events.equals(_merge_chunks(chunks, 8, 6))
    assert len(window.events) == 30 * 40 and window.events.is_sorted()


def test_an_open_window_shows_its_events_so_far_and_later_events_do_not_change_them():
    s = sync(streams=("events",))
    assert s.open_window(0) is None  # no data yet
    assert s.add_events(ev(100, 200, 300)) == []
    so_far = s.open_window(0)
    assert so_far.closed_by == "open" and so_far.frames == [] and so_far.key == (0, 0)
    assert so_far.events.t.tolist() == [100, 200, 300]
    s.add_events(ev(400, 500))
    assert so_far.events.t.tolist() == [100, 200, 300]  # the snapshot holds what it read
    assert s.open_window(0).events.t.tolist() == [100, 200, 300, 400, 500]
    [closed] = s.add_events(ev(1200))
    assert closed.id == 0 and len(closed.events) == 5
    assert s.open_window(0) is None  # closed
    assert s.open_window(1).events.t.tolist() == [1200]


def test_the_streams_majority_sets_the_sensor_size_not_an_odd_first_packet(caplog) -> None:
    # issue 53, item 5: a first packet labelled 160x120 in a 320x240 stream kept ~2 s of the
    # stream's events out ("late events 0" meanwhile)
    s = sync(streams=("events",))
    s.add_events(ev(10, 20, width=160, height=120))  # the odd first packet
    with caplog.at_level(logging.WARNING, logger="crossspec_ros.sync"):
        assert s.add_events(ev(100, 110, width=320, height=240)) == []  # held, counted
        assert s.stats.rejected_events == 2
        s.add_events(ev(200, 210, 220, width=320, height=240))  # the majority: it wins
    assert "dropped 2 buffered events of sensor 160x120" in caplog.text
    assert s.stats.rejected_events == 2  # the odd packet's, no longer the held batch's
    [window] = s.add_events(ev(1500, width=320, height=240))
    assert window.events.t.tolist() == [100, 110, 200, 210, 220]
    assert (window.events.width, window.events.height) == (320, 240)
