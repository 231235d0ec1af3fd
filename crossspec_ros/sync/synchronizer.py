"""The windowing synchronizer: event batches + stamped frames in, complete Windows out.

Emission is driven by data time (watermarks), never by arrival order:

- each stream's watermark is the latest time seen on it minus ``reorder_slack_ns``;
- window [t0, t1) is complete once both watermarks reached t1, or once either
  one reached t1 + ``max_lateness_ns`` (the other stream is silent or far behind:
  the window comes out without RGB, or without events);
- ``flush()`` emits everything pending (end of a bag); ``poll(now_ns)`` emits
  everything pending once no input at all arrived for ``idle_timeout_ns`` of the
  caller's clock, so nothing waits forever.

Windows come out in strictly increasing id order within an epoch. Ids that no
data ever fell in are skipped (no empty windows): ids still come from time, so
a gap simply shows as missing ids. Data for a window already closed is dropped
and counted (late_events / late_frames), never re-emitted.

With ``announce_frames``, each window's frame selection is also announced while the window is
still open (``take_frame_selections``): slot k's frame as soon as no frame yet to come can be
nearer to its target (``decided_frames``), in slot order, so a verifier can encode and prefill
frame k before the window closes. The closed Window still carries the exact selection; a frame
later than the reorder slack can contradict an announcement, and consumers compare.

Wild timestamps and clock jumps (``sync/outliers.py``, one gate per stream, ``reset_threshold_ns``
its threshold, the frontier of both streams its timeline): a frame or an event batch more than
``reset_threshold_ns`` from the frontier, ahead or behind, is held until its stream's next
datum. If that one agrees with the frontier, the held one was an isolated outlier (a damaged
time word, a bad stamp): dropped, counted (outlier_events / outlier_frames), warned once. If it
agrees with the held one, the clock really jumped:

- backwards (a bag looping, a clock reset): the old timeline's pending windows are flushed, one
  line is logged, a new epoch starts and all state is cleared. Until a stream shows
  new-timeline data, its old-timeline data still in flight (more than ``reset_threshold_ns``
  ahead of the new frontier and no more than that behind the stream's old latest time) is
  dropped as late rather than causing a second reset;
- forwards (a gap in the recording): the data are taken; the windows in between are skipped.

A batch whose own events span more than ``reset_threshold_ns`` (no packet does: its time words
are damaged) is dropped at once. A jump confirmed while the timeline it leaves holds a single
datum and closed no window shows that datum was the outlier (the stream's first datum was
wild): it is dropped and counted, and no epoch starts. ``flush`` drops a datum still held that
disagrees with the frontier (nothing will confirm it). So every node sees an isolated outlier
alike (dropped), and a real jump alike (one new epoch), whichever streams it synchronizes.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.stamps import SECOND_NS, ns_to_seconds, seconds_to_ns
from crossspec_ros.sync.outliers import GateVerdict, TimeOutlierGate
from crossspec_ros.sync.window import (
    StampedFrame,
    Window,
    decided_frames,
    sample_frames,
    window_bounds,
)

logger = logging.getLogger(__name__)
# batches of another sensor size held back while events of the adopted size are buffered:
# when more of them come than batches of the adopted size, the adopted size was the odd one
ODD_SIZE_HELD = 8



@dataclass
class SyncStats:
    """Counters for diagnostics (cumulative over epochs, except pending_*)."""

    windows_emitted: int = 0
    windows_without_rgb: int = 0
    windows_without_events: int = 0
    late_events: int = 0
    late_frames: int = 0
    duplicate_frames: int = 0
    rejected_events: int = 0
    dropped_windows: int = 0
    dropped_events: int = 0
    outlier_events: int = 0  # in batches far from the streams' time (isolated): dropped
    outlier_frames: int = 0  # frames stamped far from the streams' time (isolated): dropped
    abandoned_windows: int = 0  # pending when their node stopped (abandon_pending)
    resets: int = 0
    epoch: int = 0
    pending_windows: int = 0
    pending_events: int = 0


class _EventRun:
    """A window's event chunks copied into one growing buffer as they come. While every chunk
    starts strictly after the previous one ended (a live camera's packets in order), the
    buffer is already their time-sorted union, so closing the window copies nothing: a second
    of a busy camera is millions of events, and their merge delayed the draft by tens of ms.
    The chunk bounds are kept, so a chunk that comes out of order turns the run back into
    the chunk list ``_merge_chunks`` orders (the same result either way)."""

    def __init__(self, first: EventBatch, capacity: int) -> None:
        size = max(capacity, len(first))
        self.columns = [np.empty(size, dtype=a.dtype) for a in _columns(first)]
        self.width, self.height = first.width, first.height
        self.n = 0
        self.bounds = [0]
        self.append(first)

    def follows(self, chunk: EventBatch) -> bool:
        """``chunk`` starts strictly after the run's last event."""
        return int(chunk.t[0]) > int(self.columns[0][self.n - 1])

    def append(self, chunk: EventBatch) -> None:
        end = self.n + len(chunk)
        if end > len(self.columns[0]):
            grown = []
            for column in self.columns:
                bigger = np.empty(max(end, 2 * len(column)), dtype=column.dtype)
                bigger[:self.n] = column[:self.n]
                grown.append(bigger)
            self.columns = grown
        for column, values in zip(self.columns, _columns(chunk), strict=True):
            column[self.n:end] = values
        self.n = end
        self.bounds.append(end)

    def batch(self) -> EventBatch:
        return EventBatch(*(c[:self.n] for c in self.columns), self.width, self.height)

    def chunks(self) -> list[EventBatch]:
        return [EventBatch(*(c[a:b] for c in self.columns), self.width, self.height)
                for a, b in pairwise(self.bounds)]


def _columns(batch: EventBatch) -> tuple[np.ndarray, ...]:
    return batch.t, batch.x, batch.y, batch.p


@dataclass
class _Pending:
    """Data buffered for one window that is not closed yet: its events in ``run`` while each
    chunk starts after the last one ended, in ``chunks`` (merged at the close) once one does
    not."""

    chunks: list[EventBatch] = field(default_factory=list)
    run: _EventRun | None = None
    frames: dict[int, StampedFrame] = field(default_factory=dict)
    n_events: int = 0
    announced: int = 0  # slots whose frame was announced (announce_frames)


@dataclass(frozen=True)
class FrameSelection:
    """Slot ``slot`` of window (``epoch``, ``window_id``) will be ``frame``."""

    epoch: int
    window_id: int
    slot: int
    frame: StampedFrame


def _check_settings(window_len_ns: int, frames_per_window: int, max_lateness_ns: int,
                    reorder_slack_ns: int, reset_threshold_ns: int, max_pending_windows: int,
                    max_pending_events: int | None, idle_timeout_ns: int,
                    streams: tuple[str, ...]) -> None:
    """Refuse WindowSynchronizer settings it cannot work with (ValueError saying which)."""
    if window_len_ns <= 0:
        raise ValueError(f"window_len_ns must be > 0, got {window_len_ns}")
    if frames_per_window < 1:
        raise ValueError(f"frames_per_window must be >= 1, got {frames_per_window}")
    if max_lateness_ns < 0 or reorder_slack_ns < 0:
        raise ValueError(
            f"max_lateness_ns ({max_lateness_ns}) and reorder_slack_ns "
            f"({reorder_slack_ns}) must be >= 0"
        )
    if reset_threshold_ns <= reorder_slack_ns:
        raise ValueError(
            f"reset_threshold_ns ({reset_threshold_ns}) must exceed reorder_slack_ns "
            f"({reorder_slack_ns}): legitimate reordering must never look like a reset"
        )
    if max_pending_windows < 1:
        raise ValueError(f"max_pending_windows must be >= 1, got {max_pending_windows}")
    if max_pending_events is not None and max_pending_events < 1:
        raise ValueError(f"max_pending_events must be >= 1 or None, got {max_pending_events}")
    if idle_timeout_ns <= 0:
        raise ValueError(f"idle_timeout_ns must be > 0, got {idle_timeout_ns}")
    if not streams or set(streams) - {"events", "rgb"}:
        raise ValueError(f"streams must be a non-empty subset of ('events', 'rgb'), "
                         f"got {streams!r}")


class WindowSynchronizer:
    """Stateful synchronizer; feed it with add_events/add_frame, drive it with poll/flush.

    Not thread-safe: a node calls it from one callback group.
    """

    def __init__(
        self,
        window_len_ns: int = SECOND_NS,
        frames_per_window: int = 8,
        max_lateness_ns: int = SECOND_NS,
        reorder_slack_ns: int = 20_000_000,
        reset_threshold_ns: int = 2 * SECOND_NS,
        max_pending_windows: int = 16,
        max_pending_events: int | None = 64_000_000,
        idle_timeout_ns: int = 2 * SECOND_NS,
        streams: tuple[str, ...] = ("events", "rgb"),
        announce_frames: bool = False,
    ) -> None:
        _check_settings(window_len_ns, frames_per_window, max_lateness_ns, reorder_slack_ns,
                        reset_threshold_ns, max_pending_windows, max_pending_events,
                        idle_timeout_ns, streams)
        self.window_len_ns = int(window_len_ns)
        self.frames_per_window = int(frames_per_window)
        self.max_lateness_ns = int(max_lateness_ns)
        self.reorder_slack_ns = int(reorder_slack_ns)
        self.reset_threshold_ns = int(reset_threshold_ns)
        self.max_pending_windows = int(max_pending_windows)
        self.max_pending_events = max_pending_events
        self.idle_timeout_ns = int(idle_timeout_ns)
        # the streams whose watermarks complete a window (a draft node has only events, a
        # verifier node only RGB: neither should wait out the lateness bound for the other)
        self.streams = tuple(streams)
        self.announce_frames = announce_frames
        self._selections: list[FrameSelection] = []

        self._init_window_state()
        self._init_timeline_state()

    def _init_window_state(self) -> None:
        """Counters, the windows buffered and how far each stream got (this epoch)."""
        self._stats = SyncStats()
        self._pending: dict[int, _Pending] = {}
        self._pending_events = 0
        self._last_window_events = 0  # the size a new window's event buffer starts with
        self._ev_max: int | None = None   # latest event time seen (this epoch)
        self._rgb_max: int | None = None  # latest frame stamp seen (this epoch)
        self._closed_before: int | None = None  # every id below this is closed

    def _init_timeline_state(self) -> None:
        """Outlier gates, stale-data bounds, one-time warnings and idle tracking."""
        # per stream, its latest time on the old timeline until it shows new-timeline data
        self._stale: dict[str, int | None] = {"events": None, "rgb": None}
        self._sensor = (0, 0)  # (width, height) for windows without events
        self._sensor_batches = 0  # batches of that size since it was adopted
        # batches of another size held while the buffered events are of ``_sensor``
        self._odd_sensor: tuple[tuple[int, int], list[EventBatch]] = ((0, 0), [])
        # per stream, a datum far from the frontier until the stream's next datum decides
        self._gates: dict[str, TimeOutlierGate] = {
            "events": TimeOutlierGate(self.reset_threshold_ns),
            "rgb": TimeOutlierGate(self.reset_threshold_ns)}
        # data taken and windows closed (emitted or dropped) on this timeline: a jump away from
        # a timeline of one datum and no window drops that datum rather than starting an epoch
        self._timeline_data = 0
        self._timeline_windows = 0
        self._warned_outlier: set[str] = set()
        self._warned_drop = False
        self._warned_size = False
        self._arrivals = 0
        self._arrivals_seen = 0
        self._idle_since: int | None = None

    # ---------------------------------------------------------------- public API

    @property
    def epoch(self) -> int:
        return self._stats.epoch

    @property
    def stats(self) -> SyncStats:
        """A snapshot of the counters."""
        return replace(self._stats, pending_windows=len(self._pending),
                       pending_events=self._pending_events)

    @property
    def closed_before(self) -> int | None:
        """Windows with smaller ids are closed (emitted, dropped or skipped) this epoch."""
        return self._closed_before

    def take_frame_selections(self) -> list[FrameSelection]:
        """The frame selections announced since the last call (``announce_frames``), in the
        order they were decided."""
        out, self._selections = self._selections, []
        return out

    def pending_ids(self) -> list[int]:
        """Ids of the windows buffered now (not yet emitted)."""
        return sorted(self._pending)

    def open_window(self, wid: int) -> Window | None:
        """Window ``wid`` as far as it came while it is still open (None once closed, or
        before any data): its events so far (nothing copied; later events do not change
        them) and no frames (``closed_by`` "open"). A drafter may start on it before the
        close: a draft is only a proposal (speculative/draft_schedule.py)."""
        pend = self._pending.get(wid)
        if pend is None:
            return None
        t0, t1 = window_bounds(wid, self.window_len_ns)
        events = pend.run.batch() if pend.run is not None else _merge_chunks(pend.chunks,
                                                                             *self._sensor)
        return Window(id=wid, t0=t0, t1=t1, events=events, frames=[], n_distinct_frames=0,
                      epoch=self._stats.epoch, closed_by="open")

    def continue_timeline(self, previous: WindowSynchronizer) -> None:
        """Carry on ``previous``'s timeline (a node configured again): its epoch, so window
        keys keep agreeing with the other nodes' synchronizers, and its frontier, so its
        closed windows stay closed and a jump back while this node was stopped still starts
        a new epoch. What it had pending is not carried: a window still open then is made of
        the data that comes from now on."""
        self._stats.epoch = previous.epoch
        self._ev_max, self._rgb_max = previous._ev_max, previous._rgb_max
        self._closed_before = previous._closed_before
        self._timeline_data = previous._timeline_data
        self._timeline_windows = previous._timeline_windows

    def add_events(self, batch: EventBatch) -> list[Window]:
        """Buffer a batch (any order, spanning windows but no more than
        ``reset_threshold_ns``); return windows now complete."""
        self._arrivals += 1
        if len(batch) == 0:
            return []
        # Decide staleness on the batch's newest event: the whole batch is from the past.
        if self._is_stale("events", int(batch.t_last)):
            self._stats.late_events += len(batch)
            return []
        return self._through_gate("events", batch, int(batch.t_first), int(batch.t_last))

    def add_frame(self, frame: StampedFrame) -> list[Window]:
        """Buffer one frame; return windows now complete."""
        self._arrivals += 1
        t = int(frame.stamp_ns)
        if self._is_stale("rgb", t):
            self._stats.late_frames += 1
            return []
        return self._through_gate("rgb", frame, t, t)

    def _through_gate(self, stream: str, item: EventBatch | StampedFrame, t_first: int,
                      t_last: int) -> list[Window]:
        """Offer a datum to its stream's outlier gate; take what it lets through."""
        verdict = self._gates[stream].offer(item, t_first, t_last, self._frontier())
        return self._apply(stream, verdict)

    def _apply(self, stream: str, verdict: GateVerdict) -> list[Window]:
        for item in verdict.dropped:
            self._count_outlier(stream, item, "the stream's next datum agreed with the "
                                "streams' time, not with it")
        if not verdict.passed:
            return []
        out: list[Window] = []
        if verdict.jump:
            out += self._jump(stream, verdict.jump_ns)
        for item in verdict.passed:
            if stream == "events":
                self._take_events(item)
            else:
                self._take_frame(item)
            self._timeline_data += 1
        if stream == "rgb" and self.announce_frames:
            self._announce()
        return out + self._after_input()

    def _take_events(self, batch: EventBatch) -> None:
        t_last = int(batch.t_last)
        if not self._accept_sensor(batch):
            return
        ev = batch.sorted()
        ids = np.floor_divide(ev.t, self.window_len_ns)
        start = 0
        if self._closed_before is not None:
            start = int(np.searchsorted(ids, self._closed_before, side="left"))
            self._stats.late_events += start
        if start < len(ev):
            cuts = np.flatnonzero(ids[start + 1:] != ids[start:-1]) + (start + 1)
            bounds = [start, *cuts.tolist(), len(ev)]
            for a, b in pairwise(bounds):
                pend = self._pending_for(int(ids[a]))
                self._buffer(pend, ev.take(slice(a, b)))
                pend.n_events += b - a
                self._pending_events += b - a
        self._ev_max = t_last if self._ev_max is None else max(self._ev_max, t_last)

    def _take_frame(self, frame: StampedFrame) -> None:
        t = int(frame.stamp_ns)
        wid = t // self.window_len_ns
        if self._closed_before is not None and wid < self._closed_before:
            self._stats.late_frames += 1
        else:
            pend = self._pending_for(wid)
            if t in pend.frames:
                # keep the first: later copies (or different images with the same stamp) drop
                self._stats.duplicate_frames += 1
            else:
                pend.frames[t] = frame
        self._rgb_max = t if self._rgb_max is None else max(self._rgb_max, t)

    def poll(self, now_ns: int) -> list[Window]:
        """Call periodically with a wall/ROS clock; emits all pending windows once no input
        arrived for ``idle_timeout_ns`` (measured from the first poll that saw the last input).
        """
        now_ns = int(now_ns)
        if self._arrivals != self._arrivals_seen or self._idle_since is None:
            self._arrivals_seen = self._arrivals
            self._idle_since = now_ns
            return []
        # a caller clock that went backwards (sim time looping) restarts the idle timer
        self._idle_since = min(self._idle_since, now_ns)
        if now_ns - self._idle_since >= self.idle_timeout_ns and self._pending:
            return self._close_all("timeout")
        return []

    def flush(self) -> list[Window]:
        """Emit every pending window now (end of a bag); later data for them is late. A datum
        still held by an outlier gate is taken if it agrees with the frontier, else dropped
        and counted."""
        out: list[Window] = []
        for stream, gate in self._gates.items():
            out += self._apply(stream, gate.settle(self._frontier()))
        return out + self._close_all("flush")

    def abandon_pending(self) -> list[tuple[int, int, int]]:
        """Close every pending window without emitting it (its node stops: it will never be
        captioned); returns their (id, t0, t1). Later data for them is late, so a node that
        starts again never captions a window from half of its data; counted in
        ``abandoned_windows``."""
        ids = sorted(self._pending)
        for wid in ids:
            self._pending_events -= self._pending.pop(wid).n_events
        if ids:
            self._close_through(ids[-1])
        self._selections.clear()  # announcements of the abandoned windows
        self._stats.abandoned_windows += len(ids)
        return [(wid, *window_bounds(wid, self.window_len_ns)) for wid in ids]

    # ---------------------------------------------------------------- internals

    def _frontier(self) -> int | None:
        seen = [m for m in (self._ev_max, self._rgb_max) if m is not None]
        return max(seen) if seen else None

    def _jump(self, stream: str, t_new: int) -> list[Window]:
        """The gate confirmed a jump of ``stream`` to ``t_new``: a lone datum left behind was
        the outlier; else a jump back starts a new epoch and one ahead is a gap."""
        if self._timeline_data == 1 and self._timeline_windows == 0:
            self._drop_lone_datum(t_new)
            return []
        front = self._frontier()
        if front is not None and t_new < front - self.reset_threshold_ns:
            flushed = self._reset(t_new, stream)
            self._stale[stream] = None  # the stream is on the new timeline already
            return flushed
        logger.info("sync: %s time jumped forward by %.3f s (two data in a row agree): a gap "
                    "in the input", stream, ns_to_seconds(t_new - (front or t_new)))
        return []

    def _drop_lone_datum(self, t_new: int) -> None:
        """The timeline so far is one datum that closed no window, and the streams' next data
        agree elsewhere: that datum was the outlier (e.g. a wild first frame)."""
        frames = sum(len(p.frames) for p in self._pending.values())
        stream = "rgb" if frames else "events"
        self._stats.outlier_frames += frames
        self._stats.outlier_events += self._pending_events
        self._warn_outlier(stream, "the only datum of the timeline so far, at %s ns (the "
                           "data after it agree with each other at %d ns)",
                           self._frontier(), t_new)
        self._pending.clear()
        self._pending_events = 0
        self._ev_max = self._rgb_max = None
        self._closed_before = None
        self._timeline_data = 0
        self._stale = {"events": None, "rgb": None}

    def _count_outlier(self, stream: str, item: EventBatch | StampedFrame, why: str) -> None:
        front = self._frontier()
        if stream == "events":
            self._stats.outlier_events += len(item)
            t_first, t_last = int(item.t_first), int(item.t_last)
            if t_last - t_first > self.reset_threshold_ns:
                self._warn_outlier(stream, "a batch of %d events spanning %.3f s (%d to %d ns; "
                                   "no packet spans that: damaged time words)", len(item),
                                   ns_to_seconds(t_last - t_first), t_first, t_last)
                return
        else:
            self._stats.outlier_frames += 1
            t_first = t_last = int(item.stamp_ns)
        what = f"a batch of {len(item)} events" if stream == "events" else "a frame"
        self._warn_outlier(stream, "%s stamped %d ns, %.3f s from the streams' time %s ns (%s)",
                           what, t_last, ns_to_seconds(t_last - (front or t_last)), front, why)

    def _warn_outlier(self, stream: str, msg: str, *args: object) -> None:
        """Warn once per stream (then debug): what was dropped, why, where it is counted."""
        counter = "outlier_events" if stream == "events" else "outlier_frames"
        level = logging.DEBUG if stream in self._warned_outlier else logging.WARNING
        self._warned_outlier.add(stream)
        logger.log(level, "sync: %s: dropped " + msg + ": an isolated wild timestamp (a "
                   "damaged packet or stamp), not a clock jump. Counted in %s; further ones "
                   "are logged at debug level. If it repeats, check the camera driver's clock "
                   "and stamps.", stream, *args, counter)

    def _is_stale(self, stream: str, t: int) -> bool:
        """Old-timeline data still in flight after a reset (e.g. RGB of the last pass of a
        looping bag while events already restarted): dropping it avoids a second reset."""
        old = self._stale[stream]
        if old is None:
            return False
        front = self._frontier()
        thr = self.reset_threshold_ns
        if front is not None and t > front + thr and t >= old - thr:
            return True
        self._stale[stream] = None  # this stream has joined the new timeline
        return False

    def _reset(self, t_new: int, stream: str) -> list[Window]:
        old = self._frontier()
        assert old is not None  # only called when a frontier exists
        flushed = self._close_all("reset")
        self._stats.epoch += 1
        self._stats.resets += 1
        logger.warning(
            "sync: %s time went backwards from %d ns to %d ns (%.3f s, reset threshold "
            "%.3f s): flushed %d pending window(s), starting epoch %d",
            stream, old, t_new, ns_to_seconds(old - t_new), ns_to_seconds(self.reset_threshold_ns),
            len(flushed), self._stats.epoch,
        )
        self._stale = {"events": self._ev_max, "rgb": self._rgb_max}
        self._pending.clear()
        self._pending_events = 0
        self._ev_max = self._rgb_max = None
        self._closed_before = None
        self._timeline_data = self._timeline_windows = 0
        return flushed

    def _accept_sensor(self, batch: EventBatch) -> bool:
        """Whether ``batch``'s sensor size is the stream's. The stream's size is its
        majority, not its first batch: a batch of another size while events are buffered is
        held back (at most ODD_SIZE_HELD batches of one other size); once that size has come
        in more batches than the buffered one since it was adopted, the buffered events were
        the odd ones (a first packet labelled 160x120 in a 320x240 stream cost ~2 s of events
        before): they are dropped, counted in rejected_events, and the held batches taken."""
        size = (batch.width, batch.height)
        if size == self._sensor:
            self._sensor_batches += 1
            return True
        if self._pending_events == 0:
            self._adopt_sensor(size)  # nothing buffered to clash with
            return True
        self._reject(batch)  # counted at once: a batch held may never be taken
        held_size, held = self._odd_sensor
        if held_size != size:
            self._odd_sensor = (size, [])
            held = self._odd_sensor[1]
        if len(held) < ODD_SIZE_HELD:
            held.append(batch)
        if len(held) <= self._sensor_batches:
            return False
        # the buffered size is the odd one: let its events go, take the held batches
        self._stats.rejected_events += self._pending_events - sum(len(b) for b in held)
        logger.warning("sync: dropped %d buffered events of sensor %dx%d: the stream's "
                       "batches are %dx%d (counted in rejected_events)", self._pending_events,
                       *self._sensor, *size)
        for pend in self._pending.values():
            pend.chunks, pend.run, pend.n_events = [], None, 0
        self._pending_events = 0
        self._adopt_sensor(size)
        for earlier in held:
            self._take_events(earlier)
        return False  # taken among the held ones

    def _adopt_sensor(self, size: tuple[int, int]) -> None:
        self._sensor, self._sensor_batches = size, 1
        self._odd_sensor = ((0, 0), [])

    def _reject(self, batch: EventBatch) -> None:
        """Count ``batch`` as rejected and say so, once."""
        self._stats.rejected_events += len(batch)
        if not self._warned_size:
            self._warned_size = True
            logger.warning("sync: an event batch of sensor %dx%d while windows of sensor "
                           "%dx%d are pending: held back, counted in rejected_events (taken "
                           "if the stream turns out to be %dx%d)", batch.width, batch.height,
                           *self._sensor, batch.width, batch.height)

    def _buffer(self, pend: _Pending, chunk: EventBatch) -> None:
        """Keep ``chunk`` for its window: appended to the window's run while the chunks come
        in time order (room for as many events as the last window had), else in the list."""
        if pend.run is None and not pend.chunks:
            pend.run = _EventRun(chunk, self._last_window_events)
        elif pend.run is not None and pend.run.follows(chunk):
            pend.run.append(chunk)
        else:
            if pend.run is not None:
                pend.chunks, pend.run = pend.run.chunks(), None
            pend.chunks.append(chunk)

    def _pending_for(self, wid: int) -> _Pending:
        pend = self._pending.get(wid)
        if pend is None:
            pend = self._pending[wid] = _Pending()
        return pend

    def _announce(self) -> None:
        """Announce every newly decided slot of the open windows, oldest window first."""
        watermark = self._rgb_max - self.reorder_slack_ns
        n = self.frames_per_window
        for wid in sorted(self._pending):
            pend = self._pending[wid]
            if pend.announced == n or not pend.frames:
                continue
            t0, t1 = window_bounds(wid, self.window_len_ns)
            decided = decided_frames(pend.frames.values(), t0, t1, n, watermark)
            for slot in range(pend.announced, len(decided)):
                self._selections.append(
                    FrameSelection(self._stats.epoch, wid, slot, decided[slot]))
            pend.announced = max(pend.announced, len(decided))
        cap = self.max_pending_windows * n  # nobody taking them: keep memory bounded
        if len(self._selections) > cap:
            del self._selections[:-cap]

    def _after_input(self) -> list[Window]:
        out = self._emit_ready()
        self._enforce_bounds()
        return out

    def _watermarks(self) -> dict[str, int]:
        latest = {"events": self._ev_max, "rgb": self._rgb_max}
        return {s: m - self.reorder_slack_ns for s, m in latest.items() if m is not None}

    def _emit_ready(self) -> list[Window]:
        marks = self._watermarks()
        if not marks:
            return []
        wms = list(marks.values())
        required = [marks.get(s) for s in self.streams]
        both = min(required) if None not in required else None  # all required streams passed
        bound = max(wms) - self.max_lateness_ns
        if both is not None:
            bound = max(bound, both)
        last_ready = bound // self.window_len_ns - 1  # largest id with t1 <= bound
        out = []
        for wid in sorted(w for w in self._pending if w <= last_ready):
            t1 = window_bounds(wid, self.window_len_ns)[1]
            reason = "watermark" if both is not None and both >= t1 else "lateness"
            out.append(self._emit(wid, reason))
        self._close_through(last_ready)
        return out

    def _close_through(self, wid: int) -> None:
        if self._closed_before is None or wid + 1 > self._closed_before:
            self._closed_before = wid + 1

    def _close_all(self, reason: str) -> list[Window]:
        ids = sorted(self._pending)
        out = [self._emit(wid, reason) for wid in ids]
        if ids:
            self._close_through(ids[-1])
        return out

    def _emit(self, wid: int, reason: str) -> Window:
        pend = self._pending.pop(wid)
        self._pending_events -= pend.n_events
        t0, t1 = window_bounds(wid, self.window_len_ns)
        frames = sample_frames(pend.frames.values(), t0, t1, self.frames_per_window)
        self._last_window_events = pend.n_events
        win = Window(
            id=wid, t0=t0, t1=t1,
            events=pend.run.batch() if pend.run is not None else _merge_chunks(pend.chunks,
                                                                               *self._sensor),
            frames=frames, n_distinct_frames=len({id(f) for f in frames}),
            epoch=self._stats.epoch, closed_by=reason,
        )
        self._stats.windows_emitted += 1
        self._timeline_windows += 1
        self._stats.windows_without_rgb += not win.has_rgb
        self._stats.windows_without_events += not win.has_events
        return win

    def _enforce_bounds(self) -> None:
        cap = self.max_pending_events
        while self._pending and (len(self._pending) > self.max_pending_windows
                                 or (cap is not None and self._pending_events > cap)):
            wid = min(self._pending)
            pend = self._pending.pop(wid)
            self._pending_events -= pend.n_events
            self._close_through(wid)
            self._stats.dropped_windows += 1
            self._timeline_windows += 1
            self._stats.dropped_events += pend.n_events
            if not self._warned_drop:
                self._warned_drop = True
                logger.warning(
                    "sync: more than %d pending windows (or %s pending events): dropping the "
                    "oldest (window %d, epoch %d); further drops only counted in dropped_windows",
                    self.max_pending_windows, cap, wid, self._stats.epoch,
                )


def sync_from_params(p: dict[str, Any], streams: tuple[str, ...],
                     announce_frames: bool = False,
                     previous: WindowSynchronizer | None = None) -> WindowSynchronizer:
    """A node's synchronizer from its parameters (``p``: window_length_s, frames_per_window,
    max_lateness_s, reorder_slack_s, reset_threshold_s, max_pending_windows); ``previous``: the
    one of its last configuration, whose timeline (epoch, closed windows) it carries on (see
    ``continue_timeline``)."""
    sync = WindowSynchronizer(
        announce_frames=announce_frames,
        window_len_ns=seconds_to_ns(p["window_length_s"]),
        frames_per_window=p["frames_per_window"],
        max_lateness_ns=seconds_to_ns(p["max_lateness_s"]),
        reorder_slack_ns=seconds_to_ns(p["reorder_slack_s"]),
        reset_threshold_ns=seconds_to_ns(p["reset_threshold_s"]),
        max_pending_windows=p["max_pending_windows"],
        streams=streams)
    if previous is not None:
        sync.continue_timeline(previous)
    return sync



def _merge_chunks(chunks: list[EventBatch], width: int, height: int) -> EventBatch:
    """Time-sorted union of a window's chunks, independent of their arrival order.

    Chunks are ordered by (first t, last t, length, content digest) before a
    stable sort by t, so events sharing a timestamp across batches always come
    out in the same order however the batches arrived.
    """
    if not chunks:
        return EventBatch.empty(width, height)
    if len(chunks) == 1:
        return chunks[0]
    keys: list[tuple] = [(int(c.t[0]), int(c.t[-1]), len(c)) for c in chunks]
    if len(set(keys)) < len(keys):  # rare tie: break it by content, never by arrival
        keys = [(*k, _digest(c)) for k, c in zip(keys, chunks, strict=True)]
    order = sorted(range(len(chunks)), key=keys.__getitem__)
    # chunk t is sorted, so the union is sorted unless chunks overlap (reordered input)
    return EventBatch.concat([chunks[i] for i in order]).sorted()


def _digest(b: EventBatch) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for a in (b.t, b.x, b.y, b.p):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.digest()
