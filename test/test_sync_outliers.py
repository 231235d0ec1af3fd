"""Isolated wild timestamps are dropped and counted; a sustained jump is still a jump.

The gate (sync/outliers.py) on its own, then the synchronizer: one frame or one event packet
far from the stream's time must not close windows early, start an epoch or make phantom
windows, while a bag looping (tested in test_sync_synchronizer.py) and a gap in the recording
still behave as they did.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.sync import StampedFrame, Window, WindowSynchronizer
from crossspec_ros.sync.outliers import TimeOutlierGate

L = 1000  # window length in ns
THRESHOLD = 5000


# ------------------------------------------------------------------ the gate alone


def test_the_gate_passes_data_that_agree_with_the_timeline_at_once() -> None:
    gate: TimeOutlierGate[str] = TimeOutlierGate(THRESHOLD)
    assert gate.offer("first", 0, 10, None).passed == ["first"]  # no timeline yet
    verdict = gate.offer("next", 4000, 5010, timeline_ns=10)
    assert (verdict.passed, verdict.dropped, verdict.jump) == (["next"], [], False)


def test_the_gate_drops_a_lone_outlier_once_the_next_datum_agrees_with_the_timeline() -> None:
    gate: TimeOutlierGate[str] = TimeOutlierGate(THRESHOLD)
    held = gate.offer("wild", 10**12, 10**12, timeline_ns=1000)
    assert (held.passed, held.dropped, gate.held) == ([], [], "wild")
    verdict = gate.offer("normal", 1100, 1100, timeline_ns=1000)
    assert (verdict.passed, verdict.dropped, verdict.jump) == (["normal"], ["wild"], False)
    assert gate.held is None


def test_the_gate_confirms_a_jump_when_the_next_datum_agrees_with_the_held_one() -> None:
    gate: TimeOutlierGate[str] = TimeOutlierGate(THRESHOLD)
    gate.offer("looped", 0, 50, timeline_ns=100_000)
    verdict = gate.offer("after", 100, 150, timeline_ns=100_000)
    assert (verdict.passed, verdict.dropped) == (["looped", "after"], [])
    assert verdict.jump and verdict.jump_ns == 50


def test_the_gate_replaces_a_held_datum_the_next_one_contradicts_too() -> None:
    gate: TimeOutlierGate[str] = TimeOutlierGate(THRESHOLD)
    gate.offer("a", 10**9, 10**9, timeline_ns=0)
    verdict = gate.offer("b", -(10**9), -(10**9), timeline_ns=0)
    assert (verdict.passed, verdict.dropped, gate.held) == ([], ["a"], "b")


def test_a_datum_spanning_more_than_the_threshold_is_dropped_at_once() -> None:
    gate: TimeOutlierGate[str] = TimeOutlierGate(THRESHOLD)
    verdict = gate.offer("torn", 100, 100 + 10**12, timeline_ns=None)
    assert (verdict.passed, verdict.dropped, gate.held) == ([], ["torn"], None)


def test_settle_passes_a_held_datum_the_timeline_came_to_and_drops_the_others() -> None:
    gate: TimeOutlierGate[str] = TimeOutlierGate(THRESHOLD)
    gate.offer("ahead", 50_000, 50_000, timeline_ns=0)
    assert gate.settle(timeline_ns=49_000).passed == ["ahead"]  # another stream got there
    gate.offer("wild", 10**12, 10**12, timeline_ns=0)
    verdict = gate.settle(timeline_ns=0)
    assert (verdict.passed, verdict.dropped, gate.held) == ([], ["wild"], None)


# ------------------------------------------------------------------ the synchronizer


def ev(*times: int) -> EventBatch:
    n = len(times)
    idx = np.arange(n)
    return EventBatch(np.array(times, np.int64), idx % 8, idx % 6, idx % 2, 8, 6)


def fr(t: int) -> StampedFrame:
    return StampedFrame(t, image=np.zeros((2, 2, 3), np.uint8))


def sync(**kw: object) -> WindowSynchronizer:
    params: dict = dict(window_len_ns=L, frames_per_window=4, max_lateness_ns=2000,
                        reorder_slack_ns=0, reset_threshold_ns=THRESHOLD,
                        max_pending_windows=16, idle_timeout_ns=10_000)
    params.update(kw)
    return WindowSynchronizer(**params)


def feed_steady(s: WindowSynchronizer, t_from: int, t_to: int, step: int = 100) -> list[Window]:
    out = []
    for t in range(t_from, t_to, step):
        out += s.add_events(ev(t, t + step // 2))
        out += s.add_frame(fr(t))
    return out


def summary(windows: list[Window]) -> list[tuple]:
    """What a consumer sees of each window: key, events and frame stamps."""
    return [(w.key, w.events.t.tolist(), [f.stamp_ns for f in w.frames]) for w in windows]


def reference() -> list[tuple]:
    s = sync()
    return summary(feed_steady(s, 0, 10_000) + s.flush())


# +100 s, the frame; -100 s; +15,752 s, the damaged EVT 2.1 packet's events
FAR = [100 * 10**9, -100 * 10**9, 15_752 * 10**9]


@pytest.mark.parametrize("offset", FAR, ids=["+100 s", "-100 s", "+15752 s"])
def test_one_frame_far_from_the_stream_is_dropped_and_counted_not_an_epoch(
        offset: int, caplog: pytest.LogCaptureFixture) -> None:
    s = sync()
    with caplog.at_level(logging.WARNING, logger="crossspec_ros.sync"):
        out = feed_steady(s, 0, 5000)
        out += s.add_frame(fr(5000 + offset))
        out += feed_steady(s, 5000, 10_000) + s.flush()
    assert summary(out) == reference()
    st = s.stats
    assert (st.outlier_frames, st.outlier_events, st.resets, st.epoch) == (1, 0, 0, 0)
    assert st.late_frames == st.late_events == 0
    warned = [r.getMessage() for r in caplog.records if "outlier_frames" in r.getMessage()]
    assert len(warned) == 1 and f"{5000 + offset} ns" in warned[0] and "rgb" in warned[0]


@pytest.mark.parametrize("offset", FAR, ids=["+100 s", "-100 s", "+15752 s"])
def test_one_event_batch_far_from_the_stream_is_dropped_and_counted_not_an_epoch(
        offset: int) -> None:
    s = sync()
    out = feed_steady(s, 0, 5000)
    out += s.add_events(ev(5000 + offset, 5010 + offset, 5020 + offset))
    out += feed_steady(s, 5000, 10_000) + s.flush()
    assert summary(out) == reference()
    st = s.stats
    assert (st.outlier_events, st.outlier_frames, st.resets, st.epoch) == (3, 0, 0, 0)


def test_an_event_batch_whose_times_span_seconds_is_damaged_and_dropped() -> None:
    # a damaged time word in the middle of a packet: its later events are 15,752 s away
    s = sync()
    out = feed_steady(s, 0, 5000)
    out += s.add_events(ev(5000, 5010, 5020 + 15_752 * 10**9))
    out += feed_steady(s, 5000, 10_000) + s.flush()
    assert summary(out) == reference()
    assert (s.stats.outlier_events, s.stats.resets) == (3, 0)


def test_a_first_frame_far_from_everything_after_it_is_dropped_not_an_epoch() -> None:
    s = sync()
    out = s.add_frame(fr(100 * 10**9))
    out += feed_steady(s, 0, 10_000) + s.flush()
    assert summary(out) == reference()
    assert (s.stats.outlier_frames, s.stats.resets, s.epoch) == (1, 0, 0)


def test_a_gap_in_the_recording_is_a_jump_forward_confirmed_by_the_next_data() -> None:
    s = sync()
    out = feed_steady(s, 0, 3000) + feed_steady(s, 50_000, 53_000) + s.flush()
    assert [w.key for w in out] == [(0, i) for i in (0, 1, 2, 50, 51, 52)]
    assert all(len(w.events) == 20 and len({f.stamp_ns for f in w.frames}) == 4 for w in out)
    st = s.stats
    assert (st.outlier_events, st.outlier_frames, st.late_events, st.late_frames) == (0, 0, 0, 0)


def test_two_wild_frames_in_a_row_are_a_jump_and_the_stream_coming_back_is_one_epoch() -> None:
    # the rule's limit, stated: two data that agree with each other are a jump
    s = sync(streams=("rgb",))
    for t in range(0, 5000, 100):
        s.add_frame(fr(t))
    s.add_frame(fr(10**9))
    s.add_frame(fr(10**9 + 100))
    for t in range(5000, 8000, 100):
        s.add_frame(fr(t))
    assert (s.stats.resets, s.epoch, s.stats.outlier_frames) == (1, 1, 0)


def test_an_evt3_packet_stamped_100_s_late_is_dropped_after_the_sensor_clock_maps_it() -> None:
    # the sensor clock re-estimates its offset for the packet (its events follow its stamp)
    # and again for the next; the synchronizer then sees one batch 100 s off, and drops it
    from dataclasses import replace

    from crossspec_ros.events.decode import EventPacketDecoder
    from crossspec_ros.events.encode import encode_evt3_packets

    t0, n = 1_700_000_000 * 10**9, 30_000
    rng = np.random.default_rng(2)
    t = t0 + np.sort(rng.integers(0, 3_000_000, n)) * 1000
    batch = EventBatch(t, rng.integers(0, 64, n), rng.integers(0, 48, n), rng.integers(0, 2, n),
                       64, 48)
    packets = encode_evt3_packets(batch, 2_000_000)
    k = len(packets) // 2
    wild = [replace(p, stamp_ns=p.stamp_ns + 100 * 10**9) if i == k else p
            for i, p in enumerate(packets)]

    def windows(stream: list) -> tuple[list[Window], WindowSynchronizer, EventPacketDecoder]:
        s = WindowSynchronizer(streams=("events",))
        decoder = EventPacketDecoder()
        out = []
        for packet in stream:
            out += s.add_events(decoder.decode(packet))
        return out + s.flush(), s, decoder

    reference, _, _ = windows(packets)
    out, s, decoder = windows(wild)
    in_k = (batch.t >= packets[k].stamp_ns) & (batch.t < packets[k + 1].stamp_ns)
    assert [w.key for w in out] == [w.key for w in reference] == [(0, t0 // 10**9 + i)
                                                                   for i in range(3)]
    assert EventBatch.concat([w.events for w in out]).equals(batch.take(~in_k))
    assert (s.stats.outlier_events, s.stats.resets) == (int(in_k.sum()), 0)
    assert decoder.stats.clock_resets == 2  # there and back
