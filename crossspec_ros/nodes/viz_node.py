"""The visualization node: captions drawn where people look.

Subscribes to crossspec/Caption and the RGB stream; publishes a visualization_msgs/Marker
(TEXT_VIEW_FACING in the RGB frame's frame_id: RViz) and an annotated sensor_msgs/Image (the
frame with the confirmed text in one style and the unconfirmed draft tail in another: RViz and
Foxglove). Optionally serves the same live on a Foxglove WebSocket (127.0.0.1 by default), and
records captions, annotated images, the marker and diagnostics as a rosbag2 bag
(``record_bag``), each message under its own header stamp.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from crossspec import msg as cs_msg
from sensor_msgs.msg import CompressedImage, Image
from visualization_msgs.msg import Marker

from crossspec_ros.images import UnsupportedImageError, compressed_to_rgb, image_to_rgb
from crossspec_ros.nodes.common import (
    declare_params,
    follow_clock,
    msg_to_ns,
    reliable_qos,
    sensor_qos,
)
from crossspec_ros.nodes.lifecycle import ManagedNode
from crossspec_ros.params import FOXGLOVE_PARAMS, VIZ_NODE_PARAMS
from crossspec_ros.viz.overlay import annotate_frame, marker_text


class VizNode(ManagedNode):
    """See the module docstring; the lifecycle is nodes/lifecycle.py's (configure starts the
    Foxglove server and the recording, cleanup finishes them)."""

    def __init__(self, *, node_name: str = "crossspec_viz",
                 parameter_overrides: list | None = None, verifier_first: Any = None,
                 foxglove: Any = None, **kwargs: Any) -> None:
        """``verifier_first``: shared with a verifier node in this process (composed mode):
        frames that come while it works on a closed window are not drawn, event packets
        are decoded after (speculative/verifier_first.py). ``foxglove``: a FoxgloveOutput
        its caller owns: the node logs to it instead of starting its own server, and never
        closes it (a client stays connected while ``crossspec drive`` replaces the graph)."""
        super().__init__(node_name, parameter_overrides=parameter_overrides or [], **kwargs)
        self.params = p = declare_params(self, [*VIZ_NODE_PARAMS, *FOXGLOVE_PARAMS])
        self.verifier_first = verifier_first
        self.frames_yielded = 0  # frames not drawn: the verifier in this process had its turn
        self._held_packets: deque[Any] = deque()  # event packets that came meanwhile
        self._lock = threading.Lock()
        self._latest: Any = None   # the newest Caption
        self._frames = 0
        self.annotated = 0
        self.event_images = 0
        self.not_recorded = 0
        self._frame_id = p["marker_frame"]  # the RGB camera's, once a frame came
        self.foxglove = self.recorder = None
        self.foxglove_failed = ""  # why the Foxglove server could not start, if it could not
        self._given_foxglove = foxglove

    def configure_node(self) -> None:
        p = self.params
        if self._given_foxglove is not None:
            self.foxglove = self._given_foxglove
        elif p["foxglove"]:
            from crossspec_ros.viz.foxglove_out import FoxgloveOutput, FoxgloveServerError

            # Foxglove channels take the topics' full names, as a ROS bridge would show them
            # (the bundled layout asks for /crossspec/...)
            try:
                self.foxglove = FoxgloveOutput(serve=True, host=p["foxglove_host"],
                                               port=p["foxglove_port"],
                                               caption_topic=self.shown_topic(
                                                   p["caption_topic"]))
            except FoxgloveServerError as err:  # a busy port: captioning goes on without it
                self.foxglove_failed = str(err)
                self.get_logger().error(
                    f"Foxglove not served: {err}; the graph goes on without it (set the "
                    "parameter foxglove_port, launch argument foxglove_port:=N)")
            else:
                self.get_logger().info(
                    f"Foxglove: ws://{p['foxglove_host']}:{self.foxglove.port}")
        self.recorder = self._start_recording(p["record_bag"]) if p["record_bag"] else None
        self.pub_marker = self.add_publisher(Marker, p["marker_topic"], reliable_qos(10))
        self.pub_image = self.add_publisher(Image, p["annotated_image_topic"], 5)
        self.add_subscription(cs_msg.Caption, p["caption_topic"], self._on_caption,
                              reliable_qos())
        self.add_subscription(Image, p["rgb_topic"], self._on_image, sensor_qos(5))
        self.add_subscription(CompressedImage, p["rgb_topic"] + "/compressed",
                              self._on_compressed, sensor_qos(5))
        if p["event_image_hz"] > 0:
            self._start_event_image()
        if p["follow_clock"]:  # the server of a split: its robot may replay a bag, or not
            self.add_timer(0.5, follow_clock(self))

    def _start_event_image(self) -> None:
        """Decode the event stream and publish a time surface of the events since the last
        image, ``event_image_hz`` times a second: what the drafter is looking at."""
        from event_camera_msgs.msg import EventPacket

        from crossspec_ros.events.decode import EventPacketDecoder

        p = self.params
        self._decoder = EventPacketDecoder(name=p["event_topic"])
        self._events: list = []
        self._events_header: Any = None
        self.pub_event_image = self.add_publisher(Image, p["event_image_topic"], 5)
        self.add_subscription(EventPacket, p["event_topic"], self._on_events,
                              sensor_qos(50))
        self.add_timer(1.0 / p["event_image_hz"], self._publish_event_image)

    def start(self) -> None:
        decoder = getattr(self, "_decoder", None)
        if decoder is not None:  # the inactive time's packets were let go on purpose
            decoder.restart_sequence()

    def release(self) -> None:
        if self.foxglove is not None and self.foxglove is not self._given_foxglove:
            self.foxglove.close()
        if self.recorder is not None:
            self.recorder.close()
            self.get_logger().info(f"recorded {self.recorder.written} messages to "
                                   f"{self.recorder.path}")
        self.foxglove = self.recorder = None

    def _on_caption(self, msg: Any) -> None:
        if not self.active:
            return
        with self._lock:
            self._latest = msg
        marker = Marker(ns="crossspec", id=0, type=Marker.TEXT_VIEW_FACING, action=Marker.ADD,
                        text=marker_text(msg.confirmed_text, msg.unconfirmed_text, msg.status,
                                         lossy=msg.acceptance_rule))
        marker.header.frame_id = self._frame_id
        marker.header.stamp = msg.header.stamp
        marker.pose.position.z = 2.0
        marker.pose.orientation.w = 1.0
        marker.scale.z = 0.3
        marker.color.r = marker.color.g = marker.color.b = marker.color.a = 1.0
        self.pub_marker.publish(marker)
        if self.foxglove is not None:
            self.foxglove.log_caption(msg.window_id, msg.status, msg.confirmed_text,
                                      msg.unconfirmed_text,
                                      {**_latencies(msg), "acceptance_rule": msg.acceptance_rule},
                                      msg_to_ns(msg.header.stamp), epoch=msg.epoch,
                                      unverified_reason=msg.unverified_reason)

    def _on_image(self, msg: Image) -> None:
        self._annotate(msg, image_to_rgb)

    def _on_compressed(self, msg: CompressedImage) -> None:
        self._annotate(msg, compressed_to_rgb)

    def _annotate(self, msg: Any, convert: Any) -> None:
        if not self.active:
            return
        self._frames += 1
        self._frame_id = msg.header.frame_id or self._frame_id
        with self._lock:
            caption = self._latest
        if caption is None or self._frames % self.params["annotate_every_n_frames"]:
            return
        if self._verifier_busy():  # the next frame is drawn instead
            self.frames_yielded += 1
            self._frames -= 1
            return
        try:
            rgb = convert(msg)
        except UnsupportedImageError:
            return  # the verifier node counts and reports bad frames
        out = annotate_frame(rgb, caption.confirmed_text, caption.unconfirmed_text,
                             caption.status, caption.window_id, _latencies(caption),
                             lossy=caption.acceptance_rule)
        image = Image(height=out.shape[0], width=out.shape[1], encoding="rgb8", is_bigendian=0,
                      step=out.shape[1] * 3, data=out.tobytes())
        image.header = msg.header
        self.pub_image.publish(image)
        self.annotated += 1
        if self.foxglove is not None:
            self._to_foxglove(msg, rgb, out, caption)

    def _to_foxglove(self, msg: Any, rgb: Any, annotated: Any, caption: Any) -> None:
        """The drawn frame, and the raw frame with the caption as ImageAnnotations stamped like
        it (Foxglove's Image panel overlays them in its own font, at any zoom)."""
        from crossspec_ros.viz.foxglove_out import ANNOTATIONS_TOPIC, caption_annotations

        stamp = msg_to_ns(msg.header.stamp)
        self.foxglove.log_image(self.shown_topic(self.params["annotated_image_topic"]),
                                annotated, stamp, msg.header.frame_id)
        self.foxglove.log_image(self.shown_topic(self.params["rgb_topic"]), rgb, stamp,
                                msg.header.frame_id)
        self.foxglove.log_annotations(ANNOTATIONS_TOPIC, caption_annotations(
            caption.confirmed_text, caption.unconfirmed_text, caption.status, rgb.shape[1],
            rgb.shape[0], stamp), stamp)

    def _verifier_busy(self) -> bool:
        return self.verifier_first is not None and self.verifier_first.paused

    def _on_events(self, msg: Any) -> None:
        if not self.active:
            return
        self._held_packets.append(msg)
        if self._verifier_busy():
            return  # decoded with the next packet after the verifier's turn
        from crossspec_ros.events.packet import from_msg

        while self._held_packets:
            held = self._held_packets.popleft()
            batch = self._decoder.decode(from_msg(held))
            with self._lock:
                self._events_header = held.header
                if len(batch):
                    if self._events and (self._events[-1].width, self._events[-1].height) != \
                            (batch.width, batch.height):
                        # the camera changed size (the decoder confirmed it): an image shows
                        # one sensor, the new one
                        self._events.clear()
                    self._events.append(batch)

    def _publish_event_image(self) -> None:
        from crossspec_ros.events.batch import EventBatch
        from crossspec_ros.events.representations import dv_time_surface

        if self._verifier_busy():
            return  # the next tick draws what came meanwhile too

        with self._lock:
            batches, self._events = self._events, []
            header = self._events_header
        if not batches or header is None:
            return
        surface = dv_time_surface(EventBatch.concat(batches))
        image = Image(height=surface.shape[0], width=surface.shape[1], encoding="mono8",
                      is_bigendian=0, step=surface.shape[1], data=surface.tobytes())
        image.header = header
        self.pub_event_image.publish(image)
        self.event_images += 1
        if self.foxglove is not None:
            self.foxglove.log_image(self.shown_topic(self.params["event_image_topic"]),
                                    surface, msg_to_ns(header.stamp), header.frame_id)

    def _start_recording(self, path: str) -> Any:
        """Record the graph's outputs as they are published (raw CDR, nothing re-encoded)."""
        from diagnostic_msgs.msg import DiagnosticArray

        from crossspec_ros.bags.recorder import BagRecorder

        recorder = BagRecorder(path, overwrite=True)
        p = self.params
        for topic, msg_type, msgtype, qos in (
                (p["caption_topic"], cs_msg.Caption, "crossspec/msg/Caption", reliable_qos()),
                (p["annotated_image_topic"], Image, "sensor_msgs/msg/Image", sensor_qos(5)),
                (p["marker_topic"], Marker, "visualization_msgs/msg/Marker", reliable_qos(10)),
                (p["diagnostics_topic"], DiagnosticArray, "diagnostic_msgs/msg/DiagnosticArray",
                 10)):
            name = self.shown_topic(topic)  # the bag holds full names
            self.add_subscription(
                msg_type, topic, lambda data, t=name, m=msgtype: self._record(t, m, data), qos,
                raw=True)
        self.get_logger().info(f"recording to {path} (written under {recorder.staging.name} "
                               "until the node stops)")
        return recorder

    def shown_topic(self, topic: str) -> str:
        """``topic``'s full name as the recording and Foxglove show it: as it resolves here,
        without this node's namespace under ``outputs_in_root``."""
        name = self.resolve_topic_name(topic)
        namespace = self.get_namespace().rstrip("/")
        if self.params["outputs_in_root"] and namespace and name.startswith(namespace + "/"):
            return name[len(namespace):]
        return name

    def _record(self, topic: str, msgtype: str, data: bytes) -> None:
        if not self.active:
            return
        now = self.get_clock().now().nanoseconds
        if now <= 0:  # use_sim_time before the first /clock: no time to file it under
            self.not_recorded += 1
            return
        self.recorder.write(topic, msgtype, data, now)


def _latencies(msg: Any) -> dict[str, float]:
    return {k: float(getattr(msg, k)) for k in
            ("draft_first_token_ms", "confirmed_first_ms", "confirmed_done_ms", "acceptance")}
