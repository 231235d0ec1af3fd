"""Time stamps, one way everywhere: nanoseconds (int) <-> ROS's (sec, nanosec), seconds ->
nanoseconds rounded (1.001 s is 1,001,000,000 ns; ``int()`` would give 1,000,999,999),
nanoseconds -> seconds. No other module converts by hand or defines its own nanoseconds per
second."""

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


def ns_to_seconds(ns: float) -> float:
    """Nanoseconds (a stamp or a duration) in seconds, as a float: ``ns / 1e9``, the one way
    crossspec writes a stamp in seconds (rows' ``t0``/``t1``, logs), so that every place
    gives the same float for the same stamp."""
    return ns / 1e9


def stamp_seconds(stamp: Any) -> float:
    """A builtin_interfaces/Time (anything with ``sec`` and ``nanosec``) in float seconds, as
    a run's rows give a window's span (the same float as ``ns_to_seconds`` of its stamp)."""
    return ns_to_seconds(join_ns(stamp.sec, stamp.nanosec))
