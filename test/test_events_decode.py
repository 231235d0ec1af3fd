"""The decode path on bad input: warned once, counted, never raised."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pytest
from bag_helpers import evt21_packets

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.encode import encode_evt3_packets
from crossspec_ros.events.packet import EventPacketData

ROS_T0 = 1_700_000_000_000_000_000


def packets_of(n: int = 2000, seed: int = 0, width: int = 640, height: int = 480,
               span_ns: int = 10**8, t0: int = ROS_T0) -> tuple[EventBatch, list[EventPacketData]]:
    rng = np.random.default_rng(seed)
    t = t0 + np.sort(rng.integers(0, span_ns // 1000, n)) * 1000
    batch = EventBatch(t, rng.integers(0, width, n), rng.integers(0, height, n),
                       rng.integers(0, 2, n), width, height)
    return batch, encode_evt3_packets(batch, 1_000_000)


def warnings_in(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("encoding", ["libcaer", "mono", "evt4", "trigger", ""])
def test_unknown_encoding_is_warned_once_and_counted(
        caplog: pytest.LogCaptureFixture, encoding: str) -> None:
    _, packets = packets_of()
    decoder = EventPacketDecoder(name="/cam/events")
    with caplog.at_level(logging.WARNING):
        outs = [decoder.decode(replace(p, encoding=encoding)) for p in packets]
    assert all(len(o) == 0 for o in outs)
    assert decoder.stats.unsupported_encoding == len(packets)
    warned = warnings_in(caplog)
    assert len(warned) == 1
    assert repr(encoding) in warned[0] and "/cam/events" in warned[0] and "evt3" in warned[0]


def test_big_endian_packets_are_unsupported_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    _, packets = packets_of()
    decoder = EventPacketDecoder()
    with caplog.at_level(logging.WARNING):
        outs = [decoder.decode(replace(p, is_bigendian=True)) for p in packets[:5]]
    assert sum(len(o) for o in outs) == 0
    assert decoder.stats.big_endian == 5
    assert len(warnings_in(caplog)) == 1


def test_out_of_range_coordinates_are_dropped_and_counted() -> None:
    # Encoded for 640x480, announced as 320x240: a quarter of the events fit.
    batch, packets = packets_of(n=4000, seed=1)
    decoder = EventPacketDecoder()
    out = EventBatch.concat([decoder.decode(replace(p, width=320, height=240))
                             for p in packets], 320, 240)
    inside = (batch.x < 320) & (batch.y < 240)
    assert out.in_bounds_mask().all()
    assert decoder.stats.out_of_bounds_events == int((~inside).sum())
    assert np.array_equal(out.x, batch.x[inside]) and np.array_equal(out.t, batch.t[inside])


def test_empty_packets_are_counted_without_warnings(caplog: pytest.LogCaptureFixture) -> None:
    decoder = EventPacketDecoder()
    with caplog.at_level(logging.WARNING):
        for events in (b"", np.zeros(0, np.uint8)):
            out = decoder.decode(EventPacketData(ROS_T0, 640, 480, 0, 0, "evt3", events))
            assert len(out) == 0 and (out.width, out.height) == (640, 480)
    assert decoder.stats.empty_packets == 2
    assert warnings_in(caplog) == []


def test_odd_length_packets_carry_the_half_word(caplog: pytest.LogCaptureFixture) -> None:
    batch, packets = packets_of()
    data = b"".join(p.events for p in packets)
    cut = 2 * (len(data) // 4) + 1
    halves = [replace(packets[0], events=data[:cut]), replace(packets[0], events=data[cut:])]
    decoder = EventPacketDecoder()
    with caplog.at_level(logging.WARNING):
        out = EventBatch.concat([decoder.decode(h) for h in halves])
    assert np.array_equal(out.x, batch.x) and np.array_equal(out.p, batch.p)
    assert decoder.stats.odd_length == 2
    assert len(warnings_in(caplog)) == 1


def test_sensor_size_change_restarts_the_decoder(caplog: pytest.LogCaptureFixture) -> None:
    batch_a, packets_a = packets_of(seed=2)
    batch_b, packets_b = packets_of(seed=3, width=320, height=240, t0=ROS_T0 + 10**9)
    decoder = EventPacketDecoder()
    with caplog.at_level(logging.WARNING):
        out_a = EventBatch.concat([decoder.decode(p) for p in packets_a])
        # the first packet of the new size is held (empty, the old size) until the next
        out_b = EventBatch.concat([b for b in map(decoder.decode, packets_b) if len(b)])
    assert out_a.equals(batch_a) and out_b.equals(batch_b)
    assert decoder.stats.size_changes == 1
    assert any("320x240" in w for w in warnings_in(caplog))


@pytest.mark.parametrize("encoding", ["evt3", "evt21"])
def test_one_packet_labelled_with_another_sensor_size_is_dropped_counted_and_warned_once(
        caplog: pytest.LogCaptureFixture, encoding: str) -> None:
    batch, packets = packets_of(seed=8, width=320, height=240)
    if encoding == "evt21":
        packets = evt21_packets(batch, ROS_T0)
    odd = [10, 40]  # two lone packets labelled 160x120 in a 320x240 stream
    labelled = [replace(p, width=160, height=120) if i in odd else p
                for i, p in enumerate(packets)]
    decoder = EventPacketDecoder(name="/cam/events")
    with caplog.at_level(logging.WARNING):
        outs = [decoder.decode(p) for p in labelled]
    # the stream goes on at its own size, decoded exactly but for the odd packets' events
    assert {(o.width, o.height) for o in outs} == {(320, 240)}
    assert [len(outs[i]) for i in odd] == [0, 0]
    kept = np.ones(len(batch), bool)
    for i in odd:
        kept[(batch.t >= packets[i].stamp_ns) & (batch.t < packets[i + 1].stamp_ns)] = False
    assert EventBatch.concat(outs).equals(batch.take(kept))
    assert (decoder.stats.size_mismatch, decoder.stats.size_changes) == (2, 0)
    assert decoder.stats.bad_packets == 2  # what the draft node's diagnostics report
    warned = [w for w in warnings_in(caplog) if "160x120" in w]
    stamp_s = f"{packets[10].stamp_ns / 1e9:.6f}"
    assert len(warned) == 1 and "/cam/events" in warned[0] and stamp_s in warned[0]
    assert "320x240" in warned[0] and "size_mismatch" in warned[0]


def test_a_sensor_size_change_is_taken_once_the_next_packet_confirms_it() -> None:
    batch_a, packets_a = packets_of(seed=9)
    batch_b, packets_b = packets_of(seed=10, width=320, height=240, t0=ROS_T0 + 10**9)
    decoder = EventPacketDecoder()
    outs_a = [decoder.decode(p) for p in packets_a]
    first_b = decoder.decode(packets_b[0])  # held: one packet of a new size may be damage
    assert len(first_b) == 0 and (first_b.width, first_b.height) == (640, 480)
    second_b = decoder.decode(packets_b[1])  # confirmed: both packets' events, in order
    rest_b = [decoder.decode(p) for p in packets_b[2:]]
    assert EventBatch.concat(outs_a).equals(batch_a)
    assert EventBatch.concat([second_b, *rest_b]).equals(batch_b)
    assert (decoder.stats.size_changes, decoder.stats.size_mismatch) == (1, 0)


def test_a_packet_still_held_when_the_stream_ends_is_dropped_and_counted() -> None:
    _, packets = packets_of(seed=11)
    decoder = EventPacketDecoder()
    for p in packets[:-1]:
        decoder.decode(p)
    assert len(decoder.decode(replace(packets[-1], width=160, height=120))) == 0
    decoder.finish()
    assert decoder.stats.size_mismatch == 1


@pytest.mark.parametrize("size", [(0, 480), (640, 0), (4096, 480), (-1, 5)])
def test_invalid_sensor_sizes_are_counted(size: tuple[int, int]) -> None:
    _, packets = packets_of()
    decoder = EventPacketDecoder()
    out = decoder.decode(replace(packets[0], width=size[0], height=size[1]))
    assert len(out) == 0 and decoder.stats.invalid_size == 1


def test_clock_recovers_exactly_after_a_camera_reset() -> None:
    # The camera restarts 3 s in: its sensor clock starts again from 0 (a new epoch).
    batch_a, packets_a = packets_of(n=3000, seed=4, span_ns=3 * 10**9)
    t_reset = int(batch_a.t[-1]) + 5_000_000
    batch_b, _ = packets_of(n=3000, seed=5, span_ns=3 * 10**9, t0=t_reset)
    packets_b = encode_evt3_packets(batch_b, 1_000_000, epoch_ns=t_reset)
    decoder = EventPacketDecoder()
    out = EventBatch.concat([decoder.decode(p) for p in packets_a + packets_b])
    assert out.equals(EventBatch.concat([batch_a, batch_b]))
    assert decoder.stats.clock_resets == 1


def test_clock_follows_a_bag_loop_exactly() -> None:
    # Replaying the same packets again (ROS time and sensor time both go back) after a wrap.
    batch, packets = packets_of(n=3000, seed=6, span_ns=20 * 10**9)
    decoder = EventPacketDecoder()
    first = EventBatch.concat([decoder.decode(p) for p in packets])
    second = EventBatch.concat([decoder.decode(p) for p in packets])
    assert first.equals(batch) and second.equals(batch)


def test_decoder_accepts_array_payloads_like_bytes() -> None:
    batch, packets = packets_of(seed=7)
    decoder = EventPacketDecoder()
    arrays = [replace(p, events=np.frombuffer(p.events, np.uint8)) for p in packets]
    assert EventBatch.concat([decoder.decode(p) for p in arrays]).equals(batch)


def test_packets_skipped_in_the_seq_numbers_are_counted_missing_and_warned_once(
        caplog: pytest.LogCaptureFixture) -> None:
    _, packets = packets_of()
    assert [p.seq for p in packets] == list(range(len(packets)))  # the encoder counts them
    kept = [p for p in packets if p.seq not in (5, 6, 7, 40)]
    decoder = EventPacketDecoder(name="/cam/events")
    with caplog.at_level(logging.WARNING):
        for packet in kept:
            decoder.decode(packet)
    assert decoder.stats.missing_packets == 4
    warned = [w for w in warnings_in(caplog) if "missing" in w]
    assert len(warned) == 1 and "seq 8 follows 4" in warned[0] and "/cam/events" in warned[0]


@pytest.mark.parametrize("seqs", [[0, 0, 0, 0], [10, 11, 3, 4], [5, 6, 10**7, 10**7 + 1]],
                         ids=["always zero", "a loop", "a restarted driver"])
def test_seq_numbers_that_stay_go_back_or_leap_are_no_loss(seqs: list[int]) -> None:
    _, packets = packets_of()
    decoder = EventPacketDecoder()
    for packet, seq in zip(packets, seqs, strict=False):
        decoder.decode(replace(packet, seq=seq))
    assert decoder.stats.missing_packets == 0


def test_a_packet_that_comes_after_a_later_one_is_late_not_lost(
        caplog: pytest.LogCaptureFixture) -> None:
    # a bag whose packet was stored with a wild log time replays it last (issue 53, item 3)
    _, packets = packets_of()
    moved = packets[6]
    decoder = EventPacketDecoder(name="/cam/events")
    with caplog.at_level(logging.WARNING):
        for packet in [*packets[:6], *packets[7:12], moved, packets[12]]:
            decoder.decode(packet)
    assert decoder.stats.missing_packets == 0 and decoder.stats.late_packets == 1
    warned = warnings_in(caplog)
    assert any("seq 7 follows 5" in w and "unless they come late" in w for w in warned)
    assert any("seq 6 came after seq 11: late, not lost" in w for w in warned)


def test_packets_let_go_while_inactive_are_not_missing_once_the_sequence_restarts() -> None:
    _, packets = packets_of()
    decoder = EventPacketDecoder()
    for packet in packets[:3]:
        decoder.decode(packet)
    decoder.restart_sequence()  # the node was inactive: packets 3-9 were ignored on purpose
    for packet in packets[10:13]:
        decoder.decode(packet)
    assert decoder.stats.missing_packets == 0
