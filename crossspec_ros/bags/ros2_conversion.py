"""A bag's messages as a ROS 2 graph takes them: CDR bytes of types a ROS 2 install has.

What ``crossspec play``/``drive`` publish and ``crossspec convert-bag`` writes:

- messages of a ROS 2 bag pass as they are (their stored CDR bytes);
- messages of a ROS 1 bag are converted to CDR byte by byte (rosbags' ``ros1_to_cdr``), read
  with the ROS 2 definitions of their types where ROS 2 has them (std_msgs/Header loses its
  ``seq``; sensor_msgs/Image and CompressedImage are otherwise the same), else with the bag's;
- EventArray topics (dvs_msgs, prophesee_event_msgs; ROS 1 or ROS 2) become
  event_camera_msgs/EventPacket topics of the same name: each message's events (read with
  numpy, events/event_array.py) are encoded as one evt3 packet, stamped with its first event
  (events/encode.py), so crossspec's nodes and every event_camera_msgs tool read them. evt3
  keeps microseconds: sub-microsecond parts of the times are floored.

EVT3 time only goes forward: each message's events are sorted, and events earlier than an
event already encoded on the topic (a driver that went back in time) are dropped. A message
far (more than 2 s) from the topic's time goes through the outlier gate of
``sync/outliers.py``: alone (the next message is back at the topic's time) it is dropped and
counted (``time_outliers``: one damaged message must neither end a replay nor make every later
event "out of order"); confirmed by the next message (a driver whose clock was reset, ahead or
back) it starts a new evt3 stream, as a camera restart does, and the packet decoder's clock
follows. A held message is written with the next one, at its log time. Per event topic
``counts`` says how many events came in, how many went out (counted from the evt3 words
written) and how many were dropped and why; ``EventCounts.balanced`` checks that they add up.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from rosbags.typesys.store import Typestore

from crossspec_ros.bags.typestore import EVENT_PACKET_TYPE
from crossspec_ros.bags.writer import event_packet_cdr
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.decode import MAX_SENSOR_SIZE
from crossspec_ros.events.encode import MAX_SENSOR_US, Evt3PacketEncoder, count_cd_events
from crossspec_ros.events.event_array import (
    EVENT_ARRAY_TYPES,
    EventArrayDecoder,
    EventArrayFormatError,
    parse_event_array,
)
from crossspec_ros.stamps import ns_to_seconds
from crossspec_ros.sync.outliers import DEFAULT_THRESHOLD_NS, TimeOutlierGate

log = logging.getLogger(__name__)

# Each EventArray becomes one packet: a period no message spans (2**62 ns: 146 years).
ONE_PACKET_NS = 1 << 62


class ConversionError(ValueError):
    """A message cannot be converted; the message names the topic and says why."""


@dataclass
class EventCounts:
    """Events of one EventArray topic through the conversion."""

    messages: int = 0
    unreadable_messages: int = 0  # bytes that are not an EventArray: skipped, events unknown
    events_in: int = 0            # in the readable messages
    outside_sensor: int = 0       # outside the message's width x height: dropped
    out_of_order: int = 0         # earlier than an event already encoded: dropped
    time_outliers: int = 0        # in a lone message far from the topic's time: dropped
    events_out: int = 0           # CD events in the evt3 packets, counted from their words
    packets: int = 0

    @property
    def dropped(self) -> int:
        return self.outside_sensor + self.out_of_order + self.time_outliers

    @property
    def balanced(self) -> bool:
        """Every event that came in went out or was dropped for a reason counted here."""
        return self.events_in == self.events_out + self.dropped


class _EventArrayToEvt3:
    """One EventArray topic -> evt3 EventPackets (CDR), one packet per message."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.counts = EventCounts()
        self._decoder = EventArrayDecoder(name=topic)
        self._encoder: Evt3PacketEncoder | None = None
        self._last_us: int | None = None  # the latest encoded event's time, in whole us
        self._gate: TimeOutlierGate[EventBatch] = TimeOutlierGate(DEFAULT_THRESHOLD_NS)
        self._recent_ns: int | None = None  # the latest time of the messages let through
        self._frame_id = ""
        self._warned_outlier = False

    def convert(self, raw: bytes, ros1: bool) -> list[bytes]:
        counts = self.counts
        counts.messages += 1
        try:
            data = parse_event_array(raw, ros1)
        except EventArrayFormatError as exc:
            counts.unreadable_messages += 1
            log.warning("%s: an EventArray message cannot be read and was skipped (%s)",
                        self.topic, exc)
            return []
        counts.events_in += len(data)
        outside_before = self._decoder.stats.out_of_bounds_events
        batch = self._decoder.decode(data)
        counts.outside_sensor += self._decoder.stats.out_of_bounds_events - outside_before
        if len(batch) == 0:
            return []
        self._frame_id = data.frame_id
        verdict = self._gate.offer(batch, int(batch.t_first), int(batch.t_last),
                                   self._recent_ns)
        for dropped in verdict.dropped:
            self._count_outlier(dropped)
        if verdict.jump:  # a clock that jumped for good: a new evt3 stream, as a restart is
            self._encoder, self._last_us = None, None
        out = []
        for passed in verdict.passed:
            self._recent_ns = int(passed.t_last)
            out += self._encode(passed, self._frame_id)
        return out

    def _encode(self, batch: EventBatch, frame_id: str) -> list[bytes]:
        batch = self._in_time_order(batch)
        if len(batch) == 0:
            return []
        try:
            packets = self._encoder_for(batch, frame_id).encode(batch)
        except ValueError as exc:  # the encoder's checks: a bug here, not the bag's fault
            raise ConversionError(f"{self.topic}: a message's events cannot be written as "
                                  f"evt3 ({exc})") from exc
        self._last_us = int(batch.t[-1]) // 1000
        out = []
        for packet in packets:
            self.counts.events_out += count_cd_events(packet.events)
            self.counts.packets += 1
            out.append(event_packet_cdr(packet))
        return out

    def _count_outlier(self, batch: EventBatch) -> None:
        self.counts.time_outliers += len(batch)
        level = logging.DEBUG if self._warned_outlier else logging.WARNING
        self._warned_outlier = True
        log.log(level, "%s: dropped an EventArray of %d events at %.6f s, %.3f s from the "
                "topic's time (the next message is back at it): an isolated wild timestamp, "
                "not a clock jump. Counted in time_outliers; further ones are logged at debug "
                "level.", self.topic, len(batch), ns_to_seconds(int(batch.t_first)),
                ns_to_seconds(int(batch.t_first) - (self._recent_ns or int(batch.t_first))))

    def finish(self) -> list[bytes]:
        """End of the topic: a message still held is written if it agrees with the topic's
        time, else dropped and counted (nothing will confirm it)."""
        verdict = self._gate.settle(self._recent_ns)
        for dropped in verdict.dropped:
            self._count_outlier(dropped)
        return [cdr for passed in verdict.passed for cdr in self._encode(passed, self._frame_id)]

    def _in_time_order(self, batch: EventBatch) -> EventBatch:
        batch = batch.sorted()
        if self._last_us is None or len(batch) == 0 or int(batch.t[0]) // 1000 >= self._last_us:
            return batch
        keep = batch.t // 1000 >= self._last_us
        late = len(batch) - int(np.count_nonzero(keep))
        self.counts.out_of_order += late
        log.warning("%s: %d events earlier than events already converted dropped (EVT3 time "
                    "only goes forward)", self.topic, late)
        return batch.take(keep)

    def _encoder_for(self, batch: EventBatch, frame_id: str) -> Evt3PacketEncoder:
        size = (batch.width, batch.height)
        encoder = self._encoder
        beyond = encoder is not None and encoder.epoch_ns is not None and \
            (int(batch.t[-1]) - encoder.epoch_ns) // 1000 >= MAX_SENSOR_US
        if encoder is None or (encoder.width, encoder.height) != size or beyond:
            if max(size) > MAX_SENSOR_SIZE:
                raise ConversionError(
                    f"{self.topic}: a {size[0]}x{size[1]} sensor cannot be written as evt3 "
                    f"(addresses up to {MAX_SENSOR_SIZE})")
            # a new size, or times past what one evt3 stream holds (12.7 days on), restart the
            # stream, as a camera restart does (the decoder follows)
            self._encoder = Evt3PacketEncoder(*size, packet_period_ns=ONE_PACKET_NS,
                                              frame_id=frame_id)
        return self._encoder


