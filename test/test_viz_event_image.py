"""The viz node's event image when the event camera's sensor size changes mid-stream.

The node's own methods run on a stand-in object (no executor, no publishers): what is checked
is what one tick draws from the packets that came since the last one.
"""

from __future__ import annotations

import threading
from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.encode import encode_evt3_packets

pytestmark = pytest.mark.ros

ROS_T0 = 1_700_000_000_000_000_000


def packet_msgs(width: int, height: int, t0: int, n: int = 500) -> list[SimpleNamespace]:
    """EventPacket messages (as rclpy gives them) of ``n`` events over 10 ms."""
    rng = np.random.default_rng(width)
    t = t0 + np.sort(rng.integers(0, 10_000, n)) * 1000
    batch = EventBatch(t, rng.integers(0, width, n), rng.integers(0, height, n),
                       rng.integers(0, 2, n), width, height)
    return [SimpleNamespace(
        header=SimpleNamespace(stamp=SimpleNamespace(sec=p.stamp_ns // 10**9,
                                                     nanosec=p.stamp_ns % 10**9),
                               frame_id="event_camera"),
        width=p.width, height=p.height, seq=p.seq, time_base=0, encoding=p.encoding,
        events=p.events, is_bigendian=False)
        for p in encode_evt3_packets(batch, 1_000_000)]


def test_a_tick_after_the_camera_changed_size_draws_the_new_sensor_only() -> None:
    from crossspec_ros.nodes.viz_node import VizNode

    published = []
    node = SimpleNamespace(
        active=True, verifier_first=None, foxglove=None, event_images=0,
        _held_packets=deque(), _decoder=EventPacketDecoder(name="/event_camera/events"),
        _lock=threading.Lock(), _events=[], _events_header=None,
        pub_event_image=SimpleNamespace(publish=published.append))
    node._verifier_busy = lambda: VizNode._verifier_busy(node)
    # one tick's packets: 320x240, then the camera restarted at 160x120 (two packets in a row:
    # the decoder takes the change)
    for msg in packet_msgs(320, 240, ROS_T0) + packet_msgs(160, 120, ROS_T0 + 10**8):
        VizNode._on_events(node, msg)
    assert node._decoder.stats.size_changes == 1
    VizNode._publish_event_image(node)
    assert [(image.width, image.height) for image in published] == [(160, 120)]
