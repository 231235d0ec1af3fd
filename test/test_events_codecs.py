"""EVT 2.0 and libcaer_cmp word streams: hand-built words decode to the events the formats
define; encode -> decode is exact; state carries across packets; damage is counted."""

from __future__ import annotations

import numpy as np

from crossspec_ros.events import evt2, libcaer_cmp
from crossspec_ros.events.evt2 import Evt2Decoder, encode_evt2
from crossspec_ros.events.libcaer_cmp import LibcaerCmpDecoder, encode_libcaer_cmp


def u32(*words: int) -> bytes:
    return np.array(words, dtype="<u4").tobytes()


def u16(*words: int) -> bytes:
    return np.array(words, dtype="<u2").tobytes()


def cd2(on: int, t_low: int, x: int, y: int) -> int:
    return (on << 28) | (t_low << 22) | (x << 11) | y


def lc(code: int, value: int) -> int:
    return (code << 12) | value


def random_events(n: int, seed: int, span_us: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return (np.sort(rng.integers(0, span_us, n)), rng.integers(0, 640, n),
            rng.integers(0, 480, n), rng.integers(0, 2, n))


# ------------------------------------------------------------------------------ EVT 2.0
def test_evt2_words_decode_to_the_events_the_format_defines() -> None:
    data = u32((evt2.TIME_HIGH << 28) | 3, cd2(1, 5, 100, 200), cd2(0, 63, 2047, 0),
               (evt2.EXT_TRIGGER << 28) | (7 << 22) | 1, (evt2.OTHERS << 28) | 99,
               (evt2.TIME_HIGH << 28) | 4, cd2(1, 0, 1, 2))
    ev = Evt2Decoder().feed(data)
    assert ev.t_us.tolist() == [3 * 64 + 5, 3 * 64 + 63, 4 * 64]
    assert ev.x.tolist() == [100, 2047, 1] and ev.y.tolist() == [200, 0, 2]
    assert ev.p.tolist() == [1, 0, 1]
    assert (ev.triggers_p1, ev.triggers_p0, ev.unknown_words, ev.untimed_events) == (1, 0, 0, 0)


def test_evt2_time_high_and_split_words_carry_to_the_next_packet() -> None:
    decoder = Evt2Decoder()
    data = u32((evt2.TIME_HIGH << 28) | 10, cd2(1, 1, 5, 6), cd2(0, 2, 7, 8))
    first = decoder.feed(data[:6])  # the event word is split after 2 of its 4 bytes
    second = decoder.feed(data[6:])
    assert len(first.t_us) == 0
    assert second.t_us.tolist() == [641, 642] and second.x.tolist() == [5, 7]
    third = decoder.feed(u32(cd2(1, 3, 9, 9)))  # no time high in this packet: the last one
    assert third.t_us.tolist() == [643]


def test_evt2_events_before_any_time_high_are_counted_and_dropped() -> None:
    ev = Evt2Decoder().feed(u32(cd2(1, 1, 1, 1), (evt2.TIME_HIGH << 28) | 1, cd2(1, 2, 2, 2)))
    assert ev.untimed_events == 1 and ev.t_us.tolist() == [66]


def test_evt2_counts_words_of_no_evt2_type() -> None:
    ev = Evt2Decoder().feed(u32((evt2.TIME_HIGH << 28), (0x3 << 28) | 5, (0x9 << 28),
                                cd2(1, 0, 0, 0)))
    assert ev.unknown_words == 2 and len(ev.t_us) == 1


def test_evt2_time_wraps_after_34_bits() -> None:
    top = (1 << evt2.HIGH_BITS) - 1
    decoder = Evt2Decoder()
    before = decoder.feed(u32((evt2.TIME_HIGH << 28) | top, cd2(1, 63, 0, 0)))
    after = decoder.feed(u32((evt2.TIME_HIGH << 28) | 0, cd2(1, 0, 0, 0)))
    assert int(after.t_us[0]) == int(before.t_us[0]) + 1 == evt2.WRAP_US


def test_evt2_encode_then_decode_is_exact_across_packets() -> None:
    t, x, y, p = random_events(20_000, seed=1, span_us=50_000)
    t = t + (1 << 30)
    decoder, high, out = Evt2Decoder(), None, []
    for part in np.array_split(np.arange(len(t)), 37):
        data, high = encode_evt2(t[part], x[part], y[part], p[part], high)
        out.append(decoder.feed(data))
    assert np.array_equal(np.concatenate([o.t_us for o in out]), t)
    assert np.array_equal(np.concatenate([o.x for o in out]), x)
    assert np.array_equal(np.concatenate([o.y for o in out]), y)
    assert np.array_equal(np.concatenate([o.p for o in out]), p)


# ------------------------------------------------------------------------------ libcaer_cmp
def test_libcaer_words_decode_to_the_events_the_format_defines() -> None:
    words = u16(lc(libcaer_cmp.TIME_HIGH, 1), lc(libcaer_cmp.TIME_LOW, 5),
                lc(libcaer_cmp.ADDR_X, 7), lc(libcaer_cmp.ADDR_Y, (1 << 11) | 3),
                lc(libcaer_cmp.VECT_BASE_Y, 16), lc(libcaer_cmp.VECT_8, 0b101),
                lc(libcaer_cmp.VECT_8, 0b1000_0000), lc(libcaer_cmp.TIME_LOW, 6),
                lc(libcaer_cmp.ADDR_X, 9), lc(libcaer_cmp.ADDR_Y, 2))
    ev = LibcaerCmpDecoder().feed(words)
    assert ev.t_us.tolist() == [4101, 4101, 4101, 4101, 4102]
    assert ev.x.tolist() == [7, 7, 7, 7, 9]
    assert ev.y.tolist() == [3, 16, 18, 31, 2]  # the second VECT_8 starts 8 rows further
    assert ev.p.tolist() == [1, 0, 0, 0, 0]


def test_libcaer_time_restarts_per_packet_and_x_and_vector_base_carry_over() -> None:
    decoder = LibcaerCmpDecoder()
    decoder.feed(u16(lc(libcaer_cmp.TIME_LOW, 100), lc(libcaer_cmp.ADDR_X, 12),
                     lc(libcaer_cmp.VECT_BASE_Y, (1 << 11) | 40),
                     lc(libcaer_cmp.VECT_8, 1)))
    ev = decoder.feed(u16(lc(libcaer_cmp.VECT_8, 0b10), lc(libcaer_cmp.ADDR_Y, 5)))
    assert ev.t_us.tolist() == [0, 0]  # no time word yet in this packet: its time base
    assert ev.x.tolist() == [12, 12]
    assert ev.y.tolist() == [40 + 8 + 1, 5] and ev.p.tolist() == [1, 0]


def test_libcaer_counts_vect12_and_words_of_no_libcaer_code() -> None:
    ev = LibcaerCmpDecoder().feed(u16(lc(libcaer_cmp.VECT_12, 0xFFF), lc(0x9, 1),
                                      lc(0xF, 2), lc(libcaer_cmp.ADDR_Y, 1)))
    assert (ev.unsupported_words, ev.unknown_words, len(ev.t_us)) == (1, 2, 1)


def test_libcaer_encode_then_decode_is_exact() -> None:
    t, x, y, p = random_events(20_000, seed=2, span_us=(1 << 24) - 1)
    ev = LibcaerCmpDecoder().feed(encode_libcaer_cmp(t, x, y, p))
    for decoded, expected in zip((ev.t_us, ev.x, ev.y, ev.p), (t, x, y, p), strict=True):
        assert np.array_equal(decoded, expected)


def test_libcaer_a_word_split_across_packets_is_carried() -> None:
    data = u16(lc(libcaer_cmp.ADDR_X, 3), lc(libcaer_cmp.ADDR_Y, 4))
    decoder = LibcaerCmpDecoder()
    assert len(decoder.feed(data[:3]).t_us) == 0
    ev = decoder.feed(data[3:])
    assert (ev.x.tolist(), ev.y.tolist()) == ([3], [4])


# ------------------------------------------------------------------------------ decode path
def test_the_decode_path_puts_evt2_and_libcaer_events_on_the_ros_clock() -> None:
    from crossspec_ros.events.decode import EventPacketDecoder
    from crossspec_ros.events.packet import EventPacketData

    t0 = 1_700_000_000_000_000_000
    evt2_bytes, _ = encode_evt2(np.array([1000, 1500]), np.array([1, 2]), np.array([3, 4]),
                                np.array([1, 0]))
    # the first event's sensor time (1000 us) happened at the header stamp
    evt2_batch = EventPacketDecoder().decode(
        EventPacketData(t0, 640, 480, 0, 0, "evt2", evt2_bytes))
    assert evt2_batch.t.tolist() == [t0, t0 + 500_000]
    caer_bytes = encode_libcaer_cmp(np.array([0, 7]), np.array([5, 6]), np.array([7, 8]),
                                    np.array([0, 1]))
    caer = EventPacketDecoder().decode(
        EventPacketData(t0 + 123, 346, 260, 0, t0, "libcaer_cmp", caer_bytes))
    assert caer.t.tolist() == [t0, t0 + 7000]  # time_base + us, whatever the stamp says
    assert caer.x.tolist() == [5, 6] and caer.p.tolist() == [0, 1]


def test_libcaer_events_outside_the_sensor_are_dropped_and_counted() -> None:
    from crossspec_ros.events.decode import EventPacketDecoder
    from crossspec_ros.events.packet import EventPacketData

    data = u16(lc(libcaer_cmp.ADDR_X, 10), lc(libcaer_cmp.VECT_BASE_Y, 250),
               lc(libcaer_cmp.VECT_8, 0xFF), lc(libcaer_cmp.ADDR_Y, 1))
    decoder = EventPacketDecoder()
    batch = decoder.decode(EventPacketData(0, 346, 260, 0, 0, "libcaer_cmp", data))
    assert batch.y.tolist() == [250, 251, 252, 253, 254, 255, 256, 257, 1]
    decoder = EventPacketDecoder()
    batch = decoder.decode(EventPacketData(0, 346, 255, 0, 0, "libcaer_cmp", data))
    assert len(batch) == 6 and decoder.stats.out_of_bounds_events == 3


def test_libcaer_a_vector_base_alone_carries_its_polarity_to_the_next_packet() -> None:
    decoder = LibcaerCmpDecoder()  # found by the fuzzer: the code's bits leaked into it
    decoder.feed(u16(lc(libcaer_cmp.VECT_BASE_Y, (1 << 11) | 4)))
    ev = decoder.feed(u16(lc(libcaer_cmp.VECT_8, 1)))
    assert ev.p.tolist() == [1] and ev.y.tolist() == [4]
