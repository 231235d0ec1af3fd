"""EVT 2.1 (Prophesee; the GenX320's default): 64-bit words, decoded and encoded in numpy.

The format, from Prophesee's public description: bits 63..60 of a word give its type.
  0x0 EVT_NEG, 0x1 EVT_POS  bits 59..54 the time's 6 low bits, 53..43 x (a multiple of 32),
                            42..32 y, 31..0 a valid mask: bit i set = one event at (x + i, y)
  0x8 EVT_TIME_HIGH         bits 59..32 the time's 28 high bits (time = high << 6 | low, in
                            us); bits 31..0 unused, zero
  0xA EXT_TRIGGER           bits 59..54 time low, 44..40 channel, 32 value (edge)
  0xE OTHERS                vendor extensions, skipped
Any other type is reserved: such words are counted and skipped. Time works as in EVT 2.0
(``words.TimeHighs``: carried across packets, events before the stream's first time high
counted and dropped, the 34-bit wrap counted). Events of one word come out in x order.

Byte order. The sensors send a word in one of two layouts, and an EventPacket says neither
(metavision_driver copies the camera's raw buffers into ``events`` as they come, and
``is_bigendian`` is false for both), so the decoder tells them apart from the stream:
- ``LITTLE``: one little-endian 64-bit word (the GenX320; Prophesee's SDK calls it
  ``endianness=little``, the default of its file headers);
- ``LEGACY``: two little-endian 32-bit halves, bits 63..32 first (the IMX636 and IMX646 on
  Prophesee's USB cameras; the SDK's ``endianness=legacy``). The 64-bit word 0x0102030405060708
  travels as the bytes 04 03 02 01 08 07 06 05 (LITTLE: 08 07 ... 01).
A time high word tells them apart: its low half is zero, so in the LITTLE layout its first
four bytes are zero and byte 7 starts with the type 1000, in the LEGACY layout its last four
bytes are zero and byte 3 does. A sensor sends one every 64 us while events flow. The decoder
counts the words that look like a time high in each layout and reads every packet in the
layout with more of them so far (on a tie, the layout of the stream's first one, since a stream
starts with a time high; LITTLE before any); once one leads by ``LOCK_MARGIN`` it stops
counting. The counts hardly mix: a LEGACY event word looks like a LITTLE time high only at
x = y = 0 with a time low of 0 and valid bits 31..28 = 1000 (and the other way round). Events
before the first time high are dropped in either layout, so reading a packet in the wrong one
before that loses nothing more (only the count of those dropped events is the LITTLE
reading's).
"""

from __future__ import annotations

import numpy as np

from crossspec_ros.events.words import TimeHighs, WordEvents, set_bits, whole_words

EVT_NEG, EVT_POS, EVT_TIME_HIGH, EXT_TRIGGER, OTHERS = 0x0, 0x1, 0x8, 0xA, 0xE
KNOWN_TYPES = (EVT_NEG, EVT_POS, EVT_TIME_HIGH, EXT_TRIGGER, OTHERS)
LITTLE, LEGACY = "little", "legacy"
LOCK_MARGIN = 8  # time highs: a lead this large settles a stream's layout
WRAP_US = 1 << (TimeHighs.BITS + 6)


