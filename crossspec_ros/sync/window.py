"""Windows of time, the frames and events in them, and uniform frame sampling.

A window covers [t0, t1) in integer nanoseconds on the ROS clock. Its id comes
from time alone, ``id = floor(t / window_len)``, so processes that never talk
(the draft node and the verifier node) still agree on which window is which.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from crossspec_ros.events.batch import EventBatch


def window_id(t_ns: int, window_len_ns: int) -> int:
    """Id of the window holding time ``t_ns``: floor division, so -1 ns is in window -1."""
    if window_len_ns <= 0:
        raise ValueError(f"window_len_ns must be > 0, got {window_len_ns}")
    # Python's // floors (not truncates), which is what negative times need.
    return int(t_ns) // int(window_len_ns)


def window_bounds(wid: int, window_len_ns: int) -> tuple[int, int]:
    """[t0, t1) of window ``wid``."""
    t0 = int(wid) * int(window_len_ns)
    return t0, t0 + int(window_len_ns)


@dataclass(frozen=True, eq=False)
class StampedFrame:
    """One RGB frame. The synchronizer never looks into ``image``."""

    stamp_ns: int
    image: Any
    encoding: str = "rgb8"
    frame_id: str = ""


@dataclass(frozen=True, eq=False)
class Window:
    """Everything a captioner needs for one window of one timeline.

    ``events``: every accepted event with t0 <= t < t1, time-sorted (an empty
    batch of the last seen sensor size, 0x0 before any event, when none).
    ``frames``: exactly ``frames_per_window`` frames sampled uniformly by nearest
    stamp (repeats when fewer distinct frames exist), or [] when the window had
    no RGB. ``epoch`` counts timeline resets (bag loops, clock jumps): ids may
    repeat across epochs, so consumers key on ``(epoch, id)``. ``closed_by``
    says why it was emitted: "watermark", "lateness", "flush", "timeout" or
    "reset" (diagnostics only; it may differ between runs with the same data).
    """

    id: int
    t0: int
    t1: int
    events: EventBatch
    frames: list[StampedFrame]
    n_distinct_frames: int
    epoch: int = 0
    closed_by: str = "watermark"

    @property
    def key(self) -> tuple[int, int]:
        """(epoch, id): unique across timeline resets."""
        return (self.epoch, self.id)

    @property
    def has_rgb(self) -> bool:
        """False when no frame fell in the window (the verifier skips it)."""
        return bool(self.frames)

    @property
    def has_events(self) -> bool:
        return len(self.events) > 0

    @property
    def flags(self) -> tuple[str, ...]:
        """Short labels for logs and diagnostics: no_rgb, no_events, repeated_frames."""
        out = []
        if not self.has_rgb:
            out.append("no_rgb")
        elif self.n_distinct_frames < len(self.frames):
            out.append("repeated_frames")
        if not self.has_events:
            out.append("no_events")
        return tuple(out)


def sample_frames(frames: Iterable[StampedFrame], t0: int, t1: int, n: int) -> list[StampedFrame]:
    """``n`` frames for targets ``t0 + (i + 0.5) * (t1 - t0) / n``, i = 0..n-1.

    Only frames with t0 <= stamp < t1 count. Each target takes the frame with
    the nearest stamp; a tie (target exactly halfway) takes the earlier frame,
    and of frames sharing one stamp the first given is used. Fewer distinct
    frames than ``n`` means repeats; no frame in the window gives [].
    """
    return [frame for frame, _, _ in _slot_choices(frames, t0, t1, n)]


def _slot_choices(frames: Iterable[StampedFrame], t0: int, t1: int, n: int
                  ) -> list[tuple[StampedFrame, int, int]]:
    """Per slot: (nearest frame, target, distance), target and distance in units of 1/(2n)
    ns so targets are exact integers (ROS stamps ~1.7e18 ns times 2n overflow int64: Python
    ints, not numpy). [] when no frame lies in [t0, t1)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    by_stamp: dict[int, StampedFrame] = {}
    for f in frames:
        s = int(f.stamp_ns)
        if t0 <= s < t1 and s not in by_stamp:
            by_stamp[s] = f
    if not by_stamp:
        return []
    stamps = sorted(by_stamp)
    scaled = [2 * n * s for s in stamps]
    length = t1 - t0
    out = []
    for i in range(n):
        target = 2 * n * t0 + (2 * i + 1) * length
        k = bisect_left(scaled, target)
        if k == 0:
            best = 0
        elif k == len(scaled):
            best = k - 1
        else:
            # strict <: an exact halfway tie goes to the earlier frame
            best = k if scaled[k] - target < target - scaled[k - 1] else k - 1
        out.append((by_stamp[stamps[best]], target, abs(scaled[best] - target)))
    return out


def decided_frames(frames: Iterable[StampedFrame], t0: int, t1: int, n: int,
                   watermark_ns: int) -> list[StampedFrame]:
    """The leading slots of ``sample_frames(frames, t0, t1, n)`` already decided, assuming
    every frame still to come has a stamp >= ``watermark_ns`` (the stream's latest stamp minus
    its reorder slack).

    Slot k is decided once no later frame can be nearer to its target than the frame it has:
    a frame exactly on the target, or a watermark past the target by at least that frame's
    distance (on a tie the earlier frame wins, so an equally near later frame changes
    nothing). Only a prefix is returned: a live prefill feeds slots in order. With the
    watermark at or past ``t1`` this is ``sample_frames`` itself. A frame that breaks the
    assumption (later than the reorder slack) can change a decided slot; the closed
    ``Window`` always has the exact selection, so consumers compare against it.
    """
    if watermark_ns >= t1:
        return sample_frames(frames, t0, t1, n)
    mark = 2 * n * int(watermark_ns)  # in the units of _slot_choices
    out: list[StampedFrame] = []
    for frame, target, distance in _slot_choices(frames, t0, t1, n):
        if distance != 0 and mark - target < distance:
            break  # a frame yet to come could still be nearer
        out.append(frame)
    return out
