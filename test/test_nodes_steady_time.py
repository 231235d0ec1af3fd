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
        node._on_draft(msg)
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
