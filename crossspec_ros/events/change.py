"""How much a scene changed between two windows, from their events alone.

An event camera reports brightness changes, so the event stream says for free, before any
model runs, how different a window is from the one before: how many events fired (the rate)
and where (a coarse grid of counts). Two signals, both 0 for identical windows:

- ``rate``: |log((n + 1) / (n_before + 1))|, the change in event count;
- ``layout``: the L1 distance between the two windows' normalised event-count grids (0..2),
  the change in where events fire.

Pure numpy; ``crossspec bench change-signal`` measures how well each predicts that a window's
caption differs from the window before's (the first step of event-aware speculation: how far
to trust the last caption).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from crossspec_ros.events.batch import EventBatch

GRID = (8, 6)  # cells across, down


@dataclass(frozen=True)
class EventLayout:
    """One window's events reduced to a count and a normalised grid of where they fired."""

    count: int
    grid: np.ndarray  # GRID cells, summing to 1 (all 0 without events)

    @classmethod
    def of(cls, batch: EventBatch, grid: tuple[int, int] = GRID) -> EventLayout:
        if len(batch) == 0 or batch.width <= 0 or batch.height <= 0:
            return cls(0, np.zeros(grid[0] * grid[1]))
        cx = np.minimum(batch.x.astype(np.int64) * grid[0] // batch.width, grid[0] - 1)
        cy = np.minimum(batch.y.astype(np.int64) * grid[1] // batch.height, grid[1] - 1)
        counts = np.bincount(cy * grid[0] + cx, minlength=grid[0] * grid[1])
        return cls(len(batch), counts / counts.sum())


@dataclass(frozen=True)
class SceneChange:
    rate: float
    layout: float


def scene_change(before: EventLayout, now: EventLayout) -> SceneChange:
    """How much ``now`` differs from ``before`` (see the module docstring)."""
    rate = abs(float(np.log((now.count + 1) / (before.count + 1))))
    return SceneChange(rate, float(np.abs(now.grid - before.grid).sum()))
