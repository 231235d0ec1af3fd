"""Read event topics from bags (ROS 2 sqlite3 or MCAP, ROS 1 .bag) as EventBatches.

Event topics are found by type: event_camera_msgs/EventPacket (packed words, decoded by
events/decode.py) and the EventArray messages of rpg_dvs_ros and Prophesee's ROS 1 driver
(one message field per event, read from the serialized bytes by events/event_array.py), in
ROS 1 bags or ROS 2 ones. ``rosbags.highlevel.AnyReader`` reads every storage (a bag directory
with metadata.yaml, a single .db3/.mcap file, a ROS 1 .bag file) and needs no type
registration: bags carry their message definitions. Each topic gets its own streaming decoder.

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

from rosbags.highlevel import AnyReader

from crossspec_ros.bagfile import BagDamagedError, any_reader, cannot_open, stored_messages
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.errors import EventSourceError
from crossspec_ros.events.event_array import (
    EVENT_ARRAY_TYPES,
    EventArrayData,
    EventArrayDecoder,
    parse_event_array,
)
from crossspec_ros.events.packet import EventPacketData, from_msg

log = logging.getLogger(__name__)

EVENT_PACKET_TYPE = "event_camera_msgs/msg/EventPacket"
EVENT_TOPIC_TYPES = (EVENT_PACKET_TYPE, *EVENT_ARRAY_TYPES)
EVENT_TYPES_TEXT = ("event_camera_msgs/EventPacket, dvs_msgs/EventArray or "
                    "prophesee_event_msgs/EventArray")
DEFAULT_WARMUP_NS = 20_000_000

EventMessage = EventPacketData | EventArrayData
EventDecoder = EventPacketDecoder | EventArrayDecoder


def event_decoder(msgtype: str, name: str, count_triggers: bool = False) -> EventDecoder:
    """The streaming decoder for one event topic of type ``msgtype``."""
    if msgtype in EVENT_ARRAY_TYPES:
        return EventArrayDecoder(name=name)
    return EventPacketDecoder(name=name, count_triggers=count_triggers)


def read_event_message(reader: AnyReader, raw: bytes, msgtype: str) -> EventMessage:
    """One stored event message, read from its bytes: EventArrays without deserializing
    (ROS 1 or CDR, as the bag is), EventPackets with rosbags (their events are one byte array).
    Raises what the bytes' damage raises."""
    if msgtype in EVENT_ARRAY_TYPES:
        return parse_event_array(raw, ros1=not reader.is2)
    return from_msg(reader.deserialize(raw, msgtype))


class EventBagError(EventSourceError):
    """The bag is missing, not a bag, corrupt, or has no (such) event topic."""


class EventBagReader:
    """Event topics of one bag. Use as a context manager (or call ``close``)."""

    def __init__(self, path: str | Path, topics: Sequence[str] | None = None) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise EventBagError(f"{self.path}: no such file or directory. Pass a ROS 2 bag "
                                "directory (with metadata.yaml), a .db3/.mcap file or a ROS 1 "
                                ".bag file.")
        try:
            self._reader = any_reader(self.path)
            self._reader.open()
        except Exception as exc:  # rosbags raises several kinds (format, sqlite, yaml)
            raise EventBagError(cannot_open(self.path, exc)) from exc
        conns = [c for c in self._reader.connections if c.msgtype in EVENT_TOPIC_TYPES]
        available = sorted({c.topic for c in conns})
        if topics:
            missing = [t for t in topics if t not in available]
            if missing:
                self.close()
                raise EventBagError(
                    f"{self.path}: no event topic {missing} ({EVENT_TYPES_TEXT}); event topics in "
                    f"this bag: {available or 'none'} (all topics: {self._all_topics()})")
            conns = [c for c in conns if c.topic in topics]
        if not conns:
            all_topics = self._all_topics()
            self.close()
            raise EventBagError(
                f"{self.path}: no event topic ({EVENT_TYPES_TEXT}) in this bag (topics: "
                f"{all_topics or 'none'}). Record the event camera driver's events topic.")
        self._connections = conns
        self.topics = sorted({c.topic for c in conns})
        self.msgtypes = {c.topic: c.msgtype for c in conns}  # topic -> message type
        self.decoders: dict[str, EventDecoder] = {}
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
                stop_ns: int | None = None) -> Iterator[tuple[str, int, EventMessage]]:
        """(topic, bag time ns, message) in bag order for bag times in [start_ns, stop_ns):
        an EventPacketData or an EventArrayData, as the topic's type is."""
        messages = stored_messages(self._reader, self.path, connections=self._connections,
                                   start=start_ns, stop=stop_ns)
        try:
            for conn, stamp, raw in messages:
                packet = self._deserialize(conn, raw)
                if packet is not None:
                    yield conn.topic, stamp, packet
        except BagDamagedError as err:  # the events read before it are kept by the caller
            raise EventBagError(str(err)) from err

    def _deserialize(self, conn: Any, raw: bytes) -> EventMessage | None:
        try:
            return read_event_message(self._reader, raw, conn.msgtype)
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
        self.decoders = {t: event_decoder(self.msgtypes[t], name=f"{self.path.name}:{t}")
                         for t in self.topics}
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
