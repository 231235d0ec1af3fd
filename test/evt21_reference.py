"""A plain-Python EVT 2.1 writer for tests, written from Prophesee's public description of the
format (docs.prophesee.ai, data/encoding_formats/evt21), not from crossspec's decoder: one word
at a time, as a Python int, then bytes in either byte order a sensor sends.

Bits of a word (63 is the most significant):
  EVT_NEG 0000 / EVT_POS 0001: 63..60 type, 59..54 time bits 5..0, 53..43 x (aligned on 32),
      42..32 y, 31..0 valid (bit n: an event at x + n)
  EVT_TIME_HIGH 1000: 59..32 time bits 33..6, 31..0 zero
  EXT_TRIGGER 1010: 59..54 time bits 5..0, 44..40 channel id, 32 value (1: rising edge)
  OTHERS 1110: extensions
Byte orders (the page's example, 0x0102030405060708): GenX320 sends the bytes 08 07 06 05 04 03
02 01 (one little-endian 64-bit word: "little"), IMX636 sends 04 03 02 01 08 07 06 05 (the
first 32-bit half, bits 63..32, then the second, each little-endian: "legacy").
"""

from __future__ import annotations

from collections.abc import Iterable

TIME_HIGH_FIELD = (1 << 28) - 1


def time_high_word(t_us: int) -> int:
    return (0b1000 << 60) | (((t_us >> 6) & TIME_HIGH_FIELD) << 32)


def cd_word(polarity: int, t_us: int, x_aligned: int, y: int, valid: int) -> int:
    kind = 0b0001 if polarity else 0b0000
    assert x_aligned % 32 == 0 and 0 <= y < 2048 and 0 <= valid < (1 << 32)
    return (kind << 60) | ((t_us & 0b111111) << 54) | (x_aligned << 43) | (y << 32) | valid


def trigger_word(t_us: int, channel: int, rising: bool) -> int:
    return (0b1010 << 60) | ((t_us & 0b111111) << 54) | (channel << 40) | (int(rising) << 32)


def others_word(payload: int) -> int:
    return (0b1110 << 60) | (payload & ((1 << 60) - 1))


def to_bytes(words: Iterable[int], layout: str = "little") -> bytes:
    """Words as the bytes a sensor sends in ``layout`` ("little" or "legacy")."""
    if layout == "little":
        return b"".join(w.to_bytes(8, "little") for w in words)
    assert layout == "legacy", layout
    return b"".join((w >> 32).to_bytes(4, "little") + (w & 0xFFFF_FFFF).to_bytes(4, "little")
                    for w in words)


def event_words(events: Iterable[tuple[int, int, int, int]], last_high: int | None = None
                ) -> tuple[list[int], int | None]:
    """Words for (t_us, x, y, polarity) events in time order, and the last time high written.

    A time high is written before an event whose time bits 33..6 differ from the last one
    (``last_high``: the stream's, to continue it). An event joins the word before it when that
    word has its time, polarity, row and block of 32 columns and a smaller x (so a decoder,
    which reads a word's events in x order, gives them back in the same order)."""
    words: list[int] = []
    open_word: list[int] | None = None  # [t, polarity, y, x_aligned, valid, last x]

    def close() -> None:
        if open_word is not None:
            t, pol, y, x_aligned, valid, _ = open_word
            words.append(cd_word(pol, t, x_aligned, y, valid))

    for t, x, y, pol in events:
        t, x, y, pol = int(t), int(x), int(y), int(pol != 0)
        high = t >> 6
        x_aligned = x - x % 32
        if open_word is not None and open_word[:4] == [t, pol, y, x_aligned] \
                and x > open_word[5]:
            open_word[4] |= 1 << (x % 32)
            open_word[5] = x
            continue
        close()
        if high != last_high:
            words.append(time_high_word(t))
            last_high = high
        open_word = [t, pol, y, x_aligned, 1 << (x % 32), x]
    close()
    return words, last_high
