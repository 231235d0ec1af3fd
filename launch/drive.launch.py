"""ros2 launch crossspec drive.launch.py [bag:=PATH|live] [config:=YAML] [composed:=true|false]
    [drafter_model:=DIR] [draft_head:=DIR] [verifier_model:=DIR|HUB_ID] [device:=cpu|cuda]
    [foxglove:=true] [foxglove_port:=8765] [rviz:=true] [rate:=1.0] [namespace:=NS]
    [exit_when_bag_ends:=true] [nodes:=draft,verifier,viz] [use_sim_time:=auto|true|false]

The graph (which nodes, what runs them) is defined once in crossspec_ros/nodes/graph.py and
shared with `crossspec drive`; this file only turns it into launch actions. composed:=true
(the default) runs every node in one process (one CUDA context, each model on its own worker
thread and CUDA stream); composed:=false runs one process per node, talking only over topics
(the distributed layout: the draft node could as well run on the robot). nodes:= starts a
subset of the graph: robot.launch.py (draft, viz and the bag or the cameras) and
server.launch.py (the verifier) are this file with nodes:= set, one per host.

The nodes are lifecycle nodes. With composed:=false launch manages each one: it configures
it and activates it once that configure has finished (configuring -> inactive, once: a
deactivate also ends in inactive and stays there; nodes/graph.py BRING_UP); the composed
process holds three nodes under one process and brings them up itself. Either way the bag
player waits until all of them report active before its first message. `ros2 lifecycle set
/crossspec_verifier deactivate` (and activate, cleanup...) works on them.

The parameter file is checked before any process starts (crossspec_ros/params.py), so a bad
one ends the launch with one line instead of three nodes failing while the player waits.
namespace:=NS puts every node, topic and the replayed bag's clock under NS (the player
publishes NS/clock and the nodes remap /clock:=clock): two robots replaying bags on one DDS
domain each keep their own bag time.
exit_when_bag_ends:=true shuts the launch down once the bag has been replayed and its last
window captioned (nodes/graph.py bag_end_grace_s); by default the graph keeps running after
the bag, as with `ros2 bag play`.
"""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

from launch import LaunchDescription
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    ExecuteProcess,
    LogInfo,
    OpaqueFunction,
    RegisterEventHandler,
    Shutdown,
    TimerAction,
)
from launch.event_handlers import OnProcessExit
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.substitutions import ExecutableInPackage
from lifecycle_msgs.msg import Transition

from crossspec_ros.nodes.graph import (
    BRING_UP,
    COMPOSED,
    EXECUTABLE,
    GRAPH,
    bag_end_grace_s,
    default_config,
    exit_shuts_down_launch,
    launch_flag,
    launch_parameter_file,
    node_parameters,
    sim_time_parameters,
)
from crossspec_ros.params import check_param_file
from crossspec_ros.paths import sample_bag

ARGUMENTS = {
    "bag": (str(sample_bag()), "bag to replay with /clock, or 'live' for live cameras"),
    "rate": ("1.0", "bag replay rate"),
    "config": (str(default_config()), "ROS parameter YAML for every crossspec node"),
    "composed": ("true", "all nodes in one process (true) or one process per node (false)"),
    "drafter_model": ("", "EventGPT directory (empty: the bundled tiny drafter, distilled)"),
    "draft_head": ("", "draft head directory (crossspec distill --method head; empty: none)"),
    "verifier_model": ("", "Video-LLaVA directory or hub id (empty: the bundled tiny verifier)"),
    "device": ("cpu", "cpu, cuda or cuda:N"),
    "emulate": ("", "a cost profile (h100-bf16-eager-2026-11-24, h100-bf16-limit or a file): "
                "every model call lasts what it costs on that target, the tokens computed "
                "here; every output says emulated (empty: this machine's own costs; "
                "composed:=true shares one emulated device between the models)"),
    "foxglove": ("false", "serve captions and annotated frames on ws://127.0.0.1:PORT"),
    "foxglove_port": ("8765", "the Foxglove server's port (foxglove:=true); 0 picks a free one"),
    "rviz": ("false", "start RViz with config/crossspec.rviz"),
    "namespace": ("", "namespace of every node and topic (two robots on one DDS domain)"),
    "streams": ("", "several cameras on one verifier: their names, comma-separated (front,rear), "
                "each a namespace of that camera's topics (front/camera/image_raw -> "
                "front/crossspec/caption); the verifier node serves them all, one draft node "
                "per camera runs with namespace:=NAME (docs/streams.md); empty: one camera"),
    "nodes": ("draft,verifier,viz", "which of the graph's nodes this launch starts: all (one "
              "host), or a side of the edge-cloud split (robot.launch.py: draft,viz; "
              "server.launch.py: verifier); a subset runs one process per node"),
    "use_sim_time": ("auto", "auto: true when this launch replays a bag (bag is not live), "
                     "false for live cameras, and where the robot is elsewhere (nodes without "
                     "draft: the server of a split) true while /clock is published, at run "
                     "time; true or false: as given"),
    "exit_when_bag_ends": ("false", "shut the launch down once the bag has been replayed and "
                           "its last window captioned (false: the graph keeps running, as "
                           "with ros2 bag play)"),
}
LIVE = ("live", "")  # bag values meaning: no replay, the cameras publish
TRANSITION_IDS = {"activate": Transition.TRANSITION_ACTIVATE}


