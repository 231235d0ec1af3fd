"""A bounded queue of closed windows waiting for a model (pure: the nodes and the verifier
loop share it). It never waits: the worker that takes from it does (speculative/worker.py),
woken by whoever puts."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any


class WindowQueue:
    """Windows waiting for a model: bounded, the oldest dropped (and counted) when full, so a
    slow model falls behind by at most ``maxlen`` windows and never grows memory. The executor
    puts and the worker takes: one lock keeps the two consistent."""

    def __init__(self, maxlen: int) -> None:
        self._items: deque[tuple[Any, Any]] = deque()
        self.maxlen = maxlen
        self._lock = threading.Lock()
        self.dropped = 0
        self.closed = False
        self._in_hand: Any = None  # the window the last get took (see get)

    def put(self, window: Any, tag: Any) -> Any | None:
        """Queue a window with its ``tag`` (its close time, or its draft's timing); returns
        the window dropped to make room, if any."""
        with self._lock:
            dropped = None
            if len(self._items) >= self.maxlen:
                dropped = self._items.popleft()[0]
                self.dropped += 1
            self._items.append((window, tag))
            return dropped

    def get(self) -> tuple[Any, Any] | None:
        """The oldest window and its tag, or None when none is queued. The window stays among
        ``keys()`` until the next ``get``: between taking it and marking it as being worked
        on, nobody may take it for one that was never queued."""
        with self._lock:
            self._in_hand = None
            if not self._items:
                return None
            item = self._items.popleft()
            self._in_hand = item[0]
            return item

    def drain(self) -> list[Any]:
        """Take every queued window out (oldest first)."""
        with self._lock:
            windows = [w for w, _ in self._items]
            self._items.clear()
            return windows

    def keys(self) -> list[tuple[int, int]]:
        """(epoch, id) of the queued windows and of the one the last ``get`` took."""
        with self._lock:
            taken = [self._in_hand.key] if self._in_hand is not None else []
            return taken + [w.key for w, _ in self._items]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def close(self) -> None:
        """Take no more: the loops read ``closed`` to stop the work in hand."""
        self.closed = True
