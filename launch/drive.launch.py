"""ros2 launch crossspec drive.launch.py [bag:=PATH] [config:=YAML] [composed:=true|false]
    [drafter_model:=DIR] [verifier_model:=DIR|HUB_ID] [device:=cpu|cuda] [foxglove:=true]
    [rviz:=true] [rate:=1.0]

The graph (which nodes, what runs them) is defined once in crossspec_ros/nodes/graph.py and
shared with `crossspec drive`; this file only turns it into launch actions. composed:=true
(the default) runs every node in one process (one CUDA context, each model on its own worker
thread and CUDA stream); composed:=false runs one process per node, talking only over topics
(the distributed layout: the draft node could as well run on the robot).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.actions import Node

from crossspec_ros.nodes.graph import COMPOSED, EXECUTABLE, GRAPH, default_config
from crossspec_ros.paths import sample_bag

ARGUMENTS = {
    "bag": (str(sample_bag()), "bag to replay with /clock ('' for live cameras)"),
    "rate": ("1.0", "bag replay rate"),
    "config": (str(default_config()), "ROS parameter YAML for every crossspec node"),
    "composed": ("true", "all nodes in one process (true) or one process per node (false)"),
    "drafter_model": ("", "EventGPT directory (empty: the bundled tiny drafter)"),
    "verifier_model": ("", "Video-LLaVA directory or hub id (empty: the bundled tiny verifier)"),
    "device": ("cpu", "cpu, cuda or cuda:N"),
    "foxglove": ("false", "serve captions and annotated frames on ws://127.0.0.1:8765"),
    "rviz": ("false", "start RViz with config/crossspec.rviz"),
}


def _nodes(context, *_args, **_kwargs) -> list:
    get = lambda name: LaunchConfiguration(name).perform(context)  # noqa: E731
    use_sim_time = bool(get("bag"))
    overrides = {"use_sim_time": use_sim_time, "device": get("device"),
                 "drafter_model": get("drafter_model"),
                 "verifier_model": get("verifier_model"),
                 "foxglove": get("foxglove").lower() == "true"}
    params = [get("config"), overrides]
    if get("composed").lower() == "true":
        # no name remapping here: it would rename every node of the process
        return [Node(package="crossspec", executable=EXECUTABLE, arguments=COMPOSED.arguments,
                     parameters=params, output="screen", emulate_tty=True)]
    return [Node(package="crossspec", executable=EXECUTABLE, name=spec.name,
                 arguments=spec.arguments, parameters=params, output="screen",
                 emulate_tty=True)
            for spec in GRAPH]


def generate_launch_description() -> LaunchDescription:
    declared = [DeclareLaunchArgument(name, default_value=default, description=doc)
                for name, (default, doc) in ARGUMENTS.items()]
    replay = ExecuteProcess(
        cmd=[EXECUTABLE, "play", LaunchConfiguration("bag"), "--rate",
             LaunchConfiguration("rate")],
        output="screen",
        condition=IfCondition(PythonExpression(["'", LaunchConfiguration("bag"), "' != ''"])))
    rviz = Node(package="rviz2", executable="rviz2", output="screen",
                arguments=["-d", str(default_config().parent / "crossspec.rviz")],
                condition=IfCondition(LaunchConfiguration("rviz")))
    return LaunchDescription([*declared, OpaqueFunction(function=_nodes), replay, rviz])
