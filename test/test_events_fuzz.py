"""Fuzz: 100,000 random and corrupted packets through the decode path, no exception."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.encode import encode_evt3_packets
from crossspec_ros.events.packet import EventPacketData

ROS_T0 = 1_700_000_000_000_000_000
N_PACKETS = 100_000
ENCODINGS = ["evt2", "libcaer_cmp", "mono", "EVT3", " evt3", "", "evt3\x00", "trigger"]
SIZES = [(0, 0), (1, 1), (7, 3), (4096, 10), (1280, 720), (2048, 2048), (10**6, 1)]


def valid_packets(rng: np.random.Generator) -> list[bytes]:
    n = 20_000
    t = ROS_T0 + np.sort(rng.integers(0, 40_000_000, n)) * 1000  # 40 s: wraps included
    batch = EventBatch(t, rng.integers(0, 640, n), rng.integers(0, 480, n),
                       rng.integers(0, 2, n), 640, 480)
    return [p.events for p in encode_evt3_packets(batch, 200_000)]


def test_decode_path_survives_100k_random_and_corrupted_packets(
        caplog: pytest.LogCaptureFixture) -> None:
    rng = np.random.default_rng(1234)
    pool = valid_packets(rng)
    noise = rng.integers(0, 256, 1 << 22, dtype=np.uint8).tobytes()
    kind = rng.integers(0, 8, N_PACKETS)
    pick = rng.integers(0, len(pool), N_PACKETS)
    length = rng.integers(0, 96, N_PACKETS)
    start = rng.integers(0, len(noise) - 96, N_PACKETS)
    stamps = ROS_T0 + rng.integers(-(10**11), 10**11, N_PACKETS)
    decoders = [EventPacketDecoder(name=f"fuzz{i}", count_triggers=i == 0) for i in range(4)]
    emitted = 0
    with caplog.at_level(logging.ERROR):  # the expected warnings are not the point here
        for i in range(N_PACKETS):
            k, valid = int(kind[i]), pool[pick[i]]
            w, h, enc, events, bigendian = 640, 480, "evt3", valid, False
            if k == 0:  # random bytes
                events = noise[start[i]:start[i] + length[i]]
            elif k == 1:  # truncated valid packet
                events = valid[: int(length[i]) % (len(valid) + 1)]
            elif k == 2:  # bit flips in a valid packet
                arr = np.frombuffer(valid, np.uint8).copy()
                arr[rng.integers(0, len(arr), 3)] ^= np.uint8(1 << int(length[i] % 8))
                events = arr
            elif k == 3:
                enc = ENCODINGS[i % len(ENCODINGS)]
            elif k == 4:
                w, h = SIZES[i % len(SIZES)]
            elif k == 5:
                bigendian = True
            elif k == 6:  # random bytes as a uint8 array (the rosbags payload type)
                events = np.frombuffer(noise, np.uint8, count=int(length[i]), offset=start[i])
            packet = EventPacketData(int(stamps[i]), w, h, i, 0, enc, events,
                                     is_bigendian=bigendian)
            out = decoders[i % 4].decode(packet)
            if len(out):
                emitted += len(out)
                assert int(out.x.max()) < out.width and int(out.y.max()) < out.height
                assert out.t.dtype == np.int64 and out.p.max() <= 1
    stats = [d.stats for d in decoders]
    assert sum(s.packets for s in stats) == N_PACKETS
    assert emitted == sum(s.events for s in stats) > 0
    for counter in ("unsupported_encoding", "big_endian", "invalid_size", "empty_packets",
                    "odd_length", "out_of_bounds_events", "size_changes", "clock_resets"):
        assert sum(getattr(s, counter) for s in stats) > 0, counter
