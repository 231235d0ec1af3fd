"""Early start without ROS or models: a caption held for its close is published only for the
same frames, at the close, with latencies after the close."""

from __future__ import annotations

import math

from crossspec_ros.speculative.early_start import HeldCaption, HeldCaptions, provisional_window
from crossspec_ros.speculative.engine import WindowResult
from crossspec_ros.speculative.events import EngineEvent, EventKind
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.sync.window import StampedFrame

SECOND = 1_000_000_000


def frames(*stamps_ms: int) -> list[StampedFrame]:
    return [StampedFrame(s * 1_000_000, None) for s in stamps_ms]


def held_for(key=(0, 3), stamps=(3050, 3950)) -> HeldCaption:
    held = HeldCaption(provisional_window(key, frames(*stamps), SECOND))
    held.keep(EngineEvent(EventKind.VERIFIER_PREFILL_DONE, key[1], 1.0))
    held.keep(EngineEvent(EventKind.CONFIRMED, key[1], 2.0, tokens=[5, 6], text="a b"))
    held.keep(EngineEvent(EventKind.CONFIRMED, key[1], 3.0, tokens=[2], base=2, text="a b",
                          done=True))
    held.done(WindowResult(key[1], [5, 6, 2], "a b", [], "", WindowStats(
        confirmed_first_ms=2.0, confirmed_done_ms=3.0)))
    return held


def test_the_provisional_window_has_the_closed_windows_bounds_and_the_decided_frames():
    window = provisional_window((2, 3), frames(3050, 3950), SECOND)
    assert (window.key, window.t0, window.t1) == ((2, 3), 3 * SECOND, 4 * SECOND)
    assert [f.stamp_ns for f in window.frames] == [3_050_000_000, 3_950_000_000]
    assert window.has_rgb and not window.has_events


def test_released_events_are_the_confirmed_ones_timed_at_their_publication_after_the_close():
    held = held_for()
    t_close = held.finished + 0.040  # the caption was ready 40 ms before the close
    events = held.release(t_close, now=t_close + 0.0005)
    assert [e.kind for e in events] == [EventKind.CONFIRMED, EventKind.CONFIRMED]
    assert [e.tokens for e in events] == [[5, 6], [2]] and events[-1].done
    assert all(math.isclose(e.t_ms, 0.5, abs_tol=1e-6) for e in events)
    stats = held.result.stats
    assert math.isclose(stats.confirmed_first_ms, 0.5, abs_tol=1e-6)
    assert math.isclose(stats.confirmed_done_ms, 0.5, abs_tol=1e-6)
    assert math.isclose(stats.ready_before_close_ms, 40.0, abs_tol=1e-6)


def test_a_caption_that_completes_after_the_close_says_so():
    held = held_for()
    events = held.release(t_close=held.finished - 0.003, now=held.finished + 0.001)
    assert math.isclose(held.result.stats.ready_before_close_ms, -3.0, abs_tol=1e-6)
    assert math.isclose(events[0].t_ms, 4.0, abs_tol=1e-6)


def test_a_held_caption_is_claimed_only_by_its_window_reading_the_same_frames():
    held_captions = HeldCaptions()
    held_captions.hold(held_for())
    other_frames = provisional_window((0, 3), frames(3050, 3900), SECOND)
    assert held_captions.claim(other_frames) is None  # a late frame changed slot 1
    assert held_captions.counters["early_discarded"] == 1
    held_captions.hold(held_for())
    assert held_captions.claim(provisional_window((1, 3), frames(3050, 3950), SECOND)) is None
    same = provisional_window((0, 3), frames(3050, 3950), SECOND)
    assert held_captions.claim(same) is not None
    assert held_captions.counters["early_published"] == 1
    assert held_captions.claim(same) is None  # published once


def test_a_caption_still_decoding_is_not_claimed():
    held_captions = HeldCaptions()
    held_captions.hold(HeldCaption(provisional_window((0, 3), frames(3050), SECOND)))
    assert held_captions.claim(provisional_window((0, 3), frames(3050), SECOND)) is None


def test_at_most_keep_captions_are_held_and_the_oldest_go_first():
    held_captions = HeldCaptions(keep=2)
    for wid in (1, 2, 3):
        held_captions.hold(held_for((0, wid), (wid * 1000 + 50,)))
    assert held_captions.counters["early_dropped"] == 1
    assert held_captions.claim(provisional_window((0, 1), frames(1050), SECOND)) is None
    assert held_captions.claim(provisional_window((0, 3), frames(3050), SECOND)) is not None
