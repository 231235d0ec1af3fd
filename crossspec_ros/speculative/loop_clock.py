"""The clock the loops decide by, passed in by their owner: the nodes and the bench give the
process's monotonic clock, the loops' tests a ``ManualClock`` they move by hand, so no test of a
decision waits on real time."""

from __future__ import annotations

import time
from typing import Protocol

from crossspec_ros.stamps import ns_to_seconds, seconds_to_ns


class LoopClock(Protocol):
    """Monotonic time: ``now()`` in seconds, ``now_ns()`` in nanoseconds (the same clock)."""

    def now(self) -> float: ...

    def now_ns(self) -> int: ...


class MonotonicClock:
    """The process's monotonic clock (``time.monotonic``)."""

    @staticmethod
    def now() -> float:
        return time.monotonic()

    @staticmethod
    def now_ns() -> int:
        return time.monotonic_ns()


class ManualClock:
    """A clock that moves only when told (``advance``): a loop's decisions, replayed exactly."""

    def __init__(self, start_s: float = 1000.0) -> None:
        self._ns = seconds_to_ns(start_s)

    def now(self) -> float:
        return ns_to_seconds(self._ns)

    def now_ns(self) -> int:
        return self._ns

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a monotonic clock does not go back ({seconds} s)")
        self._ns += seconds_to_ns(seconds)


MONOTONIC = MonotonicClock()
