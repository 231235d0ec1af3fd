"""Bags as `ros2 bag record` writes them: an empty storage_identifier in metadata.yaml, and
MCAP schemas in ros2idl with rosidl's #include lines. Both are read by every reader."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import yaml

from crossspec_ros.bagfile import damaged_mcap, readable_path, without_preprocessor_lines
from crossspec_ros.bags.inputs import read_inputs
from crossspec_ros.bags.replay import BagReplay
from crossspec_ros.bags.test_pattern import write_test_pattern_bag
from crossspec_ros.events.bag import EventBagError, EventBagReader

SEP = "=" * 80 + "\n"
TIME_IDL = """// generated from rosidl_adapter/resource/msg.idl.em
module builtin_interfaces {
  module msg {
    struct Time {
      int32 sec;
      uint32 nanosec;
    };
  };
};
"""
HEADER_IDL = """// generated from rosidl_adapter/resource/msg.idl.em
#include "builtin_interfaces/msg/Time.idl"

module std_msgs {
  module msg {
    @verbatim (language="comment", text=
      "Standard metadata for higher-level stamped data types.")
    struct Header {
      builtin_interfaces::msg::Time stamp;

      string frame_id;
    };
  };
};
"""
PACKET_IDL = """// generated from rosidl_adapter/resource/msg.idl.em
// with input from event_camera_msgs/msg/EventPacket.msg
#include "std_msgs/msg/Header.idl"

module event_camera_msgs {
  module msg {
    struct EventPacket {
      std_msgs::msg::Header header;

      @verbatim (language="comment", text=
        "sensor size in pixels")
      uint32 height;
      uint32 width;
      uint64 seq;
      uint64 time_base;
      string encoding;
      boolean is_bigendian;
      sequence<uint8> events;
    };
  };
};
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bags") / "pattern"
    write_test_pattern_bag(out, duration_s=1.5)
    return out


def test_a_metadata_yaml_without_storage_identifier_is_read_by_its_files(
        recorded: Path, tmp_path: Path) -> None:
    blank = tmp_path / "blank"
    blank.mkdir()
    for item in recorded.iterdir():
        (blank / item.name).write_bytes(item.read_bytes())
    doc = yaml.safe_load((blank / "metadata.yaml").read_text())
    doc["rosbag2_bagfile_information"]["storage_identifier"] = ""
    (blank / "metadata.yaml").write_text(yaml.safe_dump(doc))
    assert readable_path(blank) != blank and readable_path(recorded) == recorded

    expected = [(i.topic, i.log_time_ns) for i in read_inputs(recorded)]
    assert [(i.topic, i.log_time_ns) for i in read_inputs(blank)] == expected
    with EventBagReader(blank) as reader:
        assert sum(len(batch) for _, batch in reader.batches()) > 0
    assert len(list(BagReplay(blank).messages())) == len(expected)


def test_mcap_with_ros2idl_schemas_and_include_lines_is_read(tmp_path: Path) -> None:
    from mcap.writer import Writer

    from crossspec_ros.bags.typestore import EVENT_PACKET_TYPE, typestore
    from crossspec_ros.bags.writer import header

    store = typestore()
    packet_type = store.types[EVENT_PACKET_TYPE]
    payload = np.arange(8, dtype=np.uint8)  # not EVT3 events: the decoder drops them
    schema = (f"{SEP}IDL: event_camera_msgs/msg/EventPacket\n{PACKET_IDL}"
              f"{SEP}IDL: std_msgs/msg/Header\n{HEADER_IDL}"
              f"{SEP}IDL: builtin_interfaces/msg/Time\n{TIME_IDL}")
    bag = tmp_path / "recorded.mcap"
    with bag.open("wb") as stream:
        writer = Writer(stream)
        writer.start(profile="ros2", library="test")
        schema_id = writer.register_schema(name=EVENT_PACKET_TYPE, encoding="ros2idl",
                                           data=schema.encode())
        channel = writer.register_channel(topic="/events", message_encoding="cdr",
                                          schema_id=schema_id)
        for k in range(3):
            msg = packet_type(header(10**9 + k, "cam"), 480, 640, k, 0, "evt3", False, payload)
            writer.add_message(channel_id=channel, log_time=10**9 + k, publish_time=10**9 + k,
                               data=bytes(store.serialize_cdr(msg, EVENT_PACKET_TYPE)))
        writer.finish()
    with EventBagReader(bag) as reader:
        packets = [packet for _, _, packet in reader.packets()]
    assert [p.seq for p in packets] == [0, 1, 2]
    assert packets[0].width == 640 and packets[0].encoding == "evt3"
    assert packets[0].stamp_ns == 10**9


