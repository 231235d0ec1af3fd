"""The draft node: event packets in, a speculative caption per window out, at once.

Subscribes to the event camera (event_camera_msgs/EventPacket, evt3) and to the verifier's
confirmed tokens. Windows the events (ids from time, so the verifier agrees without talking),
runs the event drafter on a worker thread (or, with ``drafter_process`` on CPU, in a child
process) and publishes crossspec/DraftTokens the moment each token exists. When the verifier
confirms tokens that disagree with the draft, the drafter rolls back to the confirmed prefix
and drafts on from there (re-sync). A newer window always wins:
the drafter leaves the old one as soon as the next window closes, and says so (a
DraftTokens with ``cut_short``), as it does for a window it drops unstarted, so the verifier's
captions never pass a fragment off as the whole draft.

Every window it drafted ends in a terminal caption, also when no verifier answers (the verifier
unconfigured, its process dead or restarting, the link down): it hears the verifier's captions
and confirmed tokens, and a window the verifier stays silent about for ``verifier_silence_s``
it publishes itself on the caption topics, UNVERIFIED with reason VERIFIER_ABSENT and its
draft (sync/robot_captions.py; docs/deployment.md).
"""

from __future__ import annotations

import threading
from typing import Any

from crossspec import msg as cs_msg
from diagnostic_msgs.msg import DiagnosticArray
from event_camera_msgs.msg import EventPacket

from crossspec_ros.composition import caption_patience_s, share_turns
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.packet import from_msg
from crossspec_ros.models.runtime_setup import runtime_counters
from crossspec_ros.models.streams import assign_cuda_streams
from crossspec_ros.nodes.common import (
    Worker,
    caption_msg,
    declare_params,
    diagnostics,
    follow_clock,
    latched_qos,
    ns_to_msg,
    reliable_qos,
    sensor_qos,
    sync_from_params,
)
from crossspec_ros.nodes.lifecycle import ManagedNode
from crossspec_ros.params import DRAFT_NODE_PARAMS
from crossspec_ros.speculative.draft_loop import DraftLoop
from crossspec_ros.speculative.events import EngineEvent
from crossspec_ros.speculative.loop_clock import MONOTONIC
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.speculative.verifier_first import VerifierFirst
from crossspec_ros.sync.captions import CaptionStatus, UnverifiedReason, WindowCaption
from crossspec_ros.sync.robot_captions import RobotCaptionBook, verifier_silence_s


