"""Writing ROS 2 bags (MCAP or sqlite3) of crossspec's inputs with rosbags.

One small wrapper so every tool (test patterns, the sample bag, the DSEC converter) writes
EventPacket and Image messages the same way: header stamps on one clock, log time = stamp.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import TracebackType

import numpy as np
from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer

from crossspec_ros.bags.typestore import EVENT_PACKET_TYPE, typestore
from crossspec_ros.events.packet import EventPacketData
from crossspec_ros.images import rgb_to_image_fields
from crossspec_ros.stamps import split_ns

IMAGE_TYPE = "sensor_msgs/msg/Image"


def ns_to_time(stamp_ns: int):
    store = typestore()
    sec, nanosec = split_ns(stamp_ns)
    return store.types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec)


def header(stamp_ns: int, frame_id: str):
    return typestore().types["std_msgs/msg/Header"](stamp=ns_to_time(stamp_ns), frame_id=frame_id)


def event_packet_cdr(packet: EventPacketData) -> bytes:
    """``packet`` as a serialized (CDR) event_camera_msgs/EventPacket."""
    msg = typestore().types[EVENT_PACKET_TYPE](
        header=header(packet.stamp_ns, packet.frame_id), height=packet.height,
        width=packet.width, seq=packet.seq, time_base=packet.time_base,
        encoding=packet.encoding, is_bigendian=False,
        events=np.frombuffer(bytes(packet.events), dtype=np.uint8),
    )
    return bytes(typestore().serialize_cdr(msg, EVENT_PACKET_TYPE))


class BagWriter:
    """Context manager writing a rosbag2 directory; removes it again if the block fails.

    storage: "mcap" (default) or "sqlite3". compress: zstd chunk compression (MCAP storage
    compression; ~8x on the sample bag's images). The bag is written to ``path`` directly;
    callers that need atomic output write to a temporary sibling and rename it.
    """

    def __init__(self, path: str | Path, storage: str = "mcap", overwrite: bool = False,
                 compress: bool = False) -> None:
        self.path = Path(path)
        if storage not in ("mcap", "sqlite3"):
            raise ValueError(f"unknown bag storage '{storage}': use mcap or sqlite3")
        if self.path.exists():
            if not overwrite:
                raise FileExistsError(f"{self.path} exists; remove it or pass overwrite")
            shutil.rmtree(self.path)
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        self._writer = Writer(self.path, version=9, storage_plugin=plugin)
        if compress:
            self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        self._connections: dict[str, object] = {}
        self.store = typestore()

    def __enter__(self) -> BagWriter:
        self._writer.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._writer.close()
        if exc_type is not None:
            shutil.rmtree(self.path, ignore_errors=True)

    def _connection(self, topic: str, msgtype: str):
        if topic not in self._connections:
            self._connections[topic] = self._writer.add_connection(
                topic, msgtype, typestore=self.store)
        return self._connections[topic]

    def write(self, topic: str, msgtype: str, msg, log_time_ns: int) -> None:
        """Write any message of the type store at log time ``log_time_ns``."""
        self.write_raw(topic, msgtype, self.store.serialize_cdr(msg, msgtype), log_time_ns)

    def write_raw(self, topic: str, msgtype: str, data: bytes, log_time_ns: int) -> None:
        """Write an already serialized (CDR) message of the type store."""
        self._writer.write(self._connection(topic, msgtype), int(log_time_ns), data)

    def write_event_packet(self, topic: str, packet: EventPacketData,
                           log_time_ns: int | None = None) -> None:
        """Write ``packet`` at ``log_time_ns`` (default: its header stamp)."""
        self.write_raw(topic, EVENT_PACKET_TYPE, event_packet_cdr(packet),
                       packet.stamp_ns if log_time_ns is None else log_time_ns)

    def write_rgb(self, topic: str, stamp_ns: int, rgb: np.ndarray, frame_id: str) -> None:
        msg = self.store.types[IMAGE_TYPE](header=header(stamp_ns, frame_id),
                                           **rgb_to_image_fields(rgb))
        self.write(topic, IMAGE_TYPE, msg, stamp_ns)


def output_problem(out: Path, source: Path, overwrite: bool, source_kind: str) -> str | None:
    """Why a converter must not write the bag ``out`` from ``source`` (None: it may): an
    existing OUT is replaced only when asked, and never the input itself or a folder
    holding it. ``source_kind``: what the input is called in the message ("bag")."""
    if not (out.exists() or out.is_symlink()):
        return None
    if not overwrite:
        return f"{out} exists; pass --overwrite to replace it, or choose another output."
    resolved, src = out.resolve(), source.resolve()
    if resolved == src or resolved in src.parents:
        return (f"{out} holds the {source_kind} being converted; refusing to overwrite it. "
                "Choose another output.")
    return None
