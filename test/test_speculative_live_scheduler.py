"""The live-prefill scheduler without ROS or models: which frames it prefills, when, and how
many windows' caches it holds."""

from __future__ import annotations

from crossspec_ros.speculative.live_scheduler import LivePrefillScheduler
from crossspec_ros.sync.synchronizer import FrameSelection
from crossspec_ros.sync.window import StampedFrame


class FakePrefill:
    """Counts the frames added, in slot order, as LivePrefill does (three slots)."""

    def __init__(self) -> None:
        self.frames = 0
        self.stamps: list[int] = []

    @property
    def complete(self) -> bool:
        return self.frames == 3

    def add_frame(self, image, stamp_ns: int) -> None:
        self.frames += 1
        self.stamps.append(stamp_ns)


def selection(window_id: int, slot: int, epoch: int = 0) -> FrameSelection:
    return FrameSelection(epoch, window_id, slot, StampedFrame(window_id * 100 + slot, None))


def scheduler(**kwargs) -> LivePrefillScheduler:
    return LivePrefillScheduler(FakePrefill, **kwargs)


def test_frames_are_prefilled_in_slot_order_into_their_windows_prefill():
    s = scheduler()
    s.add([selection(1, 0), selection(1, 1), selection(2, 0)])
    assert s.prefill_queued() == 3
    live = s.take((0, 1))
    assert (live.frames, live.stamps) == (2, [100, 101])
    assert s.take((0, 1)) is None  # taken once
    assert s.counters["live_frames"] == 3


def test_a_window_whose_first_slot_was_missed_is_left_to_the_one_shot_prefill():
    s = scheduler()
    s.add([selection(1, 1), selection(1, 2)])
    s.prefill_queued()
    assert s.take((0, 1)) is None and s.counters["live_frames"] == 0


def test_taking_a_window_prefills_its_own_queued_frames_but_not_later_windows():
    s = scheduler()
    s.add([selection(1, 0), selection(1, 1), selection(2, 0)])
    live = s.take((0, 1))
    assert live.frames == 2 and s.queued == 1  # window 2's frame waits


def test_at_most_keep_windows_are_held_and_the_oldest_go_first():
    s = scheduler(keep=2)
    s.add([selection(w, 0) for w in (1, 2, 3)])
    s.prefill_queued()
    assert s.counters["live_dropped"] == 1
    assert s.take((0, 1)) is None and s.take((0, 3)) is not None


def test_a_decoding_window_makes_room_for_one_frame_only_under_backlog():
    s = scheduler(backlog=3)
    s.add([selection(2, 0), selection(2, 1)])
    s.between_rounds()
    assert s.queued == 2  # below the backlog: they wait for the window to finish
    s.add([selection(2, 2)])
    s.between_rounds()
    assert s.queued == 2 and s.counters["live_frames_pipelined"] == 1  # one, not all


def test_epochs_keep_windows_with_the_same_id_apart():
    s = scheduler()
    s.add([selection(5, 0, epoch=0), selection(5, 0, epoch=1)])
    s.prefill_queued()
    assert s.take((0, 5)).frames == 1 and s.take((1, 5)).frames == 1


def test_a_window_is_taken_complete_only_once_every_slot_is_in_with_its_frames():
    s = scheduler()
    s.add([selection(1, 0), selection(1, 1), selection(2, 0)])
    s.prefill_queued()
    assert s.take_complete() is None  # window 1 has 2 of 3 slots
    s.add([selection(1, 2)])
    s.prefill_queued()
    key, live, frames = s.take_complete()
    assert key == (0, 1) and live.stamps == [100, 101, 102]
    assert [f.stamp_ns for f in frames] == [100, 101, 102]
    assert s.take((0, 1)) is None and s.take_complete() is None  # taken once
