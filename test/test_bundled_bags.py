"""Every bag the package ships reads with the message definitions it ships: each message
deserializes with rclpy (what a subscriber of `crossspec play` does) and each topic's
recorded type hash is the one rosidl generates for the current definition."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.serialization import deserialize_message  # noqa: E402
from rosbags.highlevel import AnyReader  # noqa: E402

from crossspec_ros.paths import package_share_dir  # noqa: E402

pytestmark = pytest.mark.ros
ROSBAGS = Path(__file__).resolve().parents[1] / "rosbags"
BUNDLED = sorted(p.parent for p in ROSBAGS.glob("*/metadata.yaml"))


def rosidl_hash(msgtype: str) -> str:
    """The RIHS01 hash rosidl generated for ``msgtype`` (e.g. crossspec/msg/Caption)."""
    package, _, name = msgtype.split("/")
    description = package_share_dir(package) / "msg" / f"{name}.json"
    hashes = json.loads(description.read_text())["type_hashes"]
    return next(h["hash_string"] for h in hashes if h["type_name"] == msgtype)


def message_class(msgtype: str) -> type:
    package, _, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


def test_the_package_ships_a_bag():
    assert BUNDLED, f"no bag directory under {ROSBAGS}"


@pytest.mark.parametrize("bag", BUNDLED, ids=[p.name for p in BUNDLED])
def test_every_message_of_a_bundled_bag_deserializes_with_the_current_definitions(bag):
    counts: dict[str, int] = {}
    with AnyReader([bag]) as reader:
        for connection in reader.connections:
            assert connection.digest == rosidl_hash(connection.msgtype), (
                f"{bag.name}: {connection.topic} was recorded with another definition of "
                f"{connection.msgtype}: regenerate the bag")
        for connection, _, raw in reader.messages():
            deserialize_message(bytes(raw), message_class(connection.msgtype))
            counts[connection.topic] = counts.get(connection.topic, 0) + 1
        assert counts == {c.topic: c.msgcount for c in reader.connections}
