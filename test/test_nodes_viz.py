"""The viz node's event image: a dv-processing time surface of the events since the last
image, published for RViz and Foxglove (what the drafter looks at)."""

from __future__ import annotations

import pytest

rclpy = pytest.importorskip("rclpy")

from recording_publisher import RecordingPublisher  # noqa: E402

from crossspec_ros.nodes.lifecycle import bring_up  # noqa: E402
from crossspec_ros.nodes.viz_node import VizNode  # noqa: E402

pytestmark = pytest.mark.ros




def test_the_viz_node_publishes_a_time_surface_of_the_events():
    import numpy as np
    from event_camera_msgs.msg import EventPacket

    from crossspec_ros.events.batch import EventBatch
    from crossspec_ros.events.encode import encode_evt3_packets

    rng = np.random.default_rng(0)
    n = 2000
    batch = EventBatch(np.sort(rng.integers(0, 50_000_000, n)), rng.integers(0, 64, n),
                       rng.integers(0, 48, n), rng.integers(0, 2, n), 64, 48)
    rclpy.init()
    node = bring_up(VizNode())
    try:
        node.pub_event_image = RecordingPublisher()
        for packet in encode_evt3_packets(batch, 5_000_000, frame_id="event_camera"):
            msg = EventPacket(width=64, height=48, seq=packet.seq, time_base=packet.time_base,
                              encoding=packet.encoding, events=packet.events_bytes())
            msg.header.frame_id = packet.frame_id
            node._on_events(msg)
        node._publish_event_image()
        [image] = node.pub_event_image.sent
        assert (image.width, image.height, image.encoding) == (64, 48, "mono8")
        assert image.header.frame_id == "event_camera"
        pixels = np.frombuffer(bytes(image.data), np.uint8).reshape(48, 64)
        touched = np.zeros((48, 64), bool)
        touched[batch.y, batch.x] = True
        assert (pixels[touched] > 0).mean() > 0.9  # the events' pixels light up
        node._publish_event_image()
        assert len(node.pub_event_image.sent) == 1  # nothing new: nothing published
    finally:
        node.destroy_node()
        rclpy.shutdown()


def test_the_caption_marker_takes_the_rgb_frames_frame_id():
    from crossspec import msg as cs_msg
    from sensor_msgs.msg import Image

    rclpy.init()
    node = bring_up(VizNode())
    try:
        node.pub_marker = RecordingPublisher()
        node._on_caption(cs_msg.Caption(window_id=1, confirmed_text="a car"))
        image = Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(12))
        image.header.frame_id = "camera_left"
        node._on_image(image)
        node._on_caption(cs_msg.Caption(window_id=1, confirmed_text="a car turns"))
        assert [m.header.frame_id for m in node.pub_marker.sent] == ["camera", "camera_left"]
    finally:
        node.destroy_node()
        rclpy.shutdown()


def test_frames_that_come_during_the_verifiers_turn_are_not_drawn_the_next_one_is():
    from crossspec import msg as cs_msg
    from sensor_msgs.msg import Image

    from crossspec_ros.speculative.verifier_first import VerifierFirst

    first = VerifierFirst(max_pause_s=5.0)
    rclpy.init()
    node = bring_up(VizNode(verifier_first=first, parameter_overrides=[
        rclpy.parameter.Parameter("annotate_every_n_frames", value=1)]))
    try:
        node.pub_image = RecordingPublisher()
        node._on_caption(cs_msg.Caption(window_id=1, confirmed_text="a car"))
        image = Image(height=8, width=8, encoding="rgb8", step=24, data=bytes(192))
        with first.turn():  # the verifier in this process works on a closed window
            node._on_image(image)
        assert node.pub_image.sent == [] and node.frames_yielded == 1
        node._on_image(image)
        assert len(node.pub_image.sent) == 1
    finally:
        node.destroy_node()
        rclpy.shutdown()


