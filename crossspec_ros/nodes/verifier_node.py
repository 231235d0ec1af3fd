"""The verifier node: RGB frames and draft tokens in, confirmed tokens and captions out.

Windows the RGB stream (ids from time, the same as the draft node's), runs the verifier with
the speculative engine on a worker thread, and uses whatever the draft node has published for
that window as proposals (drafts may arrive before, during or after the verifier's prefill).
Publishes crossspec/ConfirmedTokens after each verification round (the draft node re-syncs
to them) and crossspec/Caption for consumers, as the caption protocol (sync/captions.py)
decides: DRAFT while only the draft exists, PARTIAL with a confirmed prefix and the draft's
unconfirmed tail, FINAL when done, UNVERIFIED (the draft) for windows the verifier never
captions. With live prefill each frame is prefilled as soon as it is selected, and with early
start a window whose frames are all decided is captioned before it closes and published at the
close (speculative/early_start.py). Those decisions are the verifier loop's
(speculative/verifier_loop.py); this node converts messages and publishes what it hands over.
"""

from __future__ import annotations

import math
import threading
from collections import ChainMap
from collections.abc import Callable
from typing import Any

from crossspec import msg as cs_msg
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import CompressedImage, Image

from crossspec_ros.composition import (
    VerifierStreams,
    build_engine,
    verifier_loop,
    verifier_streams,
)
from crossspec_ros.images import UnsupportedImageError, compressed_to_rgb, image_to_rgb
from crossspec_ros.models.runtime_setup import runtime_counters
from crossspec_ros.nodes.caption_action import CaptionWindowServer
from crossspec_ros.nodes.common import (
    Worker,
    caption_msg,
    declare_params,
    diagnostic_array,
    follow_clock,
    latched_qos,
    msg_to_ns,
    ns_to_msg,
    reliable_qos,
    sensor_qos,
    stats_msg,
)
from crossspec_ros.nodes.lifecycle import ManagedNode
from crossspec_ros.params import (
    VERIFIER_NODE_PARAMS,
    ParameterError,
    check_against_vocabulary,
    combination_problem,
    engine_config,
    stream_graph,
    stream_names,
)
from crossspec_ros.speculative.engine import WindowResult
from crossspec_ros.speculative.events import EngineEvent
from crossspec_ros.speculative.loop_clock import MONOTONIC
from crossspec_ros.speculative.verifier_first import VerifierFirst
from crossspec_ros.stamps import split_ns
from crossspec_ros.sync.agreement import text_to_ids
from crossspec_ros.sync.captions import (
    WindowCaption,
)
from crossspec_ros.sync.window import StampedFrame

NAN = math.nan


