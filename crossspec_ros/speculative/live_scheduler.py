"""When the verifier prefills each frame of a window that is still open (live prefill).

The synchronizer announces each window's frame selections as they are decided
(``FrameSelection``: slot k of window (epoch, id) will be this frame); the scheduler queues
them and, when its owner has time (the verifier node's worker between windows, or the
benchmark at the frames' arrival times), encodes and prefills them into their window's
``LivePrefill`` (``models/live_prefill.py``). At the window's close the engine takes that
prefill and only the question is left.

    selections --> [queue] --prefill_queued()--> LivePrefill per window (at most ``keep``)
                                    \\--take(key)--> the engine, at the close
                                    \\--take_complete()--> the engine, every frame in
                                                          (early start, before the close)

- A window whose slot 0 was missed (announced before this scheduler started, or dropped) is
  not prefilled live: the engine prefills it in one shot at the close.
- At most ``keep`` live prefills (each a KV cache of a whole prompt) are held; the oldest
  beyond are dropped (counted).
- Pipelining under backlog: while a window decodes, ``between_rounds`` prefills one queued
  frame of a later window once ``backlog`` or more are waiting (the verifier is falling
  behind the camera), so a round waits for at most one frame's work; fewer wait for the
  window to finish, still before their own close (measured on CPU: one frame per round with
  any backlog made plain decoding in the graph slower, 451 -> 631 ms median).

Not thread-safe: one thread (the verifier's) calls everything but ``add``, which appends to a
deque (atomic in CPython) and may come from the executor.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Any

from crossspec_ros.sync.captions import WindowKey
from crossspec_ros.sync.synchronizer import FrameSelection
from crossspec_ros.sync.window import StampedFrame

KEEP_WINDOWS = 2  # live prefills held at once (each holds a KV cache of a whole prompt)
PIPELINE_BACKLOG = 4  # queued frames that make a decoding window make room for one


class LivePrefillScheduler:
    """See the module docstring. ``new_prefill()``: a fresh LivePrefill for a window."""

    def __init__(self, new_prefill: Callable[[], Any], keep: int = KEEP_WINDOWS,
                 backlog: int = PIPELINE_BACKLOG) -> None:
        self.new_prefill = new_prefill
        self.keep, self.backlog = keep, backlog
        self._queued: deque[FrameSelection] = deque()
        self._live: OrderedDict[WindowKey, Any] = OrderedDict()
        self._frames: dict[WindowKey, list[StampedFrame]] = {}  # in each held prefill
        self.counters = {"live_frames": 0, "live_dropped": 0, "live_frames_pipelined": 0}

    def add(self, selections: Iterable[FrameSelection]) -> None:
        """Frames the synchronizer decided (any thread)."""
        self._queued.extend(selections)

    @property
    def queued(self) -> int:
        return len(self._queued)

    def prefill_queued(self, up_to: WindowKey | None = None, at_most: int | None = None) -> int:
        """Encode and prefill queued frames in order (of windows up to ``up_to``; ``at_most``
        of them); returns how many were taken from the queue."""
        done = 0
        while self._queued and (at_most is None or done < at_most):
            job = self._queued[0]
            key = (job.epoch, job.window_id)
            if up_to is not None and key > up_to:
                break
            self._queued.popleft()
            done += 1
            live = self._live.get(key)
            if live is None and job.slot == 0:
                live = self._live[key] = self.new_prefill()
                self._frames[key] = []
                while len(self._live) > self.keep:
                    self._frames.pop(self._live.popitem(last=False)[0], None)
                    self.counters["live_dropped"] += 1
            if live is not None and job.slot == live.frames:
                live.add_frame(job.frame.image, job.frame.stamp_ns)
                self._frames[key].append(job.frame)
                self.counters["live_frames"] += 1
        return done

    def take(self, key: WindowKey) -> Any | None:
        """The closed window ``key``'s live prefill (its own queued frames first), or None."""
        self.prefill_queued(up_to=key)
        self._frames.pop(key, None)
        return self._live.pop(key, None)

    def let_go(self, key: WindowKey) -> None:
        """Drop the window ``key``'s queued frames and live prefill unprefilled (its window
        is given up: the work would be for nothing)."""
        self._frames.pop(key, None)
        self._live.pop(key, None)

    def take_complete(self) -> tuple[WindowKey, Any, list[StampedFrame]] | None:
        """The oldest held prefill whose every frame is in, with its frames (slot order),
        taken as ``take`` takes one: its window can be captioned before it closes
        (``speculative/early_start.py``); None when no held window is complete."""
        for key, live in self._live.items():
            if live.complete:
                del self._live[key]
                return key, live, self._frames.pop(key)
        return None

    def between_rounds(self) -> None:
        """Between a decoding window's rounds: one later frame when the backlog is deep."""
        if len(self._queued) >= self.backlog:
            self.counters["live_frames_pipelined"] += self.prefill_queued(at_most=1)

    def live_windows(self) -> list[Any]:
        """The live prefills held now (oldest first)."""
        return list(self._live.values())

    def clear(self) -> None:
        """Forget everything queued and held (their KV caches go with them)."""
        self._queued.clear()
        self._live.clear()
        self._frames.clear()