class DraftNode(ManagedNode):
    """See the module docstring; the lifecycle is nodes/lifecycle.py's. ``drafter``: a loaded
    model (composed mode shares one); None loads it from the parameters on configure."""

    def __init__(self, drafter: Any = None, *, node_name: str = "crossspec_draft",
                 parameter_overrides: list | None = None,
                 verifier_first: VerifierFirst | None = None, **kwargs: Any) -> None:
        """``verifier_first``: shared with a verifier node in this process (composed mode):
        the drafter pauses while the verifier works on a closed window."""
        super().__init__(node_name, parameter_overrides=parameter_overrides or [], **kwargs)
        self.params = declare_params(self, DRAFT_NODE_PARAMS)
        self.verifier_first = verifier_first
        # the window decisions (speculative/draft_loop.py); this node converts and publishes
        self.loop = DraftLoop(self.params, on_draft=self._publish_draft, clock=MONOTONIC,
                              lock=threading.Lock(),
                              warn=self.get_logger().warning, error=self.get_logger().error)
        self._given_drafter = self.drafter = drafter
        self.worker: Worker | None = None
        # the windows drafted here until a terminal caption ends them (the verifier's, or
        # this node's once the verifier stayed silent); the worker and the executor share it
        self.robot_captions = RobotCaptionBook(
            verifier_silence_s(self.params, caption_patience_s(self.params)))
        self._captions_lock = threading.Lock()
        self.drafter_runs_in = "a thread"  # where the last configure put it (for reports)

    def configure_node(self) -> None:
        p = self.params
        if self.drafter is None:
            from crossspec_ros.models.pair import load_from_params

            self.drafter = load_from_params(p, verifier=False)[1]
        assign_cuda_streams(self.drafter)  # its own CUDA stream, also when composed
        from crossspec_ros.models.runtime_setup import prepare_runtime, runtime_options

        if p["drafter_process"] and p["device"] == "cpu":
            from crossspec_ros.models.pair import drafter_source
            from crossspec_ros.speculative.drafter_process import DrafterProcess

            # this process keeps its drafter for the tokenizer (re-syncs) and reports
            process = DrafterProcess(drafter_source(p), device="cpu", dtype=p["dtype"],
                                          runtime=runtime_options(p, "drafter"),
                                     max_new_tokens=p["max_new_tokens"])
        else:
            process = None
            self.get_logger().info(prepare_runtime(self.drafter, p, "drafter",
                                                   p["max_new_tokens"]))
        self.drafter_runs_in = "a child process" if process is not None else "a thread"
        self.decoder = EventPacketDecoder(name=p["event_topic"])
        self.loop.configure(self.drafter,
                            sync_from_params(p, streams=("events",), previous=self.loop.sync),
                            process=process,
                            decode=lambda msg: self.decoder.decode(from_msg(msg)))
        self.pub_draft = self.add_publisher(cs_msg.DraftTokens, p["draft_topic"],
                                            reliable_qos())
        self.pub_diag = self.add_publisher(DiagnosticArray, p["diagnostics_topic"], 10)
        self.add_subscription(EventPacket, p["event_topic"], self._on_events,
                              sensor_qos(p["event_qos_depth"]))
        self.add_subscription(cs_msg.ConfirmedTokens, p["confirmed_topic"],
                              self._on_confirmed, reliable_qos())
        self._keep_robot_captions()
        self.add_timer(0.1, self._tick)
        self.add_timer(p["diagnostics_period_s"], self._publish_diagnostics)
        if p["follow_clock"]:  # the server of a split: its robot may replay a bag, or not
            self.add_timer(0.5, follow_clock(self))
        if self.verifier_first is not None:
            share_turns(self.verifier_first, self.loop)
        self.get_logger().info(
            f"drafting {p['event_topic']} -> {p['draft_topic']} "
            f"({type(self.drafter).__name__} on {getattr(self.drafter, 'device', 'cpu')}, "
            f"in {self.drafter_runs_in})")

    def _keep_robot_captions(self) -> None:
        """Hear the verifier's captions; publish those of the windows it stays silent about
        (while configured, active or not: a drafted window is owed its caption)."""
        p = self.params
        self.pub_caption = self.add_publisher(cs_msg.Caption, p["caption_topic"],
                                              reliable_qos())
        self.pub_latest = self.add_publisher(cs_msg.Caption, p["latest_caption_topic"],
                                             latched_qos())
        self.add_subscription(cs_msg.Caption, p["caption_topic"], self._on_caption,
                              reliable_qos())
        self.add_timer(0.1, self._end_silent_windows)

    def start(self) -> None:
        self.loop.start()
        # the packets of the inactive time were let go on purpose: not "missing" (issue 53)
        self.decoder.restart_sequence()
        self.worker = Worker.serving(f"{self.get_name()}-worker", self.loop,
                                     lambda e: self.get_logger().error(f"drafting failed: {e}"))
        self.worker.start()

    def stop(self) -> None:
        self.loop.stop_taking()
        if self.worker is not None:
            self.worker.stop()

    def release(self) -> None:
        if self.verifier_first is not None:
            self.verifier_first.remove_drafters()
        self.drafter = self._given_drafter  # a model this node loaded is let go
        self.loop.drafter = None
        if self.loop.process is not None:
            self.loop.process.close()
            self.loop.process = None

    # ------------------------------------------------------------ callbacks (executor)
    def _on_events(self, msg: EventPacket) -> None:
        if not self.active:
            return  # inactive: inputs are ignored
        self.loop.add_events(msg)

    def _tick(self) -> None:
        if self.active:
            self.loop.tick()

    def _on_caption(self, msg: Any) -> None:
        with self._captions_lock:
            self.robot_captions.on_caption(
                (int(msg.epoch), int(msg.window_id)), CaptionStatus(msg.status),
                UnverifiedReason(msg.unverified_reason), MONOTONIC.now())

    def _end_silent_windows(self) -> None:
        with self._captions_lock:  # published under the lock: in the order they ended
            for caption in self.robot_captions.expire(MONOTONIC.now()):
                self._publish_caption(caption_msg(caption), caption)

    def _publish_caption(self, msg: Any, caption: WindowCaption) -> None:
        msg.header.stamp = self.get_clock().now().to_msg()
        self.pub_caption.publish(msg)
        self.pub_latest.publish(msg)
        self.get_logger().warning(
            f"window {caption.window_id}: no caption from the verifier within "
            f"{self.robot_captions.silence_s:g} s: published UNVERIFIED (verifier absent) with "
            "its draft", throttle_duration_sec=10.0)

    def _on_confirmed(self, msg: Any) -> None:
        with self._captions_lock:
            self.robot_captions.on_verifier_word((int(msg.epoch), int(msg.window_id)),
                                                 MONOTONIC.now())
        self.loop.on_confirmed((int(msg.epoch), int(msg.window_id)), int(msg.base_index),
                               [int(t) for t in msg.new_token_ids], msg.text, msg.done,
                               float(msg.stats.confirmed_done_ms))

    # ------------------------------------------------------------ publishing (the worker)
    def _publish_draft(self, window: Any, event: EngineEvent, stats: WindowStats,
                       window_state: Any = None, cut_short: bool = False) -> None:
        if cut_short and not self.context.ok():
            return  # the process is going down: nobody is listening
        msg = cs_msg.DraftTokens(
            window_id=int(window.id), epoch=int(window.epoch),
            window_start=ns_to_msg(window.t0), window_end=ns_to_msg(window.t1),
            revision=event.revision, base_index=0, token_ids=[int(t) for t in event.tokens],
            log_probs=[float(x) for x in event.log_probs],
            text=event.text, done=event.done, cut_short=cut_short,
            first_token_latency_ms=float(stats.draft_first_token_ms),
            events_until=ns_to_msg(int(window.events.t_last) if len(window.events) else
                                   window.t0))
        if window_state is not None:
            msg.window_state = window_state.detach().float().cpu().numpy()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = "event_camera"
        with self._captions_lock:  # booked first: the verifier's answer may come at once
            self.robot_captions.on_draft(
                (int(window.epoch), int(window.id)), window.t0, window.t1, event.text,
                float(stats.draft_first_token_ms), event.done, MONOTONIC.now(),
                cut_short=cut_short)
        self.pub_draft.publish(msg)

    def _publish_diagnostics(self) -> None:
        values = {**self.loop.diagnostics, "callback_errors": self.callback_errors,
                  "bad_packets": self.decoder.stats.bad_packets,
                  "missing_packets": self.decoder.stats.missing_packets,
                  **self.robot_captions.diagnostics,
                  **runtime_counters(self.drafter)}  # eager_steps: not compiled, see its log
        stats = self.decoder.stats
        level = 1 if self.loop.queue.dropped or stats.bad_packets or stats.missing_packets or \
            self.callback_errors else 0
        message = "dropping windows" if self.loop.queue.dropped else \
            "event packets missing (raise event_qos_depth)" if stats.missing_packets else \
            "callbacks failed (see the log)" if self.callback_errors else "ok"
        self.pub_diag.publish(diagnostics(self, "crossspec: draft", values, level, message))
