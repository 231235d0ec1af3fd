"""rosbags type store with the message types crossspec writes and reads.

Bags carry their own type definitions, so *reading* needs no registration; writing
crossspec's or event_camera_msgs' messages with rosbags does.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from crossspec_ros.paths import package_share_dir

EVENT_PACKET_TYPE = "event_camera_msgs/msg/EventPacket"
# The event_camera_msgs/msg/EventPacket definition (comments stripped). Its RIHS01 hash must
# stay RIHS01_d6fa1762...: test/test_interfaces.py checks it against the .msg stand-in.
EVENT_PACKET_MSG = """\
std_msgs/Header header
uint32 height
uint32 width
uint64 seq
uint64 time_base
string encoding
bool is_bigendian
uint8[] events
"""
EVENT_PACKET_RIHS01 = "RIHS01_d6fa176260b1f37e5a40845305315e150a0f18191241eb64f407442aa29844aa"


def msg_dir() -> Path:
    """Directory holding crossspec's .msg files (source checkout or installed share/)."""
    here = Path(__file__).resolve().parents[2] / "msg"
    if here.is_dir():
        return here
    return package_share_dir("crossspec") / "msg"


@lru_cache(maxsize=1)
def typestore() -> Typestore:
    """ROS 2 (latest) types plus EventPacket and crossspec's own messages."""
    store = get_typestore(Stores.ROS2_KILTED)
    types = get_types_from_msg(EVENT_PACKET_MSG, EVENT_PACKET_TYPE)
    for path in sorted(msg_dir().glob("*.msg")):
        types.update(get_types_from_msg(path.read_text(), f"crossspec/msg/{path.stem}"))
    store.register(types)
    return store
