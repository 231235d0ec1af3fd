"""EXT_TRIGGER counting agrees with the evt3 library's file decoder, across any split."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import evt3
import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.encode import encode_evt3_packets
from crossspec_ros.events.packet import EventPacketData
from crossspec_ros.events.triggers import TriggerWordCounter

ROS_T0 = 1_700_000_000_000_000_000


def packets_with_triggers(seed: int = 0) -> tuple[EventBatch, list[EventPacketData], np.ndarray]:
    """CD packets with EXT_TRIGGER words (random channel and value) inserted between words."""
    rng = np.random.default_rng(seed)
    n = 3000
    t = ROS_T0 + np.sort(rng.integers(0, 50_000, n)) * 1000
    batch = EventBatch(t, rng.integers(0, 640, n), rng.integers(0, 480, n),
                       rng.integers(0, 2, n), 640, 480)
    out, values = [], []
    for p in encode_evt3_packets(batch, 1_000_000):
        words = np.frombuffer(p.events, "<u2")
        k = int(rng.integers(0, 4))
        value = rng.integers(0, 2, k)
        trig = (0xA000 | (rng.integers(0, 16, k) << 8) | value).astype("<u2")
        at = np.sort(rng.integers(1, len(words) + 1, k))  # after the leading TIME_HIGH
        out.append(replace(p, events=np.insert(words, at, trig).astype("<u2").tobytes()))
        values.append(value)
    return batch, out, np.concatenate(values)


def test_trigger_counts_match_the_evt3_file_decoder(tmp_path: Path) -> None:
    batch, packets, values = packets_with_triggers()
    raw = tmp_path / "stream.raw"
    raw.write_bytes(b"".join(p.events for p in packets))
    _, triggers = evt3.decode_file_with_triggers(str(raw))
    assert np.array_equal(np.asarray(triggers.value), values)

    decoder = EventPacketDecoder(count_triggers=True)
    out = EventBatch.concat([decoder.decode(p) for p in packets])
    assert out.equals(batch)  # triggers do not disturb CD decoding
    assert decoder.stats.triggers_p1 == int(values.sum())
    assert decoder.stats.triggers_p0 == int(len(values) - values.sum())


def test_trigger_counter_is_split_invariant() -> None:
    _, packets, values = packets_with_triggers(seed=1)
    data = b"".join(p.events for p in packets)
    rng = np.random.default_rng(2)
    cuts = np.sort(rng.choice(np.arange(1, len(data)), 400, replace=False))
    counter = TriggerWordCounter()
    for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
        counter.feed(data[a:b])
    assert (counter.p0, counter.p1) == (int((values == 0).sum()), int(values.sum()))
