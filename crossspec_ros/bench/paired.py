"""Paired comparisons: the ratio of two runs' latencies window by window, summarized.

A ratio of medians hides which windows got faster; a paired ratio (baseline / mode, per
window, then its median and interquartile range) does not, and the two runs' shared windows
cancel out what differs between windows (caption length, scene). Empty inputs give ``None``
statistics, never an exception: a run cut short has nothing to pair.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

import numpy as np


def ratio_summary(ratios: Iterable[float]) -> dict[str, float | None]:
    """Median and interquartile range of ``ratios`` (rounded to 3 places; None if empty)."""
    values = [r for r in ratios if r == r]  # NaN dropped
    if not values:
        return {"median": None, "q25": None, "q75": None}
    q25, q50, q75 = np.percentile(values, [25, 50, 75])
    return {"median": round(float(q50), 3), "q25": round(float(q25), 3),
            "q75": round(float(q75), 3)}


def paired_ratios(baseline: Mapping[Hashable, float | None],
                  mode: Mapping[Hashable, float | None]) -> dict[Hashable, float]:
    """baseline / mode for every key both have a positive value for."""
    return {key: baseline[key] / mode[key] for key in baseline
            if key in mode and baseline[key] and mode[key]}


def median_or_none(values: Iterable[float | None], places: int = 1) -> float | None:
    """The median of the values that are there (None and NaN skipped), rounded; None if none."""
    clean = [v for v in values if v is not None and v == v]
    return round(float(np.median(clean)), places) if clean else None
