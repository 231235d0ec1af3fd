"""EventArray messages (one message field per event) read straight from their serialized bytes.

Most public event-camera recordings are ROS 1 bags of ``dvs_msgs/EventArray`` (rpg_dvs_ros,
iniVation DAVIS cameras) or ``prophesee_event_msgs/EventArray`` (Prophesee's ROS 1 driver);
both packages have ROS 2 ports with the same fields. All four messages are laid out alike::

    Header header            # ROS 1: uint32 seq, time stamp, string frame_id; ROS 2: no seq
    uint32 height
    uint32 width
    Event[] events           # uint16 x, uint16 y, time ts, bool polarity

so one parser reads them all. A message of 5,000 events deserialized by rosbags is 5,000 Python
objects (8-10 ms here); this parser makes the event array one numpy view of the bytes (a
structured dtype with explicit strides) and copies it into an EventBatch's arrays: ~15 us for
5,000 events, ROS 1 or CDR (2-core dev machine, 2026-11).

The two serializations differ in where the event fields lie:

- ROS 1 packs fields with no padding: each event is 13 bytes (x@0, y@2, sec@4, nsec@8, p@12).
- ROS 2 CDR aligns each field to its size, counted from the end of the 4-byte encapsulation
  header. The array starts 4-aligned (after its uint32 length), so event 0 is x@0, y@2, sec@4,
  nsec@8, p@12 (13 bytes); event 1 starts 2-aligned at 14 and needs 2 bytes of padding before
  its 4-aligned ``sec``: every later event is x@0, y@2, sec@6, nsec@10, p@14 and 16 bytes long.
  Read from 2 bytes *before* event 0 with a stride of 16, ``sec``, ``nsec`` and ``p`` of every
  event (event 0 included) sit at 6, 10 and 14: only event 0's x and y (at 2 and 4 of that
  first stride) are patched afterwards.

Times are ROS times already (drivers stamp each event), so no sensor clock is involved.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.decode import DecodeStats
from crossspec_ros.stamps import SECOND_NS, join_ns

log = logging.getLogger(__name__)

DVS_EVENT_ARRAY = "dvs_msgs/msg/EventArray"
PROPHESEE_EVENT_ARRAY = "prophesee_event_msgs/msg/EventArray"
EVENT_ARRAY_TYPES = (DVS_EVENT_ARRAY, PROPHESEE_EVENT_ARRAY)

# CDR encapsulation identifiers (first two bytes of a ROS 2 message): plain CDR, big or little
# endian. rosbag2 and every rmw write little endian; big endian is read for completeness.
CDR_BE, CDR_LE = b"\x00\x00", b"\x00\x01"


def _event_dtype(order: str, sec: str, offsets: tuple[int, ...], itemsize: int) -> np.dtype:
    return np.dtype({"names": ["x", "y", "sec", "nsec", "p"],
                     "formats": [f"{order}u2", f"{order}u2", f"{order}{sec}", f"{order}u4",
                                 "u1"],
                     "offsets": list(offsets), "itemsize": itemsize})


# ROS 1 ``time`` is two uint32; ROS 2 builtin_interfaces/Time is int32 sec, uint32 nanosec
ROS1_EVENT = _event_dtype("<", "u4", (0, 2, 4, 8, 12), 13)
# one 16-byte stride of a CDR array read from 2 bytes before event 0 (see the module docstring);
# the last event has no trailing padding byte, hence itemsize 15
CDR_EVENT = {order: _event_dtype(order, "i4", (0, 2, 6, 10, 14), 15) for order in "<>"}
CDR_STRIDE = 16


class EventArrayFormatError(ValueError):
    """The bytes are not a whole EventArray message (damaged or another type)."""


@dataclass(frozen=True, eq=False)
class EventArrayData:
    """One EventArray message: header, sensor size and its events as they were recorded
    (``t``: int64 ROS time in ns; ``p``: 0 OFF, 1 ON), none dropped yet."""

    stamp_ns: int
    frame_id: str
    width: int
    height: int
    t: np.ndarray
    x: np.ndarray
    y: np.ndarray
    p: np.ndarray

    def __len__(self) -> int:
        return len(self.t)


def parse_event_array(raw: bytes | memoryview | np.ndarray, ros1: bool) -> EventArrayData:
    """Read one serialized EventArray (``ros1``: ROS 1 bytes, else CDR with its encapsulation
    header). Raises EventArrayFormatError for bytes that do not hold a whole message."""
    buffer = memoryview(raw).cast("B") if not isinstance(raw, np.ndarray) else \
        memoryview(np.ascontiguousarray(raw, dtype=np.uint8))
    try:
        return _parse_ros1(buffer) if ros1 else _parse_cdr(buffer)
    except (struct.error, ValueError, TypeError) as exc:
        if isinstance(exc, EventArrayFormatError):
            raise
        raise EventArrayFormatError(f"not a whole EventArray message ({exc})") from None


def _text(buffer: memoryview, start: int, length: int) -> str:
    if length < 0 or start + length > len(buffer):
        raise EventArrayFormatError(f"frame_id of {length} bytes runs past the message's "
                                    f"{len(buffer)} bytes")
    return bytes(buffer[start:start + length]).decode("utf-8", errors="replace")


def _parse_ros1(buffer: memoryview) -> EventArrayData:
    _seq, sec, nsec, id_len = struct.unpack_from("<4I", buffer, 0)
    frame_id = _text(buffer, 16, id_len)
    pos = 16 + id_len
    height, width, count = struct.unpack_from("<3I", buffer, pos)
    pos += 12
    if pos + count * ROS1_EVENT.itemsize > len(buffer):
        raise EventArrayFormatError(f"{count} events of 13 bytes do not fit the message's "
                                    f"{len(buffer)} bytes")
    events = np.frombuffer(buffer, dtype=ROS1_EVENT, count=count, offset=pos)
    return _data(join_ns(sec, nsec), frame_id, width, height, events)


def _parse_cdr(buffer: memoryview) -> EventArrayData:
    kind = bytes(buffer[:2])
    if kind not in (CDR_LE, CDR_BE):
        raise EventArrayFormatError(f"encapsulation {kind.hex()} is not plain CDR")
    order = "<" if kind == CDR_LE else ">"
    body = buffer[4:]  # CDR aligns relative to the end of the encapsulation header
    sec, nanosec, id_len = struct.unpack_from(f"{order}iII", body, 0)
    frame_id = _text(body, 12, id_len - 1) if id_len else ""  # the length counts the NUL
    pos = (12 + id_len + 3) & ~3
    height, width, count = struct.unpack_from(f"{order}3I", body, pos)
    pos += 12
    if count == 0:
        empty = np.empty(0, dtype=CDR_EVENT[order])
        return _data(join_ns(sec, nanosec), frame_id, width, height, empty)
    end = pos - 2 + (count - 1) * CDR_STRIDE + CDR_EVENT[order].itemsize
    if end > len(body):
        raise EventArrayFormatError(f"{count} events do not fit the message's "
                                    f"{len(buffer)} bytes")
    events = np.ndarray((count,), dtype=CDR_EVENT[order], buffer=body, offset=pos - 2,
                        strides=(CDR_STRIDE,))
    first_xy = struct.unpack_from(f"{order}2H", body, pos)
    return _data(join_ns(sec, nanosec), frame_id, width, height, events, first_xy)


def _data(stamp_ns: int, frame_id: str, width: int, height: int, events: np.ndarray,
          first_xy: tuple[int, int] | None = None) -> EventArrayData:
    t = events["sec"].astype(np.int64)
    t *= SECOND_NS  # join_ns, over every event at once
    t += events["nsec"]
    x = events["x"].astype(np.uint16)  # a copy in native order, free of the message's bytes
    y = events["y"].astype(np.uint16)
    if first_xy is not None:
        x[0], y[0] = first_xy
    p = (events["p"] != 0).view(np.uint8)  # bool is one byte; anything but 0 is ON
    return EventArrayData(stamp_ns, frame_id, int(width), int(height), t, x, y, p)


class EventArrayDecoder:
    """EventArrays of one topic -> EventBatches of the events inside the sensor.

    The sensor size is each message's width x height; events outside it are dropped and
    counted (``stats.out_of_bounds_events``), as a message without a size (0 x 0) drops all
    of its events (and counts as ``invalid_size``). ``stats`` has the fields of the packet
    decoder's (events/decode.py), so reports treat both alike; ``packets`` counts messages.
    ``decode`` never raises.
    """

    def __init__(self, name: str = "events") -> None:
        self.name = name
        self.stats = DecodeStats()
        self._size: tuple[int, int] | None = None
        self._warned: set[str] = set()

    def _problem(self, kind: str, msg: str, *args: object) -> None:
        level = logging.DEBUG if kind in self._warned else logging.WARNING
        self._warned.add(kind)
        log.log(level, "%s: " + msg, self.name, *args)

    def decode(self, data: EventArrayData) -> EventBatch:
        """The message's events inside its sensor, in recorded order."""
        self.stats.packets += 1
        w, h = data.width, data.height
        n = len(data)
        if n == 0:
            self.stats.empty_packets += 1
            return EventBatch.empty(w, h)
        if w <= 0 or h <= 0:
            self.stats.invalid_size += 1
            self.stats.out_of_bounds_events += n
            self._problem("size", "EventArray with sensor size %dx%d: its %d events cannot be "
                          "placed and are dropped. Check the driver's width/height.", w, h, n)
            return EventBatch.empty(max(w, 0), max(h, 0))
        if self._size is not None and self._size != (w, h):
            self.stats.size_changes += 1
            self._problem("size_change", "sensor size changed from %dx%d to %dx%d",
                          *self._size, w, h)
        self._size = (w, h)
        t, x, y, p = data.t, data.x, data.y, data.p
        # max() is one SIMD pass; the mask is only built when something is out of bounds
        if int(x.max()) >= w or int(y.max()) >= h:
            keep = (x < w) & (y < h)
            kept = int(np.count_nonzero(keep))
            self.stats.out_of_bounds_events += n - kept
            self._problem("bounds", "%d events outside the %dx%d sensor dropped (counted in "
                          "out_of_bounds_events)", n - kept, w, h)
            t, x, y, p = t[keep], x[keep], y[keep], p[keep]
        self.stats.events += len(t)
        return EventBatch(t, x, y, p, w, h)

    def finish(self) -> None:
        """End of the stream: nothing is held (the packet decoder's interface)."""
