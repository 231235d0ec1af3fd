"""ros2 launch crossspec server.launch.py [the arguments of drive.launch.py]

The server's side of the edge-cloud split: the verifier node (the GPU). Its clock follows
the robot's input: with the default use_sim_time:=auto the node runs on /clock while the
robot's bag player publishes it (it crosses the link), on its own clock live. It is
drive.launch.py with nodes:=verifier: the graph is defined once (crossspec_ros/nodes/graph.py).
Both sides need the same ROS_DOMAIN_ID and DDS discovery between the hosts (on one subnet the
default multicast works; see docs/deployment.md).
"""

from pathlib import Path

from launch import LaunchDescription
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource


def generate_launch_description() -> LaunchDescription:
    drive = Path(__file__).resolve().parent / "drive.launch.py"
    return LaunchDescription([IncludeLaunchDescription(
        PythonLaunchDescriptionSource(str(drive)),
        launch_arguments={"nodes": "verifier", "composed": "false"}.items())])
