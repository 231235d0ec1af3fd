"""Decode event_camera_msgs/EventPacket streams into EventBatches on the ROS clock.

One ``EventPacketDecoder`` per event stream (topic): EVT3 is stateful (TIME_HIGH words and a
partial 16-bit word carry over from one packet to the next), so packets must be fed in order.
Decoding is done by the ``evt3`` library (Rust, exact; FACTS.md); this module adds what a
robot needs around it:

- the encoding is checked first (evt3 returns nothing for non-EVT3 bytes, silently);
  ``libcaer_cmp``, ``mono``, ``evt2``... are reported once and counted, and give empty batches;
- ``is_bigendian`` true is unsupported (EVT3 is a little-endian word stream; drivers send false);
- a sensor size change starts a new decoder and clock estimate;
- corrupt bytes never raise: library errors are caught, events outside width x height dropped;
- sensor microseconds are mapped to ROS nanoseconds by ``SensorClock`` (events/clock.py).
``time_base`` is not used: EVT3 carries its own time words.

Every problem is logged once per kind per decoder (then counted silently) in ``stats``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import evt3
import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.clock import DEFAULT_MAX_JUMP_NS, SensorClock
from crossspec_ros.events.packet import EVT3, EventPacketData
from crossspec_ros.events.triggers import TriggerWordCounter

log = logging.getLogger(__name__)

# EVT3 addresses are 11 bits wide.
MAX_SENSOR_SIZE = 2048


@dataclass
class DecodeStats:
    """Counters of one decoder (packets unless named *_events)."""

    packets: int = 0
    events: int = 0
    empty_packets: int = 0
    unsupported_encoding: int = 0
    big_endian: int = 0
    invalid_size: int = 0
    size_changes: int = 0
    odd_length: int = 0
    decoder_errors: int = 0
    out_of_bounds_events: int = 0
    clock_resets: int = 0
    triggers_p0: int = 0
    triggers_p1: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @property
    def bad_packets(self) -> int:
        """Packets whose events were dropped entirely (not counting empty packets)."""
        return self.unsupported_encoding + self.big_endian + self.invalid_size + self.decoder_errors


class EventPacketDecoder:
    """Streaming EVT3 decoder for one event stream; ``decode(packet)`` never raises.

    count_triggers: also count EXT_TRIGGER words (``stats.triggers_p0/p1``), ~10% slower.
    """

    def __init__(self, name: str = "events", max_jump_ns: int = DEFAULT_MAX_JUMP_NS,
                 count_triggers: bool = False) -> None:
        self.name = name
        self.stats = DecodeStats()
        self.clock = SensorClock(max_jump_ns)
        self._decoder: evt3.Decoder | None = None
        self._size: tuple[int, int] | None = None
        self._triggers = TriggerWordCounter() if count_triggers else None
        self._warned: set[str] = set()

    def _problem(self, kind: str, msg: str, *args: object) -> None:
        """Warn the first time a kind of problem shows up in this stream, then log at debug."""
        level = logging.DEBUG if kind in self._warned else logging.WARNING
        self._warned.add(kind)
        log.log(level, "%s: " + msg, self.name, *args)

    def _restart(self, width: int, height: int) -> None:
        self._decoder = evt3.Decoder(sensor_width=width, sensor_height=height)
        self._size = (width, height)
        self.clock.reset()
        if self._triggers is not None:
            self._triggers.reset()

    def _accept(self, packet: EventPacketData) -> bool:
        """Check encoding, byte order and size; (re)start the decoder when needed."""
        enc = packet.encoding
        if enc != EVT3 and enc.strip().lower() != EVT3:
            self.stats.unsupported_encoding += 1
            self._problem(
                f"encoding:{enc}",
                "event encoding %r is not supported; its packets are dropped. crossspec decodes "
                "'evt3' (Prophesee cameras via metavision_driver); for other cameras (e.g. "
                "iniVation, 'libcaer_cmp') publish or convert the events to EVT3.", enc)
            return False
        if packet.is_bigendian:
            self.stats.big_endian += 1
            self._problem("bigendian", "EVT3 packet with is_bigendian=true is not supported "
                          "(EVT3 is a little-endian word stream); packets are dropped.")
            return False
        w, h = packet.width, packet.height
        if not (0 < w <= MAX_SENSOR_SIZE and 0 < h <= MAX_SENSOR_SIZE):
            self.stats.invalid_size += 1
            self._problem("size", "invalid sensor size %dx%d in packet (EVT3 allows 1..%d); "
                          "packets are dropped. Check the driver's width/height.",
                          w, h, MAX_SENSOR_SIZE)
            return False
        if self._size != (w, h):
            if self._size is not None:
                self.stats.size_changes += 1
                self._problem("size_change", "sensor size changed from %dx%d to %dx%d: "
                              "restarting the decoder", *self._size, w, h)
            self._restart(w, h)
        return True

    def decode(self, packet: EventPacketData) -> EventBatch:
        """Decode one packet (in stream order) into events on the ROS clock."""
        self.stats.packets += 1
        if not self._accept(packet):
            return EventBatch.empty(max(packet.width, 0), max(packet.height, 0))
        w, h = self._size  # type: ignore[misc]
        try:
            data = packet.events_bytes()
        except (TypeError, ValueError, OverflowError) as exc:
            self.stats.decoder_errors += 1
            self._problem("payload", "unreadable events payload (%s); packet dropped", exc)
            return EventBatch.empty(w, h)
        if not data:
            self.stats.empty_packets += 1
            return EventBatch.empty(w, h)
        if len(data) & 1:
            # Legal for the decoder (it carries the half word) but drivers send whole words.
            self.stats.odd_length += 1
            self._problem("odd", "packet of %d bytes is not a whole number of 16-bit EVT3 "
                          "words (truncated?); the half word is carried to the next packet",
                          len(data))
        if self._triggers is not None:
            self._triggers.feed(data)
            self.stats.triggers_p0 = self._triggers.p0
            self.stats.triggers_p1 = self._triggers.p1
        try:
            ev = self._decoder.feed(data)  # type: ignore[union-attr]
        except Exception as exc:  # the library's errors are not documented: never crash
            self.stats.decoder_errors += 1
            self._problem("decoder", "EVT3 decoder failed (%s); restarting it", exc)
            self._restart(w, h)
            return EventBatch.empty(w, h)
        return self._to_batch(packet.stamp_ns, ev.t, ev.x, ev.y, ev.p, w, h)

    def _to_batch(self, stamp_ns: int, t_us: np.ndarray, x: np.ndarray, y: np.ndarray,
                  p: np.ndarray, w: int, h: int) -> EventBatch:
        n = len(x)
        if n == 0:
            return EventBatch.empty(w, h)
        # The stamp bounds the packet's *first* event, so that one feeds the clock even if it
        # is dropped below (a later event could lie after the stamp).
        offset = self.clock.update(stamp_ns, int(t_us[0]) * 1000)
        self.stats.clock_resets = self.clock.resets
        # max() is one SIMD pass; the mask is only built when something is out of bounds.
        if int(x.max()) >= w or int(y.max()) >= h:
            keep = (x < w) & (y < h)
            kept = int(np.count_nonzero(keep))
            self.stats.out_of_bounds_events += n - kept
            self._problem("bounds", "%d events outside the %dx%d sensor dropped (corrupt "
                          "data or wrong width/height in the packets)", n - kept, w, h)
            if kept == 0:
                return EventBatch.empty(w, h)
            t_us, x, y, p = t_us[keep], x[keep], y[keep], p[keep]
        # uint64 us -> int64 ns: reinterpreting is free (sensor times are far below 2**63).
        t = np.multiply(t_us.view(np.int64), 1000)
        t += offset
        self.stats.events += len(t)
        return EventBatch(t, x, y, p, w, h)
