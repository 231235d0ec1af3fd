"""EVT3 encode -> decode round trips: exact events, exact clock, any byte split."""

from __future__ import annotations

import evt3
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.encode import TIME_RANGE_NS, Evt3PacketEncoder, encode_evt3_packets
from crossspec_ros.events.packet import EventPacketData

ROS_T0 = 1_700_000_000_123_456_000  # a ROS time in ns, whole microseconds


def random_batch(rng: np.random.Generator, n: int, span_ns: int, width: int = 640,
                 height: int = 480, t0: int = ROS_T0) -> EventBatch:
    t = t0 + np.sort(rng.integers(0, span_ns, n)) // 1000 * 1000
    return EventBatch(t, rng.integers(0, width, n), rng.integers(0, height, n),
                      rng.integers(0, 2, n), width, height)


def decode_all(packets: list[EventPacketData], decoder: EventPacketDecoder | None = None,
               size: tuple[int, int] = (640, 480)) -> EventBatch:
    decoder = decoder or EventPacketDecoder()
    return EventBatch.concat([decoder.decode(p) for p in packets], *size)


def floored(batch: EventBatch) -> EventBatch:
    s = batch.sorted()
    return EventBatch(s.t // 1000 * 1000, s.x, s.y, s.p, s.width, s.height)


@st.composite
def batches(draw: st.DrawFn) -> EventBatch:
    # Small sizes repeat coordinates across packets (faery then omits ADDR_Y words).
    width = draw(st.one_of(st.integers(1, 4), st.integers(1, 2048)))
    height = draw(st.one_of(st.integers(1, 4), st.integers(1, 2048)))
    n = draw(st.integers(0, 120))
    # Gaps from 0 (same timestamp) to 20 s (beyond the 16.8 s EVT3 wrap), sub-us parts too.
    gaps = draw(st.lists(st.one_of(st.just(0), st.integers(0, 5_000),
                                   st.integers(0, 20_000_000_000)), min_size=n, max_size=n))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    t = ROS_T0 + draw(st.integers(0, 10**12)) + np.cumsum(np.asarray(gaps, dtype=np.int64))
    return EventBatch(t, rng.integers(0, width, n), rng.integers(0, height, n),
                      rng.integers(0, 2, n), width, height)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches(), period_ns=st.integers(1_000, 50_000_000))
def test_evt3_round_trip_is_exact_to_the_microsecond(batch: EventBatch, period_ns: int) -> None:
    packets = encode_evt3_packets(batch, period_ns)
    expected = floored(batch)
    assert decode_all(packets, size=(batch.width, batch.height)).equals(expected)
    # Every packet is one period, stamped with its first event, and decodes on its own.
    stamps = [p.stamp_ns for p in packets] + [int(expected.t[-1]) + 1 if len(expected) else 0]
    for packet, t0, t1 in zip(packets, stamps, stamps[1:], strict=False):
        alone = EventPacketDecoder().decode(packet)
        assert alone.equals(expected.between(t0, t1))
        assert packet.stamp_ns == alone.t[0]
        assert alone.t[0] // period_ns == alone.t[-1] // period_ns


def test_round_trip_over_40_s_crosses_the_24_bit_wrap_exactly() -> None:
    rng = np.random.default_rng(1)
    # Dense stretches and sparse ones (one event per 0.1-3 s) over 45 s: the sparse ones are
    # what a decoder needs the TIME_HIGH steps for.
    dense = random_batch(rng, 20_000, 2_000_000_000)
    sparse_t = ROS_T0 + 2_000_000_000 + np.cumsum(rng.integers(100_000, 3_000_000, 30)) * 1000
    sparse = EventBatch(sparse_t, rng.integers(0, 640, 30), rng.integers(0, 480, 30),
                        rng.integers(0, 2, 30), 640, 480)
    late = random_batch(rng, 20_000, 2_000_000_000, t0=int(sparse_t[-1]) + 1000)
    batch = EventBatch.concat([dense, sparse, late])
    assert batch.t[-1] - batch.t[0] > 40 * 10**9
    decoder = EventPacketDecoder()
    out = decode_all(encode_evt3_packets(batch, 1_000_000), decoder)
    assert out.equals(batch)
    assert decoder.stats.clock_resets == 0  # no wrap was missed


def test_sub_microsecond_parts_are_floored() -> None:
    t = np.array([ROS_T0 + 1, ROS_T0 + 999, ROS_T0 + 1000, ROS_T0 + 2_500_001])
    batch = EventBatch(t, [1, 2, 3, 4], [5, 6, 7, 8], [0, 1, 0, 1], 640, 480)
    out = decode_all(encode_evt3_packets(batch))
    assert out.t.tolist() == [ROS_T0, ROS_T0, ROS_T0 + 1000, ROS_T0 + 2_500_000]


def test_packets_follow_the_period_grid_and_skip_empty_periods() -> None:
    period = 1_000_000
    base = ROS_T0 // period * period
    offsets_us = [0, 10, 999, 1000, 5500, 5501]  # periods 0, 0, 0, 1, 5, 5
    t = base + np.array(offsets_us) * 1000
    batch = EventBatch(t, [1, 2, 3, 4, 5, 6], [0] * 6, [1, 0, 1, 0, 1, 0], 640, 480)
    packets = encode_evt3_packets(batch, period, seq_start=7, frame_id="cam")
    assert [p.stamp_ns for p in packets] == [base, base + 1_000_000, base + 5_500_000]
    assert [p.seq for p in packets] == [7, 8, 9]
    assert {p.frame_id for p in packets} == {"cam"}
    assert [len(EventPacketDecoder().decode(p)) for p in packets] == [3, 1, 2]


