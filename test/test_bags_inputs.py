"""Bags as input streams: test-pattern bags, the windows command, bad images."""

import json

import numpy as np
import pytest

from crossspec_ros.bags.inputs import InputStats, read_inputs
from crossspec_ros.bags.test_pattern import TestPattern, write_test_pattern_bag
from crossspec_ros.bags.writer import BagWriter
from crossspec_ros.cli.main import main
from crossspec_ros.events.bag import EventBagError
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.encode import encode_evt3_packets


@pytest.fixture(scope="module")
def pattern_bag(tmp_path_factory):
    path = tmp_path_factory.mktemp("bags") / "pattern"
    counts = write_test_pattern_bag(path, duration_s=3.0, rgb_gap_s=(1.0, 2.0))
    return path, counts


def test_test_pattern_bag_decodes_to_exactly_the_generated_events(pattern_bag):
    path, counts = pattern_bag
    pattern = TestPattern()
    expected = EventBatch.concat([pattern.events(pattern.start_ns + k * 1_000_000_000,
                                                 pattern.start_ns + (k + 1) * 1_000_000_000)
                                  for k in range(3)])
    items = list(read_inputs(path))
    decoded = EventBatch.concat([i.events for i in items if i.events is not None])
    assert decoded.equals(expected)
    frames = [i.frame for i in items if i.frame is not None]
    assert len(frames) == counts["frames"] == 40  # 3 s at 20 Hz minus the 1 s gap
    assert np.array_equal(frames[0].image, pattern.rgb(frames[0].stamp_ns))
    log_times = [i.log_time_ns for i in items]
    assert log_times == sorted(log_times)


def test_windows_command_lists_windows_and_flags_the_one_without_rgb(pattern_bag, capsys):
    path, counts = pattern_bag
    assert main(["windows", str(path), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    windows, summary = lines[:-1], lines[-1]["summary"]
    assert [w["window"] for w in windows] == [1_700_000_000, 1_700_000_001, 1_700_000_002]
    assert [w["flags"] for w in windows] == [[], ["no_rgb"], []]
    assert sum(w["events"] for w in windows) == counts["events"]
    assert windows[0]["frames"] == 8 and windows[0]["distinct_frames"] == 8
    assert summary["windows_emitted"] == 3 and summary["dropped_windows"] == 0


def test_windows_command_reads_parameters_from_yaml_and_rejects_bad_ones(pattern_bag, tmp_path,
                                                                          capsys):
    path, _ = pattern_bag
    config = tmp_path / "p.yaml"
    config.write_text("/**:\n  ros__parameters:\n    window_length_s: 0.5\n")
    assert main(["windows", str(path), "--json", "--config", str(config)]) == 0
    windows = [json.loads(line) for line in capsys.readouterr().out.splitlines()[:-1]]
    assert len(windows) == 6  # 3 s of half-second windows
    assert [w["flags"] for w in windows] == [[], [], ["no_rgb"], ["no_rgb"], [], []]
    config.write_text("/**:\n  ros__parameters:\n    window_length_s: -1.0\n")
    assert main(["windows", str(path), "--config", str(config)]) == 2
    assert "'window_length_s' = -1.0 is invalid" in capsys.readouterr().err


def test_windows_command_cuts_the_windows_the_nodes_cut_for_a_length_of_odd_nanoseconds(
        pattern_bag, capsys):
    # 1.001 s is 1,001,000,000 ns in the nodes (rounded); int() made it 1,000,999,999, which
    # moves every window id this far from the epoch
    path, _ = pattern_bag
    assert main(["windows", str(path), "--json", "--window-length", "1.001"]) == 0
    windows = [json.loads(line) for line in capsys.readouterr().out.splitlines()[:-1]]
    start_ns = TestPattern().start_ns
    assert windows[0]["window"] == start_ns // 1_001_000_000 != start_ns // 1_000_999_999


def test_missing_bag_is_a_clear_error_not_a_traceback(tmp_path, capsys):
    assert main(["windows", str(tmp_path / "nope")]) == 1
    assert "no such bag" in capsys.readouterr().err


def test_undecodable_images_are_counted_and_skipped(tmp_path, caplog):
    path = tmp_path / "bad"
    batch = EventBatch([1_000, 2_000], [1, 2], [1, 2], [0, 1], 8, 8)
    with BagWriter(path) as bag:
        for packet in encode_evt3_packets(batch):
            bag.write_event_packet("/ev", packet)
        good = np.zeros((4, 4, 3), np.uint8)
        bag.write_rgb("/rgb", 5_000, good, "camera")
        msg = bag.store.types["sensor_msgs/msg/Image"](
            header=bag.store.types["std_msgs/msg/Header"](
                stamp=bag.store.types["builtin_interfaces/msg/Time"](sec=0, nanosec=6_000),
                frame_id="camera"),
            height=4, width=4, encoding="yuv422", is_bigendian=0, step=8,
            data=np.zeros(32, np.uint8))
        bag.write("/rgb", "sensor_msgs/msg/Image", msg, 6_000)
    stats = InputStats()
    items = list(read_inputs(path, stats=stats))
    assert stats.frames == 1 and stats.bad_frames == 1
    assert sum(1 for i in items if i.frame is not None) == 1
    assert "yuv422" in caplog.text


def test_ambiguous_image_topics_ask_the_user_to_choose(tmp_path):
    path = tmp_path / "two"
    with BagWriter(path) as bag:
        bag.write_rgb("/a", 1, np.zeros((2, 2, 3), np.uint8), "a")
        bag.write_rgb("/b", 2, np.zeros((2, 2, 3), np.uint8), "b")
    with pytest.raises(EventBagError, match="several rgb topics"):
        list(read_inputs(path))
    assert len(list(read_inputs(path, rgb_topic="/b"))) == 1


def test_messages_whose_bytes_do_not_deserialize_are_counted_and_skipped(tmp_path, caplog,
                                                                          capsys):
    from crossspec_ros.bags.writer import header
    from crossspec_ros.images import rgb_to_image_fields

    path = tmp_path / "damaged"
    batch = EventBatch([1_000, 2_000], [1, 2], [1, 2], [0, 1], 8, 8)
    with BagWriter(path) as bag:
        for packet in encode_evt3_packets(batch):
            bag.write_event_packet("/ev", packet)
        bag.write_rgb("/rgb", 5_000, np.zeros((4, 4, 3), np.uint8), "camera")
        image = bag.store.types["sensor_msgs/msg/Image"](
            header=header(6_000, "camera"), **rgb_to_image_fields(np.zeros((4, 4, 3), np.uint8)))
        data = bag.store.serialize_cdr(image, "sensor_msgs/msg/Image")
        bag.write_raw("/rgb", "sensor_msgs/msg/Image", data[:30], 6_000)  # cut mid-message
        bag.write_rgb("/rgb", 7_000, np.zeros((4, 4, 3), np.uint8), "camera")
    stats = InputStats()
    items = list(read_inputs(path, stats=stats))
    assert stats.frames == 2 and stats.unreadable_messages == 1
    assert sum(1 for i in items if i.frame is not None) == 2
    assert "message on /rgb cannot be read and was skipped" in caplog.text
    assert main(["windows", str(path)]) == 0
    assert "1 unreadable messages skipped" in capsys.readouterr().out
