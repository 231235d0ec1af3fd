"""EventArray messages (dvs_msgs, prophesee_event_msgs; ROS 1 and CDR) read with numpy."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from event_array_bags import (
    PACKAGES,
    array_type,
    event_array_message,
    event_array_store,
    serialize,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossspec_ros.events.event_array import (
    EventArrayDecoder,
    EventArrayFormatError,
    parse_event_array,
)

STORES = {True: event_array_store(ros1=True), False: event_array_store(ros1=False)}


@st.composite
def messages(draw: st.DrawFn) -> dict:
    ros1 = draw(st.booleans())
    n = draw(st.integers(0, 40))
    # ROS 1 time is two uint32, ROS 2 builtin_interfaces/Time an int32 and a uint32; rosbags
    # (the reference) holds ROS 1 seconds in an int32 too, so they stop before 2038 here
    sec = st.integers(0, 2**31 - 1) if ros1 else st.integers(-2**31, 2**31 - 1)
    nsec = st.integers(0, 999_999_999)
    return {
        "ros1": ros1,
        "package": draw(st.sampled_from(PACKAGES)),
        # the frame_id's length moves everything after it across CDR alignments
        "frame_id": draw(st.text(max_size=9)),
        "stamp_ns": draw(st.integers(0, 2**31 - 1)) * 10**9 + draw(nsec),
        "width": draw(st.integers(0, 2**32 - 1)),
        "height": draw(st.integers(0, 2**32 - 1)),
        "x": np.array(draw(st.lists(st.integers(0, 2**16 - 1), min_size=n, max_size=n)),
                      dtype=np.int64),
        "y": np.array(draw(st.lists(st.integers(0, 2**16 - 1), min_size=n, max_size=n)),
                      dtype=np.int64),
        "t": np.array([s * 10**9 + ns for s, ns in zip(
            draw(st.lists(sec, min_size=n, max_size=n)),
            draw(st.lists(nsec, min_size=n, max_size=n)), strict=True)], dtype=np.int64),
        "p": np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool),
        "little_endian": draw(st.booleans()),
    }


def serialized(m: dict) -> bytes:
    store = STORES[m["ros1"]]
    msg = event_array_message(store, m["package"], m["ros1"], m["stamp_ns"], m["width"],
                              m["height"], m["t"], m["x"], m["y"], m["p"], m["frame_id"])
    if m["ros1"] or m["little_endian"]:
        return serialize(store, msg, array_type(m["package"]), m["ros1"])
    return bytes(store.serialize_cdr(msg, array_type(m["package"]), little_endian=False))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=messages())
def test_numpy_reading_equals_rosbags_deserialization(m: dict) -> None:
    raw = serialized(m)
    store, msgtype = STORES[m["ros1"]], array_type(m["package"])
    reference = store.deserialize_ros1(raw, msgtype) if m["ros1"] else \
        store.deserialize_cdr(raw, msgtype)
    data = parse_event_array(raw, m["ros1"])
    stamp = reference.header.stamp
    assert data.stamp_ns == stamp.sec * 10**9 + stamp.nanosec
    assert data.frame_id == reference.header.frame_id
    assert (data.width, data.height) == (reference.width, reference.height)
    events = reference.events
    assert data.x.dtype == data.y.dtype == np.uint16 and data.t.dtype == np.int64
    assert data.x.tolist() == [e.x for e in events]
    assert data.y.tolist() == [e.y for e in events]
    assert data.t.tolist() == [e.ts.sec * 10**9 + e.ts.nanosec for e in events]
    assert data.p.tolist() == [int(e.polarity) for e in events]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=messages(), cut=st.floats(0.0, 1.0, exclude_max=True))
def test_cut_bytes_are_a_format_error_never_another_exception(m: dict, cut: float) -> None:
    raw = serialized(m)
    with pytest.raises(EventArrayFormatError):
        parse_event_array(raw[:int(len(raw) * cut)], m["ros1"])


def test_bytes_of_another_serialization_are_a_format_error() -> None:
    with pytest.raises(EventArrayFormatError, match="not plain CDR"):
        parse_event_array(b"\x00\x03\x00\x00" + bytes(40), ros1=False)


def python_lines_run(work, *args):
    """``work(*args)`` and how many Python lines it ran (line events of every frame: numpy's
    Python wrappers too)."""
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return trace

    before = sys.gettrace()  # a coverage tool's, if any: given back after
    sys.settrace(trace)
    try:
        result = work(*args)
    finally:
        sys.settrace(before)
    return result, count


def read_message(decoder: EventArrayDecoder, raw: bytes, ros1: bool):
    return decoder.decode(parse_event_array(raw, ros1))


def test_reading_a_message_runs_no_python_per_event() -> None:
    # a 5,000-event message reads in ~15 us (numpy over the bytes); a Python loop per event
    # (rosbags' deserializer: 8-10 ms) would run thousands more lines for 5,000 events than
    # for 50. Counted rather than timed: a unit test on a shared machine shows no speed.
    rng = np.random.default_rng(0)
    for ros1 in (True, False):
        store = STORES[ros1]
        lines = {}
        for n in (50, 5000):
            t = 1_700_000_000 * 10**9 + np.sort(rng.integers(0, 30_000_000, n))
            msg = event_array_message(store, "dvs_msgs", ros1, int(t[-1]), 346, 260, t,
                                      rng.integers(0, 346, n), rng.integers(0, 260, n),
                                      rng.integers(0, 2, n))
            raw = serialize(store, msg, array_type("dvs_msgs"), ros1)
            decoder = EventArrayDecoder()
            read_message(decoder, raw, ros1)  # first-call imports and caches
            batch, lines[n] = python_lines_run(read_message, decoder, raw, ros1)
            assert len(batch) == n
        assert lines[5000] <= lines[50] + 10, (ros1, lines)


def test_events_outside_the_sensor_are_dropped_and_counted() -> None:
    store = STORES[True]
    t = np.arange(6, dtype=np.int64) * 1000 + 10**18
    x = np.array([0, 9, 10, 3, 12, 1])   # 10 and 12 are outside a 10 px wide sensor
    y = np.array([0, 4, 0, 5, 1, 2])     # 5 is outside a 5 px high one
    msg = event_array_message(store, "dvs_msgs", True, 10**18, 10, 5, t, x, y,
                              np.array([1, 0, 1, 1, 0, 0]))
    decoder = EventArrayDecoder()
    batch = decoder.decode(parse_event_array(serialize(store, msg, array_type("dvs_msgs"),
                                                       True), ros1=True))
    assert batch.x.tolist() == [0, 9, 1] and batch.y.tolist() == [0, 4, 2]
    assert batch.t.tolist() == t[[0, 1, 5]].tolist() and batch.p.tolist() == [1, 0, 0]
    assert (batch.width, batch.height) == (10, 5)
    assert decoder.stats.out_of_bounds_events == 3 and decoder.stats.events == 3


def test_a_message_without_a_sensor_size_drops_its_events_and_says_so(caplog) -> None:
    store = STORES[False]
    t = np.array([10**18, 10**18 + 1])
    msg = event_array_message(store, "prophesee_event_msgs", False, 10**18, 0, 0, t,
                              np.array([1, 2]), np.array([3, 4]), np.array([0, 1]))
    decoder = EventArrayDecoder(name="/prophesee/events")
    raw = serialize(store, msg, array_type("prophesee_event_msgs"), False)
    assert len(decoder.decode(parse_event_array(raw, ros1=False))) == 0
    assert decoder.stats.invalid_size == 1 and decoder.stats.out_of_bounds_events == 2
    assert "/prophesee/events: EventArray with sensor size 0x0" in caplog.text