def test_default_epoch_is_on_the_24_bit_grid_and_in_sensor_time_range() -> None:
    batch = random_batch(np.random.default_rng(2), 100, 10**9)
    encoder = Evt3PacketEncoder(640, 480)
    encoder.encode(batch)
    assert encoder.epoch_ns % TIME_RANGE_NS == 0
    assert 0 <= batch.t[0] - encoder.epoch_ns < TIME_RANGE_NS


def test_encoding_chunk_by_chunk_decodes_like_one_batch() -> None:
    rng = np.random.default_rng(3)
    batch = random_batch(rng, 30_000, 40 * 10**9)
    start = int(batch.t[0]) // 10**9 * 10**9
    chunks = [batch.between(a, a + 10**9) for a in range(start, int(batch.t[-1]) + 1, 10**9)]
    # Separate calls (as a bag writer does per second) and one stateful encoder.
    separate = [p for c in chunks for p in encode_evt3_packets(c, 2_000_000)]
    encoder = Evt3PacketEncoder(640, 480, 2_000_000)
    stateful = [p for c in chunks for p in encoder.encode(c)]
    assert decode_all(separate).equals(batch)
    assert decode_all(stateful).equals(batch)
    assert [p.stamp_ns for p in separate] == [p.stamp_ns for p in stateful]


def test_encoder_rejects_events_going_back_in_time_and_out_of_bounds() -> None:
    rng = np.random.default_rng(4)
    encoder = Evt3PacketEncoder(640, 480)
    encoder.encode(random_batch(rng, 10, 10**9, t0=ROS_T0 + 10**9))
    with pytest.raises(ValueError, match="back in time"):
        encoder.encode(random_batch(rng, 10, 10**6))
    with pytest.raises(ValueError, match="outside"):
        encode_evt3_packets(EventBatch([ROS_T0], [640], [0], [1], 640, 480))


def test_evt3_library_carries_partial_words_across_any_byte_split() -> None:
    rng = np.random.default_rng(5)
    data = b"".join(p.events for p in encode_evt3_packets(random_batch(rng, 5000, 10**8)))
    whole = evt3.Decoder(sensor_width=640, sensor_height=480).feed(data)
    for _ in range(5):
        cuts = np.sort(rng.choice(np.arange(1, len(data)), 300, replace=False))
        decoder = evt3.Decoder(sensor_width=640, sensor_height=480)
        parts = [decoder.feed(data[a:b]) for a, b in zip([0, *cuts], [*cuts, len(data)],
                                                          strict=True)]
        for field in ("t", "x", "y", "p"):
            assert np.array_equal(np.concatenate([getattr(e, field) for e in parts]),
                                  getattr(whole, field))


def test_decoder_fed_arbitrary_byte_splits_equals_one_shot_decode() -> None:
    rng = np.random.default_rng(6)
    batch = random_batch(rng, 5000, 3 * 10**8)
    packets = encode_evt3_packets(batch, 1_000_000)
    data = b"".join(p.events for p in packets)
    boundaries = np.cumsum([0] + [p.nbytes for p in packets])
    odd_cuts = rng.choice(np.arange(1, len(data), 2), 200, replace=False)  # mid-word cuts
    cuts = np.unique(np.concatenate([boundaries[:-1], odd_cuts]))
    chunks = []
    for a, b in zip(cuts, [*cuts[1:], len(data)], strict=True):
        # A chunk starting on a packet boundary gets that packet's stamp (exact); one starting
        # inside a packet gets the next packet's stamp: late, as a driver's stamp can be.
        k = int(np.searchsorted(boundaries, a, side="right")) - (1 if a in boundaries else 0)
        stamp = packets[min(k, len(packets) - 1)].stamp_ns
        chunks.append(EventPacketData(stamp, 640, 480, 0, 0, "evt3", data[a:b]))
    decoder = EventPacketDecoder()
    assert decode_all(chunks, decoder).equals(batch)
    assert decoder.stats.odd_length > 0


def test_every_packet_decodes_on_its_own() -> None:
    # Two rows only: consecutive packets often start on the row the previous one ended on.
    batch = random_batch(np.random.default_rng(8), 5000, 10**9, width=64, height=2)
    packets = encode_evt3_packets(batch, 1_000_000)
    stamps = [p.stamp_ns for p in packets] + [int(batch.t[-1]) + 1]
    for packet, t0, t1 in zip(packets, stamps, stamps[1:], strict=False):
        assert EventPacketDecoder().decode(packet).equals(batch.between(t0, t1))


def test_decoder_joining_mid_stream_times_events_exactly() -> None:
    rng = np.random.default_rng(7)
    batch = random_batch(rng, 20_000, 30 * 10**9)  # crosses a wrap before the join
    packets = encode_evt3_packets(batch, 1_000_000)
    half = len(packets) // 2
    out = decode_all(packets[half:])
    assert out.equals(batch.between(packets[half].stamp_ns, int(batch.t[-1]) + 1))
