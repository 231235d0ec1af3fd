"""launch_testing: `drive.launch.py` on the sample bag brings the graph up, captions reach
/crossspec/caption and windows end FINAL, and every process exits cleanly on shutdown.

Needs ROS 2 launch (launch_testing, launch_ros: a ROS install, not PyPI), so it is skipped
where launch_testing is not importable, as in CI here. Run it on a ROS install with
`pytest test/test_launch_drive.py` (launch_testing's pytest plugin) after sourcing the
workspace that `colcon build` made.
"""

import os
import sys
import time
import unittest
from pathlib import Path

import pytest

pytest.importorskip("launch_testing")
pytest.importorskip("launch_ros")  # PyPI's `launch` is an unrelated package: check launch_ros

import launch
import launch_testing.actions
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource

LAUNCH_FILE = Path(__file__).resolve().parents[1] / "launch" / "drive.launch.py"
# `make setup` lays the package out in the venv (scripts/install_ros_layout.sh), which its
# activate script puts on AMENT_PREFIX_PATH: the same when the tests run without activating it
if (Path(sys.prefix) / "share" / "crossspec").is_dir() and \
        sys.prefix not in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
    os.environ["AMENT_PREFIX_PATH"] = os.pathsep.join(
        p for p in (sys.prefix, os.environ.get("AMENT_PREFIX_PATH")) if p)
FINAL_WITHIN_S = 120.0  # start-up (model loading) plus a few windows of the 24 s bag


@pytest.mark.launch_test
def generate_test_description():
    drive = IncludeLaunchDescription(PythonLaunchDescriptionSource(str(LAUNCH_FILE)),
                                     launch_arguments={"composed": "true"}.items())
    return launch.LaunchDescription([drive, launch_testing.actions.ReadyToTest()])


class TestCaptions(unittest.TestCase):
    def test_windows_get_a_draft_then_a_final_caption(self):
        import rclpy
        from crossspec.msg import Caption

        rclpy.init()
        node = rclpy.create_node("crossspec_launch_test")
        received: list = []
        node.create_subscription(Caption, "/crossspec/caption", received.append, 100)
        deadline = time.monotonic() + FINAL_WITHIN_S
        try:
            while time.monotonic() < deadline and not any(
                    m.status == Caption.STATUS_FINAL for m in received):
                rclpy.spin_once(node, timeout_sec=0.5)
        finally:
            node.destroy_node()
            rclpy.shutdown()
        finals = [m for m in received if m.status == Caption.STATUS_FINAL]
        self.assertTrue(finals, f"no FINAL caption within {FINAL_WITHIN_S:.0f} s "
                        f"({len(received)} captions received)")
        self.assertTrue(finals[0].confirmed_text.startswith("The"), finals[0].confirmed_text)


@launch_testing.post_shutdown_test()
class TestShutdown(unittest.TestCase):
    def test_every_process_exits_cleanly(self, proc_info):
        # launch stops everything with SIGINT: every process exits 0, the bag player too,
        # stopped mid-bag or finished (`crossspec play --help`: as ros2 bag play, a stopped
        # player is no failure; test_player.py's signal test holds it to that)
        for process in proc_info.processes():
            info = proc_info[process]
            self.assertEqual(info.returncode, 0, " ".join(info.cmd))
