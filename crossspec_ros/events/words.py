"""What the word-stream decoders (evt2.py, libcaer_cmp.py) share: splitting a packet into
little-endian words, and the form of one packet's decoded events."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class WordEvents:
    """One packet's CD events (time in us: sensor time for evt2, after the packet's
    ``time_base`` for libcaer_cmp) and what the counters of decode.py take from it."""

    t_us: np.ndarray  # uint64 (evt2) or int64 (libcaer_cmp)
    x: np.ndarray     # uint16
    y: np.ndarray     # uint16
    p: np.ndarray     # uint8
    unknown_words: int = 0      # words of no type of the format
    untimed_events: int = 0     # events before the stream's first time word (evt2)
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
