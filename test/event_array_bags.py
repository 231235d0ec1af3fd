"""Bags of EventArray messages as rpg_dvs_ros and Prophesee's ROS 1 driver record them.

Written with rosbags' own writers and serializers (ROS 1 ``rosbags.rosbag1.Writer``, ROS 2
``rosbags.rosbag2.Writer``) from the packages' public .msg definitions, so crossspec's numpy
reader is checked against an independent serialization.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rosbags.rosbag1 import Writer as Ros1Writer
from rosbags.rosbag2 import StoragePlugin
from rosbags.rosbag2 import Writer as Ros2Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from crossspec_ros.bags.test_pattern import TestPattern
from crossspec_ros.events.batch import EventBatch

# dvs_msgs (uzh-rpg/rpg_dvs_ros) and prophesee_event_msgs (prophesee_ros_wrapper) in ROS 1;
# their ROS 2 ports keep the fields, with builtin_interfaces/Time for ``time``.
EVENT_ROS1 = "uint16 x\nuint16 y\ntime ts\nbool polarity\n"
EVENT_ROS2 = "uint16 x\nuint16 y\nbuiltin_interfaces/Time ts\nbool polarity\n"
EVENT_ARRAY = "std_msgs/Header header\nuint32 height\nuint32 width\nEvent[] events\n"
PACKAGES = ("dvs_msgs", "prophesee_event_msgs")
IMAGE = "sensor_msgs/msg/Image"
NS = 1_000_000_000


def array_type(package: str) -> str:
    return f"{package}/msg/EventArray"


def event_array_store(ros1: bool) -> Typestore:
    """ROS 1 (noetic) or ROS 2 types plus both packages' Event and EventArray."""
    store = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_KILTED)
    types = {}
    for package in PACKAGES:
        types.update(get_types_from_msg(EVENT_ROS1 if ros1 else EVENT_ROS2,
                                        f"{package}/msg/Event"))
        types.update(get_types_from_msg(EVENT_ARRAY, array_type(package)))
    store.register(types)
    return store


def _time(store: Typestore, t_ns: int):
    sec, nanosec = divmod(int(t_ns), NS)
    return store.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec)


def _header(store: Typestore, ros1: bool, stamp_ns: int, frame_id: str, seq: int = 0):
    extra = {"seq": seq} if ros1 else {}
    return store.types["std_msgs/msg/Header"](stamp=_time(store, stamp_ns), frame_id=frame_id,
                                              **extra)


def event_array_message(store: Typestore, package: str, ros1: bool, stamp_ns: int,
                        width: int, height: int, t: np.ndarray, x: np.ndarray, y: np.ndarray,
                        p: np.ndarray, frame_id: str = "dvs", seq: int = 0):
    """A rosbags EventArray message object (one Event object per event, as drivers fill it)."""
    event = store.types[f"{package}/msg/Event"]
    events = [event(x=int(xi), y=int(yi), ts=_time(store, ti), polarity=bool(pi))
              for ti, xi, yi, pi in zip(t.tolist(), x.tolist(), y.tolist(), p.tolist(),
                                        strict=True)]
    return store.types[array_type(package)](
        header=_header(store, ros1, stamp_ns, frame_id, seq), height=height, width=width,
        events=events)


def serialize(store: Typestore, msg, msgtype: str, ros1: bool) -> bytes:
    return bytes(store.serialize_ros1(msg, msgtype) if ros1 else
                 store.serialize_cdr(msg, msgtype))


def mono8_message(store: Typestore, ros1: bool, stamp_ns: int, grey: np.ndarray, seq: int = 0):
    height, width = grey.shape
    return store.types[IMAGE](header=_header(store, ros1, stamp_ns, "camera", seq),
                              height=height, width=width, encoding="mono8", is_bigendian=0,
                              step=width, data=np.ascontiguousarray(grey).reshape(-1))


@dataclass
class WrittenBag:
    """What a pattern bag holds: its events (all, as recorded), frame stamps, topics."""

    path: Path
    events: EventBatch             # every event written, the outside ones included
    outside: int                   # of them, outside the sensor
    frame_stamps: list[int] = field(default_factory=list)
    event_topic: str = "/dvs/events"
    image_topic: str = "/dvs/image_raw"

    @property
    def inside(self) -> EventBatch:
        return self.events.take(self.events.in_bounds_mask())


def small_pattern() -> TestPattern:
    """The test pattern at a quarter of its pixels: fewer events, same motion."""
    return TestPattern(width=160, height=120, square_side=20, bar_height=6)


def write_pattern_bag(path: Path, package: str = "dvs_msgs", *, ros1: bool = True,
                      seconds: float = 2.0, message_ms: int = 20, rgb_hz: float = 20.0,
                      outside_every: int = 0, pattern: TestPattern | None = None,
                      shifted: dict[int, int] | None = None) -> WrittenBag:
    """The test pattern as an event camera driver records it: an EventArray every
    ``message_ms`` (stamped and logged at its end) and mono8 frames (APS frames), in log-time
    order. ``outside_every``: every n-th event is moved to x = width (outside the sensor).
    ``shifted``: message index -> ns added to that message's stamp and event times (a damaged
    message; logged where the undamaged one would be). ROS 1: ``path`` is a .bag file; ROS 2:
    an MCAP bag directory."""
    pattern = pattern or small_pattern()
    store = event_array_store(ros1)
    msgtype = array_type(package)
    start, end = pattern.start_ns, pattern.start_ns + round(seconds * NS)
    events = pattern.events(start, end)
    x = events.x.copy()
    if outside_every:
        x[::outside_every] = pattern.width
    events = EventBatch(events.t, x, events.y, events.p, pattern.width, pattern.height)
    step = message_ms * 1_000_000
    messages: list[tuple[int, int, bytes]] = []  # (log time, kind, bytes)
    for k, t0 in enumerate(range(start, end, step)):
        part = events.between(t0, t0 + step)
        shift = (shifted or {}).get(k, 0)
        msg = event_array_message(store, package, ros1, t0 + step + shift, pattern.width,
                                  pattern.height, part.t + shift, part.x, part.y, part.p, seq=k)
        messages.append((t0 + step, 0, serialize(store, msg, msgtype, ros1)))
    frame_stamps = list(range(start, end, round(NS / rgb_hz)))
    for k, stamp in enumerate(frame_stamps):
        msg = mono8_message(store, ros1, stamp, pattern.intensity(stamp), seq=k)
        messages.append((stamp, 1, serialize(store, msg, IMAGE, ros1)))
    messages.sort(key=lambda m: (m[0], m[1]))
    written = WrittenBag(path, events, int(np.count_nonzero(~events.in_bounds_mask())),
                         frame_stamps)
    if ros1:
        with Ros1Writer(path) as writer:
            conns = [writer.add_connection(written.event_topic, msgtype, typestore=store),
                     writer.add_connection(written.image_topic, IMAGE, typestore=store)]
            for log_time, kind, data in messages:
                writer.write(conns[kind], log_time, data)
    else:
        with Ros2Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
            conns = [writer.add_connection(written.event_topic, msgtype, typestore=store),
                     writer.add_connection(written.image_topic, IMAGE, typestore=store)]
            for log_time, kind, data in messages:
                writer.write(conns[kind], log_time, data)
    return written
