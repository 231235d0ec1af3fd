"""A bounded queue of closed windows waiting for a model (pure: the nodes and the verifier
loop share it)."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any


class WindowQueue:
    """Windows waiting for a model: bounded, the oldest dropped (and counted) when full, so a
    slow model falls behind by at most ``maxlen`` windows and never grows memory."""

    def __init__(self, maxlen: int) -> None:
        self._items: deque[tuple[Any, float]] = deque()
        self.maxlen = maxlen
        self.cond = threading.Condition()
        self.dropped = 0
        self.closed = False
        self._in_hand: Any = None  # the window the last get took (see get)

    def put(self, window: Any, t_close: float) -> Any | None:
        """Queue a window; returns the window dropped to make room, if any."""
        with self.cond:
            dropped = None
            if len(self._items) >= self.maxlen:
                dropped = self._items.popleft()[0]
                self.dropped += 1
            self._items.append((window, t_close))
            self.cond.notify_all()
            return dropped

    def get(self, timeout: float = 0.2) -> tuple[Any, float] | None:
        """The oldest window and its close time, or None after ``timeout``. The window stays
        among ``keys()`` until the next ``get``: between taking it and marking it as being
        worked on, nobody may take it for one that was never queued."""
        with self.cond:
            self._in_hand = None
            if not self._items and not self.closed:
                self.cond.wait(timeout)
            if not self._items:
                return None
            item = self._items.popleft()
            self._in_hand = item[0]
            return item

    def drain(self) -> list[Any]:
        """Take every queued window out (oldest first)."""
        with self.cond:
            windows = [w for w, _ in self._items]
            self._items.clear()
            return windows

    def keys(self) -> list[tuple[int, int]]:
        """(epoch, id) of the queued windows and of the one the last ``get`` took."""
        with self.cond:
            taken = [self._in_hand.key] if self._in_hand is not None else []
            return taken + [w.key for w, _ in self._items]

    def __len__(self) -> int:
        with self.cond:
            return len(self._items)

    def wake(self) -> None:
        """End a waiting ``get`` early (it returns None): other work for the worker came."""
        with self.cond:
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
