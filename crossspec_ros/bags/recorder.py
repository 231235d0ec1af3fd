"""Recording crossspec's outputs as a rosbag2 bag: `ros2 bag play`, `crossspec play`,
rosbags and Foxglove all read it.

Messages arrive already serialized (CDR from rclpy's raw subscriptions) and are written as
they are, with the log time the caller gives (the graph's clock: the replayed bag's time under
``use_sim_time``, so the recording plays on one timeline with the bag it came from). The bag
is a rosbag2 directory (MCAP storage, ros2msg schemas) written under a hidden staging name
and renamed to its final name on ``close()``: whatever kills the process, no unreadable bag
sits under the name the user asked for.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from crossspec_ros.bags.writer import BagWriter


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
        """One serialized message; ignored after close (a late callback during shutdown)."""
        with self._lock:
            if self.closed:
                return
            self._bag.write_raw(topic, msgtype, data, log_time_ns)
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