class VerifierStream:
    """One camera stream of the verifier node: its window decisions (``loop``), its worker,
    and its ROS ends (RGB and drafts in; confirmed tokens, captions, the latest caption and
    the caption action out), each name resolved under the stream's ``name`` (its namespace,
    relative to the node's; "" for the node's one stream, on the topics as given)."""

    def __init__(self, node: VerifierNode, name: str,
                 on_result: Callable[[Any, WindowResult], None] | None) -> None:
        self.node, self.name = node, name
        p = node.params
        # captions leave through _publish_captions with the loop's lock held: in order
        self.loop = verifier_loop(p, on_captions=self._publish_captions,
                                  on_confirmed=self._publish_confirmed, clock=MONOTONIC,
                                  lock=threading.Lock(), warn=node.get_logger().warning,
                                  on_result=on_result)
        self.node_counters = {"bad_frames": 0, "errors": 0}
        self.counters = ChainMap(self.node_counters, self.loop.counters)
        self.worker: Worker | None = None
        self.caption_action: CaptionWindowServer | None = None
        self.sync: Any = None  # the RGB synchronizer (configure); its timeline outlives it
        # the book's FINAL / UNVERIFIED counts at the last diagnostics (is anything verified?)
        self.finished_seen = (0, 0)

    def topic(self, parameter: str) -> str:
        """The stream's name for the topic (or action) parameter ``parameter``."""
        value = self.node.params[parameter]
        if not self.name:
            return value
        if value.startswith(("/", "~")):
            raise ParameterError(
                f"node '{self.node.get_name()}' parameters: '{parameter}' = {value!r} is not "
                f"relative: with streams each stream's topics are resolved under its name "
                f"({self.name}/...); give a relative name, or remap it per stream")
        return f"{self.name}/{value}"

    def open(self) -> None:
        """The stream's publishers, subscriptions and caption action (configure)."""
        node, p = self.node, self.node.params
        self.pub_confirmed = node.add_publisher(cs_msg.ConfirmedTokens,
                                                self.topic("confirmed_topic"), reliable_qos())
        self.pub_caption = node.add_publisher(cs_msg.Caption, self.topic("caption_topic"),
                                              reliable_qos())
        self.pub_latest = node.add_publisher(cs_msg.Caption, self.topic("latest_caption_topic"),
                                             latched_qos())
        qos = sensor_qos(p["sensor_qos_depth"])
        node.add_subscription(Image, self.topic("rgb_topic"), self._on_image, qos)
        node.add_subscription(CompressedImage, self.topic("rgb_topic") + "/compressed",
                              self._on_compressed, qos)
        node.add_subscription(cs_msg.DraftTokens, self.topic("draft_topic"), self._on_draft,
                              reliable_qos())
        node.add_timer(0.1, self.loop.tick)
        self.caption_action = CaptionWindowServer(node, self.topic("caption_action"),
                                                  p["window_length_s"])
        node.get_logger().info(
            f"verifying {self.topic('rgb_topic')} with drafts from {self.topic('draft_topic')} "
            f"-> {self.topic('confirmed_topic')}, {self.topic('caption_topic')}")

    def start(self) -> None:
        self.loop.start(self.node.params["max_queued_windows"])
        name = f"{self.node.get_name()}-{self.name or 'worker'}"
        self.worker = Worker.serving(name, self.loop, self._on_error)
        self.worker.start()

    def stop(self, publish: bool, wait_for_drafts: bool) -> None:
        self.loop.stop_taking()
        if self.worker is not None:
            self.worker.stop()  # the window in progress ends first
        self.loop.end_open_windows(publish=publish, wait_for_drafts=wait_for_drafts)

    def release(self) -> None:
        if self.caption_action is not None:
            self.caption_action.destroy()
            self.caption_action = None

    # ------------------------------------------------------------ callbacks (executor)
    def _on_image(self, msg: Image) -> None:
        self._frame(msg, image_to_rgb)

    def _on_compressed(self, msg: CompressedImage) -> None:
        self._frame(msg, compressed_to_rgb)

    def _frame(self, msg: Any, convert: Callable[[Any], Any]) -> None:
        if not self.node.active:
            return  # inactive: inputs are ignored
        stamp = msg_to_ns(msg.header.stamp)
        try:
            rgb = convert(msg)
        except UnsupportedImageError as err:
            self.counters["bad_frames"] += 1
            self.node.get_logger().warning(
                f"{self.topic('rgb_topic')}: frame at {stamp} ns skipped: {err} "
                f"({self.counters['bad_frames']} skipped so far)",
                throttle_duration_sec=5.0)
            return
        self.loop.add_frame(StampedFrame(stamp, rgb, "rgb8", msg.header.frame_id))

    def _on_draft(self, msg: Any) -> None:
        self.loop.on_draft((int(msg.epoch), int(msg.window_id)), msg_to_ns(msg.window_start),
                           msg_to_ns(msg.window_end), text=msg.text,
                           first_token_ms=msg.first_token_latency_ms, done=msg.done,
                           cut_short=msg.cut_short, tokens=[int(t) for t in msg.token_ids],
                           revision=int(msg.revision), window_state=msg.window_state)

    # ------------------------------------------------------------ what the loop hands over
    def _publish_confirmed(self, window: Any, event: EngineEvent, stats: Any) -> None:
        msg = cs_msg.ConfirmedTokens(
            window_id=int(window.id), epoch=int(window.epoch), window_start=ns_to_msg(window.t0),
            window_end=ns_to_msg(window.t1), base_index=event.base,
            new_token_ids=[int(t) for t in event.tokens], text=event.text, done=event.done,
            acceptance_rule=stats.acceptance_rule if stats is not None else "",
            frame_stamps_sec=[split_ns(f.stamp_ns)[0] for f in window.frames],
            frame_stamps_nanosec=[split_ns(f.stamp_ns)[1] for f in window.frames],
            stats=stats_msg(stats) if stats is not None else cs_msg.WindowStats())
        msg.header.stamp = self.node.get_clock().now().to_msg()
        self.pub_confirmed.publish(msg)

    def _publish_captions(self, captions: list[WindowCaption]) -> None:
        """Publish ``captions`` in order (the loop holds its lock)."""
        for caption in captions:
            msg = caption_msg(caption)
            msg.header.stamp = self.node.get_clock().now().to_msg()
            self.pub_caption.publish(msg)
            if caption.finished:
                self.pub_latest.publish(msg)
            if self.caption_action is not None:
                self.caption_action.offer(msg)

    def _on_error(self, error: str) -> None:
        if not self.node.context.ok():
            return  # shutting down mid-window: publishing fails, nothing is wrong
        self.counters["errors"] += 1
        where = f" of stream {self.name}" if self.name else ""
        self.node.get_logger().error(f"verifying a window{where} failed: {error}")

    def status(self, extra: dict[str, Any]) -> tuple[dict[str, Any], int, str]:
        """The stream's diagnostics: its values, level and message."""
        s = self.sync.stats
        values = {"sync_dropped_windows": s.dropped_windows, "late_frames": s.late_frames,
                  "outlier_frames": s.outlier_frames, "resets": s.resets,
                  **extra, **self.node_counters, **self.loop.diagnostics}
        book = self.loop.book
        finished = (book.counters["windows_final"], book.counters["windows_unverified"])
        final_now, unverified_now = (a - b for a, b in zip(finished, self.finished_seen,
                                                            strict=True))
        self.finished_seen = finished
        level, message = 0, "ok"
        if self.loop.queue.dropped or self.counters["errors"] or self.counters["bad_frames"] or \
                extra.get("callback_errors"):
            level, message = 1, "degraded"
        if unverified_now and not final_now:  # whatever the cause, nothing is verified
            level, message = 1, (f"no window verified since the last report: {unverified_now} "
                                 "ended UNVERIFIED")
        return values, level, message


