"""Medians and percentiles of run measurements that may be empty, and how to print them.

A run can end with nothing to summarize: a bag with images but no events gives no draft
latency, a drafter slowed by load can lose every window's race against the verifier, a mode
can have no window to pair. That is a fact to report, not an error: every summary here
returns None for an empty list (JSON null; NaN and None values are left out first) and
``shown`` prints None as "n/a". The CLI and the benchmarks summarize through these only.

A run that does not end (``drive --loop``) summarizes from ``BoundedSample``s: every value while
they fit, a uniform sample after, so its memory stays bounded however long it runs.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterable, Mapping

NOT_AVAILABLE = "n/a"


def finite(values: Iterable[float | None]) -> list[float]:
    """``values`` without None and NaN (a window that never measured it)."""
    return [float(v) for v in values if v is not None and not math.isnan(v)]


def percentile(values: Iterable[float | None], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation, numpy's default; None when
    there is no finite value."""
    data = sorted(finite(values))
    if not data:
        return None
    position = (len(data) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (position - low)


def median(values: Iterable[float | None]) -> float | None:
    """The median (the mean of the middle two for an even count), or None."""
    return percentile(values, 50.0)


def quartiles(values: Iterable[float | None]) -> tuple[float, float, float] | None:
    """(q25, median, q75), or None."""
    data = finite(values)
    if not data:
        return None
    return percentile(data, 25.0), percentile(data, 50.0), percentile(data, 75.0)


def rounded(value: float | None, digits: int = 2) -> float | None:
    """``value`` rounded, None for None or NaN (for JSON rows and reports)."""
    return None if value is None or math.isnan(value) else round(float(value), digits)


def shown(value: float | None, spec: str = ".1f", unit: str = "") -> str:
    """``value`` formatted with ``spec`` and ``unit``, or "n/a"."""
    if value is None or math.isnan(value):
        return NOT_AVAILABLE
    return f"{value:{spec}}{unit}"


def shown_percent(value: float) -> str:
    """A share as a whole percentage ("50%"), or "--" for NaN (not measured)."""
    return "--" if math.isnan(value) else f"{100 * value:.0f}%"


def median_ms(values: Iterable[float | None]) -> float | None:
    """A latency median as the JSON and the terminal give it: to 0.1 ms, None when none."""
    return rounded(median(values), 1)


def percentile_ms(values: Iterable[float | None], q: float) -> float | None:
    """A latency's q-th percentile to 0.1 ms, None when none."""
    return rounded(percentile(values, q), 1)


def shown_ms(value: float | None) -> str:
    """A latency as the terminal prints it: "12.3 ms", or "n/a"."""
    return shown(value, ".1f", " ms")


def against_close(ms: float | None) -> str:
    """A time against a window's close, in words: "12.0 ms before" or "3.1 ms after" (< 0
    and 0: before)."""
    if ms is None or math.isnan(ms):
        return f"{NOT_AVAILABLE} ms from"
    return f"{abs(ms):.1f} ms {'before' if ms <= 0 else 'after'}"


def paired_ratios(baseline: Mapping[Hashable, float | None],
                  mode: Mapping[Hashable, float | None]) -> dict[Hashable, float]:
    """baseline / mode for every key (a window) both measured with a positive value: a
    paired comparison, where a ratio of medians would hide which windows got faster."""
    return {key: baseline[key] / mode[key] for key in baseline
            if key in mode and baseline[key] and mode[key]}


def spread(ratios: Iterable[float | None]) -> dict[str, float | None]:
    """{"median", "q25", "q75"} of ``ratios``, rounded to 3 places (None each when empty)."""
    q25, q50, q75 = quartiles(ratios) or (None, None, None)
    return {"median": rounded(q50, 3), "q25": rounded(q25, 3), "q75": rounded(q75, 3)}


class BoundedSample:
    """Values to take medians and percentiles of, in bounded memory: every finite value up to
    ``capacity``, then a uniform random sample of ``capacity`` of all offered so far
    (reservoir sampling, seeded: the same run gives the same summary). ``count``: the
    finite values offered; ``sampled``: whether ``values`` holds only a sample of them."""

    def __init__(self, capacity: int = 100_000, seed: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.values: list[float] = []
        self.count = 0
        self._random = random.Random(seed)

    def add(self, value: float | None) -> None:
        """Offer one value; None and NaN (not measured) are left out."""
        if value is None or math.isnan(value):
            return
        self.count += 1
        if len(self.values) < self.capacity:
            self.values.append(float(value))
            return
        slot = self._random.randrange(self.count)  # kept with probability capacity / count
        if slot < self.capacity:
            self.values[slot] = float(value)

    @property
    def sampled(self) -> bool:
        return self.count > len(self.values)
