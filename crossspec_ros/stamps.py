"""Time stamps, one way everywhere: nanoseconds (int) <-> ROS's (sec, nanosec), seconds ->
nanoseconds rounded (1.001 s is 1,001,000,000 ns; ``int()`` would give 1,000,999,999)."""

from __future__ import annotations

from typing import Any

SECOND_NS = 1_000_000_000


def split_ns(stamp_ns: int) -> tuple[int, int]:
    """(sec, nanosec) of a builtin_interfaces/Time for ``stamp_ns``."""
    return divmod(int(stamp_ns), SECOND_NS)


def join_ns(sec: int, nanosec: int) -> int:
    """Nanoseconds of a builtin_interfaces/Time's (sec, nanosec)."""
    return int(sec) * SECOND_NS + int(nanosec)


def seconds_to_ns(seconds: float) -> int:
    """A duration or stamp in seconds as whole nanoseconds, rounded."""
    return round(seconds * SECOND_NS)


def stamp_seconds(stamp: Any) -> float:
    """A builtin_interfaces/Time (anything with ``sec`` and ``nanosec``) in float seconds, as
    a run's rows give a window's span."""
    return stamp.sec + stamp.nanosec / 1e9
