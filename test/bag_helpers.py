"""Small bags for tests of what a command does with a bag that lacks something."""

from __future__ import annotations

from pathlib import Path

from crossspec_ros.bags.sample import CAPTION_TYPE, GROUND_TRUTH_TOPIC, ground_truth_caption
from crossspec_ros.bags.test_pattern import TestPattern
from crossspec_ros.bags.writer import BagWriter
from crossspec_ros.events.encode import Evt3PacketEncoder


def write_rgb_only_bag(path: Path, seconds: int = 2) -> Path:
    """A bag of the test pattern's frames at 20 Hz and nothing else (no event camera)."""
    pattern = TestPattern()
    with BagWriter(path) as bag:
        for k in range(seconds * 20):
            stamp = pattern.start_ns + k * 50_000_000
            bag.write_rgb("/camera/image_raw", stamp, pattern.rgb(stamp), "camera")
    return path


def write_bag_with_ground_truth(path: Path, unreadable: set[int]) -> Path:
    """Two windows of the test pattern (events + RGB) and a ground-truth caption per window;
    the captions of the windows in ``unreadable`` (0, 1) are cut to 20 bytes of CDR."""
    pattern = TestPattern()
    encoder = Evt3PacketEncoder(pattern.width, pattern.height, packet_period_ns=2_000_000,
                                epoch_ns=pattern.start_ns, frame_id="event_camera")
    with BagWriter(path) as bag:
        for k in range(2):
            t0 = pattern.start_ns + k * 1_000_000_000
            for packet in encoder.encode(pattern.events(t0, t0 + 1_000_000_000)):
                bag.write_event_packet("/event_camera/events", packet)
            for f in range(20):
                stamp = t0 + f * 50_000_000
                bag.write_rgb("/camera/image_raw", stamp, pattern.rgb(stamp), "camera")
            msg = ground_truth_caption(bag.store, t0, t0 + 1_000_000_000, f"pattern {k}")
            data = bag.store.serialize_cdr(msg, CAPTION_TYPE)
            bag.write_raw(GROUND_TRUTH_TOPIC, CAPTION_TYPE, data[:20] if k in unreadable
                          else data, t0 + 1_000_000_000)
    return path