class VerifierNode(ManagedNode):
    """See the module docstring; the lifecycle is nodes/lifecycle.py's. ``verifier``: a loaded
    model (None: from the parameters, on configure); ``drafter``: the drafter object when it
    lives in this process (composed mode; used for vocabulary bridging only), else drafts are
    taken to share the verifier's ids. With the parameter ``streams`` the node verifies
    several camera streams (``self.streams``, each a ``VerifierStream``) on one verifier;
    ``stream`` and ``loop`` are the first's (the only one's without)."""

    def __init__(self, verifier: Any = None, drafter: Any = None, *,
                 node_name: str = "crossspec_verifier", parameter_overrides: list | None = None,
                 on_result: Callable[[Any, WindowResult], None] | None = None,
                 verifier_first: VerifierFirst | None = None, **kwargs: Any) -> None:
        """``verifier_first``: shared with a draft node in this process (composed mode): its
        drafter pauses while this node works on a closed window."""
        super().__init__(node_name, parameter_overrides=parameter_overrides or [], **kwargs)
        self.verifier_first = verifier_first
        self.params = p = declare_params(self, VERIFIER_NODE_PARAMS, on_change=self._on_params,
                                         live_check=self._live_refusal)
        self._given = (verifier, drafter)
        names = stream_names(p["streams"]) or [""]
        self.streams = [VerifierStream(self, name, on_result) for name in names]
        self.stream = self.streams[0]
        self.loop = self.stream.loop
        self.shared: VerifierStreams | None = None  # several streams: their shared runtime
        self._uninstall_turns: Callable[[], None] = lambda: None
        self.live_prefill = False

    def configure_node(self) -> None:
        p = self.params
        verifier, drafter = self._given
        where = f"node '{self.get_name()}' parameters"
        for stream in self.streams:  # a name that cannot be resolved: before any model loads
            for parameter in STREAM_TOPICS:
                stream.topic(parameter)
        if verifier is None:
            from crossspec_ros.models.pair import load_from_params

            check_against_vocabulary(p, where)  # before it loads, as far as its files tell
            verifier = load_from_params(p, drafter=False)[0]
        engines = self._engines(verifier, drafter, where)
        for stream, engine in zip(self.streams, engines, strict=True):
            stream.loop.agreement.tokenize = text_to_ids(verifier.tokenizer)
            self.live_prefill = stream.loop.configure_from_params(
                p, engine, previous_sync=stream.sync, verifier_first=self.verifier_first)
            if self.shared is not None:
                stream.loop.due = self.shared.due
            stream.sync = stream.loop.sync
        if p["live_prefill"] and not self.live_prefill:
            self.get_logger().info("live_prefill: this verifier prefills after the close "
                                   "(it needs a Video-LLaVA verifier whose num_frames is "
                                   "frames_per_window)")
        self.pub_diag = self.add_publisher(DiagnosticArray, p["diagnostics_topic"], 10)
        for stream in self.streams:
            stream.open()
        self.add_timer(p["diagnostics_period_s"], self._publish_diagnostics)
        if p["follow_clock"]:  # the server of a split: its robot may replay a bag, or not
            self.add_timer(0.5, follow_clock(self))

    def _engines(self, verifier: Any, drafter: Any, where: str) -> list[Any]:
        """One engine per stream: the one stream's as the parameters compose it; several
        streams' over one verifier whose device calls take turns (composition.py)."""
        p, say = self.params, self.get_logger().info
        if len(self.streams) == 1:
            return [build_engine(p, verifier, drafter, where=where, say=say)]
        from crossspec_ros.models.device_turns import DeviceTurns
        from crossspec_ros.models.emulated import emulate

        if p["emulate"]:  # before the turns: the turn wraps the emulated call
            emulate(verifier, "verifier", p["emulate"])
        turns = DeviceTurns()
        self._uninstall_turns = turns.install(verifier)
        graph = stream_graph(p)
        self.shared = verifier_streams(p, verifier, len(self.streams), graph=graph,
                                       where=where, say=say)
        say(f"{len(self.streams)} streams ({', '.join(s.name for s in self.streams)}) on one "
            f"verifier: {graph}")
        return self.shared.engines

    def start(self) -> None:
        for stream in self.streams:
            stream.start()

    def stop(self) -> None:
        # the windows queued or open end UNVERIFIED with their drafts (relayed while
        # inactive); in the shutdown transition each at once, with what draft it has; the
        # context gone, nothing more is published
        for stream in self.streams:
            stream.stop(publish=self.context.ok(), wait_for_drafts=not self.shutting_down)

    def publish_last(self) -> None:
        for stream in self.streams:
            stream.loop.end_open_windows(publish=self.context.ok(), wait_for_drafts=False)

    def release(self) -> None:
        for stream in self.streams:
            stream.release()
        self._uninstall_turns()
        self._uninstall_turns, self.shared = (lambda: None), None
        if self._given[0] is None:  # a verifier this node loaded is let go (a given one
            for stream in self.streams:  # stays with its owner, and its engine readable)
                stream.loop.engine = None

    def _live_refusal(self, values: dict[str, Any]) -> str | None:
        """What the loaded verifier cannot run: a top_k beyond its vocabulary, a live
        max_new_tokens its static caches (sized at configure) cannot hold."""
        if self.loop.engine is None:
            return None
        problem = combination_problem(values, self.loop.engine.verifier.info.vocab_size)
        if problem is not None:
            return problem
        room = self.loop.engine.verifier.generated_room()
        if room is not None and values["max_new_tokens"] > room:
            return (f"max_new_tokens {values['max_new_tokens']} exceeds the {room} tokens the "
                    "verifier's static caches hold (sized at configure): set it in the "
                    "parameter file and configure the node again (cleanup, configure)")
        return None

    def _on_params(self, changed: dict[str, Any]) -> None:
        """``ros2 param set`` of an engine parameter: the next window uses it."""
        for stream in self.streams:
            stream.loop.reconfigure(engine_config(self.params))
        self.get_logger().info(f"parameters {', '.join(sorted(changed))} changed: used from "
                               "the next window on")

    def _publish_diagnostics(self) -> None:
        runtime = runtime_counters(self.loop.engine.verifier) \
            if self.loop.engine is not None else {}
        extra = {"callback_errors": self.callback_errors, **runtime}
        statuses = []
        for stream in self.streams:
            values, level, message = stream.status(extra)
            name = f"crossspec: verifier {stream.name}" if stream.name else \
                "crossspec: verifier"
            statuses.append((name, values, level, message))
        if self.shared is not None:
            statuses.append(("crossspec: verifier streams", self.shared.counters(), 0, "ok"))
        self.pub_diag.publish(diagnostic_array(self, statuses))


# the parameters each stream resolves under its name
STREAM_TOPICS = ("rgb_topic", "draft_topic", "confirmed_topic", "caption_topic",
                 "latest_caption_topic", "caption_action")
