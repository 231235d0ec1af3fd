"""What launch/drive.launch.py decides, tested without ROS 2 launch (not on PyPI, absent in
CI): which lifecycle transition launch triggers on which transition event (issue 36, fault
9), and how long it waits after the bag before shutting down with exit_when_bag_ends:=true
(fault 11). The launch file only turns these into launch actions."""

from __future__ import annotations

import time

import pytest

from crossspec_ros.nodes.graph import (
    BRING_UP,
    CAPTION_FINISH_S,
    bag_end_grace_s,
    bring_up_follow_up,
    default_config,
)

# every transition of the ROS 2 managed-node state machine, as (start, goal) state labels
LIFECYCLE_STEPS = [
    ("unconfigured", "configuring"), ("configuring", "inactive"),
    ("configuring", "unconfigured"), ("inactive", "activating"), ("activating", "active"),
    ("activating", "inactive"), ("active", "deactivating"), ("deactivating", "inactive"),
    ("inactive", "cleaningup"), ("cleaningup", "unconfigured"),
    ("unconfigured", "shuttingdown"), ("inactive", "shuttingdown"), ("active", "shuttingdown"),
    ("shuttingdown", "finalized"), ("configuring", "errorprocessing"),
    ("errorprocessing", "unconfigured"), ("errorprocessing", "finalized"),
]


def test_launch_activates_a_node_only_when_its_configure_has_finished():
    assert bring_up_follow_up("configuring", "inactive") == "activate"
    others = [step for step in LIFECYCLE_STEPS if step != ("configuring", "inactive")]
    assert [bring_up_follow_up(*step) for step in others] == [None] * len(others)


def test_a_deactivate_by_the_user_is_not_answered_with_an_activate():
    # before: launch matched goal_state "inactive" alone, so `ros2 lifecycle set
    # /crossspec_verifier deactivate` was followed by activating -> active at once
    assert bring_up_follow_up("deactivating", "inactive") is None
    assert [(rule.start_state, rule.goal_state) for rule in BRING_UP] == [
        ("configuring", "inactive")]


@pytest.mark.ros
def test_the_labels_match_the_transition_events_a_real_lifecycle_node_publishes():
    """Drive a real rclpy lifecycle node as launch and then a user would, read its
    transition_event topic, and answer each event as launch would."""
    import rclpy
    from lifecycle_msgs.msg import TransitionEvent
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.lifecycle import LifecycleNode

    context = rclpy.Context()
    rclpy.init(context=context)
    node = LifecycleNode("crossspec_test_lifecycle", context=context)
    listener = rclpy.create_node("crossspec_test_lifecycle_listener", context=context)
    events: list[tuple[str, str]] = []
    topic = "/crossspec_test_lifecycle/transition_event"
    listener.create_subscription(TransitionEvent, topic, lambda m: events.append(
        (m.start_state.label, m.goal_state.label)), 50)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    executor.add_node(listener)

    def spin_until(count: int) -> None:
        deadline = time.monotonic() + 10.0
        while len(events) < count and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)

    try:
        deadline = time.monotonic() + 10.0
        while node.count_subscribers(topic) == 0 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        spin_until(0)
        executor.spin_once(timeout_sec=0.5)  # let the match settle on both sides
        answers = []
        for trigger in (node.trigger_configure, node.trigger_activate,  # launch's bring-up
                        node.trigger_deactivate,  # the user pauses captioning
                        node.trigger_cleanup, node.trigger_configure):  # and reconfigures
            before = len(events)
            trigger()
            spin_until(before + 2)
            answers += [bring_up_follow_up(*event) for event in events[before:]]
    finally:
        executor.shutdown(timeout_sec=1.0)
        listener.destroy_node()
        node.destroy_node()
        rclpy.shutdown(context=context)
    assert list(zip(events, answers, strict=True)) == [
        (("unconfigured", "configuring"), None), (("configuring", "inactive"), "activate"),
        (("inactive", "activating"), None), (("activating", "active"), None),
        (("active", "deactivating"), None), (("deactivating", "inactive"), None),
        (("inactive", "cleaningup"), None), (("cleaningup", "unconfigured"), None),
        (("unconfigured", "configuring"), None), (("configuring", "inactive"), "activate")]
    # the second configure is the user's: the launch file registers each rule with
    # handle_once, so it answers only the configure of its own bring-up


def test_launch_waits_for_the_last_window_after_the_bag_ends(tmp_path):
    assert bag_end_grace_s(None) == 1.0 + 1.0 + CAPTION_FINISH_S
    assert bag_end_grace_s(default_config()) == 1.0 + 1.0 + CAPTION_FINISH_S
    config = tmp_path / "slow.yaml"
    config.write_text("/**:\n  ros__parameters:\n    window_length_s: 2\n"
                      "/crossspec_verifier:\n  ros__parameters:\n    max_lateness_s: 3.0\n")
    assert bag_end_grace_s(config) == 2.0 + 3.0 + CAPTION_FINISH_S
