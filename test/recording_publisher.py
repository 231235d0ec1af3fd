"""A stand-in for an rclpy publisher that keeps what is published (node tests read it back).

Tests import this as `from recording_publisher import RecordingPublisher` (pytest puts test/ on
sys.path)."""


class RecordingPublisher:
    def __init__(self) -> None:
        self.sent: list = []

    def publish(self, msg) -> None:
        self.sent.append(msg)