def test_preprocessor_lines_are_dropped_and_nothing_else() -> None:
    assert without_preprocessor_lines(PACKET_IDL).count("#") == 0
    kept = without_preprocessor_lines(PACKET_IDL).splitlines()
    assert kept == [line for line in PACKET_IDL.splitlines() if not line.startswith("#")]


def _cut_short(recorded: Path, out: Path, keep: float) -> Path:
    """A copy of ``recorded``'s MCAP file with only its first ``keep`` of the bytes."""
    data = next(recorded.glob("*.mcap")).read_bytes()
    out.write_bytes(data[: int(len(data) * keep)])
    return out


@pytest.mark.parametrize("layout", ["file", "directory"])
def test_an_mcap_cut_short_is_read_up_to_the_damage_with_one_warning(
        recorded: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, layout: str) -> None:
    if layout == "file":
        cut = _cut_short(recorded, tmp_path / "cut.mcap", 0.6)
    else:  # a bag directory as recorded, its metadata.yaml counting what is no longer there
        cut = tmp_path / "cut"
        cut.mkdir()
        (cut / "metadata.yaml").write_bytes((recorded / "metadata.yaml").read_bytes())
        _cut_short(recorded, cut / next(recorded.glob("*.mcap")).name, 0.6)
    assert damaged_mcap(cut) is not None and damaged_mcap(recorded) is None
    expected = [(i.topic, i.log_time_ns) for i in read_inputs(recorded)]
    with caplog.at_level(logging.WARNING, logger="crossspec.bags"):
        got = [(i.topic, i.log_time_ns) for i in read_inputs(cut)]
        replayed = [(m.topic, m.time_ns) for m in BagReplay(cut).messages()]
        with EventBagReader(cut) as reader:
            events = sum(len(batch) for _, batch in reader.batches())
    assert 0 < len(got) < len(expected) and got == expected[: len(got)]
    every = [(m.topic, m.time_ns) for m in BagReplay(recorded).messages()]
    assert 0 < len(replayed) < len(every) and replayed == every[: len(replayed)]
    assert events > 0
    warnings = [r.getMessage() for r in caplog.records if r.name == "crossspec.bags"]
    assert len(warnings) == 1, warnings  # once per file, however often it is opened
    assert "cut short or damaged" in warnings[0] and f"read the {len(replayed):,} messages" \
        in warnings[0]


def test_an_mcap_cut_inside_its_first_records_yields_nothing_or_a_clear_error(
        recorded: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="crossspec.bags"):
        early = _cut_short(recorded, tmp_path / "early.mcap", 0.001)  # inside the first chunk
        assert list(read_inputs(early)) == []
        header = _cut_short(recorded, tmp_path / "header.mcap", 0.000005)  # magic + a few
        with pytest.raises(EventBagError, match=r"header\.mcap"):
            list(read_inputs(header))
    warnings = [r.getMessage() for r in caplog.records if r.name == "crossspec.bags"]
    assert len(warnings) == 2 and all("read the 0 messages" in w for w in warnings)


