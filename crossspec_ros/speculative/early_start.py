"""Early start: a window captioned once every frame it reads is decided, published at its close.

The verifier reads ``frames_per_window`` frames per window, each the frame nearest its slot's
target (``sync/window.py``). The last slot's target lies half a slot before the window's end,
so its frame is usually decided (no frame yet to come can be nearer) well before the window
closes: with 20 Hz frames, 1 s windows, 8 slots and 20 ms of reorder slack, 50 ms before. The
caption depends only on those frames and the question, so the verifier node can decode it
then, into a ``HeldCaption``, and publish it the moment the window closes:

    last slot decided --> run the engine on a provisional window --> HeldCaption (events kept)
    the window closes --> same frames?  yes: publish the kept events now (FINAL at the close)
                                        no:  discard, caption the closed window as usual

Nothing is published before the close: a frame later than the reorder slack may still change
the selection (the closed window has the exact one), and then the held caption is discarded
(counted) and the closed window captioned from scratch, so every published caption is the
verifier's own for the closed window's frames. Latencies stay ms after the close: a caption
ready before it is published at it, so its ``confirmed_*_ms`` are the publication's.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.speculative.engine import WindowResult
from crossspec_ros.speculative.events import EngineEvent, EventKind
from crossspec_ros.sync.captions import WindowKey
from crossspec_ros.sync.window import StampedFrame, Window, window_bounds

KEEP_HELD = 2  # held captions at most (windows whose close never came are dropped, oldest first)


def provisional_window(key: WindowKey, frames: Sequence[StampedFrame],
                       window_len_ns: int) -> Window:
    """The window ``key`` as the verifier will read it, before it closes: its decided frames
    (one per slot) and no events (the verifier reads none)."""
    epoch, wid = key
    t0, t1 = window_bounds(wid, window_len_ns)
    return Window(id=wid, t0=t0, t1=t1, events=EventBatch.empty(0, 0), frames=list(frames),
                  n_distinct_frames=len({id(f) for f in frames}), epoch=epoch,
                  closed_by="early")


@dataclass
class HeldCaption:
    """One window's caption decoded before its close, waiting for it."""

    window: Window                      # the provisional window it was decoded from
    started: float = field(default_factory=time.monotonic)
    confirmed: list[EngineEvent] = field(default_factory=list)  # CONFIRMED, in order
    result: WindowResult | None = None  # set once the engine finished
    finished: float = float("nan")      # time.monotonic() then

    def keep(self, event: EngineEvent) -> None:
        """The engine's ``on_event``: keep what will be published at the close."""
        if event.kind is EventKind.CONFIRMED:
            self.confirmed.append(event)

    def done(self, result: WindowResult) -> None:
        self.result, self.finished = result, time.monotonic()

    def matches(self, window: Any) -> bool:
        """Whether the closed ``window`` reads exactly the frames this caption was decoded
        from (the same window, the same stamps slot by slot)."""
        return window.key == self.window.key and \
            [f.stamp_ns for f in window.frames] == [f.stamp_ns for f in self.window.frames]

    def release(self, t_close: float, now: float) -> list[EngineEvent]:
        """The kept CONFIRMED events as published ``now`` (``t_close``: when the window
        closed, both time.monotonic()): their ``t_ms`` and the result's confirmed latencies
        become the publication's, and ``ready_before_close_ms`` says how long before the
        close the caption was complete (negative: it completed after)."""
        if self.result is None:
            raise ValueError("the held caption is not finished")
        at_ms = max(0.0, now - t_close) * 1e3
        stats = self.result.stats
        stats.confirmed_first_ms = stats.confirmed_done_ms = at_ms
        stats.ready_before_close_ms = (t_close - self.finished) * 1e3
        return [dataclasses.replace(e, t_ms=at_ms) for e in self.confirmed]


class HeldCaptions:
    """The held captions of the windows not closed yet (at most ``keep``), and what became
    of them (counters: published, discarded because the selection changed, dropped unclaimed)."""

    def __init__(self, keep: int = KEEP_HELD) -> None:
        self.keep = keep
        self._held: OrderedDict[WindowKey, HeldCaption] = OrderedDict()
        self.counters = {"early_published": 0, "early_discarded": 0, "early_dropped": 0}

    def hold(self, held: HeldCaption) -> None:
        self._held[held.window.key] = held
        while len(self._held) > self.keep:
            self._held.popitem(last=False)
            self.counters["early_dropped"] += 1

    def claim(self, window: Any) -> HeldCaption | None:
        """The held caption for the closed ``window`` when it read the same frames (counted
        published); None when there is none or it read others (counted discarded)."""
        held = self._held.pop(window.key, None)
        if held is None or held.result is None:
            return None
        if not held.matches(window):
            self.counters["early_discarded"] += 1
            return None
        self.counters["early_published"] += 1
        return held

    def clear(self) -> None:
        self._held.clear()
