"""EventPacketData.from_msg on rclpy-like and rosbags-like messages."""

from __future__ import annotations

import array
from types import SimpleNamespace

import numpy as np
import pytest

from crossspec_ros.bags.typestore import EVENT_PACKET_TYPE, typestore
from crossspec_ros.events.packet import EventPacketData, from_msg

PAYLOAD = bytes(range(7))


def fake_msg(events: object) -> SimpleNamespace:
    header = SimpleNamespace(stamp=SimpleNamespace(sec=12, nanosec=345), frame_id="cam")
    return SimpleNamespace(header=header, width=640, height=480, seq=9, time_base=77,
                           encoding="evt3", is_bigendian=False, events=events)


@pytest.mark.parametrize("events", [
    PAYLOAD, bytearray(PAYLOAD), array.array("B", PAYLOAD), list(PAYLOAD),
    np.frombuffer(PAYLOAD, np.uint8), memoryview(PAYLOAD),
], ids=["bytes", "bytearray", "array.array", "list", "ndarray", "memoryview"])
def test_from_msg_accepts_every_payload_type(events: object) -> None:
    packet = from_msg(fake_msg(events))
    assert packet.stamp_ns == 12_000_000_345
    assert (packet.width, packet.height, packet.seq, packet.time_base) == (640, 480, 9, 77)
    assert packet.encoding == "evt3" and packet.frame_id == "cam" and not packet.is_bigendian
    assert packet.events_bytes() == PAYLOAD and packet.nbytes == len(PAYLOAD)


def test_from_msg_does_not_copy_buffers() -> None:
    source = np.frombuffer(PAYLOAD, np.uint8)
    assert from_msg(fake_msg(source)).events is source
    buf = array.array("B", PAYLOAD)
    assert np.shares_memory(from_msg(fake_msg(buf)).events, np.frombuffer(buf, np.uint8))


def test_from_msg_reads_a_rosbags_message() -> None:
    store = typestore()
    types = store.types
    msg = types[EVENT_PACKET_TYPE](
        header=types["std_msgs/msg/Header"](
            stamp=types["builtin_interfaces/msg/Time"](sec=3, nanosec=4), frame_id="f"),
        height=2, width=3, seq=4, time_base=5, encoding="mono", is_bigendian=True,
        events=np.frombuffer(PAYLOAD, np.uint8))
    raw = store.serialize_cdr(msg, EVENT_PACKET_TYPE)
    packet = from_msg(store.deserialize_cdr(raw, EVENT_PACKET_TYPE))
    assert packet == EventPacketData(3_000_000_004, 3, 2, 4, 5, "mono", packet.events, "f", True)
    assert packet.events_bytes() == PAYLOAD
