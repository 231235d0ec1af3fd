"""The launch file, where ROS 2 launch is installed (a ROS install; not PyPI, so skipped in
CI here). It must declare its documented arguments and build the graph from nodes/graph.py."""

import importlib.util
import time
from pathlib import Path

import pytest

launch_ros = pytest.importorskip("launch_ros")  # PyPI's `launch` is an unrelated package
launch = pytest.importorskip("launch")

LAUNCH_FILE = Path(__file__).resolve().parents[1] / "launch" / "drive.launch.py"


def _module():
    """The launch file as a module; what it would print at the process's exit is kept in its
    ``said`` instead (a test process exits long after)."""
    spec = importlib.util.spec_from_file_location("drive_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.said = []
    module._say_at_exit = module.said.append
    return module


def _description():
    return _module().generate_launch_description()


def test_launch_file_declares_its_documented_arguments():
    names = {a.name for a in _description().get_launch_arguments()}
    assert {"bag", "rate", "config", "composed", "drafter_model", "verifier_model", "device",
            "foxglove", "foxglove_port", "rviz", "namespace", "exit_when_bag_ends"} <= names


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


@pytest.mark.parametrize("composed", ["true", "false"])
def test_a_node_process_that_exits_with_an_error_shuts_the_launch_down(composed):
    # issue 45, fault 6: a node that could not configure ended its process and launch stayed
    # up with the player waiting for it; issue 53, item 12: launch then exited 0
    from launch.actions import OpaqueFunction, RegisterEventHandler
    from launch.event_handlers import OnProcessExit
    from launch.events.process import ProcessExited
    from launch_ros.actions import Node

    context = launch.LaunchContext()
    description = _description()
    for action in description.entities:
        if isinstance(action, launch.actions.DeclareLaunchArgument):
            action.visit(context)
    context.launch_configurations["composed"] = composed
    opaque = next(a for a in description.entities if isinstance(a, OpaqueFunction))
    actions = opaque.execute(context)
    nodes = [a for a in actions if isinstance(a, Node)]
    handlers = [a.event_handler for a in actions if isinstance(a, RegisterEventHandler)
                and isinstance(a.event_handler, OnProcessExit)]
    for node in nodes:
        def exited(returncode, node=node):
            return ProcessExited(action=node, name="crossspec", cmd=["crossspec"], cwd=None,
                                 env=None, pid=1, returncode=returncode)

        [handler] = [h for h in handlers if h.matches(exited(2))]
        # raised: launch shuts down and exits 1 (its Shutdown action would exit 0)
        with pytest.raises(RuntimeError, match="exited with code 2"):
            handler.handle(exited(2), context)
        assert not handler.handle(exited(0), context)
        # before its process: the process's own handlers of the exit (its last output) run
        registered = next(i for i, a in enumerate(actions) if isinstance(a, RegisterEventHandler)
                          and a.event_handler is handler)
        assert registered < actions.index(node)


def test_launch_exits_1_with_the_failed_node_named_last_when_a_process_fails():
    # issue 53, item 12: `ros2 launch` exited 0 after a node failed to configure (exit 2)
    from launch.actions import ExecuteProcess

    failing = ExecuteProcess(cmd=["sh", "-c", "exit 2"], output="screen")
    other = ExecuteProcess(cmd=["sleep", "60"], output="screen")
    module = _module()
    service = launch.LaunchService()
    service.include_launch_description(launch.LaunchDescription([
        module._shutdown_when_it_fails(failing, "crossspec_verifier"), failing, other]))
    started = time.monotonic()
    assert service.run() == 1
    assert time.monotonic() - started < 30  # at once, not after the other process's 60 s
    assert module.said == [  # the launch's last line
        "crossspec: the launch failed: crossspec_verifier exited with code 2 (its log above "
        "says why)"]


def _server_verifier_actions() -> tuple[launch.LaunchContext, list]:
    """server.launch.py's actions for one verifier process (composed:=false), and the launch
    context they were made in."""
    from launch.actions import OpaqueFunction

    context = launch.LaunchContext()
    description = _description()
    for action in description.entities:
        if isinstance(action, launch.actions.DeclareLaunchArgument):
            action.visit(context)
    context.launch_configurations.update(nodes="verifier", composed="false")
    opaque = next(a for a in description.entities if isinstance(a, OpaqueFunction))
    return context, opaque.execute(context)


def test_the_server_launch_leaves_the_clock_to_follow_the_robots_input():
    # issue 45, fault 8: server.launch.py (no bag of its own) set use_sim_time true, also for
    # a robot with live cameras
    from launch_ros.actions import LifecycleNode

    _, actions = _server_verifier_actions()
    [node] = [a for a in actions if isinstance(a, LifecycleNode)]
    # one parameter file per launch, each node's values under its own name (issue 53, item 9)
    import yaml

    [parameter_file] = node._Node__parameters
    path = "".join(part.text for part in parameter_file.param_file)
    values = yaml.safe_load(Path(path).read_text())["/crossspec_verifier"]["ros__parameters"]
    assert values["use_sim_time"] is False and values["follow_clock"] is True


def test_an_exit_while_launch_shuts_down_asks_for_no_second_shutdown():
    # issue 45, fault 5: a server node stopped by Ctrl-C in its first seconds exited non-zero
    # and the handler emitted a second Shutdown; launch_ros' ROS adapter raised "Cannot
    # shutdown a ROS adapter that is not running" and launch exited 1
    from launch.actions import RegisterEventHandler
    from launch.event_handlers import OnProcessExit
    from launch.events.process import ProcessExited
    from launch_ros.actions import LifecycleNode

    context, actions = _server_verifier_actions()
    [node] = [a for a in actions if isinstance(a, LifecycleNode)]
    [handler] = [a.event_handler for a in actions if isinstance(a, RegisterEventHandler)
                 and isinstance(a.event_handler, OnProcessExit)]
    died = ProcessExited(action=node, name="crossspec", cmd=["crossspec"], cwd=None, env=None,
                         pid=1, returncode=-2)
    with pytest.raises(RuntimeError, match="killed by SIGINT"):
        handler.handle(died, context)  # on its own: the launch shuts down, exit code 1
    context._set_is_shutdown(True)  # launch is stopping already (Ctrl-C)
    assert not handler.handle(died, context)
