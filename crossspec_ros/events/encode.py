"""Encode EventBatches as EVT3 EventPackets (for bags crossspec writes and for tests).

How
---
The ``faery`` library encodes the events of a whole call at once (it writes a file with a ``%``
header, stripped here). Its word stream is made of *time groups*: a run of time words
(TIME_HIGH / TIME_LOW) followed by the event words of one timestamp. Two things are changed,
by splicing new time runs in place of faery's where needed:

- TIME_HIGH words are emitted for **every** step of the 4.096 ms high time, as a real sensor
  does. faery emits them only every 1024 steps across gaps, and the evt3 decoder recognises the
  24-bit wrap (every 16.78 s) only from a step of a few units, so sparse streams would
  otherwise decode up to 16.78 s early. A gap therefore costs 2 bytes per 4.096 ms.
- each packet starts with TIME_HIGH, TIME_LOW and ADDR_Y words, so it decodes on its own: a
  decoder that joins mid-stream (a bag read from a time offset) gets its events right (the
  wrap count it missed is absorbed by the clock).

Packets: packet k holds the events with ``t`` (floored to a microsecond) in
``[k*period, (k+1)*period)`` on the ROS clock, so chunks cut at multiples of the period never
share a packet. Periods without events produce **no packet** (as drivers do); the next packet
carries the skipped TIME_HIGH steps. Each packet's header stamp is the ROS time of its first
event, so the sensor->ROS mapping of ``events/clock.py`` is exact.

Time: sensor time (us) = floor((t - epoch_ns) / 1000). EVT3 has 1 us resolution, so
sub-microsecond parts are floored: a decoded event has ``t // 1000 * 1000`` of its input time
(for an epoch that is a whole microsecond). The default epoch is the first event's time rounded
down to a multiple of the 24-bit EVT3 time range (2**24 us): sensor times then start within
16.8 s of 0, and separate ``encode_evt3_packets`` calls on consecutive chunks of one stream
agree on every time word, so one decoder reads their packets in sequence. Across calls the
TIME_HIGH steps of a gap are not filled in; a stream with gaps should use one
``Evt3PacketEncoder``.

Speed: ~30 M events/s here (faery itself ~100 M/s; the rest is numpy checks and copies).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

import faery
import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.packet import EVT3, EventPacketData
from crossspec_ros.events.words import set_bits

# EVT 3.0 word types (bits 15..12 of each little-endian 16-bit word).
ADDR_Y = 0x0
ADDR_X = 0x2
VECT_12 = 0x4
VECT_8 = 0x5
TIME_LOW = 0x6
TIME_HIGH = 0x8
# Sensor times beyond this make faery's preamble (one word per 2**22 us from 0) large: it
# means the epoch is far before the events.
MAX_SENSOR_US = 1 << 40
# The EVT3 time words hold 24 bits of microseconds.
TIME_RANGE_NS = (1 << 24) * 1000


def _faery_file(path: Path, width: int, height: int, events: np.ndarray) -> bytes:
    with faery.evt.Encoder(path, "evt3", False, (width, height), True) as encoder:
        if len(events):
            encoder.write({"events": events})
    return path.read_bytes()


_SCRATCH: dict[int, Path] = {}  # process id -> its scratch directory (a fork makes its own)
_SCRATCH_LOCK = threading.Lock()


def _scratch_file() -> Path:
    """The file faery (which only writes files) encodes into: one name per thread, in one
    directory per process. A temporary directory per call cost ~2.5 ms to make and remove
    here, more than encoding the 5,000 events of a driver's message."""
    pid = os.getpid()
    with _SCRATCH_LOCK:
        if pid not in _SCRATCH:
            _SCRATCH[pid] = Path(tempfile.mkdtemp(prefix="crossspec-evt3-"))
            atexit.register(_remove_scratch, pid)
    return _SCRATCH[pid] / f"e-{threading.get_ident()}.raw"


def _remove_scratch(pid: int) -> None:
    if os.getpid() == pid:  # never a parent's folder from a forked child
        shutil.rmtree(_SCRATCH[pid], ignore_errors=True)


@lru_cache(maxsize=8)
def _faery_header(width: int, height: int) -> bytes:
    """faery's file header for this size (an empty file is exactly the header)."""
    with tempfile.TemporaryDirectory(prefix="crossspec-evt3-") as tmp:
        return _faery_file(Path(tmp) / "h.raw", width, height,
                           np.empty(0, dtype=faery.EVENTS_DTYPE))


