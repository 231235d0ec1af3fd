"""A bag as crossspec's input stream: event batches and RGB frames in recording order.

ROS 2 bags and ROS 1 bags alike. The event topic is found by type (events/bag.py): EventPacket
topics are decoded by one streaming decoder (events/decode.py), dvs_msgs and
prophesee_event_msgs EventArrays read straight from their bytes (events/event_array.py), events
outside the sensor dropped and counted either way; images (sensor_msgs/Image: rgb8, bgr8, mono8,
mono16..., or CompressedImage) become RGB arrays (images.py). Bad images, and messages whose
bytes do not deserialize (a damaged recording), are counted and warned about once per kind or
topic, never raised: one broken message must not end a replay.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rosbags.highlevel import AnyReader

from crossspec_ros.bagfile import (
    BagDamagedError,
    any_reader,
    cannot_open,
    one_line,
    stored_messages,
)
from crossspec_ros.events.bag import (
    EVENT_TOPIC_TYPES,
    EVENT_TYPES_TEXT,
    EventBagError,
    event_decoder,
    read_event_message,
)
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.images import UnsupportedImageError, compressed_to_rgb, image_to_rgb
from crossspec_ros.stamps import join_ns
from crossspec_ros.sync.window import StampedFrame

log = logging.getLogger(__name__)

IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")


@dataclass
class BagInput:
    """One input: ``events`` (a decoded packet) or ``frame`` (an RGB image)."""

    topic: str
    log_time_ns: int
    events: EventBatch | None = None
    frame: StampedFrame | None = None


@dataclass
class InputStats:
    event_packets: int = 0  # event messages: EventPackets or EventArrays
    out_of_bounds_events: int = 0  # outside the sensor's width x height: dropped
    frames: int = 0
    bad_frames: int = 0
    unreadable_messages: int = 0  # whose CDR bytes did not deserialize; skipped
    warned: set[str] = field(default_factory=set)


def pick_topic(reader: AnyReader, msgtypes: tuple[str, ...], wanted: str | None, what: str,
               path: Path) -> str | None:
    """The topic to read: ``wanted`` if present, else the only one of those types."""
    topics = sorted({c.topic for c in reader.connections if c.msgtype in msgtypes})
    if wanted:
        if wanted not in topics:
            raise EventBagError(f"{path}: no {what} topic '{wanted}'; {what} topics in the bag: "
                                f"{topics or 'none'}")
        return wanted
    if len(topics) > 1:
        raise EventBagError(f"{path}: several {what} topics {topics}; choose one "
                            f"(--{what.replace(' ', '-')}-topic)")
    return topics[0] if topics else None


def read_inputs(path: str | Path, event_topic: str | None = None, rgb_topic: str | None = None,
                stats: InputStats | None = None) -> Iterator[BagInput]:
    """Events and frames of a bag in log-time order (topics auto-detected when unique)."""
    path = Path(path)
    stats = stats if stats is not None else InputStats()
    reader = _open(path)
    try:
        ev_topic, im_topic = _input_topics(reader, path, event_topic, rgb_topic)
        decoder = None
        connections = [c for c in reader.connections if c.topic in (ev_topic, im_topic)]
        for conn, log_time, raw in _messages(reader, path, connections):
            if conn.topic == ev_topic:
                message = _read(reader, raw, conn, stats, path, events=True)
                if message is None:
                    continue
                if decoder is None:  # of the topic's type: EventPacket or EventArray
                    decoder = event_decoder(conn.msgtype, name=ev_topic)
                stats.event_packets += 1
                events = decoder.decode(message)
                stats.out_of_bounds_events = decoder.stats.out_of_bounds_events
                yield BagInput(conn.topic, log_time, events=events)
                continue
            msg = _read(reader, raw, conn, stats, path)
            if msg is None:
                continue
            frame = _frame(msg, conn.msgtype, stats, conn.topic)
            if frame is not None:
                stats.frames += 1
                yield BagInput(conn.topic, log_time, frame=frame)
    finally:
        reader.close()


def _messages(reader: AnyReader, path: Path, connections: list[Any]
              ) -> Iterator[tuple[Any, int, bytes]]:
    """The stored messages of ``connections``; a damaged bag ends them with one line
    (EventBagError: the windows read before it are kept by whoever iterates)."""
    try:
        yield from stored_messages(reader, path, connections=connections)
    except BagDamagedError as err:
        raise EventBagError(str(err)) from err


def _read(reader: AnyReader, raw: bytes, conn: Any, stats: InputStats, path: Path,
          events: bool = False) -> Any | None:
    """The message (``events``: an event message, events/bag.py), or None (counted, warned
    once per topic) when its bytes are damaged."""
    try:
        if events:
            return read_event_message(reader, raw, conn.msgtype)
        return reader.deserialize(raw, conn.msgtype)
    except Exception as err:  # rosbags raises several kinds for damaged bytes
        stats.unreadable_messages += 1
        key = f"unreadable {conn.topic}"
        level = logging.DEBUG if key in stats.warned else logging.WARNING
        stats.warned.add(key)
        log.log(level, "%s: a %s message on %s cannot be read and was skipped (%s: %s; %d "
                "unreadable so far)", path, conn.msgtype, conn.topic, type(err).__name__,
                one_line(err), stats.unreadable_messages)
        return None


@dataclass(frozen=True)
class InputTopics:
    """The topics a bag's inputs come from (None: the bag has none) and their types."""

    events: str | None
    images: str | None
    events_type: str | None = None
    images_type: str | None = None


