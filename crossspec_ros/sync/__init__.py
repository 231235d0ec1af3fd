"""sync layer of crossspec: event batches + stamped RGB frames -> time windows (no rclpy)."""

from crossspec_ros.sync.synchronizer import SyncStats, WindowSynchronizer
from crossspec_ros.sync.window import (
    StampedFrame,
    Window,
    sample_frames,
    window_bounds,
    window_id,
)

__all__ = [
    "StampedFrame",
    "SyncStats",
    "Window",
    "WindowSynchronizer",
    "sample_frames",
    "window_bounds",
    "window_id",
]
