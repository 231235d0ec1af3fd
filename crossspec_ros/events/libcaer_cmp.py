"""libcaer_cmp (iniVation cameras through libcaer_driver): little-endian 16-bit words, in numpy.

The format, as event_camera_codecs describes its types: bits 15..12 of a word give its code.
  0 TIME_HIGH    bits 11..0: time bits 23..12 (us)
  1 TIME_LOW     bits 11..0: time bits 11..0
  2 ADDR_X       bits 10..0: x of the events that follow
  3 ADDR_Y       bits 10..0 y, bit 11 polarity: one event at (x, y) at the current time
  4 VECT_BASE_Y  bits 10..0 base y, bit 11 polarity of the vector words that follow
  5 VECT_8       bits 7..0: one event at (x, base y + i) per set bit i; base y += 8
  6 VECT_12      not produced by the driver's encoder nor read by the reference decoder:
                 counted and skipped, like codes 7..15 (not libcaer_cmp: damaged data)
Time is relative to the packet: it restarts at 0 in every packet, and an event's time on the
driver's clock is ``time_base`` (ns) + 1000 x its 24-bit microseconds. x, the vector base and
its polarity carry over from one packet to the next.
"""

from __future__ import annotations

import numpy as np

from crossspec_ros.events.words import WordEvents, whole_words

TIME_HIGH, TIME_LOW, ADDR_X, ADDR_Y, VECT_BASE_Y, VECT_8, VECT_12 = range(7)