def _layout_topics() -> set[str]:
    """Every topic the bundled Foxglove layout names (image, raw messages, plot paths)."""
    import json
    from pathlib import Path

    layout = json.loads((Path(__file__).resolve().parent.parent / "config"
                         / "crossspec.foxglove.json").read_text())
    topics = set()
    for config in layout["configById"].values():
        topics.add(config.get("imageMode", {}).get("imageTopic"))
        topics.add(config.get("topicPath", "").split(".")[0] or None)
        topics |= {p["value"].split(".")[0] for p in config.get("paths", [])}
    return topics - {None}


def test_every_topic_of_the_foxglove_layout_is_advertised_by_the_viz_nodes_server():
    import json
    import time

    from crossspec import msg as cs_msg
    from sensor_msgs.msg import Image

    ws_client = pytest.importorskip("websockets.sync.client")
    wanted = _layout_topics()
    assert "/crossspec/annotated_image" in wanted and "/crossspec/caption" in wanted
    rclpy.init()
    node = bring_up(VizNode(parameter_overrides=[
        rclpy.parameter.Parameter("foxglove", value=True),
        rclpy.parameter.Parameter("foxglove_port", value=0),
        rclpy.parameter.Parameter("annotate_every_n_frames", value=1)]))
    try:
        node._on_caption(cs_msg.Caption(window_id=1, status=2, confirmed_text="a car stops"))
        node._on_image(Image(height=4, width=4, encoding="rgb8", step=12, data=bytes(48)))
        assert node.annotated == 1
        advertised: set[str] = set()
        with ws_client.connect(f"ws://127.0.0.1:{node.foxglove.port}",
                               subprotocols=["foxglove.sdk.v1"], open_timeout=5) as ws:
            deadline = time.monotonic() + 5
            while not wanted <= advertised and time.monotonic() < deadline:
                try:
                    msg = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
                except TimeoutError:
                    break
                if isinstance(msg, str) and json.loads(msg).get("op") == "advertise":
                    advertised |= {c["topic"] for c in json.loads(msg)["channels"]}
        assert wanted <= advertised, f"not advertised: {sorted(wanted - advertised)}"
    finally:
        node.destroy_node()
        rclpy.shutdown()


def test_a_busy_foxglove_port_is_one_error_line_and_the_viz_node_goes_on_without_it():
    # issue 45, fault 7: the viz node's configure raised and the composed process died, draft
    # and verifier with it
    import socket

    from crossspec import msg as cs_msg

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    rclpy.init()
    try:
        node = bring_up(VizNode(parameter_overrides=[
            rclpy.parameter.Parameter("foxglove", value=True),
            rclpy.parameter.Parameter("foxglove_port", value=busy.getsockname()[1])]))
        try:
            assert node.active and node.foxglove is None
            assert f"127.0.0.1:{busy.getsockname()[1]}" in node.foxglove_failed
            assert "port in use" in node.foxglove_failed and "\n" not in node.foxglove_failed
            node.pub_marker = RecordingPublisher()
            node._on_caption(cs_msg.Caption(window_id=1, status=2, confirmed_text="a car"))
            assert len(node.pub_marker.sent) == 1  # captions are still drawn
        finally:
            node.destroy_node()
    finally:
        rclpy.shutdown()
        busy.close()


def test_the_viz_node_tells_foxglove_each_captions_epoch_and_why_it_is_unverified():
    # issue 45, fault 28: under --loop one window id arrived FINAL three times, passes apart
    from crossspec import msg as cs_msg

    class Recording:
        def __init__(self) -> None:
            self.calls: list[dict] = []

        def log_caption(self, *args, **kwargs) -> None:
            self.calls.append(kwargs)

    out = Recording()
    rclpy.init()
    node = bring_up(VizNode(foxglove=out))
    try:
        node._on_caption(cs_msg.Caption(window_id=5, epoch=2, status=3, unverified_reason=4,
                                        draft_text="a car"))
        assert out.calls == [{"epoch": 2, "unverified_reason": 4}]
    finally:
        node.destroy_node()
        rclpy.shutdown()
