"""ros2 launch crossspec robot.launch.py [the arguments of drive.launch.py]

The robot's side of the edge-cloud split: the draft node (its speculative caption comes within
milliseconds of a window's close, whatever the link does), the viz node, and the bag player
(bag:=live: the cameras publish). It is drive.launch.py with nodes:=draft,viz: the graph is
defined once (crossspec_ros/nodes/graph.py).
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
        launch_arguments={"nodes": "draft,viz", "composed": "false"}.items())])