def _latest(is_kind: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Per word, the position of the latest word of the kind at or before it (-1: none);
    ``positions``: arange of the words (int32: half the memory traffic of int64)."""
    last = np.where(is_kind, positions, np.int32(-1))
    np.maximum.accumulate(last, out=last)
    return last


def _value(last: np.ndarray, values: np.ndarray, at: np.ndarray, before: int) -> np.ndarray:
    """``values`` at ``last`` for word positions ``at`` (``before`` where there is none)."""
    chosen = last[at]
    return np.where(chosen >= 0, values[chosen], before)


class LibcaerCmpDecoder:
    """Streaming libcaer_cmp decoder: feed packets' bytes in stream order."""

    def __init__(self) -> None:
        self._x = 0
        self._base_y = 0      # for the next VECT_8
        self._polarity = 0    # of vector events
        self._tail = b""      # a byte of a word split across packets

    def feed(self, data: bytes | np.ndarray) -> WordEvents:
        words, self._tail = whole_words(self._tail, data, 2)
        code = words >> 12
        low12 = (words & 0xFFF).astype(np.int32)
        positions = np.arange(len(words), dtype=np.int32)
        counts = np.bincount(code, minlength=16)
        base_at = np.flatnonzero(code == VECT_BASE_Y)
        is_vect = np.flatnonzero(code == VECT_8)
        is_y = np.flatnonzero(code == ADDR_Y)
        last_high = _latest(code == TIME_HIGH, positions)
        last_low = _latest(code == TIME_LOW, positions)
        last_x = _latest(code == ADDR_X, positions)

        def time_of(at: np.ndarray) -> np.ndarray:  # restarts at 0 in every packet
            return (_value(last_high, low12, at, 0).astype(np.int64) << 12) | \
                _value(last_low, low12, at, 0)

        def x_of(at: np.ndarray) -> np.ndarray:
            return _value(last_x, low12 & 0x7FF, at, self._x)

        single = words[is_y]
        t_us = time_of(is_y)
        xs = x_of(is_y)
        ys, ps = (single & 0x7FF).astype(np.int64), (single >> 11) & 1
        if len(is_vect) or len(base_at):
            vect_y, vect_word, bit, polarity = self._vectors(words, is_vect, base_at)
            if len(vect_word):  # both kinds back in stream order (a stable merge)
                order = np.argsort(np.concatenate([is_y * 8, vect_word * 8 + bit]),
                                   kind="stable")
                t_us = np.concatenate([t_us, time_of(vect_word)])[order]
                xs = np.concatenate([xs, x_of(vect_word)])[order]
                ys = np.concatenate([ys, vect_y])[order]
                ps = np.concatenate([ps, polarity])[order]
        if counts[ADDR_X]:
            self._x = int(low12[last_x[-1]] & 0x7FF)
        return WordEvents(
            t_us, xs.astype(np.uint16), np.minimum(ys, 0xFFFF).astype(np.uint16),
            ps.astype(np.uint8), unknown_words=int(counts[VECT_12 + 1:].sum()),
            unsupported_words=int(counts[VECT_12]))

    def _vectors(self, words: np.ndarray, is_vect: np.ndarray, base_at: np.ndarray
                 ) -> tuple[np.ndarray, ...]:
        """Events of the VECT_8 words: (y, word position, bit, polarity) per event; base y
        from the latest VECT_BASE_Y, + 8 per VECT_8 since it. Updates the carried state."""
        base_slot = np.searchsorted(base_at, is_vect, side="right") - 1
        has_base = base_slot >= 0
        slot = np.maximum(base_slot, 0)
        bases = words[base_at]
        nth = np.arange(len(is_vect))  # VECT_8 words before this one in the packet
        if len(bases):
            first_after = np.searchsorted(is_vect, base_at)  # first VECT_8 after each
            base = np.where(has_base, (bases & 0x7FF)[slot].astype(np.int64), self._base_y)
            since = np.where(has_base, nth - first_after[slot], nth)
            polarity = np.where(has_base, (bases >> 11)[slot] & 1, self._polarity)
        else:
            base = np.full(len(is_vect), self._base_y, dtype=np.int64)
            since, polarity = nth, np.full(len(is_vect), self._polarity)
        bits = np.unpackbits((words[is_vect] & 0xFF).astype(np.uint8)[:, None], axis=1,
                             bitorder="little")
        row, bit = np.nonzero(bits)
        if len(is_vect):
            self._base_y = int(base[-1] + 8 * (since[-1] + 1))
            self._polarity = int(polarity[-1])
        else:
            self._base_y, self._polarity = int(bases[-1] & 0x7FF), int(bases[-1] >> 11) & 1
        return base[row] + 8 * since[row] + bit, is_vect[row], bit, polarity[row]


def encode_libcaer_cmp(t_us: np.ndarray, x: np.ndarray, y: np.ndarray,
                       p: np.ndarray) -> bytes:
    """One packet's words for events sorted by time (us after the packet's time base, below
    2**24): TIME_HIGH / TIME_LOW where the time changes (both before the first event),
    ADDR_X where x changes, then ADDR_Y. No vector words (real streams have them: the
    decoder's tests build those by hand)."""
    t_us = np.asarray(t_us, dtype=np.int64)
    n = len(t_us)
    if n == 0:
        return b""
    if t_us[0] < 0 or t_us[-1] >= 1 << 24:
        raise ValueError("libcaer_cmp times are 0 <= t < 2**24 us after the time base")
    high, low = t_us >> 12, t_us & 0xFFF
    x = np.asarray(x, np.int64)
    first = np.zeros(n, dtype=bool)
    first[0] = True
    new_high = first | np.concatenate([[False], high[1:] != high[:-1]])
    new_low = new_high | np.concatenate([[False], low[1:] != low[:-1]])
    new_x = first | np.concatenate([[False], x[1:] != x[:-1]])
    count = 1 + new_high.astype(np.int64) + new_low + new_x  # words per event
    end = np.cumsum(count)  # one past each event's ADDR_Y word
    out = np.empty(int(end[-1]), dtype="<u2")
    out[end - 1] = (ADDR_Y << 12) | (np.asarray(p, np.int64) << 11) | np.asarray(y, np.int64)
    out[(end - 2)[new_x]] = (ADDR_X << 12) | x[new_x]
    low_at = end - 2 - new_x
    out[low_at[new_low]] = (TIME_LOW << 12) | low[new_low]
    out[(low_at - 1)[new_high]] = (TIME_HIGH << 12) | high[new_high]
    return out.tobytes()
