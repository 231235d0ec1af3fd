"""Bags of dvs_msgs / prophesee_event_msgs EventArrays (ROS 1 and ROS 2) through crossspec:
`events`, the input stream (`windows`...), the player's conversion and `convert-bag`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from event_array_bags import (
    NS,
    array_type,
    event_array_message,
    event_array_store,
    serialize,
    small_pattern,
    write_pattern_bag,
)

from crossspec_ros.bags.bag_convert import EVENT_TOPIC, IMAGE_TOPIC, convert_bag
from crossspec_ros.bags.inputs import InputStats, read_inputs
from crossspec_ros.bags.replay import BagReplay
from crossspec_ros.bags.ros2_conversion import Ros2Conversion
from crossspec_ros.bags.typestore import EVENT_PACKET_TYPE, typestore
from crossspec_ros.cli.main import main
from crossspec_ros.events.bag import read_events
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.packet import from_msg
from crossspec_ros.nodes.graph import input_topic_parameters

OUTSIDE_EVERY = 97  # every 97th event lies outside the sensor


@pytest.fixture(scope="module", params=["dvs_msgs", "prophesee_event_msgs"])
def ros1_bag(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("ros1") / f"{request.param}.bag"
    return write_pattern_bag(path, request.param, ros1=True, seconds=2.0,
                             outside_every=OUTSIDE_EVERY)


def windows_json(bag: Path, capsys) -> tuple[list[dict], dict]:
    assert main(["windows", str(bag), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return lines[:-1], lines[-1]["summary"]


def test_events_reports_type_and_exact_counts_by_polarity(ros1_bag, capsys):
    assert main(["events", str(ros1_bag.path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["topics"]["/dvs/events"]
    inside = ros1_bag.inside
    assert report["type"] == array_type(ros1_bag.path.stem)
    assert report["encoding"] == "" and report["triggers"] is None
    assert (report["width"], report["height"]) == (small_pattern().width, small_pattern().height)
    assert report["packets"] == 100  # 2 s of 20 ms messages
    assert report["cd_events"] == {"p0": int(np.count_nonzero(inside.p == 0)),
                                   "p1": int(np.count_nonzero(inside.p))}
    assert report["bad"]["out_of_bounds_events"] == ros1_bag.outside > 0
    assert report["t_first_us"] == inside.t[0] // 1000
    assert report["t_last_us"] == inside.t[-1] // 1000
    assert main(["events", str(ros1_bag.path)]) == 0
    table = capsys.readouterr().out
    assert f"{ros1_bag.path.stem}/EventArray" in table and "out_of_bounds_events=" in table


def test_the_input_stream_has_the_events_inside_the_sensor_and_grey_frames(ros1_bag):
    stats = InputStats()
    items = list(read_inputs(ros1_bag.path, stats=stats))
    events = EventBatch.concat([i.events for i in items if i.events is not None])
    assert events.equals(ros1_bag.inside)  # exact: ns times, no event dropped or moved
    frames = [i.frame for i in items if i.frame is not None]
    assert [f.stamp_ns for f in frames] == ros1_bag.frame_stamps
    grey = small_pattern().intensity(frames[3].stamp_ns)
    assert np.array_equal(frames[3].image, np.repeat(grey[:, :, None], 3, axis=2))
    assert stats.out_of_bounds_events == ros1_bag.outside
    assert stats.event_packets == 100 and stats.unreadable_messages == 0
    assert read_events(ros1_bag.path).equals(ros1_bag.inside)


def test_a_ros2_bag_of_the_ported_messages_reads_like_the_ros1_bag(ros1_bag, tmp_path, capsys):
    ros2 = write_pattern_bag(tmp_path / "ros2", ros1_bag.path.stem, ros1=False, seconds=2.0,
                             outside_every=OUTSIDE_EVERY)
    assert read_events(ros2.path).equals(ros1_bag.inside)
    assert windows_json(ros2.path, capsys) == windows_json(ros1_bag.path, capsys)


def decode_replay(replay: BagReplay) -> tuple[EventBatch, list]:
    store, decoder = typestore(), EventPacketDecoder()
    batches, images = [], []
    for message in replay.messages():
        msg = store.deserialize_cdr(message.data, message.msgtype)
        if message.msgtype == EVENT_PACKET_TYPE:
            assert msg.encoding == "evt3"
            batches.append(decoder.decode(from_msg(msg)))
        else:
            images.append(msg)
    return EventBatch.concat(batches), images


def test_the_player_replays_event_arrays_as_evt3_packets_and_ros1_images_as_cdr(ros1_bag):
    replay = BagReplay(ros1_bag.path)
    assert replay.topics == {"/dvs/events": EVENT_PACKET_TYPE,
                             "/dvs/image_raw": "sensor_msgs/msg/Image"}
    events, images = decode_replay(replay)
    assert events.equals(ros1_bag.inside)  # the pattern's times are whole microseconds
    assert [m.header.stamp.sec * NS + m.header.stamp.nanosec for m in images] == \
        ros1_bag.frame_stamps
    assert {m.encoding for m in images} == {"mono8"}
    counts = replay.event_counts["/dvs/events"]
    assert counts.balanced and counts.outside_sensor == ros1_bag.outside
    assert counts.events_in == len(ros1_bag.events) and counts.packets == 100


@pytest.mark.parametrize("ros1", [True, False], ids=["ros1", "ros2"])
def test_convert_bag_writes_what_drive_replays_and_counts_every_event(ros1, tmp_path, capsys):
    source = write_pattern_bag(tmp_path / ("in.bag" if ros1 else "in"), "dvs_msgs", ros1=ros1,
                               seconds=2.0, outside_every=OUTSIDE_EVERY)
    out = tmp_path / "out"
    assert main(["convert-bag", str(source.path), str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    inside = len(source.inside)
    assert (f"check:    {len(source.events):,} events read == {inside:,} events in the "
            f"packets + {source.outside:,} outside the sensor (dropped)") in printed
    assert f"/dvs/events (dvs_msgs/msg/EventArray) -> {EVENT_TOPIC}: 100 evt3" in printed
    assert f"/dvs/image_raw (sensor_msgs/msg/Image) -> {IMAGE_TOPIC}: 40" in printed
    # the converted bag: crossspec's topics, the same windows, the events inside the sensor
    replay = BagReplay(out)
    assert replay.topics == {EVENT_TOPIC: EVENT_PACKET_TYPE, IMAGE_TOPIC: "sensor_msgs/msg/Image"}
    assert windows_json(out, capsys)[0] == windows_json(source.path, capsys)[0]
    assert read_events(out).equals(source.inside)
    # an existing OUT is kept unless --overwrite
    assert main(["convert-bag", str(source.path), str(out), "--quiet"]) == 1
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert main(["convert-bag", str(source.path), str(out), "--quiet", "--overwrite"]) == 0


def test_convert_bag_report_balances_with_the_dropped_events(ros1_bag, tmp_path):
    report = convert_bag(ros1_bag.path, tmp_path / "out", progress=False)
    counts = report.events
    assert counts.events_in == len(ros1_bag.events)
    assert counts.events_out == len(ros1_bag.inside)
    assert counts.outside_sensor == ros1_bag.outside and counts.out_of_order == 0
    assert (report.event_messages, report.images) == (100, 40)


def test_events_that_go_back_in_time_are_dropped_and_counted_by_the_conversion():
    store = event_array_store(ros1=True)
    t0 = 1_700_000_000 * NS

    def message(times_us: list[int]) -> bytes:
        t = t0 + np.asarray(times_us, dtype=np.int64) * 1000
        n = len(t)
        msg = event_array_message(store, "dvs_msgs", True, int(t.max()), 10, 10, t,
                                  np.arange(n) % 10, np.arange(n) % 10, np.arange(n) % 2)
        return serialize(store, msg, array_type("dvs_msgs"), True)

    conversion = Ros2Conversion([], ros1=True)
    packets = conversion.convert("/dvs/events", array_type("dvs_msgs"), message([5, 1, 9]))
    packets += conversion.convert("/dvs/events", array_type("dvs_msgs"), message([8, 9, 12]))
    counts = conversion.counts["/dvs/events"]
    # the first message is sorted; of the second, 8 us lies before the 9 us already written
    assert (counts.events_in, counts.events_out, counts.out_of_order) == (6, 5, 1)
    assert counts.balanced and counts.packets == len(packets) == 2
    decoder = EventPacketDecoder()
    decoded = [decoder.decode(from_msg(typestore().deserialize_cdr(p, EVENT_PACKET_TYPE)))
               for p in packets]
    assert [((b.t - t0) // 1000).tolist() for b in decoded] == [[1, 5, 9], [9, 12]]


def test_drive_points_its_nodes_at_the_bags_topics_where_the_config_names_others(tmp_path):
    assert input_topic_parameters(None, "/event_camera/events", "/camera/image_raw") == {}
    pointed = input_topic_parameters(None, "/dvs/events", "/dvs/image_raw")
    assert pointed == {kind: {"event_topic": "dvs/events", "rgb_topic": "dvs/image_raw"}
                       for kind in ("draft", "verifier", "viz")}
    compressed = input_topic_parameters(None, None, "/cam/image/compressed",
                                        "sensor_msgs/msg/CompressedImage")
    assert compressed["verifier"] == {"rgb_topic": "cam/image"}
    config = tmp_path / "c.yaml"
    config.write_text("/**:\n  ros__parameters:\n    event_topic: dvs/events\n")
    assert input_topic_parameters(config, "/dvs/events", None) == {}


def message_parts(bag, seconds: float = 1.0, message_ms: int = 20) -> list[EventBatch]:
    """The events of each message of a pattern bag, as written before any shift."""
    start, step = small_pattern().start_ns, message_ms * 1_000_000
    return [bag.inside.between(t0, t0 + step)
            for t0 in range(start, start + round(seconds * NS), step)]


@pytest.mark.parametrize("shift_s", [400_000, 2_000_000, -400_000])
def test_one_event_array_far_from_the_topic_is_dropped_counted_and_the_replay_goes_on(
        tmp_path, shift_s):
    # +400,000 s: every later event was dropped as "out of order"; +2,000,000 s: the replay
    # ended on "sensor time ... too large: pass an epoch_ns"
    bag = write_pattern_bag(tmp_path / "in.bag", seconds=1.0, shifted={10: shift_s * NS})
    parts = message_parts(bag)
    events, _ = decode_replay(BagReplay(bag.path))
    expected = EventBatch.concat([p for k, p in enumerate(parts) if k != 10])
    assert events.equals(expected)
    replay = BagReplay(bag.path)
    list(replay.messages())
    counts = replay.event_counts["/dvs/events"]
    assert (counts.time_outliers, counts.out_of_order) == (len(parts[10]), 0)
    assert counts.balanced and counts.events_out == len(expected)


def test_convert_bag_counts_a_far_off_event_array_and_names_no_missing_option(
        tmp_path, capsys):
    bag = write_pattern_bag(tmp_path / "in.bag", seconds=1.0, shifted={10: 2_000_000 * NS})
    out = tmp_path / "out"
    assert main(["convert-bag", str(bag.path), str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    n = len(message_parts(bag)[10])
    assert f"+ {n:,} far from the topic's time" in printed
    assert "epoch_ns" not in printed
    assert len(read_events(out)) == len(bag.inside) - n


def test_a_clock_that_jumps_back_for_good_restarts_the_evt3_stream_and_loses_nothing(tmp_path):
    # from message 25 on the driver's clock is 1,000 s earlier (a reset): a jump, not an outlier
    bag = write_pattern_bag(tmp_path / "in.bag", seconds=1.0,
                            shifted={k: -1000 * NS for k in range(25, 50)})
    events, _ = decode_replay(BagReplay(bag.path))
    parts = message_parts(bag)
    moved = [EventBatch(p.t - (1000 * NS if k >= 25 else 0), p.x, p.y, p.p, p.width, p.height)
             for k, p in enumerate(parts)]
    assert events.equals(EventBatch.concat(moved))
