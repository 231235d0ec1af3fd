"""EVT 2.0 (Prophesee): a stream of little-endian 32-bit words, decoded and encoded in numpy.

The format, from Prophesee's public description: bits 31..28 of a word give its type.
  0x0 CD_OFF, 0x1 CD_ON  bits 27..22 the time's 6 low bits, 21..11 x, 10..0 y
  0x8 EVT_TIME_HIGH      bits 27..0 the time's 28 high bits (time = high << 6 | low, in us)
  0xA EXT_TRIGGER        bits 27..22 time low, 12..8 channel, 0 value
  0xE OTHERS, 0xF CONTINUED  vendor extensions, skipped
Any other type is not EVT 2.0: such words are counted and skipped. The time high carries from
one packet to the next (a sensor sends one every 64 us while events flow); events before the
stream's first time high have no time and are counted and dropped. The 34-bit time wraps
after 4.77 hours: a time high far below the previous one counts a wrap.
"""

from __future__ import annotations

import numpy as np

from crossspec_ros.events.words import TimeHighs, WordEvents, whole_words

CD_OFF, CD_ON, TIME_HIGH, EXT_TRIGGER, OTHERS, CONTINUED = 0x0, 0x1, 0x8, 0xA, 0xE, 0xF
KNOWN_TYPES = (CD_OFF, CD_ON, TIME_HIGH, EXT_TRIGGER, OTHERS, CONTINUED)
HIGH_BITS = TimeHighs.BITS
WRAP_US = 1 << (HIGH_BITS + 6)


class Evt2Decoder:
    """Streaming EVT 2.0 decoder: feed packets' bytes in stream order."""

    def __init__(self) -> None:
        self._time = TimeHighs()
        self._tail = b""  # bytes of a word split across packets

    def feed(self, data: bytes | np.ndarray) -> WordEvents:
        words, self._tail = whole_words(self._tail, data, 4)
        kind = words >> 28
        is_high = kind == TIME_HIGH
        is_cd = kind <= CD_ON
        high_of_cd = self._time.of_words(is_high, words[is_high] & ((1 << HIGH_BITS) - 1),
                                         is_cd)
        cd_words = words[is_cd]
        timed = high_of_cd >= 0
        untimed = int(len(cd_words) - np.count_nonzero(timed))
        if untimed:
            cd_words, high_of_cd = cd_words[timed], high_of_cd[timed]
        t_us = (high_of_cd.astype(np.uint64) << np.uint64(6)) | \
            ((cd_words >> 22) & 0x3F).astype(np.uint64)
        triggers = words[kind == EXT_TRIGGER] & 1
        n_p1 = int(np.count_nonzero(triggers))
        known = np.isin(kind, KNOWN_TYPES)
        return WordEvents(t_us, ((cd_words >> 11) & 0x7FF).astype(np.uint16),
                          (cd_words & 0x7FF).astype(np.uint16),
                          (cd_words >> 28).astype(np.uint8),
                          unknown_words=int(len(words) - np.count_nonzero(known)),
                          untimed_events=untimed, triggers_p0=len(triggers) - n_p1,
                          triggers_p1=n_p1)


def encode_evt2(t_us: np.ndarray, x: np.ndarray, y: np.ndarray, p: np.ndarray,
                previous_high: int | None = None) -> tuple[bytes, int | None]:
    """EVT 2.0 words for events sorted by time (us): a time high before the first event and
    wherever the high part changes (``previous_high``: the stream's last one, so a packet
    continues a stream). Returns the bytes and the last time high."""
    t_us = np.asarray(t_us, dtype=np.uint64)
    n = len(t_us)
    if n == 0:
        return b"", previous_high
    high = (t_us >> np.uint64(6)).astype(np.int64)
    changed = np.empty(n, dtype=bool)
    changed[0] = previous_high is None or high[0] != previous_high
    changed[1:] = high[1:] != high[:-1]
    out = np.empty(n + int(np.count_nonzero(changed)), dtype="<u4")
    at = np.arange(n) + np.cumsum(changed)  # each event's word, after the time highs so far
    out[at[changed] - 1] = (TIME_HIGH << 28) | (high[changed] % (1 << HIGH_BITS)).astype(
        np.uint32)
    out[at] = (np.asarray(p, np.uint32) << 28) | \
        ((t_us & np.uint64(0x3F)).astype(np.uint32) << 22) | \
        (np.asarray(x, np.uint32) << 11) | np.asarray(y, np.uint32)
    return out.tobytes(), int(high[-1])
