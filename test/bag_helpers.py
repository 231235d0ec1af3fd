"""Small bags for tests of what a command does with a bag that lacks something."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from crossspec_ros.bags.sample import CAPTION_TYPE, GROUND_TRUTH_TOPIC, ground_truth_caption
from crossspec_ros.bags.test_pattern import TestPattern
from crossspec_ros.bags.writer import BagWriter
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.encode import Evt3PacketEncoder
from crossspec_ros.events.evt21 import encode_evt21
from crossspec_ros.events.packet import EventPacketData


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


def evt21_packets(batch: EventBatch, sensor_zero_ns: int, period_us: int = 1000
                  ) -> list[EventPacketData]:
    """``batch`` as EVT 2.1 packets of ``period_us`` (sensor time: microseconds since
    ``sensor_zero_ns`` on the ROS clock), each stamped with its first event, the time high
    carried from packet to packet as a sensor sends it."""
    t_us = (batch.t - sensor_zero_ns) // 1000
    cuts = np.flatnonzero(np.diff(t_us // period_us)) + 1
    packets, high = [], None
    for seq, part in enumerate(np.split(np.arange(len(batch)), cuts)):
        data, high = encode_evt21(t_us[part], batch.x[part], batch.y[part], batch.p[part], high)
        packets.append(EventPacketData(int(batch.t[part[0]]), batch.width, batch.height, seq, 0,
                                       "evt21", data))
    return packets


def with_wild_time_high(packet: EventPacketData, ahead_us: int) -> EventPacketData:
    """``packet`` (EVT 2.1, little-endian words) whose middle time high word reads ``ahead_us``
    later: the events after it decode that far off (a damaged word)."""
    words = np.frombuffer(packet.events, "<u8").copy()
    highs = np.flatnonzero((words >> np.uint64(60)) == 0x8)
    k = highs[len(highs) // 2]
    bits = np.uint64(0xFFF_FFFF)  # the 28 bits of a time high, at bits 59..32
    value = ((words[k] >> np.uint64(32)) & bits) + np.uint64(ahead_us >> 6)
    words[k] = (np.uint64(0x8) << np.uint64(60)) | ((value & bits) << np.uint64(32))
    return replace(packet, events=words.tobytes())
