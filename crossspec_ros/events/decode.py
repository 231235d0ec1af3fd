"""Decode event_camera_msgs/EventPacket streams into EventBatches on the ROS clock.

One ``EventPacketDecoder`` per event stream (topic). Four encodings, each stateful across
packets (feed them in order):
- ``evt3`` (Prophesee cameras via metavision_driver): the ``evt3`` library (Rust, exact;
  FACTS.md); sensor microseconds since the camera started;
- ``evt2`` (Prophesee, older sensors): ``events/evt2.py``; sensor microseconds too;
- ``evt21`` (also spelt ``evt2.1``; Prophesee, the GenX320's default): ``events/evt21.py``,
  either byte order the sensors send; sensor microseconds too;
- ``libcaer_cmp`` (iniVation cameras via libcaer_driver): ``events/libcaer_cmp.py``; times
  are microseconds after the packet's ``time_base``, already on the driver's clock.
This module adds what a robot needs around them:

- the encoding is checked first (a decoder returns nothing, silently, for another format's
  bytes); others (``mono``, ``libcaer``...) are reported once and counted, and give empty
  batches;
- ``is_bigendian`` true is unsupported (all four are little-endian word streams; drivers
  send false);
- a packet whose sensor size or encoding differs from the stream's is held, and the next
  packet decides: the same new format confirms a change (a new decoder and clock estimate, the
  held packet decoded first), the stream's own format shows the odd packet was damage (dropped,
  counted in ``size_mismatch``, warned with its topic and stamp), so one mislabelled packet
  never reaches a consumer with another sensor size; the stream's first packet sets its format;
- corrupt bytes never raise: library errors are caught; events outside width x height,
  words of no known type and events before any time word are dropped and counted;
- sensor microseconds are mapped to ROS nanoseconds by ``SensorClock`` (events/clock.py).

Every problem is logged once per kind per decoder (then counted silently) in ``stats``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import asdict, dataclass

import evt3
import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.clock import DEFAULT_MAX_JUMP_NS, SensorClock
from crossspec_ros.events.evt2 import Evt2Decoder
from crossspec_ros.events.evt21 import Evt21Decoder
from crossspec_ros.events.libcaer_cmp import LibcaerCmpDecoder
from crossspec_ros.events.packet import (
    ENCODING_ALIASES,
    EVT2,
    EVT3,
    EVT21,
    LIBCAER_CMP,
    EventPacketData,
)
from crossspec_ros.events.triggers import TriggerWordCounter
from crossspec_ros.events.words import WordEvents
from crossspec_ros.stamps import ns_to_seconds

log = logging.getLogger(__name__)

# Addresses are 11 bits wide in all four encodings.
MAX_SENSOR_SIZE = 2048
WORD_BYTES = {EVT3: 2, EVT2: 4, EVT21: 8, LIBCAER_CMP: 2}
# The word-stream decoders of this package, by encoding (evt3 is the evt3 library's).
WORD_DECODERS = {EVT2: Evt2Decoder, EVT21: Evt21Decoder, LIBCAER_CMP: LibcaerCmpDecoder}


@dataclass
class DecodeStats:
    """Counters of one decoder (packets unless named *_events)."""

    packets: int = 0
    events: int = 0
    empty_packets: int = 0
    unsupported_encoding: int = 0
    big_endian: int = 0
    invalid_size: int = 0
    size_changes: int = 0        # confirmed by the next packet: the decoder restarted
    size_mismatch: int = 0       # a lone packet of another size or encoding: dropped
    odd_length: int = 0
    decoder_errors: int = 0
    out_of_bounds_events: int = 0
    clock_resets: int = 0
    triggers_p0: int = 0
    triggers_p1: int = 0
    unknown_words: int = 0       # evt2 / evt21 / libcaer_cmp words of no type of the format
    untimed_events: int = 0      # evt2 / evt21 events before the stream's first time word
    unsupported_words: int = 0   # libcaer_cmp VECT_12 (no driver writes it)
    # packets the stream's seq numbers skipped: lost on the way (a best-effort subscription
    # whose queue overflowed drops them where the node cannot see it), until they come late
    missing_packets: int = 0
    late_packets: int = 0        # came after a later seq (counted missing until then)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @property
    def bad_packets(self) -> int:
        """Packets whose events were dropped entirely (not counting empty packets)."""
        return (self.unsupported_encoding + self.big_endian + self.invalid_size
                + self.decoder_errors + self.size_mismatch)


# a larger forward jump of an EventPacket's seq is a restarted driver, not lost packets
MAX_SEQ_GAP = 100_000
MISSING_KEPT = 4096  # the latest seqs counted missing: one that comes later came late


class EventPacketDecoder:
    """Streaming decoder for one event stream; ``decode(packet)`` never raises.

    count_triggers: also count EVT3 EXT_TRIGGER words (``stats.triggers_p0/p1``), ~10%
    slower (evt2 and evt21 triggers are always counted; libcaer_cmp has none).
    """

    def __init__(self, name: str = "events", max_jump_ns: int = DEFAULT_MAX_JUMP_NS,
                 count_triggers: bool = False) -> None:
        self.name = name
        self.stats = DecodeStats()
        self.clock = SensorClock(max_jump_ns)
        self._decoder: (evt3.Decoder | Evt2Decoder | Evt21Decoder | LibcaerCmpDecoder
                        | None) = None
        self._size: tuple[int, int] | None = None
        self._encoding: str | None = None
        self._triggers = TriggerWordCounter() if count_triggers else None
        self._warned: set[str] = set()
        self._last_seq: int | None = None
        self._missing: OrderedDict[int, None] = OrderedDict()  # seqs a gap skipped
        # a packet of another format than the stream's, until the next packet decides
        self._held: EventPacketData | None = None

    def _problem(self, kind: str, msg: str, *args: object) -> None:
        """Warn the first time a kind of problem shows up in this stream, then log at debug."""
        level = logging.DEBUG if kind in self._warned else logging.WARNING
        self._warned.add(kind)
        log.log(level, "%s: " + msg, self.name, *args)

    def _restart(self, encoding: str, width: int, height: int) -> None:
        if encoding == EVT3:
            self._decoder = evt3.Decoder(sensor_width=width, sensor_height=height)
        else:
            self._decoder = WORD_DECODERS[encoding]()
        self._size, self._encoding = (width, height), encoding
        self.clock.reset()
        if self._triggers is not None:
            self._triggers.reset()

    def _accept(self, packet: EventPacketData) -> str | None:
        """Check encoding, byte order and size; start the decoder on the stream's first packet.
        Returns the encoding's canonical name, None if the packet is dropped."""
        enc = packet.encoding.strip().lower()
        enc = ENCODING_ALIASES.get(enc, enc)
        if enc not in WORD_BYTES:
            self.stats.unsupported_encoding += 1
            self._problem(
                f"encoding:{packet.encoding}",
                "event encoding %r is not supported; its packets are dropped. crossspec decodes "
                "'evt3', 'evt2' and 'evt21' (Prophesee cameras via metavision_driver) and "
                "'libcaer_cmp' (iniVation cameras via libcaer_driver); convert other streams to "
                "one of them.",
                packet.encoding)
            return None
        if packet.is_bigendian:
            self.stats.big_endian += 1
            self._problem("bigendian", "%s packet with is_bigendian=true is not supported "
                          "(%s is a little-endian word stream); packets are dropped.", enc, enc)
            return None
        w, h = packet.width, packet.height
        if not (0 < w <= MAX_SENSOR_SIZE and 0 < h <= MAX_SENSOR_SIZE):
            self.stats.invalid_size += 1
            self._problem("size", "invalid sensor size %dx%d in packet (%s allows 1..%d); "
                          "packets are dropped. Check the driver's width/height.",
                          w, h, enc, MAX_SENSOR_SIZE)
            return None
        if self._size is None:
            self._restart(enc, w, h)
        return enc

    def _format_of(self, packet: EventPacketData) -> tuple[str, int, int]:
        enc = packet.encoding.strip().lower()
        return ENCODING_ALIASES.get(enc, enc), packet.width, packet.height

    def _other_format(self, packet: EventPacketData, enc: str) -> EventBatch:
        """A packet whose format is not the stream's: held until the next packet decides
        (returns nothing yet), or, if it has the held packet's format, the confirmed change:
        the decoder restarts and both packets' events come out, the held one's first."""
        held, self._held = self._held, None
        w, h = self._size  # type: ignore[misc]
        if held is None or self._format_of(held) != self._format_of(packet):
            if held is not None:
                self._drop_held(held)
            self._held = packet
            return EventBatch.empty(w, h)  # the stream's size: consumers see no change
        self.stats.size_changes += 1
        self._problem("size_change", "stream changed from %s %dx%d to %s %dx%d (two packets "
                      "in a row): restarting the decoder", self._encoding, w, h, enc,
                      packet.width, packet.height)
        self._restart(enc, packet.width, packet.height)
        return EventBatch.concat([self._decode_words(held, enc),
                                  self._decode_words(packet, enc)])

    def _drop_held(self, held: EventPacketData) -> None:
        self.stats.size_mismatch += 1
        enc, w, h = self._format_of(held)
        self._problem("size_mismatch", "dropped a packet stamped %.6f s (seq %d) labelled %s "
                      "%dx%d in a stream of %s %dx%d: the packets around it keep the stream's "
                      "format, so it is damaged or mislabelled (a real change shows in two "
                      "packets in a row). Counted in size_mismatch; further ones are logged "
                      "at debug level. If this repeats, check the driver's width, height and "
                      "encoding.", ns_to_seconds(held.stamp_ns), held.seq, enc, w, h,
                      self._encoding, *self._size)

    def finish(self) -> None:
        """End of the stream: a packet still held (its format never confirmed) is dropped."""
        held, self._held = self._held, None
        if held is not None:
            self._drop_held(held)

    def restart_sequence(self) -> None:
        """Forget the stream's seq: the packets until now were let go on purpose (a node
        made inactive), so the next gap is no loss."""
        self._last_seq = None
        self._missing.clear()

    def _count_gap(self, seq: int) -> None:
        """Count the packets a forward jump of ``seq`` skipped, and a skipped one that comes
        after all as late, not lost. A seq that stays (drivers that leave it 0) or goes back
        (a bag loop, a restarted driver) is no loss, nor is a jump too large to be one."""
        seq, last = int(seq), self._last_seq
        if seq in self._missing:  # reordered on the way (or a moved packet of a bag)
            del self._missing[seq]
            self.stats.missing_packets -= 1
            self.stats.late_packets += 1
            self._problem("late", "packet seq %d came after seq %d: late, not lost (counted "
                          "in late_packets; its events may be late for their window)", seq, last)
            return
        self._last_seq = seq
        if last is None or not 1 < seq - last <= MAX_SEQ_GAP:
            return
        self.stats.missing_packets += seq - last - 1
        self._missing.update(dict.fromkeys(range(max(last + 1, seq - MISSING_KEPT), seq)))
        while len(self._missing) > MISSING_KEPT:
            self._missing.popitem(last=False)
        self._problem("missing", "packets missing from the stream (seq %d follows %d): lost "
                      "on the way unless they come late, e.g. a subscription queue that "
                      "overflowed (raise event_qos_depth); further gaps are only counted in "
                      "missing_packets", seq, last)

    def decode(self, packet: EventPacketData) -> EventBatch:
        """Decode one packet (in stream order) into events on the ROS clock."""
        self.stats.packets += 1
        self._count_gap(packet.seq)
        enc = self._accept(packet)
        if enc is None:
            return EventBatch.empty(max(packet.width, 0), max(packet.height, 0))
        if (enc, (packet.width, packet.height)) != (self._encoding, self._size):
            return self._other_format(packet, enc)
        if self._held is not None:  # the stream goes on in its format: the held one was odd
            self._drop_held(self._held)
            self._held = None
        return self._decode_words(packet, enc)

    def _decode_words(self, packet: EventPacketData, enc: str) -> EventBatch:
        """One packet of the stream's format (``enc``, the decoder's size) into events."""
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
        word = WORD_BYTES[enc]
        if len(data) % word:
            # Legal for the decoders (they carry the split word) but drivers send whole words.
            self.stats.odd_length += 1
            self._problem("odd", "packet of %d bytes is not a whole number of %d-byte %s "
                          "words (truncated?); the split word is carried to the next packet",
                          len(data), word, enc)
        if enc == EVT3 and self._triggers is not None:
            self._triggers.feed(data)
            self.stats.triggers_p0 = self._triggers.p0
            self.stats.triggers_p1 = self._triggers.p1
        try:
            ev = self._decoder.feed(data)  # type: ignore[union-attr]
        except Exception as exc:  # the library's errors are not documented: never crash
            self.stats.decoder_errors += 1
            self._problem("decoder", "%s decoder failed (%s); restarting it", enc, exc)
            self._restart(enc, w, h)
            return EventBatch.empty(w, h)
        if enc == EVT3:
            return self._to_batch(packet.stamp_ns, ev.t, ev.x, ev.y, ev.p, w, h)
        self._count_damage(enc, ev)
        if enc in (EVT2, EVT21):  # sensor time, mapped by the clock like evt3's
            return self._to_batch(packet.stamp_ns, ev.t_us, ev.x, ev.y, ev.p, w, h)
        return self._to_batch(packet.stamp_ns, ev.t_us, ev.x, ev.y, ev.p, w, h,
                              time_base_ns=packet.time_base)

    def _count_damage(self, enc: str, ev: WordEvents) -> None:
        unknown, untimed, unsupported = ev.unknown_words, ev.untimed_events, \
            ev.unsupported_words
        self.stats.unknown_words += unknown
        self.stats.untimed_events += untimed
        self.stats.unsupported_words += unsupported
        self.stats.triggers_p0 += ev.triggers_p0
        self.stats.triggers_p1 += ev.triggers_p1
        if unknown:
            self._problem("unknown_words", "%d words of no %s type skipped (damaged data?)",
                          unknown, enc)
        if untimed:
            self._problem("untimed", "%d %s events before the stream's first time word "
                          "dropped (no time known for them)", untimed, enc)
        if unsupported:
            self._problem("vect12", "%d libcaer_cmp VECT_12 words skipped (no driver writes "
                          "them; their events are lost)", unsupported)

    def _to_batch(self, stamp_ns: int, t_us: np.ndarray, x: np.ndarray, y: np.ndarray,
                  p: np.ndarray, w: int, h: int, time_base_ns: int | None = None
                  ) -> EventBatch:
        """``t_us``: sensor time, mapped by the clock; or, with ``time_base_ns``, time after
        that base, which is on the driver's clock already (libcaer_cmp)."""
        n = len(x)
        if n == 0:
            return EventBatch.empty(w, h)
        if time_base_ns is None:
            # The stamp bounds the packet's *first* event, so that one feeds the clock even
            # if it is dropped below (a later event could lie after the stamp).
            offset = self.clock.update(stamp_ns, int(t_us[0]) * 1000)
            self.stats.clock_resets = self.clock.resets
        else:
            offset = int(time_base_ns)
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