def _namespace(context) -> str:
    value = LaunchConfiguration("namespace").perform(context).strip("/")
    return f"/{value}" if value else ""


def _nodes(context, *_args, **_kwargs) -> list:
    get = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    check_param_file(get("config"), node_parameters())  # ParameterError: one line, no start
    kinds = _kinds(get("nodes"))
    # the bag is played where the draft node runs (_replay): elsewhere (the server of a
    # split) auto follows /clock at run time
    replayed_here = get("bag") not in LIVE if "draft" in kinds else None
    overrides = {**sim_time_parameters(get("use_sim_time"), replayed_here),
                 "device": get("device"),
                 "drafter_model": get("drafter_model"), "draft_head": get("draft_head"),
                 "verifier_model": get("verifier_model"), "emulate": get("emulate"),
                 "streams": get("streams"),
                 "foxglove": launch_flag("foxglove", get("foxglove")),
                 "foxglove_port": _port(get("foxglove_port"))}
    namespace = _namespace(context)
    # each node's parameters in one file, the launch arguments over the config's values
    # (beside the config under /**, they lost to its node sections: foxglove:=true did nothing)
    params = [str(launch_parameter_file(get("config"), overrides, namespace,
                                        _temporary("crossspec-launch-", ".yaml")))]
    if launch_flag("composed", get("composed")) and len(kinds) == len(GRAPH):
        # no name remapping here: it would rename every node of the process
        composed = Node(package="crossspec", executable=EXECUTABLE,
                        arguments=COMPOSED.arguments, namespace=namespace, parameters=params,
                        remappings=_clock_remapping(namespace), output="screen",
                        emulate_tty=True)
        return [_shutdown_when_it_fails(composed, COMPOSED.name), composed]
    actions: list = []
    for spec in (s for s in GRAPH if s.kind in kinds):  # one managed process per node: launch
        # configures, then activates it
        node = LifecycleNode(package="crossspec", executable=EXECUTABLE, name=spec.name,
                             namespace=namespace or "/",
                             arguments=[*spec.arguments, "--no-autostart"],
                             parameters=params,
                             remappings=_clock_remapping(namespace), output="screen",
                             emulate_tty=True)
        actions += [_shutdown_when_it_fails(node, spec.name), node]
        for rule in BRING_UP:  # once: the node's later transitions are the user's
            follow_up = EmitEvent(event=ChangeState(
                lifecycle_node_matcher=matches_action(node),
                transition_id=TRANSITION_IDS[rule.transition]))
            actions.append(RegisterEventHandler(OnStateTransition(
                target_lifecycle_node=node, start_state=rule.start_state,
                goal_state=rule.goal_state, entities=[follow_up], handle_once=True)))
        actions.append(EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(node),
                                                   transition_id=Transition.TRANSITION_CONFIGURE)))
    return actions


def _temporary(prefix: str, suffix: str) -> Path:
    """A file for this launch, removed when the launch process ends."""
    handle, name = tempfile.mkstemp(prefix=prefix, suffix=suffix)
    os.close(handle)
    atexit.register(lambda: Path(name).unlink(missing_ok=True))
    return Path(name)


def _clock_remapping(namespace: str) -> list[tuple[str, str]]:
    """In a namespace, the nodes follow the bag time the player publishes there (NS/clock):
    two robots replaying bags on one domain each keep their own clock (issue 53, item 13)."""
    return [("/clock", "clock")] if namespace else []


class NodeFailedError(RuntimeError):
    """A crossspec process of this launch failed: the launch ends with exit code 1."""


