"""Topic names are relative: a namespace (``-r __ns:=/robot1``, the launch file's namespace
argument) moves every crossspec topic and the player's, so two robots on one DDS domain never
mix their captions. /diagnostics and /clock stay global, as ROS tools expect."""

from __future__ import annotations

import time

import pytest

rclpy = pytest.importorskip("rclpy")

from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier  # noqa: E402
from crossspec_ros.nodes.draft_node import DraftNode  # noqa: E402
from crossspec_ros.nodes.lifecycle import bring_up  # noqa: E402
from crossspec_ros.nodes.player import BagPlayer  # noqa: E402
from crossspec_ros.nodes.verifier_node import VerifierNode  # noqa: E402
from crossspec_ros.nodes.viz_node import VizNode  # noqa: E402
from crossspec_ros.paths import sample_bag  # noqa: E402

pytestmark = pytest.mark.ros


def topics(node) -> set[str]:
    names = {name for name, _ in node.get_publisher_names_and_types_by_node(
        node.get_name(), node.get_namespace())}
    names |= {name for name, _ in node.get_subscriber_names_and_types_by_node(
        node.get_name(), node.get_namespace())}
    return names


def seen_when(predicate, read, timeout_s: float = 30.0):
    """``read()`` once ``predicate`` holds for it, or after the bound: the ROS graph learns
    of a node's own entities through discovery, which takes a moment on a loaded machine."""
    deadline = time.monotonic() + timeout_s
    while not predicate(value := read()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def test_every_crossspec_topic_moves_with_the_namespace():
    rclpy.init()
    nodes = []
    try:
        nodes = [DraftNode(tiny_eventgpt_drafter(seed=1), namespace="/robot1"),
                 VerifierNode(tiny_verifier(seed=1), namespace="/robot1"),
                 VizNode(namespace="/robot1"),
                 BagPlayer(sample_bag(), autostart=False, namespace="/robot1")]
        for node in nodes[:3]:
            bring_up(node, activate=False)
        expected = {"/robot1/event_camera/events", "/robot1/camera/image_raw",
                    "/robot1/crossspec/draft", "/robot1/crossspec/confirmed",
                    "/robot1/crossspec/caption", "/robot1/crossspec/annotated_image",
                    "/robot1/crossspec/caption_marker"}
        seen = seen_when(lambda seen: expected <= seen,
                         lambda: set().union(*(topics(n) for n in nodes)))
        assert expected <= seen, expected - seen
        outside = {t for t in seen if not t.startswith("/robot1/")}
        assert outside <= {"/diagnostics", "/clock", "/parameter_events", "/rosout"}, outside
        # the lifecycle services live under the node, in the namespace too
        services = seen_when(
            lambda names: "/robot1/crossspec_verifier/change_state" in names,
            lambda: {name for name, _ in nodes[1].get_service_names_and_types_by_node(
                "crossspec_verifier", "/robot1")})
        assert "/robot1/crossspec_verifier/change_state" in services
    finally:
        for node in nodes:
            node.destroy_node()
        rclpy.shutdown()

