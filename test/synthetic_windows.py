"""A random sync.Window (events and 8 RGB frames at a small sensor size), for model tests."""

from __future__ import annotations

import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.sync.window import StampedFrame, Window


def random_window(seed: int = 0, events: bool = True, frames: bool = True) -> Window:
    """Window ``seed`` of 300 random events on a 48 x 36 sensor and 8 random frames
    (``events``/``frames`` False: none of them)."""
    rng = np.random.default_rng(seed)
    n = 300 if events else 0
    batch = EventBatch(np.sort(rng.integers(0, 10**9, n)), rng.integers(0, 48, n),
                       rng.integers(0, 36, n), rng.integers(0, 2, n), 48, 36)
    shots = [StampedFrame(i * 10**8, rng.integers(0, 256, (36, 48, 3), dtype=np.uint8))
             for i in range(8)] if frames else []
    return Window(seed, 0, 10**9, batch, shots, n_distinct_frames=len(shots))