def check_bag(path: str | Path, event_topic: str | None = None,
              rgb_topic: str | None = None, need_rgb: bool = False) -> InputTopics:
    """Raise EventBagError (one clear line) unless ``path`` opens as a bag with events or
    images (with images, for ``need_rgb``: a command that runs the verifier alone): what
    commands check before they load any model. Returns the topics the inputs come from."""
    path = Path(path)
    reader = _open(path)
    try:
        topics = _input_topics(reader, path, event_topic, rgb_topic)
        im_topic = topics[1]
        if need_rgb and im_topic is None:
            present = ", ".join(sorted(f"{c.topic} ({c.msgtype})" for c in reader.connections))
            raise EventBagError(
                f"{path}: no RGB images ({' or '.join(IMAGE_TYPES)}) in this bag (topics: "
                f"{present}); the verifier captions RGB frames: record the camera's images")
        types = {c.topic: c.msgtype for c in reader.connections}
        return InputTopics(*topics, types.get(topics[0]), types.get(im_topic))
    finally:
        reader.close()


def _open(path: Path) -> AnyReader:
    if not path.exists():
        raise EventBagError(f"{path}: no such bag. Pass a ROS 2 bag directory, an .mcap file "
                            "or a ROS 1 .bag file.")
    try:
        reader = any_reader(path)
        reader.open()
    except Exception as exc:  # rosbags raises several kinds (format, sqlite, yaml)
        raise EventBagError(cannot_open(path, exc)) from exc
    return reader


def _input_topics(reader: AnyReader, path: Path, event_topic: str | None,
                  rgb_topic: str | None) -> tuple[str | None, str | None]:
    ev_topic = pick_topic(reader, EVENT_TOPIC_TYPES, event_topic, "event", path)
    im_topic = pick_topic(reader, IMAGE_TYPES, rgb_topic, "rgb", path)
    if ev_topic is None and im_topic is None:
        present = ", ".join(sorted(f"{c.topic} ({c.msgtype})" for c in reader.connections))
        raise EventBagError(
            f"{path}: neither events ({EVENT_TYPES_TEXT}) nor images "
            f"({' or '.join(IMAGE_TYPES)}) in this bag (topics: {present or 'none'}); record "
            "the event camera driver's packets and the camera's images")
    return ev_topic, im_topic


def _frame(msg, msgtype: str, stats: InputStats, topic: str) -> StampedFrame | None:
    stamp = join_ns(msg.header.stamp.sec, msg.header.stamp.nanosec)
    try:
        rgb = compressed_to_rgb(msg) if msgtype.endswith("CompressedImage") else image_to_rgb(msg)
    except UnsupportedImageError as err:
        stats.bad_frames += 1
        kind = str(err).split(";")[0]
        level = logging.DEBUG if kind in stats.warned else logging.WARNING
        stats.warned.add(kind)
        log.log(level, "%s: frame at %d ns skipped: %s (%d skipped so far)", topic, stamp, err,
                stats.bad_frames)
        return None
    return StampedFrame(stamp, rgb, "rgb8", msg.header.frame_id)


def iter_bag_windows(path: str | Path, sync: Any, event_topic: str | None = None,
                     rgb_topic: str | None = None, stats: InputStats | None = None
                     ) -> Iterator[Any]:
    """The windows a synchronizer emits while a bag is replayed (flushed at its end)."""
    for item in read_inputs(path, event_topic, rgb_topic, stats):
        if item.events is not None:
            yield from sync.add_events(item.events) if len(item.events) else ()
        else:
            yield from sync.add_frame(item.frame)
    yield from sync.flush()


GROUND_TRUTH_TYPE = "crossspec/msg/Caption"


def read_ground_truth(path: str | Path, topic: str = "/crossspec/ground_truth"
                      ) -> dict[int, str]:
    """window id -> ground-truth caption, from a sample bag's caption topic ({} if absent or
    of another type). Ground truth is optional: a message that cannot be read is skipped,
    and one warning says how many were."""
    out: dict[int, str] = {}
    unreadable, total, first_error = 0, 0, ""
    with any_reader(path) as reader:
        connections = [c for c in reader.connections
                       if c.topic == topic and c.msgtype == GROUND_TRUTH_TYPE]
        if not connections:  # (an empty list would mean every connection to rosbags)
            return out
        try:
            for conn, _, raw in stored_messages(reader, path, connections=connections):
                total += 1
                try:
                    msg = reader.deserialize(raw, conn.msgtype)
                    out[int(msg.window_id)] = str(msg.confirmed_text)
                except Exception as err:  # rosbags raises several kinds for damaged CDR
                    unreadable += 1
                    first_error = first_error or f"{type(err).__name__}: {one_line(err)}"
        except BagDamagedError as err:  # optional: what was read before the damage is kept
            log.warning("%s (ground truth on %s: %d captions kept)", err, topic, len(out))
    if unreadable:
        log.warning("%s: %d of %d ground-truth messages on %s could not be read and were "
                    "skipped (first: %s); the windows they describe have no ground truth",
                    path, unreadable, total, topic, first_error)
    return out
