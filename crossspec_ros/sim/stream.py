"""A continuous recording of a drive, one window (second) at a time: events, RGB, captions.

One event simulator runs through the whole recording (references carry over between
seconds, as on a real sensor), so this is what bags and DSEC sequences are written from.
Times are int ns on one clock: drive time 0 is ``start_ns`` (a realistic ROS time by
default), frames are stamped every ``1/rgb_hz`` from ``start_ns``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.sim.captions import caption
from crossspec_ros.sim.events import EventConfig, EventSimulator, simulate
from crossspec_ros.sim.render import render_log, render_rgb
from crossspec_ros.sim.scene import Drive, Facts
from crossspec_ros.sim.visibility import seen_facts
from crossspec_ros.stamps import SECOND_NS, ns_to_seconds

DRIVE_START_NS = 1_700_000_000 * SECOND_NS
WINDOW_NS = SECOND_NS


@dataclass(frozen=True, eq=False)
class Chunk:
    """The recording of [t0, t1): events, (stamp, RGB) frames, the window's facts."""

    index: int
    t0: int
    t1: int
    events: EventBatch
    frames: list[tuple[int, np.ndarray]]
    facts: Facts
    caption_verifier: str
    caption_drafter: str


def frame_stamps(t0: int, t1: int, start_ns: int, rgb_hz: float) -> list[int]:
    """Stamps of the RGB frames in [t0, t1) on the grid start_ns + k * period (whole us)."""
    period = max(1, round(SECOND_NS / rgb_hz / 1000)) * 1000
    k = max(0, -(-(t0 - start_ns) // period))  # first grid index at or after t0
    return list(range(start_ns + k * period, t1, period))


def record(seed: int, duration_s: float, *, event_size: tuple[int, int] = (320, 240),
           rgb_size: tuple[int, int] = (320, 240), rgb_hz: float = 20.0,
           start_ns: int = DRIVE_START_NS, config: EventConfig | None = None,
           drive: Drive | None = None) -> Iterator[Chunk]:
    """Chunks of 1 s (the last one shorter) covering ``duration_s`` of drive ``seed``."""
    if duration_s <= 0:
        raise ValueError(f"duration must be > 0 s, got {duration_s}")
    if start_ns % 1000:
        raise ValueError("start_ns must be a whole microsecond")
    drive = drive or Drive(seed)
    ew, eh = event_size
    end = start_ns + round(duration_s * 1e6) * 1000

    def log_frame(t: int) -> np.ndarray:
        return render_log(drive.state(ns_to_seconds(t - start_ns)), ew, eh)

    sim = EventSimulator(ew, eh, config, np.random.default_rng([seed, 0xE7E7]))
    sim.start(log_frame(start_ns), start_ns)
    for index, t0 in enumerate(range(start_ns, end, WINDOW_NS)):
        t1 = min(t0 + WINDOW_NS, end)
        events = simulate(log_frame, ew, eh, t0, t1, simulator=sim)
        frames = [(t, render_rgb(drive.state(ns_to_seconds(t - start_ns)), *rgb_size))
                  for t in frame_stamps(t0, t1, start_ns, rgb_hz)]
        facts = seen_facts(drive.state(ns_to_seconds((t0 + t1) / 2 - start_ns)))
        yield Chunk(index, t0, t1, events, frames, facts, caption(facts, "verifier"),
                    caption(facts, "drafter"))
