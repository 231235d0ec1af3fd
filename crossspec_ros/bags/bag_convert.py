"""Convert an event-camera bag (ROS 1 or ROS 2) into the ROS 2 bag crossspec replays (what
``crossspec convert-bag`` runs).

Input: a bag with an event topic (dvs_msgs/EventArray, prophesee_event_msgs/EventArray or
event_camera_msgs/EventPacket) and an image topic (sensor_msgs/Image or CompressedImage),
found by type (the only one of each, or named). Output topics are crossspec's defaults
(config/drive.yaml, as convert-dsec writes them), so `crossspec drive --bag OUT` and
`ros2 launch crossspec drive.launch.py bag:=OUT` need no topic parameters:

- ``/event_camera/events``: event_camera_msgs/msg/EventPacket, ``evt3``: each EventArray
  becomes one packet stamped with its first event (bags/ros2_conversion.py); EventPackets are
  copied (converted to CDR from a ROS 1 bag);
- ``/camera/image_raw``: sensor_msgs/msg/Image as recorded (mono8 APS frames stay mono8), or
  ``/camera/image_raw/compressed`` for a CompressedImage topic.

Every message keeps its log time; other topics are not written (the report names them).
Events are counted in (every event of the EventArrays read) and out (the CD events of the
evt3 packets written, counted from their words); events outside the sensor and events a
driver sent back in time (EVT3 time only goes forward) are dropped and counted. The counts must
add up, or no bag is written. The bag is written into a temporary sibling of ``out`` and
renamed into place at the end, so a failure or Ctrl-C never leaves a partial bag.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from crossspec_ros.bagfile import cannot_open, is_ros1_bag, one_line, raw_reader
from crossspec_ros.bags.inputs import check_bag
from crossspec_ros.bags.ros2_conversion import ConversionError, EventCounts, Ros2Conversion
from crossspec_ros.bags.typestore import EVENT_PACKET_TYPE
from crossspec_ros.bags.writer import BagWriter, output_problem
from crossspec_ros.events.errors import EventSourceError
from crossspec_ros.events.event_array import EVENT_ARRAY_TYPES
from crossspec_ros.stamps import ns_to_seconds

EVENT_TOPIC = "/event_camera/events"
IMAGE_TOPIC = "/camera/image_raw"
COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"


class BagConvertError(Exception):
    """The bag or the options cannot be converted; the message says what to do."""


@dataclass
class BagConvertReport:
    """What a conversion read and wrote (``events``: the event topic's counts, for an
    EventArray topic)."""

    source: Path
    out: Path
    storage: str
    event_topic: str | None
    event_type: str | None
    image_topic: str | None
    image_type: str | None
    events: EventCounts = field(default_factory=EventCounts)
    event_messages: int = 0       # EventPackets written
    images: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # topic -> messages not written
    unconverted: int = 0          # images that do not convert from ROS 1: skipped
    duration_s: float = 0.0
    seconds: float = 0.0

    @property
    def image_out(self) -> str:
        return IMAGE_TOPIC + ("/compressed" if self.image_type == COMPRESSED_TYPE else "")

    def summary(self) -> str:
        """A few lines for people: topics, counts, speed and the count check."""
        speed = self.duration_s / self.seconds if self.seconds > 0 else math.inf
        lines = [f"wrote {self.out} ({self.storage}) from {self.source}"]
        if self.event_topic:
            kind = "evt3 EventPackets" if self.event_type in EVENT_ARRAY_TYPES else \
                "EventPackets (copied)"
            lines.append(f"  events:   {self.event_topic} ({self.event_type}) -> {EVENT_TOPIC}: "
                         f"{self.event_messages:,} {kind}")
        if self.image_topic:
            lines.append(f"  images:   {self.image_topic} ({self.image_type}) -> "
                         f"{self.image_out}: {self.images:,}"
                         + (f" ({self.unconverted:,} that do not convert skipped)"
                            if self.unconverted else ""))
        lines.append(f"  duration: {self.duration_s:.3f} s of the bag, converted in "
                     f"{self.seconds:.1f} s ({speed:.2f}x real time)")
        if self.event_type in EVENT_ARRAY_TYPES:
            counts = self.events
            dropped = [f"{n:,} {why}" for n, why in (
                (counts.outside_sensor, "outside the sensor"),
                (counts.out_of_order, "earlier than events already written"),
                (counts.time_outliers, "far from the topic's time")) if n]
            lines.append(f"  check:    {counts.events_in:,} events read == "
                         f"{counts.events_out:,} events in the packets"
                         + (f" + {' + '.join(dropped)} (dropped)" if dropped else ""))
            if counts.unreadable_messages:
                lines.append(f"  damaged:  {counts.unreadable_messages:,} EventArray messages "
                             "could not be read (skipped; their events are not counted)")
        if self.skipped:
            lines.append("  not written (not crossspec's inputs): " + ", ".join(
                f"{t} ({n:,})" for t, n in sorted(self.skipped.items())))
        return "\n".join(lines)


def convert_bag(source: str | Path, out: str | Path, *, event_topic: str | None = None,
                rgb_topic: str | None = None, storage: str = "mcap", compress: bool = True,
                overwrite: bool = False, progress: bool = True) -> BagConvertReport:
    """Convert the bag ``source`` into the bag directory ``out``, atomically.

    Raises BagConvertError for unusable input or a failed count check; then, as on any other
    error or an interrupt, ``out`` is left as it was.
    """
    start = time.perf_counter()
    source, out = Path(source), Path(out)
    if storage not in ("mcap", "sqlite3"):
        raise BagConvertError(f"unknown storage '{storage}': use mcap or sqlite3")
    try:
        inputs = check_bag(source, event_topic, rgb_topic)
    except EventSourceError as exc:
        raise BagConvertError(str(exc)) from None
    problem = output_problem(out, source, overwrite, "bag")
    if problem:
        raise BagConvertError(problem)
    report = BagConvertReport(source, out, storage, inputs.events, inputs.events_type,
                              inputs.images, inputs.images_type)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        # named like the final bag, so the storage file inside is <name>.mcap / .db3
        bag = BagWriter(staging / out.name, storage=storage,
                        compress=compress and storage == "mcap")
        with bag:
            _write(bag, report, progress)
        _verify(report)
        if out.exists() or out.is_symlink():  # --overwrite: only now, after success
            os.rename(out, staging / ".replaced")
        os.rename(staging / out.name, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    report.seconds = time.perf_counter() - start
    return report


def _write(bag: BagWriter, report: BagConvertReport, progress: bool) -> None:
    try:
        reader = raw_reader(report.source)
        reader.open()
    except Exception as exc:  # rosbags raises several kinds (format, sqlite, yaml, mcap)
        raise BagConvertError(cannot_open(report.source, exc)) from exc
    try:
        wanted = {report.event_topic: EVENT_TOPIC, report.image_topic: report.image_out}
        wanted.pop(None, None)
        conns = [c for c in reader.connections if c.topic in wanted]
        for c in reader.connections:
            if c.topic not in wanted:
                report.skipped[c.topic] = report.skipped.get(c.topic, 0) + c.msgcount
        conversion = Ros2Conversion(conns, is_ros1_bag(report.source))
        first = last = None
        with tqdm(total=sum(c.msgcount for c in conns), unit="msg", file=sys.stderr,
                  desc=f"converting {report.source.name}", disable=not progress) as bar:
            for conn, log_time, raw in reader.messages(connections=conns):
                first = log_time if first is None else first
                last = log_time
                _write_one(bag, report, conversion, conn, wanted[conn.topic], bytes(raw),
                           log_time)
                bar.update()
                counts = conversion.counts.get(report.event_topic)
                if counts is not None and bar.n % 100 == 0:
                    bar.set_postfix(events=f"{counts.events_out:,}", refresh=False)
        for topic, data in conversion.finish():  # what the event topic still held
            bag.write_raw(wanted[topic], EVENT_PACKET_TYPE, data, last)
            report.event_messages += 1
        report.events = conversion.counts.get(report.event_topic, EventCounts())
        report.duration_s = 0.0 if first is None else ns_to_seconds(last - first)
    except BagConvertError:
        raise
    except Exception as exc:  # damaged chunks: no bag rather than a silently short one
        raise BagConvertError(f"{report.source}: conversion stopped ({type(exc).__name__}: "
                              f"{one_line(exc)}); the bag may be corrupt or truncated. No bag "
                              "was written") from exc
    finally:
        reader.close()


def _write_one(bag: BagWriter, report: BagConvertReport, conversion: Ros2Conversion,
               conn: Any, topic: str, raw: bytes, log_time: int) -> None:
    msgtype = conversion.msgtype(conn.msgtype)
    is_events = conn.topic == report.event_topic
    try:
        messages = conversion.convert(conn.topic, conn.msgtype, raw)
    except ConversionError as exc:
        if is_events:
            raise BagConvertError(f"{exc}; no bag was written") from None
        report.unconverted += 1
        return
    for data in messages:
        bag.write_raw(topic, msgtype, data, log_time)
        if is_events:
            report.event_messages += 1
        else:
            report.images += 1


def _verify(report: BagConvertReport) -> None:
    """Events in == events out + dropped (else no bag: a converter must not lose events)."""
    counts = report.events
    if report.event_type in EVENT_ARRAY_TYPES and not counts.balanced:
        raise BagConvertError(
            f"event count check failed: {counts.events_in:,} events read from "
            f"{report.event_topic} but {counts.events_out:,} in the written packets (+ "
            f"{counts.outside_sensor:,} outside the sensor, {counts.out_of_order:,} out of "
            f"order, {counts.time_outliers:,} far from the topic's time). No bag was written; "
            "please report this with the bag.")
