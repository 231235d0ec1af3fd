"""Recording crossspec's outputs as a rosbag2 bag: `ros2 bag play`, `crossspec play`,
rosbags and Foxglove all read it.

Messages arrive already serialized (CDR from rclpy's raw subscriptions) and are written as
they are, each filed under the time it carries itself: its header stamp (an annotated image:
its frame's time in the replayed bag; a caption, marker or diagnostics: when its node published
it, on the graph's clock), so the recording plays on one timeline with the bag it came from.
The time the caller gives (when the recording node took the message) is used only for a
message with no header stamp: a graph busier than the replay takes its messages late, and
then its clock has run on (at a high ``--rate`` the whole recording once fell on the bag's
last instant). The bag is a rosbag2 directory (MCAP storage, ros2msg schemas) written under a
hidden staging name and renamed to its final name on ``close()``: whatever kills the process,
no unreadable bag sits under the name the user asked for.
"""

from __future__ import annotations

import shutil
import struct
import threading
from pathlib import Path

from crossspec_ros.bags.writer import BagWriter
from crossspec_ros.stamps import SECOND_NS, join_ns

# Message types whose first field is a std_msgs/Header (all that drive records): in CDR the
# 4-byte encapsulation header comes first, then the stamp's int32 sec and uint32 nanosec.
HEADER_FIRST_TYPES = frozenset({
    "crossspec/msg/Caption", "crossspec/msg/DraftTokens", "crossspec/msg/ConfirmedTokens",
    "sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage",
    "visualization_msgs/msg/Marker", "diagnostic_msgs/msg/DiagnosticArray",
    "event_camera_msgs/msg/EventPacket"})


def header_stamp_ns(data: bytes) -> int | None:
    """The header stamp of a serialized message whose first field is a std_msgs/Header, in
    ns; None when it is unset (0) or the data is too short to hold one."""
    if len(data) < 12:
        return None
    order = "<" if data[1] & 1 else ">"  # encapsulation 0x0001/0x0003: little-endian
    sec, nanosec = struct.unpack_from(order + "iI", data, 4)
    if sec <= 0 or nanosec >= SECOND_NS:
        return None
    return join_ns(sec, nanosec)


def staging_path(path: str | Path) -> Path:
    """Where a recording of ``path`` is written until it is closed."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial")


class BagRecorder:
    """A rosbag2 directory ``path`` of raw CDR messages; thread-safe; ``close()`` finishes it
    (idempotent). ``overwrite``: replace an existing bag at ``path`` when closing."""

    def __init__(self, path: str | Path, overwrite: bool = False) -> None:
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise FileExistsError(f"{self.path} exists; remove it or choose another name")
        self.staging = staging_path(self.path)
        shutil.rmtree(self.staging, ignore_errors=True)  # left by a killed earlier run
        self.staging.mkdir(parents=True)
        # named like the final bag, so the storage file inside is <name>.mcap
        self._bag = BagWriter(self.staging / self.path.name, storage="mcap",
                              compress=True).__enter__()
        self._lock = threading.Lock()
        self.written = 0
        self.closed = False

    def write(self, topic: str, msgtype: str, data: bytes, log_time_ns: int) -> None:
        """One serialized message, filed under its header stamp (else ``log_time_ns``: when
        it was taken); ignored after close (a late callback during shutdown)."""
        stamp = header_stamp_ns(data) if msgtype in HEADER_FIRST_TYPES else None
        with self._lock:
            if self.closed:
                return
            self._bag.write_raw(topic, msgtype, data, log_time_ns if stamp is None else stamp)
            self.written += 1

    def close(self) -> Path:
        """Finish the bag and move it to ``path``; returns ``path``."""
        with self._lock:
            if self.closed:
                return self.path
            self.closed = True
            self._bag.__exit__(None, None, None)
            if self.path.is_dir() and not self.path.is_symlink():
                shutil.rmtree(self.path)
            elif self.path.exists() or self.path.is_symlink():  # a file (drive --overwrite)
                self.path.unlink()
            (self.staging / self.path.name).rename(self.path)
            self.staging.rmdir()
            return self.path