def _shutdown_when_it_fails(process, name: str) -> RegisterEventHandler:
    """End the launch when a crossspec process exits with an error (a node that could not
    configure or activate: a missing model, CUDA on a CPU machine; its own line says why)
    instead of leaving the rest of the graph and the player waiting for it; not once launch is
    shutting down anyway (nodes/graph.py exit_shuts_down_launch).

    launch's Shutdown action ends `ros2 launch` with exit code 0; only an error in the launch
    itself returns non-zero (LaunchService.run: 1). So the handler raises the failure: launch
    logs "Caught exception in launch (see debug for traceback): <the reason>", shuts everything
    down and exits 1, and the reason is the launch's last line too. Register the handler before
    its process: launch runs the newest handlers first, and the process's own (the one that
    flushes its last output) must not be skipped. (A coroutine raising instead was pruned
    unread: launch exited 0.)"""

    def on_exit(event, context) -> list:
        reason = exit_shuts_down_launch(name, event.returncode, context.is_shutdown)
        if reason is None:
            return []
        _say_at_exit(f"crossspec: the launch failed: {reason}")
        raise NodeFailedError(reason)

    return RegisterEventHandler(OnProcessExit(target_action=process, on_exit=on_exit))


def _say_at_exit(line: str) -> None:
    """Print ``line`` as the launch process exits: after launch's own last lines."""
    atexit.register(print, line, file=sys.__stderr__, flush=True)


def _port(value: str) -> int:
    if not value.isdigit() or int(value) > 65535:
        raise ValueError(f"foxglove_port:={value}: give a port number 0..65535 (0: any free)")
    return int(value)


def _kinds(value: str) -> list[str]:
    kinds = [k.strip() for k in value.split(",") if k.strip()]
    known = [spec.kind for spec in GRAPH]
    unknown = [k for k in kinds if k not in known]
    if unknown or not kinds:
        raise ValueError(f"nodes:={value}: name some of {', '.join(known)} (comma-separated)")
    return kinds


def _replay(context, *_args, **_kwargs) -> list:
    bag = LaunchConfiguration("bag").perform(context)
    if "draft" not in _kinds(LaunchConfiguration("nodes").perform(context)):
        return []  # the bag stands for the robot's cameras: it plays on the robot's side
    if bag in LIVE:
        return [LogInfo(msg="crossspec: bag:=live, no replay: waiting for the cameras")]
    # the player starts once every node is active (models loaded): no window is replayed
    # before anyone listens, however long a 7B model takes to load
    # the package's executable, as the nodes are started (not whatever `crossspec` is on PATH)
    executable = ExecutableInPackage(EXECUTABLE, "crossspec").perform(context)
    cmd = [executable, "play", bag, "--rate", LaunchConfiguration("rate").perform(context),
           "--wait-active", *(spec.name for spec in GRAPH)]
    namespace = _namespace(context)
    if namespace:  # the player's topics are relative: they move with the graph
        cmd += ["--namespace", namespace]
    player = ExecuteProcess(cmd=cmd, output="screen")
    if not launch_flag("exit_when_bag_ends",
                       LaunchConfiguration("exit_when_bag_ends").perform(context)):
        return [player]
    grace_s = bag_end_grace_s(LaunchConfiguration("config").perform(context))
    reason = "the bag has ended (exit_when_bag_ends:=true)"
    return [player, RegisterEventHandler(OnProcessExit(target_action=player, on_exit=[
        LogInfo(msg=f"crossspec: {reason}; shutting down in {grace_s:g} s, once its last "
                "window is captioned"),
        TimerAction(period=grace_s, actions=[Shutdown(reason=reason)])]))]


def _rviz(context, *_args, **_kwargs) -> list:
    if not launch_flag("rviz", LaunchConfiguration("rviz").perform(context)):
        return []
    if shutil.which("rviz2") is None and not _has_package("rviz2"):
        return [LogInfo(msg="crossspec: rviz:=true but rviz2 is not installed here (e.g. "
                        "`apt install ros-$ROS_DISTRO-rviz2`); going on without RViz")]
    return [Node(package="rviz2", executable="rviz2", output="screen",
                 arguments=["-d", str(default_config().parent / "crossspec.rviz")])]


def _has_package(name: str) -> bool:
    try:
        from ament_index_python.packages import get_package_prefix

        get_package_prefix(name)
    except Exception:  # not installed, or no ament index at all
        return False
    return True


def generate_launch_description() -> LaunchDescription:
    declared = [DeclareLaunchArgument(name, default_value=default, description=doc)
                for name, (default, doc) in ARGUMENTS.items()]
    return LaunchDescription([*declared, OpaqueFunction(function=_nodes),
                              OpaqueFunction(function=_replay), OpaqueFunction(function=_rviz)])
