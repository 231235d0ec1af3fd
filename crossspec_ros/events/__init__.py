"""Event-camera data plane: EventBatch, decoders, readers, representations (no rclpy)."""

from crossspec_ros.events.batch import EventBatch

__all__ = ["EventBatch"]
