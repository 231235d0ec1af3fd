"""Read event_camera_msgs/EventPacket topics from ROS 2 bags (sqlite3 or MCAP) as EventBatches.

``rosbags.highlevel.AnyReader`` reads both storage formats (a bag directory with
metadata.yaml, or a single .db3/.mcap file) and needs no type registration: bags carry their
message definitions. Each topic gets its own streaming decoder (events/decode.py).

Time ranges select packets by *bag time* (when the packet was recorded), half-open
``[start_ns, stop_ns)``. Decoding starts fresh at the range, so packets of a short warm-up
before it are decoded and discarded: EVT3 times are only known after a TIME_HIGH word (a sensor
sends one every 4.096 ms) and the clock offset needs a packet to start from.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from crossspec_ros.bagfile import any_reader, cannot_open, one_line
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.errors import EventSourceError
from crossspec_ros.events.packet import EventPacketData, from_msg

log = logging.getLogger(__name__)

EVENT_PACKET_TYPE = "event_camera_msgs/msg/EventPacket"
DEFAULT_WARMUP_NS = 20_000_000


class EventBagError(EventSourceError):
    """The bag is missing, not a bag, corrupt, or has no (such) event topic."""


class EventBagReader:
    """Event topics of one bag. Use as a context manager (or call ``close``)."""

    def __init__(self, path: str | Path, topics: Sequence[str] | None = None) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise EventBagError(f"{self.path}: no such file or directory. Pass a ROS 2 bag "
                                "directory (with metadata.yaml) or a .db3/.mcap file.")
        try:
            self._reader = any_reader(self.path)
            self._reader.open()
        except Exception as exc:  # rosbags raises several kinds (format, sqlite, yaml)
            raise EventBagError(cannot_open(self.path, exc)) from exc
        conns = [c for c in self._reader.connections if c.msgtype == EVENT_PACKET_TYPE]
        available = sorted({c.topic for c in conns})
        if topics:
            missing = [t for t in topics if t not in available]
            if missing:
                self.close()
                raise EventBagError(
                    f"{self.path}: no {EVENT_PACKET_TYPE} topic {missing}; event topics in "
                    f"this bag: {available or 'none'} (all topics: {self._all_topics()})")
            conns = [c for c in conns if c.topic in topics]
        if not conns:
            all_topics = self._all_topics()
            self.close()
            raise EventBagError(
                f"{self.path}: no {EVENT_PACKET_TYPE} topic in this bag (topics: "
                f"{all_topics or 'none'}). Record the event camera driver's packets topic.")
        self._connections = conns
        self.topics = sorted({c.topic for c in conns})
        self.decoders: dict[str, EventPacketDecoder] = {}
        self.bad_messages = dict.fromkeys(self.topics, 0)  # undecodable messages per topic
        self._warned_bad = False

    def _all_topics(self) -> dict[str, str]:
        return {c.topic: c.msgtype for c in self._reader.connections}

    def message_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(self.topics, 0)
        for c in self._connections:
            counts[c.topic] += c.msgcount
        return counts

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> EventBagReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def packets(self, start_ns: int | None = None,
                stop_ns: int | None = None) -> Iterator[tuple[str, int, EventPacketData]]:
        """(topic, bag time ns, packet) in bag order for bag times in [start_ns, stop_ns)."""
        messages = self._reader.messages(self._connections, start=start_ns, stop=stop_ns)
        while True:
            try:
                conn, stamp, raw = next(messages)
            except StopIteration:
                return
            except Exception as exc:
                raise EventBagError(f"{self.path}: bag is corrupt or truncated "
                                    f"({one_line(exc)}); events read so far are kept, the "
                                    "rest cannot be read") from exc
            packet = self._deserialize(conn, raw)
            if packet is not None:
                yield conn.topic, stamp, packet

    def _deserialize(self, conn: Any, raw: bytes) -> EventPacketData | None:
        try:
            return from_msg(self._reader.deserialize(raw, conn.msgtype))
        except Exception as exc:  # one bad message must not end the read
            self.bad_messages[conn.topic] += 1
            level = logging.DEBUG if self._warned_bad else logging.WARNING
            self._warned_bad = True
            log.log(level, "%s: undecodable %s message on %s skipped (%s)",
                    self.path, conn.msgtype, conn.topic, exc)
            return None

    def batches(self, start_ns: int | None = None, stop_ns: int | None = None,
                warmup_ns: int = DEFAULT_WARMUP_NS) -> Iterator[tuple[str, EventBatch]]:
        """(topic, events of one packet on the ROS clock) for packets in [start_ns, stop_ns).

        Fresh decoders per call (``self.decoders`` holds their counters).
        """
        self.decoders = {t: EventPacketDecoder(name=f"{self.path.name}:{t}") for t in self.topics}
        first = None if start_ns is None else max(start_ns - warmup_ns, 0)
        for topic, stamp, packet in self.packets(first, stop_ns):
            batch = self.decoders[topic].decode(packet)
            if start_ns is None or stamp >= start_ns:
                yield topic, batch


def read_events(path: str | Path, topic: str | None = None, start_ns: int | None = None,
                stop_ns: int | None = None) -> EventBatch:
    """All events of one event topic (the only one, or ``topic``) in [start_ns, stop_ns)."""
    with EventBagReader(path, [topic] if topic else None) as reader:
        if len(reader.topics) > 1:
            raise EventBagError(f"{path}: several event topics {reader.topics}; pick one")
        batches = [b for _, b in reader.batches(start_ns, stop_ns) if len(b)]
        if not batches:
            # No events in range: the sensor size is unknown, so it is 0x0.
            return EventBatch.empty(0, 0)
        sizes = {(b.width, b.height) for b in batches}
        if len(sizes) > 1:
            raise EventBagError(f"{path}: sensor size changes within {reader.topics[0]}: "
                                f"{sorted(sizes)}; read it in parts")
        return EventBatch.concat(batches)
