"""`crossspec bench startup`'s measurement: a real node process, asked over ROS whether it is
active, then stopped."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("rclpy")

pytestmark = pytest.mark.ros


def test_a_node_process_is_timed_until_its_lifecycle_state_is_active():
    from crossspec_ros.bench.startup import time_to_active

    env = dict(os.environ)  # the suite's: eager steps, loopback, its own domain
    seconds = time_to_active("verifier", env, [], timeout=120)
    assert 0 < seconds < 120


def test_a_node_that_cannot_start_is_reported_not_waited_for():
    from crossspec_ros.bench.startup import time_to_active

    with pytest.raises(RuntimeError, match="ended"):
        time_to_active("verifier", dict(os.environ),
                       ["-p", "verifier_model:=/nonexistent/model"], timeout=120)
