"""The launch file, where ROS 2 launch is installed (a ROS install; not PyPI, so skipped in
CI here). It must declare its documented arguments and build the graph from nodes/graph.py."""

import importlib.util
from pathlib import Path

import pytest

launch_ros = pytest.importorskip("launch_ros")  # PyPI's `launch` is an unrelated package
launch = pytest.importorskip("launch")

LAUNCH_FILE = Path(__file__).resolve().parents[1] / "launch" / "drive.launch.py"


def _description():
    spec = importlib.util.spec_from_file_location("drive_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate_launch_description()


def test_launch_file_declares_its_documented_arguments():
    names = {a.name for a in _description().get_launch_arguments()}
    assert {"bag", "rate", "config", "composed", "drafter_model", "verifier_model", "device",
            "foxglove", "rviz", "namespace", "exit_when_bag_ends"} <= names


@pytest.mark.parametrize(("composed", "expected"), [("true", 1), ("false", 3)])
def test_composed_runs_one_process_and_distributed_one_per_node(composed, expected):
    from launch.actions import OpaqueFunction

    context = launch.LaunchContext()
    description = _description()
    for action in description.entities:
        if isinstance(action, launch.actions.DeclareLaunchArgument):
            action.visit(context)
    context.launch_configurations["composed"] = composed
    from launch_ros.actions import Node

    opaque = next(a for a in description.entities if isinstance(a, OpaqueFunction))
    nodes = [a for a in opaque.execute(context) if isinstance(a, Node)]
    assert len(nodes) == expected


def _distributed_actions() -> list:
    from launch.actions import OpaqueFunction

    context = launch.LaunchContext()
    description = _description()
    for action in description.entities:
        if isinstance(action, launch.actions.DeclareLaunchArgument):
            action.visit(context)
    context.launch_configurations["composed"] = "false"
    opaque = next(a for a in description.entities if isinstance(a, OpaqueFunction))
    return opaque.execute(context)


def test_distributed_launch_activates_a_node_after_its_configure_only_and_once():
    # issue 36, fault 9: matched on goal_state "inactive" alone, launch answered a user's
    # deactivate (deactivating -> inactive) with an activate
    from launch.actions import RegisterEventHandler
    from launch_ros.actions import LifecycleNode
    from launch_ros.events.lifecycle import StateTransition
    from lifecycle_msgs.msg import TransitionEvent

    def transition(node, start: str, goal: str) -> StateTransition:
        msg = TransitionEvent()
        msg.start_state.label, msg.goal_state.label = start, goal
        return StateTransition(action=node, msg=msg)

    actions = _distributed_actions()
    handlers = [a.event_handler for a in actions if isinstance(a, RegisterEventHandler)]
    nodes = [a for a in actions if isinstance(a, LifecycleNode)]
    assert len(nodes) == 3
    for node in nodes:
        after_configure = [h for h in handlers if h.matches(transition(node, "configuring",
                                                                       "inactive"))]
        assert len(after_configure) == 1 and after_configure[0].handle_once
        assert not any(h.matches(transition(node, "deactivating", "inactive"))
                       for h in handlers)
