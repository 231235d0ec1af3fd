"""Replaying a bag without ROS: its messages in recorded order, and a pacer.

The bag player node (nodes/player.py) is a thin adapter over this module: ``BagReplay`` opens
a bag once up front (so a missing or malformed bag, or a wrong topic name, is reported before
anything starts) and then yields every selected message's CDR bytes in log-time order, pass
after pass when looping; ``Pacer`` maps bag time to wall time at a rate factor. Neither
imports rclpy, so both are tested on their own.

ROS 2 bags replay their stored bytes as they are. ROS 1 bags and EventArray topics
(dvs_msgs, prophesee_event_msgs) are converted on the way (bags/ros2_conversion.py): ROS 1
bytes to CDR, EventArrays to evt3 EventPackets on the same topic, which crossspec's draft node
reads; ``topics`` names the types published.

Bag time is the *log* time (when the recorder received a message), the clock rosbag2 replays
on, not the header stamps.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rosbags.rosbag1 import Reader as Reader1
from rosbags.rosbag2 import Reader

from crossspec_ros.bagfile import (
    BagDamagedError,
    cannot_open,
    is_ros1_bag,
    raw_reader,
    stored_messages,
)
from crossspec_ros.bags.ros2_conversion import ConversionError, EventCounts, Ros2Conversion
from crossspec_ros.bags.typestore import EVENT_PACKET_TYPE
from crossspec_ros.stamps import ns_to_seconds, seconds_to_ns

log = logging.getLogger(__name__)



class BagError(Exception):
    """The bag cannot be replayed (missing, not a ROS 2 bag, corrupt, no such topic).

    The message names the path and says what to do; the CLI prints it without a traceback.
    """


@dataclass(frozen=True)
class BagMessage:
    """One recorded message: CDR bytes (with their encapsulation header), as stored or as
    converted (``msgtype``: the type of these bytes)."""

    topic: str
    msgtype: str
    data: bytes
    time_ns: int  # log time
    pass_index: int  # 0 for the first pass, 1 after the first loop, ...


class BagReplay:
    """The messages of ``path`` to replay: topics, a start offset and a duration per pass.

    topics: only these topics (None: all). start_s: skip this much bag time from the bag's
    start. max_duration_s: replay at most this much bag time per pass (None: to the end).
    loop: start again from the start offset after the last message, forever (until the
    consumer stops iterating or ``stop`` is set).
    """

    def __init__(self, path: str | Path, topics: Sequence[str] | None = None,
                 start_s: float = 0.0, max_duration_s: float | None = None,
                 loop: bool = False) -> None:
        self.path = Path(path)
        self.loop = loop
        if not self.path.exists():
            raise BagError(f"{self.path}: no such bag. Pass a ROS 2 bag directory (with "
                           "metadata.yaml), a .mcap/.db3 file or a ROS 1 .bag file.")
        if not math.isfinite(start_s) or start_s < 0:
            raise BagError(f"start offset must be >= 0 s, got {start_s}")
        if max_duration_s is not None and not max_duration_s > 0:
            raise BagError(f"duration must be > 0 s, got {max_duration_s}")
        self.ros1 = is_ros1_bag(self.path)
        # what the conversion of the latest pass counted, per EventArray topic
        self.event_counts: dict[str, EventCounts] = {}
        self.unconverted: dict[str, int] = {}  # ROS 1 messages that did not convert, skipped
        reader = _open(self.path)
        try:
            # Only CDR reaches rmw (a ROS 2 bag's other serializations are left out; a ROS 1
            # bag's messages are converted): topic -> the type published
            self.all_topics = {c.topic: Ros2Conversion.msgtype(c.msgtype)
                               for c in reader.connections
                               if getattr(c.ext, "serialization_format", "cdr") == "cdr"}
            counts: dict[str, int] = {}
            for c in reader.connections:
                counts[c.topic] = counts.get(c.topic, 0) + c.msgcount
            self.bag_start_ns, self.bag_end_ns = reader.start_time, reader.end_time
        finally:
            reader.close()
        if topics:
            missing = sorted(set(topics) - set(self.all_topics))
            if missing:
                raise BagError(f"{self.path}: no topic {missing} in this bag; its topics: "
                               f"{sorted(self.all_topics) or 'none'}")
            self.topics = {t: self.all_topics[t] for t in sorted(set(topics))}
        else:
            self.topics = dict(sorted(self.all_topics.items()))
        self.message_counts = {t: counts.get(t, 0) for t in self.topics}  # whole bag, per topic
        if not self.topics or not sum(self.message_counts.values()):
            raise BagError(f"{self.path}: nothing to replay (no CDR messages"
                           f"{' on ' + str(list(self.topics)) if topics else ''})")
        # rosbags' end_time is one past the last message: the replayed window is [start, stop).
        self.start_ns = self.bag_start_ns + seconds_to_ns(start_s)
        if self.start_ns >= self.bag_end_ns:
            raise BagError(f"{self.path}: start offset {start_s} s is past the bag's end "
                           f"({ns_to_seconds(self.bag_end_ns - self.bag_start_ns):.3f} s long)")
        self.stop_ns = self.bag_end_ns if max_duration_s is None else \
            min(self.bag_end_ns, self.start_ns + seconds_to_ns(max_duration_s))

    @property
    def duration_s(self) -> float:
        """Bag time replayed per pass."""
        return ns_to_seconds(self.stop_ns - self.start_ns)

    def messages(self, stop: threading.Event | None = None) -> Iterator[BagMessage]:
        """Selected messages in log-time order; with ``loop``, pass after pass.

        The bag is (re)opened here, in the consumer's thread: the sqlite3 storage refuses a
        connection made in another thread. A pass that yields nothing ends a loop rather than
        spinning on an empty window.
        """
        pass_index = 0
        while True:
            reader = _open(self.path)
            yielded = False
            try:
                conns = [c for c in reader.connections if c.topic in self.topics]
                conversion = Ros2Conversion(conns, self.ros1)  # fresh encoders each pass
                self.event_counts = conversion.counts
                it = stored_messages(reader, self.path, connections=conns,
                                     start=self.start_ns, stop=self.stop_ns)
                last_ns = self.start_ns
                while not (stop is not None and stop.is_set()):
                    try:
                        conn, log_time, raw = next(it)
                    except StopIteration:
                        break
                    except BagDamagedError as exc:  # the replay ends there, and says so
                        raise BagError(str(exc)) from exc
                    yielded = True
                    last_ns = int(log_time)
                    msgtype = conversion.msgtype(conn.msgtype)
                    for data in self._converted(conversion, conn, raw):
                        yield BagMessage(conn.topic, msgtype, data, int(log_time), pass_index)
                    self.event_counts = conversion.counts
                if not (stop is not None and stop.is_set()):
                    # the pass ended: what an EventArray topic still held, after its last message
                    for topic, data in conversion.finish():
                        yield BagMessage(topic, EVENT_PACKET_TYPE, data, last_ns, pass_index)
                    self.event_counts = conversion.counts
            finally:
                reader.close()
            if not self.loop or not yielded or (stop is not None and stop.is_set()):
                return
            pass_index += 1

    def _converted(self, conversion: Ros2Conversion, conn: Any, raw: bytes) -> list[bytes]:
        """One stored message's CDR bytes (ROS 2 bags: as stored); a message that does not
        convert is skipped, counted in ``unconverted`` and warned about once per topic."""
        try:
            return conversion.convert(conn.topic, conn.msgtype, bytes(raw))
        except ConversionError as exc:
            topic = conn.topic
            first = topic not in self.unconverted
            self.unconverted[topic] = self.unconverted.get(topic, 0) + 1
            log.log(logging.WARNING if first else logging.DEBUG, "%s: skipped: %s",
                    self.path, exc)
            return []


# the longest pause of the log time a replay waits out (Pacer.skip_gap): a camera's streams
# send many messages a second, so a longer one is a wild log time or a pause in the recording
MAX_LOG_GAP_S = 5.0


def _open(path: Path) -> Reader | Reader1:
    try:
        reader = raw_reader(path)
        reader.open()
    except Exception as exc:  # rosbags raises several kinds (format, sqlite, yaml, mcap)
        raise BagError(cannot_open(path, exc)) from exc
    return reader


class Pacer:
    """Maps bag time to ``time.monotonic`` time at a rate factor.

    rate 1.0 replays at recorded speed, 2.0 twice as fast; 0 or inf means as fast as
    possible (``unpaced``). ``anchor`` pins a bag time to "now" at the start of each pass
    (a loop jumps back in bag time). A publisher that falls behind is not re-anchored: it
    catches up, so the replay's total duration stays that of the bag.

    A jump of the log time of more than ``max_gap_s`` from one message to the next is not
    waited out (``skip_gap``): a camera's streams never pause that long, so it is a wild log
    time (one packet stored 400,000 s ahead would hold a replay for days) or a pause in the
    recording; the message is due as the one before it was, and the caller says so.
    """

    def __init__(self, rate: float, now: Callable[[], float] = time.monotonic,
                 max_gap_s: float = MAX_LOG_GAP_S) -> None:
        if math.isnan(rate) or rate < 0:
            raise ValueError(f"rate must be >= 0 (0 or inf: as fast as possible), got {rate}")
        self.rate = rate
        self.unpaced = rate == 0 or math.isinf(rate)
        self.max_gap_ns = seconds_to_ns(max_gap_s)
        self._now = now
        self._bag0 = 0
        self._wall0 = now()
        self._last_ns: int | None = None  # the latest message's bag time in this pass

    def anchor(self, bag_ns: int) -> None:
        self._bag0, self._wall0 = bag_ns, self._now()
        self._last_ns = None

    def skip_gap(self, bag_ns: int) -> int:
        """The log-time jump (ns) from the message before to ``bag_ns`` when it is longer
        than ``max_gap_s`` (0 otherwise): then ``bag_ns`` is due when that message was."""
        last = self._last_ns
        self._last_ns = bag_ns if last is None else max(last, bag_ns)
        if last is None or bag_ns - last <= self.max_gap_ns:
            return 0
        self._bag0 += bag_ns - last
        return bag_ns - last

    def due(self, bag_ns: int) -> float:
        """The monotonic time at which ``bag_ns`` is due (-inf when unpaced)."""
        if self.unpaced:
            return -math.inf
        return self._wall0 + ns_to_seconds(bag_ns - self._bag0) / self.rate

    def bag_now(self) -> int:
        """The bag time due now (the anchor when unpaced)."""
        if self.unpaced:
            return self._bag0
        return self._bag0 + seconds_to_ns((self._now() - self._wall0) * self.rate)

    def wait(self, bag_ns: int, stop: threading.Event, tick_s: float = 0.01,
             on_tick: Callable[[], None] | None = None) -> bool:
        """Sleep until ``bag_ns`` is due, calling ``on_tick`` every ``tick_s`` meanwhile.

        Returns False as soon as ``stop`` is set (the sleep is an Event wait, so stopping is
        immediate, never a full gap between two messages).
        """
        due = self.due(bag_ns)
        while (remaining := due - self._now()) > 0:
            if stop.wait(min(remaining, tick_s)):
                return False
            if on_tick is not None and due - self._now() > 0:
                on_tick()
        return not stop.is_set()