def _halves(words: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Bits 63..32 (type, time low, x, y) and 31..0 (valid mask) of each word, as uint32 views
    (no copy) of ``words``: the bytes as little-endian 64-bit words, sent in ``layout``."""
    pairs = words.view("<u4").reshape(-1, 2)  # the first and second 4 bytes of each word
    return (pairs[:, 1], pairs[:, 0]) if layout == LITTLE else (pairs[:, 0], pairs[:, 1])


def _looks_like_time_high(words: np.ndarray) -> dict[str, np.ndarray]:
    """Per layout, the words that look like a time high read in it: the type 1000 above a
    zero low half."""
    looks = {}
    for layout in (LITTLE, LEGACY):
        high_half, low_half = _halves(words, layout)
        looks[layout] = ((high_half >> 28) == EVT_TIME_HIGH) & (low_half == 0)
    return looks


def _swap_halves(words: np.ndarray) -> np.ndarray:
    """LITTLE words as LEGACY ones and back (both as little-endian 64-bit words)."""
    return (words << np.uint64(32)) | (words >> np.uint64(32))


def _set_bit_offsets(masks: np.ndarray, counts: np.ndarray, total: int) -> np.ndarray:
    """The index (0..31) of every set bit of ``masks`` (uint32; ``counts``: their set bits,
    ``total`` their sum), in mask order then bit order.

    One round per bit rank: round r writes each mask's r-th lowest set bit to the mask's first
    output slot + r, so at most 32 numpy rounds however many events there are."""
    offsets = np.empty(total, dtype=np.uint16)
    has_bits = counts > 0
    slot = (np.cumsum(counts, dtype=np.int64) - counts)[has_bits]
    rest = masks[has_bits]
    while len(rest):
        lowest = rest & (~rest + np.uint32(1))
        offsets[slot] = set_bits(lowest - np.uint32(1))
        rest ^= lowest
        more = rest != 0
        rest, slot = rest[more], slot[more] + 1
    return offsets


class Evt21Decoder:
    """Streaming EVT 2.1 decoder: feed packets' bytes in stream order.

    ``layout``: the byte order the decoder reads (LITTLE or LEGACY, see the module docstring),
    ``layout_settled``: whether it stopped looking."""

    def __init__(self) -> None:
        self._time = TimeHighs()
        self._tail = b""  # bytes of a word split across packets
        self._votes = {LITTLE: 0, LEGACY: 0}
        self._first_voted: str | None = None  # the layout of the stream's first time high
        self.layout = LITTLE
        self.layout_settled = False

    def _choose_layout(self, words: np.ndarray) -> None:
        looks = _looks_like_time_high(words)
        first = {name: int(np.argmax(m)) for name, m in looks.items() if m.any()}
        if self._first_voted is None and first:
            self._first_voted = min(first, key=first.__getitem__)
        for name, m in looks.items():
            self._votes[name] += int(np.count_nonzero(m))
        lead = self._votes[LEGACY] - self._votes[LITTLE]
        if lead:
            self.layout = LEGACY if lead > 0 else LITTLE
        else:  # a stream starts with a time high: a look-alike comes later
            self.layout = self._first_voted or LITTLE
        self.layout_settled = abs(lead) >= LOCK_MARGIN

    def feed(self, data: bytes | np.ndarray) -> WordEvents:
        words, self._tail = whole_words(self._tail, data, 8)
        if not self.layout_settled and len(words):
            self._choose_layout(words)
        # The two halves are all a layout changes: read each where it lies, no reordering.
        head, valid = _halves(words, self.layout)  # type, time low, x, y | valid mask
        kind = (head >> 28).astype(np.uint8)
        is_high = kind == EVT_TIME_HIGH
        is_cd = kind <= EVT_POS
        high_of_cd = self._time.of_words(
            is_high, head[is_high] & np.uint32((1 << TimeHighs.BITS) - 1), is_cd)
        # a trigger's value (1: rising edge) is bit 32: bit 0 of the high half
        rising = int(np.count_nonzero(head[kind == EXT_TRIGGER] & 1))
        head, masks = head[is_cd], valid[is_cd]
        counts = set_bits(masks)
        timed = high_of_cd >= 0
        untimed = 0
        if not timed.all():
            untimed = int(counts[~timed].sum())
            head, high_of_cd, masks, counts = (head[timed], high_of_cd[timed], masks[timed],
                                               counts[timed])
        total = int(counts.sum(dtype=np.int64))
        t_us = (high_of_cd.astype(np.uint64) << np.uint64(6)) | \
            ((head >> 22) & 0x3F).astype(np.uint64)
        x = ((head >> 11) & 0x7FF).astype(np.uint16)
        y = (head & 0x7FF).astype(np.uint16)
        p = (head >> 28).astype(np.uint8)
        if total == len(counts) and (total == 0 or int(counts.min()) == 1):
            # one event per word (sparse scenes): its bit is the mask's only one
            x += set_bits(masks - np.uint32(1))
        else:  # one event per set bit (np.repeat keeps the words' order)
            t_us, x, y, p = (np.repeat(a, counts) for a in (t_us, x, y, p))
            x += _set_bit_offsets(masks, counts, total)
        type_counts = np.bincount(kind, minlength=16)
        return WordEvents(t_us, x, y, p,
                          unknown_words=int(len(words) - type_counts[list(KNOWN_TYPES)].sum()),
                          untimed_events=untimed,
                          triggers_p0=int(type_counts[EXT_TRIGGER]) - rising, triggers_p1=rising)


def encode_evt21(t_us: np.ndarray, x: np.ndarray, y: np.ndarray, p: np.ndarray,
                 previous_high: int | None = None, layout: str = LITTLE
                 ) -> tuple[bytes, int | None]:
    """EVT 2.1 words for events sorted by time (us), in ``layout`` byte order.

    Consecutive events of one time, polarity, row and 32-column block, in increasing x, share
    a word (so decoding gives back the same events in the same order, whatever the input); a
    time high goes before the first event and wherever the high part changes
    (``previous_high``: the stream's last one, so a packet continues a stream). Returns the
    bytes and the last time high."""
    if layout not in (LITTLE, LEGACY):
        raise ValueError(f"layout must be {LITTLE!r} or {LEGACY!r}, got {layout!r}")
    t_us = np.asarray(t_us, dtype=np.uint64)
    n = len(t_us)
    if n == 0:
        return b"", previous_high
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(y, dtype=np.uint64)
    p = (np.asarray(p) != 0).astype(np.uint64)
    new_word = np.ones(n, dtype=bool)
    new_word[1:] = ((t_us[1:] != t_us[:-1]) | (p[1:] != p[:-1]) | (y[1:] != y[:-1])
                    | ((x[1:] >> 5) != (x[:-1] >> 5)) | (x[1:] <= x[:-1]))
    starts = np.flatnonzero(new_word)
    bits = np.left_shift(np.uint64(1), (x & 31).astype(np.uint64))
    masks = np.bitwise_or.reduceat(bits, starts)
    t0 = t_us[starts]
    high = (t0 >> np.uint64(6)).astype(np.int64)
    changed = np.empty(len(starts), dtype=bool)
    changed[0] = previous_high is None or high[0] != previous_high
    changed[1:] = high[1:] != high[:-1]
    out = np.empty(len(starts) + int(np.count_nonzero(changed)), dtype=np.uint64)
    at = np.arange(len(starts)) + np.cumsum(changed)  # each word's slot, after the highs
    out[at[changed] - 1] = (np.uint64(EVT_TIME_HIGH) << np.uint64(60)) | (
        (high[changed] % (1 << TimeHighs.BITS)).astype(np.uint64) << np.uint64(32))
    out[at] = (p[starts] << np.uint64(60)) | ((t0 & np.uint64(0x3F)) << np.uint64(54)) | \
        (((x[starts] >> 5) << 5).astype(np.uint64) << np.uint64(43)) | \
        (y[starts] << np.uint64(32)) | masks
    if layout == LEGACY:
        out = _swap_halves(out)
    return out.astype("<u8", copy=False).tobytes(), int(high[-1])
