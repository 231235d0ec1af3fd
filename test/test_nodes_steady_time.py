"""Under use_sim_time with /clock stopped (a bag player paused, ended or crashed), the nodes
still close windows, expire drafts and publish diagnostics: their timers run on the steady
clock."""

from __future__ import annotations

import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from crossspec import msg as cs_msg  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from crossspec_ros.models.tiny import tiny_verifier  # noqa: E402
from crossspec_ros.nodes.graph import make_executor, spin_in_thread  # noqa: E402
from crossspec_ros.nodes.lifecycle import bring_up  # noqa: E402
from crossspec_ros.nodes.verifier_node import VerifierNode  # noqa: E402

pytestmark = pytest.mark.ros


def test_a_drafted_window_without_rgb_expires_while_sim_time_stands_still():
    rclpy.init()
    overrides = [Parameter("use_sim_time", value=True), Parameter("window_length_s", value=0.2),
                 Parameter("max_lateness_s", value=0.1), Parameter("diagnostics_period_s",
                                                                   value=0.2)]
    node = bring_up(VerifierNode(tiny_verifier(seed=1), parameter_overrides=overrides))
    got: list = []
    diagnostics = threading.Event()
    listener = rclpy.create_node("steady_time_listener")
    listener.create_subscription(cs_msg.Caption, node.params["caption_topic"], got.append, 10)
    listener.create_subscription(DiagnosticArray, node.params["diagnostics_topic"],
                                 lambda _: diagnostics.set(), 10)
    executor = make_executor()
    executor.add_node(node)
    executor.add_node(listener)
    stop = spin_in_thread(executor)
    try:
        assert node.get_clock().now().nanoseconds == 0  # no /clock: sim time stands at 0
        msg = cs_msg.DraftTokens(window_id=5, token_ids=[1, 2], text="a red car", done=True)
        node.stream._on_draft(msg)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and not any(
                c.status == cs_msg.Caption.STATUS_UNVERIFIED for c in got):
            time.sleep(0.05)
        assert [c.status for c in got][-1] == cs_msg.Caption.STATUS_UNVERIFIED
        assert got[-1].unconfirmed_text == "a red car"
        assert diagnostics.wait(5.0)
    finally:
        stop()
        executor.shutdown(timeout_sec=2.0)
        node.destroy_node()
        listener.destroy_node()
        rclpy.shutdown()


def test_a_node_following_the_clock_runs_on_clock_while_it_is_published_then_on_its_own():
    # issue 45, fault 8: the server of a split cannot know whether its robot replays a bag
    from builtin_interfaces.msg import Time
    from rosgraph_msgs.msg import Clock

    from crossspec_ros.nodes.viz_node import VizNode

    rclpy.init()
    node = bring_up(VizNode(node_name="crossspec_viz_follows_clock", parameter_overrides=[
        Parameter("follow_clock", value=True), Parameter("event_image_hz", value=0.0)]))
    player = rclpy.create_node("crossspec_test_clock")
    executor = make_executor()
    executor.add_node(node)
    executor.add_node(player)
    stop = spin_in_thread(executor)

    def sim_time_becomes(value: bool) -> bool:
        deadline = time.monotonic() + 60
        while node.get_parameter("use_sim_time").value != value:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    try:
        assert node.get_parameter("use_sim_time").value is False
        clock = player.create_publisher(Clock, "/clock", 10)
        clock.publish(Clock(clock=Time(sec=1234)))
        assert sim_time_becomes(True)
        deadline = time.monotonic() + 30  # the node's clock is the bag's from now on
        while node.get_clock().now().nanoseconds // 10**9 != 1234 and \
                time.monotonic() < deadline:
            clock.publish(Clock(clock=Time(sec=1234)))
            time.sleep(0.1)
        assert node.get_clock().now().nanoseconds // 10**9 == 1234
        player.destroy_publisher(clock)  # the player ended: after a silence, its own clock
        assert sim_time_becomes(False)
    finally:
        stop()
        executor.shutdown(timeout_sec=2.0)
        player.destroy_node()
        node.destroy_node()
        rclpy.shutdown()


def test_a_namespaced_node_follows_its_own_namespaces_clock_not_another_robots():
    # issue 53, item 13: two robots replaying on one domain followed each other's /clock
    from rosgraph_msgs.msg import Clock

    from crossspec_ros.nodes.common import follow_clock

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node("follower", namespace="robot1", context=context,
                                 cli_args=["--ros-args", "-r", "/clock:=clock"])
        other = rclpy.create_node("robot2_player", namespace="robot2", context=context,
                                  cli_args=["--ros-args", "-r", "/clock:=clock"])
        tick = follow_clock(node)
        robot2_clock = other.create_publisher(Clock, "/clock", 10)  # -> /robot2/clock
        assert robot2_clock.topic_name == "/robot2/clock"
        deadline = time.monotonic() + 30
        while not other.count_publishers("/robot2/clock") and time.monotonic() < deadline:
            time.sleep(0.05)
        tick()
        assert node.get_parameter("use_sim_time").value is False  # another robot's clock
        own_clock = other.create_publisher(Clock, "/robot1/clock", 10)
        assert own_clock.topic_name == "/robot1/clock"
        while not node.count_publishers("/robot1/clock") and time.monotonic() < deadline:
            time.sleep(0.05)
        tick()
        assert node.get_parameter("use_sim_time").value is True
    finally:
        rclpy.shutdown(context=context)
