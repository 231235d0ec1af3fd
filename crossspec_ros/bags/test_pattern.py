"""A test-pattern source: moving shapes seen by an event camera and an RGB camera.

Like a video test-pattern generator: not a driving scene and not an event simulator (the
synthetic driving world is crossspec_ros/sim, with its own event simulator). A bright square
bounces left-right and a dark bar sweeps up-down over a grey background; every 1 ms the
rendered intensity is compared with the next millisecond's and each changed pixel emits one
event (ON when it got brighter), time-jittered inside that millisecond at 1 us resolution.
Cheap and exactly reproducible from a seed, which is what tests and `make drive` need.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.stamps import SECOND_NS, ns_to_seconds, seconds_to_ns

BACKGROUND, SQUARE, BAR = 96, 230, 20
NS_PER_MS = 1_000_000


@dataclass(frozen=True)
class TestPattern:
    """Geometry and timing of the pattern; times are ns on the ROS clock."""

    __test__ = False  # not a pytest test class despite the name

    width: int = 320
    height: int = 240
    start_ns: int = 1_700_000_000 * SECOND_NS
    square_side: int = 40
    square_speed_px_s: float = 150.0
    bar_height: int = 12
    bar_speed_px_s: float = 60.0

    def intensity(self, t_ns: int) -> np.ndarray:
        """H x W uint8 grey levels at time t."""
        s = ns_to_seconds(t_ns - self.start_ns)
        image = np.full((self.height, self.width), BACKGROUND, np.uint8)
        bar_y = _bounce(s * self.bar_speed_px_s, self.height - self.bar_height)
        image[bar_y:bar_y + self.bar_height, :] = BAR
        square_x = _bounce(s * self.square_speed_px_s, self.width - self.square_side)
        top = (self.height - self.square_side) // 2
        image[top:top + self.square_side, square_x:square_x + self.square_side] = SQUARE
        return image

    def rgb(self, t_ns: int) -> np.ndarray:
        """H x W x 3 RGB frame (the square is orange, so colour is visible only in RGB)."""
        grey = self.intensity(t_ns)
        rgb = np.repeat(grey[:, :, None], 3, axis=2)
        rgb[grey == SQUARE] = (250, 150, 30)
        return rgb

    def events(self, t0_ns: int, t1_ns: int, seed: int = 0) -> EventBatch:
        """Events of [t0, t1) (t0, t1 multiples of 1 ms), time-sorted, 1 us resolution."""
        rng = np.random.default_rng(seed + t0_ns // NS_PER_MS)
        chunks_t, chunks_x, chunks_y, chunks_p = [], [], [], []
        previous = self.intensity(t0_ns)
        for t in range(t0_ns, t1_ns, NS_PER_MS):
            current = self.intensity(t + NS_PER_MS)
            ys, xs = np.nonzero(current != previous)
            if len(xs):  # the change happened somewhere inside [t, t + 1 ms)
                chunks_t.append(t + 1000 * rng.integers(0, 1000, len(xs)))
                chunks_x.append(xs)
                chunks_y.append(ys)
                chunks_p.append(current[ys, xs] > previous[ys, xs])
            previous = current
        if not chunks_t:
            return EventBatch.empty(self.width, self.height)
        batch = EventBatch(np.concatenate(chunks_t), np.concatenate(chunks_x),
                           np.concatenate(chunks_y), np.concatenate(chunks_p),
                           self.width, self.height)
        return batch.sorted()


def _bounce(distance: float, span: int) -> int:
    """Position after travelling ``distance`` back and forth over [0, span]."""
    phase = distance % (2 * span)
    return int(phase if phase <= span else 2 * span - phase)


def write_test_pattern_bag(out: str | Path, duration_s: float = 10.0, *, storage: str = "mcap",
                           rgb_hz: float = 20.0, packet_ms: float = 2.0,
                           rgb_gap_s: tuple[float, float] | None = None,
                           event_topic: str = "/event_camera/events",
                           rgb_topic: str = "/camera/image_raw", seed: int = 0,
                           pattern: TestPattern | None = None) -> dict:
    """Write a bag of the pattern; returns counts. ``rgb_gap_s`` leaves out RGB in [a, b) s."""
    from crossspec_ros.bags.writer import BagWriter
    from crossspec_ros.events.encode import Evt3PacketEncoder

    pattern = pattern or TestPattern()
    end_ns = pattern.start_ns + seconds_to_ns(duration_s)
    frame_period_ns = round(SECOND_NS / rgb_hz)
    counts = {"event_packets": 0, "events": 0, "frames": 0}
    encoder = Evt3PacketEncoder(pattern.width, pattern.height,
                                packet_period_ns=round(packet_ms * 1e6),
                                epoch_ns=pattern.start_ns, frame_id="event_camera")
    with BagWriter(out, storage=storage) as bag:
        # One second at a time keeps memory flat and messages in log-time order.
        for t0 in range(pattern.start_ns, end_ns, SECOND_NS):
            t1 = min(t0 + SECOND_NS, end_ns)
            frames = [t for t in range(t0, t1, frame_period_ns)
                      if not _in_gap(t - pattern.start_ns, rgb_gap_s)]
            batch = pattern.events(t0, t1, seed=seed)
            packets = encoder.encode(batch)
            messages = [(p.stamp_ns, 0, p) for p in packets] + [(t, 1, None) for t in frames]
            for stamp, kind, packet in sorted(messages, key=lambda m: (m[0], m[1])):
                if kind == 0:
                    bag.write_event_packet(event_topic, packet)
                else:
                    bag.write_rgb(rgb_topic, stamp, pattern.rgb(stamp), frame_id="camera")
            counts["event_packets"] += len(packets)
            counts["events"] += len(batch)
            counts["frames"] += len(frames)
    return counts


def _in_gap(offset_ns: int, gap_s: tuple[float, float] | None) -> bool:
    return gap_s is not None and gap_s[0] * SECOND_NS <= offset_ns < gap_s[1] * SECOND_NS
