"""Count EVT3 external-trigger events in a packet stream.

The evt3 library's streaming decoder returns CD (change detection) events only; its trigger
decoding exists for whole files (``evt3.decode_file_with_triggers``). Counting triggers needs
no decoder state, though: in EVT 3.0 (Prophesee's public spec) every 16-bit little-endian word
carries its type in bits 15..12, and an EXT_TRIGGER word (type 0xA) holds the trigger value
(edge) in bit 0 and the trigger channel id in bits 11..8. So this counts those words, carrying an
odd byte across packets so word alignment survives any split. Trigger *times* are not produced
(crossspec does not use them). test_events_triggers.py checks the counts against
``evt3.decode_file_with_triggers``.
"""

from __future__ import annotations

import numpy as np

EXT_TRIGGER = 0xA


class TriggerWordCounter:
    """Counts EXT_TRIGGER words by value (p0: falling edge, p1: rising edge)."""

    def __init__(self) -> None:
        self.p0 = 0
        self.p1 = 0
        self._carry = b""

    def feed(self, data: bytes) -> None:
        if self._carry:
            data = self._carry + data
        usable = len(data) & ~1
        self._carry = data[usable:]
        if usable == 0:
            return
        words = np.frombuffer(data, dtype="<u2", count=usable // 2)
        trig = words[(words >> 12) == EXT_TRIGGER]
        ones = int(np.count_nonzero(trig & 1))
        self.p1 += ones
        self.p0 += len(trig) - ones

    def reset(self) -> None:
        """Drop a partial word (the stream restarts); counts stay."""
        self._carry = b""