class Ros2Conversion:
    """Converts the messages of one bag (``connections``: its rosbags connections; ``ros1``:
    whether it is a ROS 1 bag). Stateful per event topic: feed messages in bag order, and use a
    new one for each pass over the bag."""

    def __init__(self, connections: Sequence[Any], ros1: bool) -> None:
        self.ros1 = ros1
        self._connections = list(connections)
        self._store: Typestore | None = None
        self._events: dict[str, _EventArrayToEvt3] = {}

    @staticmethod
    def msgtype(msgtype: str) -> str:
        """The type a message of ``msgtype`` is converted to."""
        return EVENT_PACKET_TYPE if msgtype in EVENT_ARRAY_TYPES else msgtype

    @property
    def counts(self) -> dict[str, EventCounts]:
        """Per EventArray topic converted so far."""
        return {topic: stream.counts for topic, stream in self._events.items()}

    def convert(self, topic: str, msgtype: str, raw: bytes) -> list[bytes]:
        """The CDR messages (none, one or more) that one stored message becomes.

        Raises ConversionError when a ROS 1 message does not convert to its ROS 2 type."""
        if msgtype in EVENT_ARRAY_TYPES:
            if topic not in self._events:
                self._events[topic] = _EventArrayToEvt3(topic)
            return self._events[topic].convert(raw, self.ros1)
        if not self.ros1:
            return [raw]
        try:
            return [bytes(self._ros2_store().ros1_to_cdr(raw, msgtype))]
        except Exception as exc:  # rosbags raises several kinds for bytes it cannot convert
            raise ConversionError(f"{topic}: a {msgtype} message does not convert from ROS 1 "
                                  f"to ROS 2 ({type(exc).__name__}: {exc})") from exc

    def finish(self) -> list[tuple[str, bytes]]:
        """End of the bag (or of one pass over it): (topic, CDR) of what an EventArray topic
        still held, to write after its last message."""
        return [(topic, cdr) for topic, stream in self._events.items() for cdr in stream.finish()]

    def _ros2_store(self) -> Typestore:
        """ROS 2's definitions, plus the bag's for types ROS 2 does not have."""
        if self._store is None:
            store = get_typestore(Stores.ROS2_KILTED)
            extra: dict[str, Any] = {}
            for conn in self._connections:
                if conn.msgtype in EVENT_ARRAY_TYPES or conn.msgtype in store.fielddefs:
                    continue
                types = get_types_from_msg(conn.msgdef.data, conn.msgtype)
                extra.update({k: v for k, v in types.items() if k not in store.fielddefs})
            store.register(extra)
            self._store = store
        return self._store
