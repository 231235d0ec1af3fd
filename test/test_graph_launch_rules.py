"""What launch/drive.launch.py decides, tested without ROS 2 launch (not on PyPI, absent in
CI): which lifecycle transition launch triggers on which transition event (issue 36, fault
9), and how long it waits after the bag before shutting down with exit_when_bag_ends:=true
(fault 11), and which clock the nodes run on (issue 45, fault 8). The launch file only turns
these into launch actions."""

from __future__ import annotations

import time

import pytest

from crossspec_ros.nodes.graph import (
    BRING_UP,
    CAPTION_FINISH_S,
    bag_end_grace_s,
    bring_up_follow_up,
    default_config,
    sim_time_parameters,
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


def test_the_clock_follows_the_input_bag_replayed_here_live_or_decided_at_run_time():
    # issue 45, fault 8: server.launch.py (no replay of its own) left use_sim_time true for a
    # robot with live cameras
    assert sim_time_parameters("auto", True) == {"use_sim_time": True, "follow_clock": False}
    assert sim_time_parameters("auto", False) == {"use_sim_time": False, "follow_clock": False}
    assert sim_time_parameters("auto", None) == {"use_sim_time": False, "follow_clock": True}
    for given in (True, False, None):  # given explicitly: as given, whatever the input
        assert sim_time_parameters("TRUE", given) == {"use_sim_time": True,
                                                      "follow_clock": False}
        assert sim_time_parameters("false", given) == {"use_sim_time": False,
                                                       "follow_clock": False}
    with pytest.raises(ValueError, match="use_sim_time:=maybe: give auto, true or false"):
        sim_time_parameters("maybe", None)


def test_following_the_clock_turns_on_at_once_and_off_only_after_a_silence():
    pytest.importorskip("rclpy")
    from crossspec_ros.nodes.common import ClockFollow

    follow = ClockFollow(grace_s=5.0)
    assert follow.update(False, 0.0) is None  # live from the start: stays off
    assert follow.update(True, 1.0) is True  # a player appeared
    assert follow.update(True, 2.0) is None
    assert follow.update(False, 3.0) is None  # a loop re-creating its publisher: no flap
    assert follow.update(True, 4.0) is None
    assert follow.update(False, 5.0) is None
    assert follow.update(False, 9.9) is None
    assert follow.update(False, 10.0) is False  # 5 s without /clock
    assert follow.update(False, 20.0) is None


def test_an_exit_ends_the_launch_only_when_it_fails_and_launch_is_not_already_ending():
    # issue 45, fault 5: a node stopped by Ctrl-C while it started exited non-zero, and the
    # launch file answered with a second Shutdown: launch_ros' ROS adapter raised "Cannot
    # shutdown a ROS adapter that is not running" and launch exited 1
    from crossspec_ros.nodes.graph import exit_shuts_down_launch

    assert exit_shuts_down_launch("crossspec_verifier", 2, shutting_down=False) == (
        "crossspec_verifier exited with code 2 (its log above says why)")
    # issue 53, item 12: -9 pointed to a log line that a killed process never wrote
    assert exit_shuts_down_launch("crossspec_verifier", -9, shutting_down=False) == (
        "crossspec_verifier was killed by SIGKILL (it could not log why: the kernel's "
        "out-of-memory killer, or someone's kill; see dmesg)")
    assert exit_shuts_down_launch("crossspec_verifier", 0, shutting_down=False) is None
    for code in (0, 2, 130, -2, -9):  # during launch's own shutdown: part of it
        assert exit_shuts_down_launch("crossspec_verifier", code, shutting_down=True) is None


@pytest.mark.parametrize("value", ["maybe", "1", "yes", ""])
def test_a_launch_flag_that_is_not_true_or_false_is_refused_naming_it(value):
    # issue 53, item 12: composed:=maybe was taken as false
    from crossspec_ros.nodes.graph import launch_flag

    assert launch_flag("composed", " True ") and not launch_flag("composed", "false")
    with pytest.raises(ValueError, match=f"composed:={value}: give true or false"):
        launch_flag("composed", value)


@pytest.mark.parametrize("namespace", ["", "/robot1"])
def test_a_launch_argument_wins_over_every_section_of_the_config_it_names(tmp_path, namespace):
    # issue 53, item 9: foxglove:=true and foxglove_port:=0 did nothing with the default
    # config (the launch wrote them under /**, and the config's node section won)
    rclpy = pytest.importorskip("rclpy")
    from crossspec_ros.nodes.graph import launch_parameter_file

    config = tmp_path / "drive.yaml"
    config.write_text("/**:\n  ros__parameters:\n    event_image_hz: 4.0\n"
                      "/crossspec_viz:\n  ros__parameters:\n    foxglove: false\n"
                      "/**/crossspec_viz:\n  ros__parameters:\n    foxglove_port: 8765\n")
    path = launch_parameter_file(config, {"foxglove": True, "foxglove_port": 0,
                                          "verifier_model": "x"}, namespace,
                                 tmp_path / "launch.yaml")
    context = rclpy.Context()
    rclpy.init(context=context, args=["--ros-args", "--params-file", str(path)])
    try:
        node = rclpy.create_node("crossspec_viz", namespace=namespace or None,
                                 context=context,
                                 automatically_declare_parameters_from_overrides=True)
        values = {name: node.get_parameter(name).value
                  for name in ("foxglove", "foxglove_port", "event_image_hz")}
        assert values == {"foxglove": True, "foxglove_port": 0, "event_image_hz": 4.0}
        assert not node.has_parameter("verifier_model")  # not the viz node's
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_the_streams_launch_argument_reaches_the_verifier_alone(tmp_path):
    import yaml

    from crossspec_ros.nodes.graph import launch_parameter_file

    config = tmp_path / "drive.yaml"
    config.write_text("/**:\n  ros__parameters:\n    window_length_s: 1.0\n")
    path = launch_parameter_file(config, {"streams": "front,rear"}, "",
                                 tmp_path / "launch.yaml")
    doc = yaml.safe_load(path.read_text())
    having = {node for node, section in doc.items() if "streams" in section["ros__parameters"]}
    assert having == {"/crossspec_verifier"}
    assert doc["/crossspec_verifier"]["ros__parameters"]["streams"] == "front,rear"
