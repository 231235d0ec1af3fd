"""How much a scene changed between two windows, from their events alone.

An event camera reports brightness changes, so the event stream says for free, before any
model runs, how different a window is from the one before: how many events fired (the rate)
and where (a coarse grid of counts). Two signals, both 0 for identical windows:

- ``rate``: |log((n + 1) / (n_before + 1))|, the change in event count;
- ``layout``: the L1 distance between the two windows' normalised event-count grids (0..2),
  the change in where events fire.

Pure numpy; ``crossspec bench change-signal`` measures how well each predicts that a window's
caption differs from the window before's, and the rate threshold that separates them best
(``ChangeDetector``'s default is the sample bag's). The engine's event-aware mode
(``EngineConfig.event_aware``) keeps its measured acceptance and its drafter gate apart per
change level.
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
    return SceneChange(count_change(before.count, now.count),
                       float(np.abs(now.grid - before.grid).sum()))


def count_change(before: int, now: int) -> float:
    """The ``rate`` signal: |log((now + 1) / (before + 1))| of two windows' event counts."""
    return abs(float(np.log((now + 1) / (before + 1))))


# The rate above which a window counts as changed: the threshold with the best true-positive
# minus false-positive rate against ground-truth caption changes on the sample bag (crossspec
# bench change-signal, 2026-11-26; the drives it never saw are scored with it as it is)
CHANGE_RATE_THRESHOLD = 0.655

# What the change level may decide in the engine, each lossless (EngineConfig.event_aware,
# node parameter event_aware):
EVENT_CHOICES = (
    "acceptance",  # each level keeps its own measured acceptance per proposer (and so its
    #                own proposal sizes and chain choice)
    "cascade",     # the drafter is only asked in windows that changed: where the scene
    #                stays, the last caption and the corpus (free) are left to propose; where
    #                it changed, the drafter gate decides from what it measured there
)

STEADY, CHANGED = "steady", "changed"


class ChangeDetector:
    """Each window's change level against the window before it, from the events alone:
    ``CHANGED`` when the event-count change ``rate`` exceeds ``threshold``, else ``STEADY``;
    None for the first window, a window without events, or one that does not follow the last
    (a gap or a replay from the start: nothing to compare with)."""

    def __init__(self, threshold: float = CHANGE_RATE_THRESHOLD) -> None:
        self.threshold = threshold
        self._before: tuple[int, int] | None = None  # (window id, its event count)

    def level(self, window_id: int, batch: EventBatch | None) -> str | None:
        # the count alone: the rate needs no grid (EventLayout.of costs ~0.7 ms on the
        # sample bag's 150 000 events a window, after the close)
        if batch is None or len(batch) == 0:
            self._before = None
            return None
        before, self._before = self._before, (window_id, len(batch))
        if before is None or before[0] != window_id - 1:
            return None
        return CHANGED if count_change(before[1], len(batch)) > self.threshold else STEADY