@pytest.mark.parametrize("compression", ["NONE", "ZSTD", "LZ4"])
def test_the_whole_messages_of_a_chunk_cut_short_are_kept_whatever_its_compression(
        tmp_path: Path, compression: str) -> None:
    from mcap.writer import CompressionType, Writer

    bag = tmp_path / "strings.mcap"
    rng = np.random.default_rng(0)  # letters at random: compressed blocks stay many
    texts = [rng.integers(97, 123, 150 + k % 100, dtype=np.uint8).tobytes() for k in range(3000)]
    payloads = [bytes([0, 1, 0, 0]) + (len(t) + 1).to_bytes(4, "little") + t + b"\0"
                for t in texts]  # CDR std_msgs/String; a codec decodes a cut stream by blocks
    with bag.open("wb") as stream:  # one chunk for everything: the cut falls inside it
        writer = Writer(stream, chunk_size=1 << 24,
                        compression=getattr(CompressionType, compression))
        writer.start(profile="ros2", library="test")
        schema = writer.register_schema("std_msgs/msg/String", "ros2msg", b"string data")
        channel = writer.register_channel("/chatter", "cdr", schema,
                                          {"offered_qos_profiles": ""})
        for k, data in enumerate(payloads):
            writer.add_message(channel, log_time=10**9 + k, data=data, publish_time=10**9 + k)
        writer.finish()
    data = bag.read_bytes()
    bag.write_bytes(data[: sum(_chunk_span(bag)) // 2])  # the middle of the chunk
    got = [m.data for m in BagReplay(bag).messages()]
    assert 0 < len(got) < len(payloads) and got == payloads[: len(got)]


def _chunk_span(bag: Path) -> tuple[int, int]:
    """Where the first chunk record of ``bag`` begins and ends (file offsets)."""
    from mcap.records import Chunk
    from mcap.stream_reader import StreamReader

    with bag.open("rb") as stream:
        begin = 8  # after the magic
        for record in StreamReader(stream, emit_chunks=True).records:
            if isinstance(record, Chunk):
                return begin, stream.tell()
            begin = stream.tell()
    raise AssertionError(f"{bag} has no chunk")


def test_the_command_line_reads_an_mcap_cut_short_and_says_so_in_one_line(
        recorded: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    cut = _cut_short(recorded, tmp_path / "cut.mcap", 0.6)
    run = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "windows", str(cut)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("window") and "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "cut short or damaged" in lines[0] and str(cut) in lines[0]


def _copy_bag(recorded: Path, out: Path) -> Path:
    out.mkdir()
    for item in recorded.iterdir():
        (out / item.name).write_bytes(item.read_bytes())
    return out


@pytest.mark.parametrize("command", ["windows", "events", "play", "caption", "drive"])
def test_a_metadata_yaml_with_a_nul_byte_is_a_one_line_error(
        recorded: Path, tmp_path: Path, command: str, capsys: pytest.CaptureFixture) -> None:
    from crossspec_ros.cli.main import main

    bag = _copy_bag(recorded, tmp_path / "nul")
    (bag / "metadata.yaml").write_bytes(b"rosbag2_bagfile_information:\x00\n")
    argv = [command, "--bag", str(bag)] if command == "drive" else [command, str(bag)]
    assert main(argv) in (1, 2)
    err = capsys.readouterr().err.strip()
    assert str(bag) in err and "metadata.yaml" in err and "\n" not in err, err


def test_a_garbage_metadata_yaml_beside_an_mcap_cut_short_is_warned_about_not_ignored(
        recorded: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bag = tmp_path / "cut"
    bag.mkdir()
    (bag / "metadata.yaml").write_text(": : not [ yaml")
    _cut_short(recorded, bag / next(recorded.glob("*.mcap")).name, 0.6)
    with caplog.at_level(logging.WARNING, logger="crossspec.bags"):
        assert len(list(read_inputs(bag))) > 0  # the MCAP carries what is needed
        assert len(list(read_inputs(bag))) > 0
    warnings = [r.getMessage() for r in caplog.records if r.name == "crossspec.bags"]
    about_metadata = [w for w in warnings if "metadata.yaml" in w]
    assert len(about_metadata) == 1, warnings  # once, however often the bag is opened
    assert str(bag / "metadata.yaml") in about_metadata[0]
    assert "ignored" in about_metadata[0] and "\n" not in about_metadata[0]


@pytest.fixture(scope="module")
def flipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mcap_helpers import flipped_sample

    return flipped_sample(tmp_path_factory.mktemp("flipped"))


def test_a_flipped_byte_in_a_compressed_chunk_ends_the_replay_in_one_line(flipped: Path
                                                                          ) -> None:
    # issue 53, item 4: a ZstdError traceback from windows and caption, drive exiting 0
    from crossspec_ros.bags.replay import BagError

    replay = BagReplay(flipped)
    read = []
    with pytest.raises(BagError) as caught:
        for message in replay.messages():
            read.append(message)
    text = str(caught.value)
    assert "\n" not in text and str(flipped) in text and read
    assert f"the bag is damaged after {len(read):,} messages" in text
    assert "what was read before it is kept" in text


@pytest.mark.parametrize("command", ["windows", "events"])
def test_the_command_line_says_a_damaged_chunk_in_one_line(flipped: Path, command: str
                                                          ) -> None:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", command,
                          str(flipped)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    damage = [line for line in run.stderr.splitlines() if "the bag is damaged after" in line]
    assert len(damage) == 1 and str(flipped) in damage[0]


def test_ground_truth_read_before_a_damaged_chunk_is_kept_with_a_warning(
        flipped: Path, caplog: pytest.LogCaptureFixture) -> None:
    from crossspec_ros.bags.inputs import read_ground_truth

    with caplog.at_level(logging.WARNING):
        truth = read_ground_truth(flipped)
    assert 0 < len(truth) < 20  # the sample bag's 20 windows, up to the damage
    assert any("the bag is damaged after" in r.getMessage() and "captions kept" in
               r.getMessage() for r in caplog.records)
