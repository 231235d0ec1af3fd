"""Bags as `ros2 bag record` writes them: an empty storage_identifier in metadata.yaml, and
MCAP schemas in ros2idl with rosidl's #include lines. Both are read by every reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from crossspec_ros.bagfile import readable_path, without_preprocessor_lines
from crossspec_ros.bags.inputs import read_inputs
from crossspec_ros.bags.replay import BagReplay
from crossspec_ros.bags.test_pattern import write_test_pattern_bag
from crossspec_ros.events.bag import EventBagReader

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