def _faery_words(t_us: np.ndarray, x: np.ndarray, y: np.ndarray, p: np.ndarray,
                 width: int, height: int) -> np.ndarray:
    """faery's EVT3 words (uint16, little-endian) for sorted events, header stripped."""
    events = np.empty(len(t_us), dtype=faery.EVENTS_DTYPE)
    events["t"] = t_us
    events["x"] = x
    events["y"] = y
    events["p"] = p != 0
    scratch = _scratch_file()
    data = _faery_file(scratch, width, height, events)
    scratch.unlink()  # creating a file is cheaper than truncating one (~0.3 vs ~1.4 ms here)
    header = _faery_header(width, height)
    if not data.startswith(header) or (len(data) - len(header)) % 2:
        raise RuntimeError(f"faery {faery.__version__} wrote an unexpected EVT3 file layout")
    return np.frombuffer(data, dtype="<u2", offset=len(header))


def _event_count(words: np.ndarray, kind: np.ndarray) -> int:
    """CD events in a word stream: one per ADDR_X, one per set bit of VECT_12 / VECT_8."""
    vect12 = words[kind == VECT_12] & 0xFFF
    vect8 = words[kind == VECT_8] & 0xFF
    return (int(np.count_nonzero(kind == ADDR_X)) + int(set_bits(vect12).sum())
            + int(set_bits(vect8).sum()))


def count_cd_events(payload: bytes | np.ndarray) -> int:
    """CD events in an EVT3 payload, counted from its words (independently of whatever batch
    was encoded into it: what converters check their output with)."""
    words = np.frombuffer(bytes(payload), dtype="<u2")
    return _event_count(words, words >> 12)


def _time_runs(words: np.ndarray, n_events: int, times: np.ndarray) -> tuple[np.ndarray, ...]:
    """Start and end (first event word) of each group's time run in faery's stream, checked."""
    kind = words >> 12
    is_time = (kind == TIME_HIGH) | (kind == TIME_LOW)
    after_time = np.zeros_like(is_time)
    after_time[1:] = is_time[:-1]
    starts = np.flatnonzero(is_time & ~after_time)
    ends = np.flatnonzero(~is_time & after_time)
    # The splice relies on faery 0.7's layout: one time run per timestamp, with exactly the
    # input's events. Cheap to check, so checked (with the TIME_LOW values where present).
    ok = len(starts) == len(ends) == len(times) and _event_count(words, kind) == n_events
    if ok:
        last = words[ends - 1]
        has_tl = last >> 12 == TIME_LOW
        ok = bool(np.all(ends > starts)
                  and np.array_equal(last[has_tl] & 0xFFF, times[has_tl] & 0xFFF))
    if not ok:
        raise RuntimeError(f"faery {faery.__version__} laid out EVT3 events unexpectedly; "
                           "crossspec's encoder was written for faery 0.7")
    return starts, ends


