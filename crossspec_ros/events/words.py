"""What the word-stream decoders (evt2.py, evt21.py, libcaer_cmp.py) share: splitting a packet
into little-endian words, the form of one packet's decoded events, and the time high words of
Prophesee's EVT 2.0 and 2.1, counting set bits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# set bits per byte value, for numpy < 2 (no np.bitwise_count): Ubuntu 24.04's numpy 1.26, which
# ROS Jazzy's message bindings are built against and a ROS install must keep
_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def set_bits(values: np.ndarray) -> np.ndarray:
    """The number of set bits of each element of an unsigned integer array (uint8)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(values)
    return set_bits_by_bytes(values)


def set_bits_by_bytes(values: np.ndarray) -> np.ndarray:
    """``set_bits`` by a table of the 256 byte values (numpy < 2)."""
    values = np.ascontiguousarray(values)
    if values.dtype.kind != "u":
        raise TypeError(f"set_bits counts unsigned integers, not {values.dtype}")
    per_byte = _BYTE_BITS[values.view(np.uint8)].reshape(*values.shape, values.dtype.itemsize)
    return per_byte.sum(axis=-1, dtype=np.uint8)


@dataclass
class WordEvents:
    """One packet's CD events (time in us: sensor time for evt2 and evt21, after the packet's
    ``time_base`` for libcaer_cmp) and what the counters of decode.py take from it."""

    t_us: np.ndarray  # uint64 (evt2, evt21) or int64 (libcaer_cmp)
    x: np.ndarray     # uint16
    y: np.ndarray     # uint16
    p: np.ndarray     # uint8
    unknown_words: int = 0      # words of no type of the format
    untimed_events: int = 0     # events before the stream's first time word (evt2, evt21)
    unsupported_words: int = 0  # words of the format crossspec does not read (VECT_12)
    triggers_p0: int = 0
    triggers_p1: int = 0


def whole_words(tail: bytes, data: bytes | np.ndarray, size: int
                ) -> tuple[np.ndarray, bytes]:
    """The little-endian words of ``tail + data`` (``size`` bytes each; no copy when there is
    no tail and the data are whole words), and the bytes of a split last word."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
    if not tail and len(data) % size == 0:
        return np.frombuffer(data, dtype=f"<u{size}"), b""
    raw = tail + (data if isinstance(data, bytes) else np.asarray(data).tobytes())
    whole = len(raw) - len(raw) % size
    return np.frombuffer(raw, dtype=f"<u{size}", count=whole // size), raw[whole:]


class TimeHighs:
    """The time high words of one EVT 2.0 or 2.1 stream (28 bits: time bits 33..6, in us).

    A sensor sends one every 64 us while events flow, and each event holds the 6 low bits of its
    time, so an event's time is the latest time high before it (in this packet, or carried from
    an earlier one) << 6 | its low bits. The 34-bit time wraps after 4.77 hours: a time high
    more than half the range below the one before it counts a wrap, so times keep growing.
    """

    BITS = 28

    def __init__(self) -> None:
        self.last: int | None = None  # the stream's last time high, wraps included

    def of_words(self, is_high: np.ndarray, raw_highs: np.ndarray, selected: np.ndarray
                 ) -> np.ndarray:
        """The time high (int64, wraps included) of each word where ``selected``, -1 where the
        stream has had none yet. ``is_high`` marks the packet's time high words, ``raw_highs``
        their 28-bit values in order. Carries the last one to the next packet."""
        half, top = 1 << (self.BITS - 1), 1 << self.BITS
        highs = raw_highs.astype(np.int64)
        if len(highs):
            before = np.empty_like(highs)
            before[0] = self.last % top if self.last is not None else highs[0]
            before[1:] = highs[:-1]
            wraps = np.cumsum(highs < before - half)
            base = self.last - self.last % top if self.last is not None else 0
            highs += base + (wraps << self.BITS)
        # each word's time high: the latest one at or before it (-1: none in this packet)
        slot = (np.cumsum(is_high) - 1)[selected]
        carried = self.last if self.last is not None else -1
        if len(highs):
            high = np.where(slot >= 0, highs[np.maximum(slot, 0)], carried)
            self.last = int(highs[-1])
        else:
            high = np.full(len(slot), carried, dtype=np.int64)
        return high
