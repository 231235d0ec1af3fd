"""EventPacketData: one event_camera_msgs/EventPacket, independent of the ROS transport.

Decoders and encoders work on this view, so the same code serves rclpy messages, messages
deserialized by rosbags and packets built in tests, and this layer never imports rclpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from crossspec_ros.stamps import join_ns

EVT3 = "evt3"
EVT2 = "evt2"
EVT21 = "evt21"  # what metavision_driver would send: Prophesee's SDK names the format EVT21
LIBCAER_CMP = "libcaer_cmp"
# Other spellings of an encoding crossspec reads (lower case), by its name above.
ENCODING_ALIASES = {"evt2.1": EVT21}


@dataclass(frozen=True)
class EventPacketData:
    """The fields of an EventPacket that decoding needs.

    stamp_ns: header stamp (ROS clock, ns). events: the packed bytes, either ``bytes`` or a
    1-D uint8 array (rosbags gives arrays, rclpy gives array.array, converted without a copy).
    """

    stamp_ns: int
    width: int
    height: int
    seq: int
    time_base: int
    encoding: str
    events: bytes | np.ndarray
    frame_id: str = ""
    is_bigendian: bool = False

    @property
    def nbytes(self) -> int:
        return len(self.events)

    def events_bytes(self) -> bytes:
        """The payload as ``bytes`` (what the evt3 library accepts); copies only arrays."""
        if isinstance(self.events, bytes):
            return self.events
        return np.ascontiguousarray(self.events, dtype=np.uint8).tobytes()


def _payload(events: Any) -> bytes | np.ndarray:
    """bytes stay bytes; buffers (array.array, memoryview, ndarray) become uint8 views."""
    if isinstance(events, bytes):
        return events
    if isinstance(events, np.ndarray):
        if events.dtype == np.uint8:
            return events if events.ndim == 1 else events.reshape(-1)
        return np.asarray(events, dtype=np.uint8).reshape(-1)
    try:
        return np.frombuffer(events, dtype=np.uint8)
    except TypeError:
        # A plain list of ints (some message libraries): one vectorised conversion.
        return np.asarray(events, dtype=np.uint8).reshape(-1)


def from_msg(msg: Any) -> EventPacketData:
    """Build the view from any object with EventPacket attributes (rclpy or rosbags)."""
    stamp = msg.header.stamp
    return EventPacketData(
        stamp_ns=join_ns(stamp.sec, stamp.nanosec),
        width=int(msg.width),
        height=int(msg.height),
        seq=int(msg.seq),
        time_base=int(msg.time_base),
        encoding=str(msg.encoding),
        events=_payload(msg.events),
        frame_id=str(getattr(msg.header, "frame_id", "")),
        is_bigendian=bool(getattr(msg, "is_bigendian", False)),
    )
