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

from crossspec_ros.composition import build_engine, verifier_loop
from crossspec_ros.images import UnsupportedImageError, compressed_to_rgb, image_to_rgb
from crossspec_ros.models.runtime_setup import runtime_counters
from crossspec_ros.nodes.caption_action import CaptionWindowServer
from crossspec_ros.nodes.common import (
    Worker,
    caption_msg,
    declare_params,
    diagnostics,
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
    check_against_vocabulary,
    combination_problem,
    engine_config,
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


class VerifierNode(ManagedNode):
    """See the module docstring; the lifecycle is nodes/lifecycle.py's. ``verifier``: a loaded
    model (None: from the parameters, on configure); ``drafter``: the drafter object when it
    lives in this process (composed mode; used for vocabulary bridging only), else drafts are
    taken to share the verifier's ids."""

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
        self.caption_action: CaptionWindowServer | None = None
        self.worker: Worker | None = None
        # the window decisions (speculative/verifier_loop.py): captions leave through
        # _publish_captions with its lock held, so they leave in order
        self.loop = verifier_loop(p, on_captions=self._publish_captions,
                                  on_confirmed=self._publish_confirmed, clock=MONOTONIC,
                                  lock=threading.Lock(), warn=self.get_logger().warning,
                                  on_result=on_result)
        self._node_counters = {"bad_frames": 0, "errors": 0}
        self.counters = ChainMap(self._node_counters, self.loop.counters)
        self.sync: Any = None  # the RGB synchronizer (configure); its timeline outlives it
        # the book's FINAL / UNVERIFIED counts at the last diagnostics (is anything verified?)
        self._finished_seen = (0, 0)
        self.live_prefill = False

    def configure_node(self) -> None:
        p = self.params
        verifier, drafter = self._given
        where = f"node '{self.get_name()}' parameters"
        if verifier is None:
            from crossspec_ros.models.pair import load_from_params

            check_against_vocabulary(p, where)  # before it loads, as far as its files tell
            verifier = load_from_params(p, drafter=False)[0]
        engine = build_engine(p, verifier, drafter, where=where, say=self.get_logger().info)
        self.loop.agreement.tokenize = text_to_ids(verifier.tokenizer)
        self.live_prefill = self.loop.configure_from_params(
            p, engine, previous_sync=self.sync, verifier_first=self.verifier_first)
        self.sync = self.loop.sync
        if p["live_prefill"] and not self.live_prefill:
            self.get_logger().info("live_prefill: this verifier prefills after the close "
                                   "(it needs a Video-LLaVA verifier whose num_frames is "
                                   "frames_per_window)")
        self.pub_confirmed = self.add_publisher(cs_msg.ConfirmedTokens, p["confirmed_topic"],
                                                reliable_qos())
        self.pub_caption = self.add_publisher(cs_msg.Caption, p["caption_topic"],
                                              reliable_qos())
        self.pub_latest = self.add_publisher(cs_msg.Caption, p["latest_caption_topic"],
                                             latched_qos())
        self.pub_diag = self.add_publisher(DiagnosticArray, p["diagnostics_topic"], 10)
        qos = sensor_qos(p["sensor_qos_depth"])
        self.add_subscription(Image, p["rgb_topic"], self._on_image, qos)
        self.add_subscription(CompressedImage, p["rgb_topic"] + "/compressed",
                              self._on_compressed, qos)
        self.add_subscription(cs_msg.DraftTokens, p["draft_topic"], self._on_draft,
                              reliable_qos())
        self.add_timer(0.1, self.loop.tick)
        self.add_timer(p["diagnostics_period_s"], self._publish_diagnostics)
        if p["follow_clock"]:  # the server of a split: its robot may replay a bag, or not
            self.add_timer(0.5, follow_clock(self))
        self.caption_action = CaptionWindowServer(self, p["caption_action"],
                                                  p["window_length_s"])
        self.get_logger().info(
            f"verifying {p['rgb_topic']} with drafts from {p['draft_topic']} -> "
            f"{p['confirmed_topic']}, {p['caption_topic']}")

    def start(self) -> None:
        self.loop.start(self.params["max_queued_windows"])
        self.worker = Worker.serving(f"{self.get_name()}-worker", self.loop, self._on_error)
        self.worker.start()

    def stop(self) -> None:
        self.loop.stop_taking()
        if self.worker is not None:
            self.worker.stop()  # the window in progress ends first
        # the windows queued or open end UNVERIFIED with their drafts (relayed while
        # inactive); in the shutdown transition each at once, with what draft it has; the
        # context gone, nothing more is published
        self.loop.end_open_windows(publish=self.context.ok(),
                                   wait_for_drafts=not self.shutting_down)

    def publish_last(self) -> None:
        self.loop.end_open_windows(publish=self.context.ok(), wait_for_drafts=False)

    def release(self) -> None:
        if self.caption_action is not None:
            self.caption_action.destroy()
            self.caption_action = None
        if self._given[0] is None:  # a verifier this node loaded is let go (a given one
            self.loop.engine = None  # stays with its owner, and its engine readable)

    # ------------------------------------------------------------ callbacks (executor)
    def _on_image(self, msg: Image) -> None:
        self._frame(msg, image_to_rgb)

    def _on_compressed(self, msg: CompressedImage) -> None:
        self._frame(msg, compressed_to_rgb)

    def _frame(self, msg: Any, convert: Callable[[Any], Any]) -> None:
        if not self.active:
            return  # inactive: inputs are ignored
        stamp = msg_to_ns(msg.header.stamp)
        try:
            rgb = convert(msg)
        except UnsupportedImageError as err:
            self.counters["bad_frames"] += 1
            self.get_logger().warning(
                f"{self.params['rgb_topic']}: frame at {stamp} ns skipped: {err} "
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
        self.loop.reconfigure(engine_config(self.params))
        self.get_logger().info(f"parameters {', '.join(sorted(changed))} changed: used from "
                               "the next window on")

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
        msg.header.stamp = self.get_clock().now().to_msg()
        self.pub_confirmed.publish(msg)

    def _publish_captions(self, captions: list[WindowCaption]) -> None:
        """Publish ``captions`` in order (the loop holds its lock)."""
        for caption in captions:
            msg = caption_msg(caption)
            msg.header.stamp = self.get_clock().now().to_msg()
            self.pub_caption.publish(msg)
            if caption.finished:
                self.pub_latest.publish(msg)
            if self.caption_action is not None:
                self.caption_action.offer(msg)

    def _on_error(self, error: str) -> None:
        if not self.context.ok():
            return  # shutting down mid-window: publishing fails, nothing is wrong
        self.counters["errors"] += 1
        self.get_logger().error(f"verifying a window failed: {error}")

    def _publish_diagnostics(self) -> None:
        s = self.sync.stats
        values = {"sync_dropped_windows": s.dropped_windows, "late_frames": s.late_frames,
                  "outlier_frames": s.outlier_frames,
                  "resets": s.resets, "callback_errors": self.callback_errors,
                  **self._node_counters, **self.loop.diagnostics,
                  **(runtime_counters(self.loop.engine.verifier)
                     if self.loop.engine is not None else {})}
        book = self.loop.book
        finished = (book.counters["windows_final"], book.counters["windows_unverified"])
        final_now, unverified_now = (a - b for a, b in zip(finished, self._finished_seen,
                                                            strict=True))
        self._finished_seen = finished
        level, message = 0, "ok"
        if self.loop.queue.dropped or self.counters["errors"] or self.counters["bad_frames"] or \
                self.callback_errors:
            level, message = 1, "degraded"
        if unverified_now and not final_now:  # whatever the cause, nothing is verified
            level, message = 1, (f"no window verified since the last report: {unverified_now} "
                                 "ended UNVERIFIED")
        self.pub_diag.publish(diagnostics(self, "crossspec: verifier", values, level, message))
