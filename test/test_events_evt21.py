"""EVT 2.1: words written from Prophesee's description (test/evt21_reference.py, not crossspec's
encoder) decode to exactly their events, in either byte order the sensors send, whatever the
packet boundaries; time highs carry and wrap; damage is counted, never raised; the decode
path maps sensor time onto the ROS clock as it does for evt2."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
from evt21_reference import (
    cd_word,
    event_words,
    others_word,
    time_high_word,
    to_bytes,
    trigger_word,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossspec_ros.events import evt21
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.evt21 import LEGACY, LITTLE, Evt21Decoder, encode_evt21
from crossspec_ros.events.packet import EventPacketData
from crossspec_ros.events.words import WordEvents

ROS_T0 = 1_700_000_000_000_000_000
LAYOUTS = st.sampled_from([LITTLE, LEGACY])


def feed_all(decoder: Evt21Decoder, chunks: list[bytes]) -> WordEvents:
    outs = [decoder.feed(c) for c in chunks]
    return WordEvents(np.concatenate([o.t_us for o in outs]),
                      np.concatenate([o.x for o in outs]), np.concatenate([o.y for o in outs]),
                      np.concatenate([o.p for o in outs]),
                      unknown_words=sum(o.unknown_words for o in outs),
                      untimed_events=sum(o.untimed_events for o in outs),
                      triggers_p0=sum(o.triggers_p0 for o in outs),
                      triggers_p1=sum(o.triggers_p1 for o in outs))


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    return [data[a:b] for a, b in pairwise(edges)]


def as_tuples(ev: WordEvents) -> list[tuple[int, int, int, int]]:
    return list(zip(ev.t_us.tolist(), ev.x.tolist(), ev.y.tolist(), ev.p.tolist(), strict=True))


@st.composite
def event_lists(draw: st.DrawFn) -> list[tuple[int, int, int, int]]:
    """Time-sorted (t_us, x, y, p): runs of one time, row and polarity (vector words), times
    from 0 to past the 34-bit wrap, the full 11-bit address range."""
    n = draw(st.integers(0, 80))
    # a stream starts before the wrap (its first time high cannot tell it is past one)
    t = draw(st.one_of(st.integers(0, 1 << 20), st.integers(evt21.WRAP_US - 5000,
                                                              evt21.WRAP_US - 1)))
    width = draw(st.sampled_from([2048, 320, 40]))
    events = []
    for _ in range(n):
        if events:
            t += draw(st.sampled_from([0, 0, 0, 1, 63, 64, 1000, 1 << 27]))
        if events and draw(st.booleans()):  # a pixel to the right in the same row
            _, x, y, p = events[-1]
            x = min(x + draw(st.integers(1, 40)), width - 1)
        else:
            x, y, p = draw(st.integers(0, width - 1)), draw(st.integers(0, 2047)), \
                draw(st.integers(0, 1))
        events.append((t, x, y, p))
    return events


# ------------------------------------------------------------------------------ the format
def test_the_reference_writer_sends_prophesees_byte_order_example() -> None:
    # The format page's example: 0x0102030405060708 as the IMX636 and the GenX320 send it.
    assert to_bytes([0x0102030405060708], "legacy") == bytes.fromhex("0403020108070605")
    assert to_bytes([0x0102030405060708], "little") == bytes.fromhex("0807060504030201")


def test_evt21_words_decode_to_the_events_the_format_defines() -> None:
    words = [time_high_word(3 << 6), cd_word(1, 5, 32, 200, (1 << 0) | (1 << 3) | (1 << 31)),
             cd_word(0, 63, 2016, 0, 1), trigger_word(7, 1, True), others_word(99),
             time_high_word(4 << 6), cd_word(1, 0, 0, 2, 1 << 1)]
    ev = Evt21Decoder().feed(to_bytes(words))
    assert ev.t_us.tolist() == [3 * 64 + 5] * 3 + [3 * 64 + 63, 4 * 64]
    assert ev.x.tolist() == [32, 35, 63, 2016, 1]  # bit n: x + n, in bit order
    assert ev.y.tolist() == [200, 200, 200, 0, 2] and ev.p.tolist() == [1, 1, 1, 0, 1]
    assert (ev.triggers_p1, ev.triggers_p0, ev.unknown_words, ev.untimed_events) == (1, 0, 0, 0)


@given(events=event_lists())
@settings(max_examples=40, deadline=None)
def test_both_byte_orders_decode_to_the_same_events(events: list) -> None:
    words, _ = event_words(events)
    little, legacy = Evt21Decoder(), Evt21Decoder()
    a = as_tuples(little.feed(to_bytes(words, LITTLE)))
    b = as_tuples(legacy.feed(to_bytes(words, LEGACY)))
    assert a == b == events
    if events:
        assert (little.layout, legacy.layout) == (LITTLE, LEGACY)


def test_a_legacy_stream_is_read_once_its_first_time_high_arrives() -> None:
    decoder = Evt21Decoder()
    before = decoder.feed(to_bytes([cd_word(1, 1, 64, 5, 0b11)], LEGACY))
    assert len(before.t_us) == 0 and before.untimed_events > 0  # no time yet in any order
    ev = decoder.feed(to_bytes([time_high_word(640), cd_word(0, 2, 96, 7, 1 << 4)], LEGACY))
    assert as_tuples(ev) == [(642, 100, 7, 0)] and decoder.layout == LEGACY
    highs = [time_high_word(640 + 64 * k) for k in range(1, evt21.LOCK_MARGIN + 1)]
    decoder.feed(to_bytes(highs, LEGACY))
    assert decoder.layout_settled


def test_a_word_looking_like_a_time_high_in_the_other_byte_order_is_read_right() -> None:
    # Read as one 64-bit word, this LEGACY event word (x = y = 0, time low 0, valid bits
    # 31..28 = 1000) is a LITTLE time high: one look-alike each, the stream's first one wins.
    data = to_bytes([time_high_word(0), cd_word(0, 0, 0, 0, 1 << 31)], LEGACY)
    decoder = Evt21Decoder()
    assert as_tuples(decoder.feed(data)) == [(0, 31, 0, 0)] and decoder.layout == LEGACY


# ------------------------------------------------------------------------------ round trips
@given(events=event_lists(), layout=LAYOUTS, cuts=st.lists(st.integers(0, 10_000), max_size=6))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_decoding_gives_back_every_event_whatever_the_packet_boundaries(
        events: list, layout: str, cuts: list[int]) -> None:
    words, _ = event_words(events)
    ev = feed_all(Evt21Decoder(), split(to_bytes(words, layout), cuts))
    assert as_tuples(ev) == events  # exact, in order, through the 34-bit wrap
    assert (ev.unknown_words, ev.untimed_events) == (0, 0)


@given(events=event_lists(), layout=LAYOUTS, parts=st.integers(1, 5))
@settings(max_examples=100, deadline=None)
def test_crossspecs_encoder_writes_the_words_the_format_description_gives(
        events: list, layout: str, parts: int) -> None:
    arr = np.array(events, dtype=np.int64).reshape(-1, 4)
    ours, reference, high_ours, high_ref = [], [], None, None
    for part in np.array_split(np.arange(len(arr)), parts):  # a stream in several packets
        t, x, y, p = arr[part].T
        data, high_ours = encode_evt21(t, x, y, p, high_ours, layout)
        words, high_ref = event_words(arr[part].tolist(), high_ref)
        ours.append(data)
        reference.append(to_bytes(words, layout))
    assert ours == reference


def test_the_time_high_wraps_after_34_bits_and_time_keeps_growing() -> None:
    top = evt21.WRAP_US - 1  # the last microsecond before the wrap
    decoder = Evt21Decoder()
    before = decoder.feed(to_bytes([time_high_word(top), cd_word(1, top, 0, 0, 1)]))
    after = decoder.feed(to_bytes([time_high_word(0), cd_word(1, 0, 0, 0, 1)]))
    assert int(after.t_us[0]) == int(before.t_us[0]) + 1 == evt21.WRAP_US


def test_a_word_split_across_packets_and_the_time_high_carry_over() -> None:
    decoder = Evt21Decoder()
    data = to_bytes([time_high_word(640), cd_word(1, 1, 0, 6, 1 << 5)])
    assert len(decoder.feed(data[:11]).t_us) == 0  # the event word is cut after 3 bytes
    assert as_tuples(decoder.feed(data[11:])) == [(641, 5, 6, 1)]
    later = decoder.feed(to_bytes([cd_word(0, 3, 32, 9, 1)]))  # no time high: the last one
    assert as_tuples(later) == [(643, 32, 9, 0)]


# ------------------------------------------------------------------------------ damage
def test_triggers_are_counted_by_edge() -> None:
    words = [time_high_word(0), trigger_word(1, 0, True), trigger_word(2, 1, False),
             trigger_word(3, 0, False), cd_word(1, 4, 0, 0, 1)]
    ev = Evt21Decoder().feed(to_bytes(words, LEGACY))
    assert (ev.triggers_p1, ev.triggers_p0, len(ev.t_us)) == (1, 2, 1)


def test_reserved_word_types_are_counted_and_skipped() -> None:
    reserved = [(kind << 60) | 12345 for kind in (0x2, 0x3, 0x4, 0x5, 0x6, 0x7, 0x9, 0xB,
                                                 0xC, 0xD, 0xF)]
    ev = Evt21Decoder().feed(to_bytes([time_high_word(64), *reserved, cd_word(0, 0, 0, 0, 1)]))
    assert ev.unknown_words == len(reserved) and as_tuples(ev) == [(64, 0, 0, 0)]


def test_events_before_any_time_high_are_counted_one_per_valid_bit() -> None:
    ev = Evt21Decoder().feed(to_bytes([cd_word(1, 1, 32, 1, 0xF0F0), time_high_word(64),
                                       cd_word(1, 2, 32, 2, 1)]))
    assert ev.untimed_events == 8 and as_tuples(ev) == [(66, 32, 2, 1)]


def test_a_vector_reaching_past_the_sensor_keeps_its_pixels_inside() -> None:
    # A 320-wide sensor: a word at x = 288 covers 288..319; one at 320 lies outside.
    data = to_bytes([time_high_word(0), cd_word(1, 0, 288, 4, 0x8000_0001),
                     cd_word(0, 0, 320, 4, 0b111)])
    decoder = EventPacketDecoder()
    batch = decoder.decode(EventPacketData(ROS_T0, 320, 320, 0, 0, "evt21", data))
    assert batch.x.tolist() == [288, 319] and decoder.stats.out_of_bounds_events == 3


@given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=4),
       width=st.integers(1, 2048), height=st.integers(1, 2048))
@settings(max_examples=200, deadline=None)
def test_random_bytes_never_raise_and_never_leave_the_sensor(
        data: bytes, cuts: list[int], width: int, height: int) -> None:
    decoder = EventPacketDecoder()
    for i, chunk in enumerate(split(data, cuts)):
        batch = decoder.decode(EventPacketData(ROS_T0 + i, width, height, i, 0, "evt21", chunk))
        assert len(batch) == 0 or (int(batch.x.max()) < width and int(batch.y.max()) < height)
        assert batch.t.dtype == np.int64 and (len(batch) == 0 or int(batch.p.max()) <= 1)


# ------------------------------------------------------------------------------ decode path
def test_the_decode_path_puts_evt21_events_on_the_ros_clock() -> None:
    words, _ = event_words([(1000, 33, 3, 1), (1000, 34, 3, 1), (1500, 2, 4, 0)])
    # the first event's sensor time (1000 us) happened at the header stamp
    batch = EventPacketDecoder().decode(
        EventPacketData(ROS_T0, 640, 480, 0, 0, "evt21", to_bytes(words, LEGACY)))
    assert batch.t.tolist() == [ROS_T0, ROS_T0, ROS_T0 + 500_000]
    assert batch.x.tolist() == [33, 34, 2] and batch.p.tolist() == [1, 1, 0]


def test_the_encoding_is_accepted_under_each_name_drivers_and_docs_use() -> None:
    words, _ = event_words([(70, 1, 2, 1)])
    for name in ("evt21", "EVT21", "evt2.1", " EVT2.1 "):
        decoder = EventPacketDecoder()
        batch = decoder.decode(EventPacketData(ROS_T0, 640, 480, 0, 0, name, to_bytes(words)))
        assert len(batch) == 1 and decoder.stats.unsupported_encoding == 0, name


def test_a_stream_of_evt21_packets_decodes_exactly_on_the_ros_clock() -> None:
    rng = np.random.default_rng(7)
    n = 30_000
    t = np.sort(rng.integers(0, 2_000_000, n))
    x, y, p = rng.integers(0, 640, n), rng.integers(0, 480, n), rng.integers(0, 2, n)
    decoder, high, out = EventPacketDecoder(), None, []
    edges = np.searchsorted(t, np.arange(0, 2_000_001, 10_000))
    for seq, (a, b) in enumerate(pairwise(edges)):
        if a == b:
            continue
        data, high = encode_evt21(t[a:b], x[a:b], y[a:b], p[a:b], high, LEGACY)
        stamp = ROS_T0 + int(t[a]) * 1000  # stamped at its first event, as drivers do
        out.append(decoder.decode(EventPacketData(stamp, 640, 480, seq, 0, "evt21", data)))
    assert np.array_equal(np.concatenate([b.t for b in out]), ROS_T0 + t * 1000)
    assert np.array_equal(np.concatenate([b.x for b in out]), x)
    assert np.array_equal(np.concatenate([b.y for b in out]), y)
    assert np.array_equal(np.concatenate([b.p for b in out]), p)
    assert decoder.stats.events == n and decoder.stats.bad_packets == 0
