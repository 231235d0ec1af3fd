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
            "foxglove", "rviz", "namespace"} <= names


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
