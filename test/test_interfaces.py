"""The messages crossspec builds: type hashes, wire compatibility, round trips."""

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

from crossspec_ros.bags.typestore import (
    EVENT_PACKET_MSG,
    EVENT_PACKET_RIHS01,
    EVENT_PACKET_TYPE,
    typestore,
)
from crossspec_ros.paths import package_share_dir

ROOT = Path(__file__).resolve().parents[1]
STAND_IN_MSG = ROOT / "test/interfaces/event_camera_msgs/msg/EventPacket.msg"


def strip_comments(text: str) -> str:
    lines = (re.sub(r"#.*", "", line).strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line) + "\n"


def test_event_packet_stand_in_matches_the_embedded_definition():
    assert strip_comments(STAND_IN_MSG.read_text()) == EVENT_PACKET_MSG


def test_rosbags_type_hash_of_event_packet_equals_the_real_drivers_hash():
    assert typestore().hash_rihs01(EVENT_PACKET_TYPE) == EVENT_PACKET_RIHS01


def test_rosidl_generated_type_hash_of_event_packet_equals_the_real_drivers_hash():
    pytest.importorskip("event_camera_msgs.msg")
    share = package_share_dir("event_camera_msgs")
    description = json.loads((share / "msg/EventPacket.json").read_text())
    hashes = {h["type_name"]: h["hash_string"] for h in description["type_hashes"]}
    assert hashes["event_camera_msgs/msg/EventPacket"] == EVENT_PACKET_RIHS01


@pytest.mark.ros
def test_rclpy_announces_the_real_drivers_hash_for_event_packet_topics():
    rclpy = pytest.importorskip("rclpy")
    from event_camera_msgs.msg import EventPacket

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node("hash_probe", context=context)
        node.create_publisher(EventPacket, "/hash_probe/events", 1)
        # the graph learns of the node's own publisher through discovery: poll, bounded
        deadline = time.monotonic() + 30
        while not (infos := node.get_publishers_info_by_topic("/hash_probe/events")) and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(infos) == 1
        assert str(infos[0].topic_type_hash) == EVENT_PACKET_RIHS01
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


@pytest.mark.ros
def test_crossspec_messages_round_trip_through_rclpy_and_rosbags_cdr():
    pytest.importorskip("rclpy")
    from crossspec.msg import Caption, ConfirmedTokens, DraftTokens
    from rclpy.serialization import deserialize_message, serialize_message

    draft = DraftTokens(window_id=42, revision=2, base_index=3, token_ids=[5, 6, 7],
                        log_probs=[-0.1, -0.2, -0.3], text="a red car", done=True)
    draft.window_start.sec = 42
    confirmed = ConfirmedTokens(window_id=42, base_index=3, new_token_ids=[5, 6], text="a red",
                                done=False)
    confirmed.stats.proposer_names = ["draft_stream", "history_ngram"]
    confirmed.stats.proposer_proposed = [10, 4]
    confirmed.stats.proposer_accepted = [6, 1]
    caption = Caption(window_id=42, status=Caption.STATUS_PARTIAL, confirmed_text="a red",
                      unconfirmed_text=" car")
    store = typestore()
    for msg in (draft, confirmed, caption):
        raw = serialize_message(msg)
        assert deserialize_message(raw, type(msg)) == msg
        # rosbags decodes what rclpy encodes: bags recorded by either side stay readable.
        type_name = f"crossspec/msg/{type(msg).__name__}"
        decoded = store.deserialize_cdr(raw, type_name)
        assert decoded.window_id == 42
    decoded = store.deserialize_cdr(serialize_message(draft), "crossspec/msg/DraftTokens")
    assert decoded.text == "a red car"
    np.testing.assert_array_equal(decoded.token_ids, [5, 6, 7])
    decoded = store.deserialize_cdr(serialize_message(confirmed), "crossspec/msg/ConfirmedTokens")
    assert list(decoded.stats.proposer_names) == ["draft_stream", "history_ngram"]
    # the frames a caption describes, as rosbags reads them whatever the padding before them
    for text in ("a", "abc"):
        for frames in ([], [1_700_000_000_123_456_789, 1_700_000_000_223_456_789]):
            msg = ConfirmedTokens(window_id=7, text=text,
                                  frame_stamps_sec=[t // 10**9 for t in frames],
                                  frame_stamps_nanosec=[t % 10**9 for t in frames])
            decoded = store.deserialize_cdr(serialize_message(msg),
                                            "crossspec/msg/ConfirmedTokens")
            assert [int(s) * 10**9 + int(n) for s, n in zip(decoded.frame_stamps_sec,
                                                  decoded.frame_stamps_nanosec,
                                                  strict=True)] == frames


def test_crossspec_messages_use_no_arrays_of_structs():
    # Arrays of small structs deserialize ~1000x slower in Python (DESIGN.md section 3).
    for path in (ROOT / "msg").glob("*.msg"):
        for line in strip_comments(path.read_text()).splitlines():
            field_type = line.split()[0]
            if field_type.endswith("]"):
                base = field_type.split("[")[0]
                assert "/" not in base and base[0].islower(), f"{path.name}: {line}"
