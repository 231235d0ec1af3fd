"""Training and evaluation windows of the synthetic world: ``make_window(seed, index)``.

A window is second ``index`` of drive ``seed``: the frames a verifier sees, the events a
drafter sees, both styles' captions and the facts behind them. It is a pure function of its
arguments (bit for bit), so datasets need not be stored: regenerate them.

Seed split (never train on evaluation seeds):

- ``TRAIN_SEEDS``: 0 .. 9 999; ``VALIDATION_SEEDS``: 10 000 .. 10 999 (model selection);
- held-out evaluation: seeds from ``HELDOUT_SEED_START`` = 100 000 up (``heldout_seeds``);
  the committed sample bag uses seed 23 (a training seed: it is a demo, not a benchmark).

Window ``index`` covers drive time [index, index + 1) s, stamped on the ROS clock from
``DRIVE_START_NS`` as in the sample bag, so ``as_window()`` has the synchronizer's window id.
Each window's events come from a fresh simulator started at the window's first instant (a
bag's simulator runs on from second to second instead; both are the same sensor model).

Cost on one core here: ~0.5 s per window with 320x240 events (200 log-intensity renders of
~2.3 ms each, plus the simulator) and 8 frames at 128x96; ``event_size=(160, 120)``: ~0.17 s;
``events=False``: ~6 ms. Windows are independent: generate them on several processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.sim.captions import caption
from crossspec_ros.sim.events import EventConfig, simulate
from crossspec_ros.sim.render import render_log, render_rgb
from crossspec_ros.sim.scene import Drive
from crossspec_ros.sim.stream import DRIVE_START_NS, WINDOW_NS, frame_stamps
from crossspec_ros.sim.visibility import seen_facts, visible_attributes
from crossspec_ros.stamps import ns_to_seconds
from crossspec_ros.sync.window import StampedFrame, Window, sample_frames

TRAIN_SEEDS = range(0, 10_000)
VALIDATION_SEEDS = range(10_000, 11_000)
HELDOUT_SEED_START = 100_000
WINDOWS_PER_DRIVE = 30  # a drive of 30 s gives 30 windows; any index >= 0 works


def heldout_seeds(n: int) -> range:
    """The first ``n`` held-out evaluation seeds (disjoint from training and validation)."""
    return range(HELDOUT_SEED_START, HELDOUT_SEED_START + n)


@dataclass(frozen=True, eq=False)
class SimWindow:
    """One 1 s window of a synthetic drive (times in ns on the ROS clock)."""

    seed: int
    index: int
    t0: int
    t1: int
    frames: list[np.ndarray]       # n_frames H x W x 3 uint8 RGB
    frame_stamps: list[int]
    events: EventBatch
    caption_verifier: str
    caption_drafter: str
    attributes: dict[str, str]
    visible_attributes: frozenset[str]

    def as_window(self) -> Window:
        """The synchronizer's ``Window`` of the same data (for the engine and nodes)."""
        frames = [StampedFrame(t, img, "rgb8", "camera")
                  for t, img in zip(self.frame_stamps, self.frames, strict=True)]
        return Window(id=self.t0 // WINDOW_NS, t0=self.t0, t1=self.t1, events=self.events,
                      frames=frames, n_distinct_frames=len(set(self.frame_stamps)),
                      closed_by="flush")


@lru_cache(maxsize=64)
def drive(seed: int) -> Drive:
    """The (cached) drive of a seed."""
    return Drive(seed)


def _size(image_size: int | tuple[int, int]) -> tuple[int, int]:
    if isinstance(image_size, int):
        # int = the short side (what CLIP preprocessing resizes to); keep the camera's 4:3
        return round(image_size * 4 / 3), image_size
    return int(image_size[0]), int(image_size[1])


def make_window(seed: int, index: int, *, image_size: int | tuple[int, int] = 96,
                n_frames: int = 8, event_size: tuple[int, int] = (320, 240),
                rgb_hz: float = 20.0, config: EventConfig | None = None,
                events: bool = True) -> SimWindow:
    """Window ``index`` (>= 0) of drive ``seed``.

    image_size: the frames' height with 4:3 width (96 -> 128x96), or (width, height).
    Frames are the ``n_frames`` of a ``rgb_hz`` camera that the synchronizer would sample
    (nearest to uniform targets), rendered directly at ``image_size``. ``events=False``
    skips the event simulation (an empty batch; ~50x faster) for RGB-only work.
    """
    if index < 0:
        raise ValueError(f"window index must be >= 0, got {index}")
    d = drive(seed)
    t0 = DRIVE_START_NS + index * WINDOW_NS
    t1 = t0 + WINDOW_NS
    width, height = _size(image_size)
    grid = [StampedFrame(t, None) for t in frame_stamps(t0, t1, DRIVE_START_NS, rgb_hz)]
    stamps = [f.stamp_ns for f in sample_frames(grid, t0, t1, n_frames)]
    frames = [render_rgb(d.state(ns_to_seconds(t - DRIVE_START_NS)), width, height)
              for t in stamps]
    ew, eh = event_size
    if events:
        batch = simulate(lambda t: render_log(d.state(ns_to_seconds(t - DRIVE_START_NS)), ew, eh),
                         ew, eh, t0, t1, config, np.random.default_rng([seed, index, 0xE7]))
    else:
        batch = EventBatch.empty(ew, eh)
    facts = seen_facts(d.state(index + 0.5))  # what the frames show mid-window
    return SimWindow(seed, index, t0, t1, frames, stamps, batch, caption(facts, "verifier"),
                     caption(facts, "drafter"), facts.as_dict(), visible_attributes(facts))


def iter_windows(seeds: Iterable[int], windows_per_seed: int = WINDOWS_PER_DRIVE,
                 **kwargs: object) -> Iterator[SimWindow]:
    """``make_window(seed, i, **kwargs)`` for each seed, i = 0 .. windows_per_seed - 1."""
    for seed in seeds:
        for index in range(windows_per_seed):
            yield make_window(seed, index, **kwargs)
