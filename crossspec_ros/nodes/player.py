"""The bag player node: replays a bag on its own topics, with its timing and /clock.

Used by `crossspec play` and in-process by `crossspec drive` (no rosbag2 on PyPI). Every
message of a ROS 2 bag goes out as the raw CDR bytes stored in the bag (no deserialize/serialize
round trip), through an rclpy publisher of the recorded type; ROS 1 bags and EventArray topics
are converted on the way (bags/replay.py: EventArrays go out as evt3 EventPackets, which the
draft node reads). /clock carries the bag time, so nodes with ``use_sim_time`` follow the bag,
also when a loop makes it jump back.

Publishing runs on a dedicated thread paced with ``time.monotonic`` (bags/replay.py): the
executor only ever sees an idle node, so a replay never delays other callbacks, and ``stop()``
or shutting the context down ends the replay at once (the thread sleeps on an Event).
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock

from crossspec_ros.bags.replay import BagError, BagMessage, BagReplay, Pacer
from crossspec_ros.stamps import ns_to_seconds, split_ns

# Camera topics: volatile KEEP_LAST like rclpy's sensor-data profile, but *reliable*. A reliable
# writer matches best-effort readers too (crossspec's nodes subscribe best effort), and on
# loopback a reliable reader loses nothing, which makes a replay reproducible. KEEP_LAST means
# a slow reader can never block the player: the writer overwrites its oldest sample instead.
# Depths hold ~0.2 s of 2 ms event packets and ~0.5 s of 20 Hz frames (big: bounded memory).
SENSOR_DEPTHS = {
    "event_camera_msgs/msg/EventPacket": 100,
    "sensor_msgs/msg/Image": 10,
    "sensor_msgs/msg/CompressedImage": 10,
}
DEFAULT_DEPTH = 10  # any other topic: rclpy's default QoS (reliable, volatile, depth 10)


def sensor_qos(depth: int) -> QoSProfile:
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)


def import_msg_type(msgtype: str) -> Any:
    """The rclpy message class for "pkg/msg/Name"; ImportError if not installed here."""
    parts = msgtype.split("/")
    if len(parts) != 3 or parts[1] != "msg":
        raise ImportError(f"'{msgtype}' is not a pkg/msg/Name message type")
    module = importlib.import_module(f"{parts[0]}.msg")
    try:
        return getattr(module, parts[2])
    except AttributeError as exc:
        raise ImportError(f"{parts[0]}.msg has no {parts[2]}") from exc


class BagPlayer(Node):
    """Replays ``bag`` (rosbag2 directory, .mcap or .db3) on its recorded topics.

    rate: 1.0 = recorded speed, 2.0 = twice as fast, 0 or inf = as fast as possible.
    loop: start again (from ``start_s``) after the last message, until stopped.
    topics: only these topics (None: all; a name the bag lacks raises BagError).
    start_s: skip this much bag time from the bag's start; max_duration_s: replay at most this
    much bag time per pass. clock: publish /clock; clock_hz: at most this often (wall time),
    always at a pass start; 0 = before every message.
    start_delay_s: wait this long after ``start()`` before the first message, so subscribers in
    other processes are discovered first (DDS drops what is published before a match).
    autostart: start replaying from the constructor (else call ``start()``).

    Raises BagError (clear message) for a missing or malformed bag, ValueError for a bad
    rate. Attributes: ``done`` (Event set when the replay ends: last message, ``stop()``, an
    error, or the context shutting down), ``published``/``skipped`` (messages per topic),
    ``clock_published``, ``passes`` (passes finished), ``error`` (None or what ended it),
    ``elapsed_s`` (wall seconds from the first message to the end), ``replay`` (the bag's
    topics and window, bags/replay.py).
    """

    def __init__(self, bag: str | Path, *, rate: float = 1.0, loop: bool = False,
                 topics: Sequence[str] | None = None, start_s: float = 0.0,
                 max_duration_s: float | None = None, clock: bool = True,
                 clock_hz: float = 100.0, start_delay_s: float = 0.5, autostart: bool = True,
                 clock_topic: str = "/clock", node_name: str = "crossspec_player",
                 **node_kwargs: Any) -> None:
        # Validate everything before the node exists: a bad argument leaves nothing behind.
        self.replay = BagReplay(bag, topics=topics, start_s=start_s,
                                max_duration_s=max_duration_s, loop=loop)
        self._pacer = Pacer(rate)
        super().__init__(node_name, **node_kwargs)
        self.rate = rate
        self.clock_period_s = 1.0 / clock_hz if clock_hz > 0 else 0.0
        self.start_delay_s = max(0.0, start_delay_s)
        self.done = threading.Event()
        self.published: dict[str, int] = dict.fromkeys(self.replay.topics, 0)
        self.skipped: dict[str, int] = {}
        self.clock_published = 0
        self.passes = 0
        self.gaps_skipped: list[tuple[str, int]] = []  # (topic, ns) of log-time jumps
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t_first: float | None = None
        self._t_end: float | None = None
        self._last_clock_ns: int | None = None
        self._last_clock_wall = -float("inf")

        self._publishers_by_topic: dict[str, Publisher] = {}
        for topic, msgtype in self.replay.topics.items():
            try:
                cls = import_msg_type(msgtype)
            except ImportError as exc:
                self.skipped[topic] = 0
                self.get_logger().warning(
                    f"{topic}: message type {msgtype} is not installed here ({exc}); its "
                    "messages are skipped and counted in `skipped`")
                continue
            depth = SENSOR_DEPTHS.get(msgtype)
            qos = sensor_qos(depth) if depth else DEFAULT_DEPTH
            # relative to the player's namespace (the root by default: the bag's own names), so
            # a namespaced player feeds a namespaced graph
            self._publishers_by_topic[topic] = self.create_publisher(cls, topic.lstrip("/"),
                                                                     qos)
        # "clock" (relative): the bag's time in the player's namespace only, so two robots
        # replaying on one domain each follow their own bag (their nodes remap /clock:=clock)
        self._clock_pub = self.create_publisher(Clock, clock_topic, 10) if clock else None
        # Shutting the context down (Ctrl-C) ends the replay; rclpy keeps a weak reference.
        self.context.on_shutdown(self.stop)
        if autostart:
            self.start()

    # -- control -------------------------------------------------------------------------

    def start(self) -> None:
        """Start replaying on the player's thread (once; later calls do nothing)."""
        if self._thread is not None or self.done.is_set():
            return
        self._thread = threading.Thread(target=self._run, name="crossspec_player",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """End the replay now; with ``timeout_s``, wait that long for the thread to finish."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            self.done.set()
        elif timeout_s is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def destroy_node(self) -> None:
        # The thread must not publish on publishers being destroyed.
        self.stop(timeout_s=2.0)
        super().destroy_node()

    def subscription_count(self, topic: str) -> int:
        """Matched subscriptions of one replayed topic (0 if skipped); "/clock" works too."""
        pub = self._clock_pub if topic == "/clock" else self._publishers_by_topic.get(topic)
        return pub.get_subscription_count() if pub is not None else 0

    @property
    def elapsed_s(self) -> float:
        if self._t_first is None:
            return 0.0
        return (self._t_end or time.monotonic()) - self._t_first

    def summary(self) -> str:
        """One line: messages per topic, skipped ones, passes and wall seconds."""
        per_topic = ", ".join(f"{t} {n}" for t, n in self.published.items())
        line = (f"{sum(self.published.values())} messages in {self.elapsed_s:.2f} s "
                f"({per_topic})")
        if self.skipped:
            line += f"; skipped {sum(self.skipped.values())} of types not installed " \
                    f"({', '.join(f'{t} {n}' for t, n in self.skipped.items())})"
        for topic, counts in self.replay.event_counts.items():
            line += (f"; {topic} as evt3: {counts.events_out:,} of {counts.events_in:,} events"
                     + (f" ({counts.outside_sensor:,} outside the sensor, "
                        f"{counts.out_of_order:,} out of order, {counts.time_outliers:,} far "
                        "from the topic's time: dropped)" if counts.dropped else ""))
        if self.replay.unconverted:
            line += "; skipped ROS 1 messages that do not convert: " + ", ".join(
                f"{t} {n}" for t, n in self.replay.unconverted.items())
        if self.gaps_skipped:
            line += (f"; {len(self.gaps_skipped)} log-time jumps not waited for ("
                     f"{ns_to_seconds(sum(gap for _, gap in self.gaps_skipped)):,.1f} s)")
        if self.replay.loop:
            line += f"; {self.passes} passes"
        return line

    # -- the replay thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self.start_delay_s and self._stop.wait(self.start_delay_s):
                return
            current_pass = -1
            for msg in self.replay.messages(stop=self._stop):
                if msg.pass_index != current_pass:
                    if current_pass >= 0:
                        self.passes += 1
                    current_pass = msg.pass_index
                    self._begin_pass()
                self._skip_gap(msg)
                if not self._pacer.wait(msg.time_ns, self._stop, self._tick_s(),
                                        self._tick_clock):
                    return
                self._publish(msg)
            if current_pass >= 0 and not self._stop.is_set():
                self.passes += 1
        except BagError as exc:
            self.error = str(exc)
            self.get_logger().error(f"replay ended: {exc}")
        except Exception as exc:  # a shut-down context or destroyed publisher ends it too
            if self.context.ok() and not self._stop.is_set():
                self.error = f"{type(exc).__name__}: {exc}"
                self.get_logger().error(f"replay ended: {self.error}")
        finally:
            self._t_end = time.monotonic()
            self.done.set()

    def _skip_gap(self, msg: BagMessage) -> None:
        """A log-time jump before ``msg`` longer than the pacer waits out: said and counted,
        and the message goes out at once."""
        gap = self._pacer.skip_gap(msg.time_ns)
        if not gap:
            return
        self.gaps_skipped.append((msg.topic, gap))
        self.get_logger().warning(
            f"{msg.topic}: the bag's log time jumps {ns_to_seconds(gap):,.1f} s ahead at this "
            f"message: replayed at once, not waited for (a wild log time, or a pause in the "
            f"recording; longer than {ns_to_seconds(self._pacer.max_gap_ns):g} s)")

    def _begin_pass(self) -> None:
        self._pacer.anchor(self.replay.start_ns)
        if self._t_first is None:
            self._t_first = time.monotonic()
        # Bag time jumps back on a loop: announce the pass start at once.
        self._last_clock_ns = None
        self._publish_clock(self.replay.start_ns)

    def _tick_s(self) -> float:
        return self.clock_period_s if self._clock_pub is not None and self.clock_period_s \
            else 0.05  # still wake up now and then (a long gap must not outlive stop())

    def _tick_clock(self) -> None:
        """While waiting for the next message, the clock keeps running at the replay rate."""
        if self._clock_pub is not None and self.clock_period_s:
            self._publish_clock(self._pacer.bag_now())

    def _publish(self, msg: BagMessage) -> None:
        pub = self._publishers_by_topic.get(msg.topic)
        if self._clock_pub is not None and \
                time.monotonic() - self._last_clock_wall >= self.clock_period_s:
            self._publish_clock(msg.time_ns)
        if pub is None:
            self.skipped[msg.topic] += 1
            return
        pub.publish(msg.data)
        self.published[msg.topic] += 1

    def _publish_clock(self, bag_ns: int) -> None:
        """Publish /clock = ``bag_ns`` unless that would go backwards within a pass."""
        if self._clock_pub is None:
            return
        if self._last_clock_ns is not None and bag_ns <= self._last_clock_ns:
            return
        sec, nanosec = split_ns(bag_ns)
        out = Clock()
        out.clock.sec, out.clock.nanosec = sec, nanosec
        self._clock_pub.publish(out)
        self._last_clock_ns = bag_ns
        self._last_clock_wall = time.monotonic()
        self.clock_published += 1