class Evt3PacketEncoder:
    """Stateful EVT3 packet encoder for one stream (call ``encode`` with successive batches).

    Successive batches must not go back in time. A packet period cut by two calls gives two
    packets (cut chunks at period boundaries to avoid it).
    """

    def __init__(self, width: int, height: int, packet_period_ns: int = 1_000_000,
                 epoch_ns: int | None = None, frame_id: str = "", seq_start: int = 0) -> None:
        if packet_period_ns <= 0:
            raise ValueError(f"packet_period_ns must be > 0, got {packet_period_ns}")
        if not (0 < width <= 2048 and 0 < height <= 2048):
            raise ValueError(f"EVT3 sensor size must be 1..2048, got {width}x{height}")
        self.width, self.height = int(width), int(height)
        self.packet_period_ns = int(packet_period_ns)
        self.epoch_ns = epoch_ns
        self.frame_id = frame_id
        self.seq = seq_start
        self._last_high: int | None = None
        self._last_us = 0

    def encode(self, batch: EventBatch) -> list[EventPacketData]:
        """Encode a batch (sorted here if needed) into packets; none if it is empty."""
        if (batch.width, batch.height) != (self.width, self.height):
            raise ValueError(f"batch is {batch.width}x{batch.height}, encoder is "
                             f"{self.width}x{self.height}")
        if len(batch) == 0:
            return []
        batch = batch.sorted()
        inside = batch.in_bounds_mask()
        if not inside.all():
            raise ValueError(f"{int((~inside).sum())} events lie outside the "
                             f"{self.width}x{self.height} sensor")
        t_us = self._sensor_us(batch)
        words = _faery_words(t_us, batch.x, batch.y, batch.p, self.width, self.height)
        new_time = np.ones(len(t_us), dtype=bool)
        new_time[1:] = t_us[1:] != t_us[:-1]
        times = t_us[new_time]  # distinct times of the sorted events, cheaper than np.unique
        first_y = batch.y[new_time].astype(np.int64)  # y of each group's first event
        out, packet_pos, packet_groups = self._splice(words, len(batch), times, first_y)
        self._last_us = int(times[-1])
        return self._packets(out, packet_pos, times[packet_groups])

    def _sensor_us(self, batch: EventBatch) -> np.ndarray:
        if self.epoch_ns is None:
            self.epoch_ns = int(batch.t[0]) // TIME_RANGE_NS * TIME_RANGE_NS
        t_us = (batch.t - self.epoch_ns) // 1000
        if int(t_us[0]) < self._last_us:
            raise ValueError(
                f"events go back in time: sensor time {int(t_us[0])} us < {self._last_us} us "
                f"(epoch {self.epoch_ns} ns); encode in time order, after the epoch")
        if int(t_us[-1]) >= MAX_SENSOR_US:
            raise ValueError(f"sensor time {int(t_us[-1])} us is too large: pass an epoch_ns "
                             "close to the first event")
        return t_us

    def _splice(self, words: np.ndarray, n_events: int, times: np.ndarray,
                first_y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Replace faery's time runs where ours differ; return words, packet starts, groups."""
        starts, ends = _time_runs(words, n_events, times)
        high = times >> 12
        packet_index = (times * 1000 + self.epoch_ns) // self.packet_period_ns
        packet_start = np.ones(len(times), dtype=bool)
        packet_start[1:] = packet_index[1:] != packet_index[:-1]
        prev_high = np.empty_like(high)
        prev_high[0] = high[0] - 1 if self._last_high is None else self._last_high
        prev_high[1:] = high[:-1]
        n_high = high - prev_high
        n_high[packet_start] = np.maximum(n_high[packet_start], 1)
        self._last_high = int(high[-1])

        # faery writes ADDR_Y only when y changes; a packet must not depend on the previous
        # one, so a packet whose first event word is not ADDR_Y gets one.
        add_y = packet_start & (words[ends] >> 12 != ADDR_Y)

        # Our run is n_high TIME_HIGH words, one TIME_LOW, and ADDR_Y where added. Most groups
        # already match faery's (same TIME_LOW, at most one TIME_HIGH step): only the others
        # are spliced, among them the first, whose run holds faery's preamble (TIME_HIGH from
        # 0 up).
        run_len = ends - starts
        th_word = (TIME_HIGH << 12) | (high & 0xFFF)
        tl_word = (TIME_LOW << 12) | (times & 0xFFF)
        same = (run_len == n_high + 1) & (words[ends - 1] == tl_word) & ~add_y & (
            (n_high == 0) | ((n_high == 1) & (words[starts] == th_word)))
        pieces, pos = [], 0
        for g in np.flatnonzero(~same).tolist():
            steps = np.arange(high[g] - n_high[g] + 1, high[g] + 1)
            pieces += [words[pos:starts[g]],
                       ((TIME_HIGH << 12) | (steps & 0xFFF)).astype(np.uint16),
                       tl_word[g:g + 1].astype(np.uint16)]
            if add_y[g]:
                pieces.append(np.array([(ADDR_Y << 12) | first_y[g]], dtype=np.uint16))
            pos = int(ends[g])
        pieces.append(words[pos:])
        out = np.concatenate(pieces) if len(pieces) > 1 else words
        # Output position of each group's run: faery's plus the growth of earlier splices.
        growth = np.where(same, 0, n_high + 1 + add_y - run_len)
        shift = np.concatenate([[0], np.cumsum(growth)[:-1]])
        groups = np.flatnonzero(packet_start)
        return out, starts[groups] + shift[groups], groups

    def _packets(self, out: np.ndarray, packet_pos: np.ndarray,
                 first_times: np.ndarray) -> list[EventPacketData]:
        raw = out.astype("<u2", copy=False).tobytes()
        cuts = [*(2 * packet_pos).tolist(), len(raw)]
        packets = []
        for i, t_us in enumerate(first_times.tolist()):
            packets.append(EventPacketData(
                stamp_ns=self.epoch_ns + t_us * 1000, width=self.width, height=self.height,
                seq=self.seq, time_base=0, encoding=EVT3, events=raw[cuts[i]:cuts[i + 1]],
                frame_id=self.frame_id))
            self.seq += 1
        return packets


def encode_evt3_packets(batch: EventBatch, packet_period_ns: int = 1_000_000, *,
                        epoch_ns: int | None = None, frame_id: str = "",
                        seq_start: int = 0) -> list[EventPacketData]:
    """Encode one batch into EVT3 packets of ``packet_period_ns`` (see the module docstring)."""
    encoder = Evt3PacketEncoder(batch.width, batch.height, packet_period_ns, epoch_ns,
                                frame_id, seq_start)
    return encoder.encode(batch)
