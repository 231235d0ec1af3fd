"""The verifier node: RGB frames and draft tokens in, confirmed tokens and captions out.

Windows the RGB stream (ids from time, the same as the draft node's), runs the verifier with
the speculative engine on a worker thread, and uses whatever the draft node has published for
that window as proposals (drafts may arrive before, during or after the verifier's prefill).
Publishes crossspec/ConfirmedTokens after each verification round (the draft node re-syncs
to them) and crossspec/Caption for consumers: DRAFT while only the draft exists, PARTIAL with
a confirmed prefix and the draft's unconfirmed tail, FINAL when done, UNVERIFIED for windows
that got a draft but no RGB.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crossspec import msg as cs_msg
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image

from crossspec_ros.images import UnsupportedImageError, compressed_to_rgb, image_to_rgb
from crossspec_ros.nodes.common import (
    WindowQueue,
    Worker,
    declare_params,
    diagnostics,
    msg_to_ns,
    ns_to_msg,
    reliable_qos,
    sensor_qos,
    stats_msg,
    sync_from_params,
)
from crossspec_ros.params import VERIFIER_NODE_PARAMS
from crossspec_ros.speculative.drafting import DraftChannel
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine, WindowResult
from crossspec_ros.speculative.events import EngineEvent, EventKind
from crossspec_ros.sync.window import StampedFrame

FINISHED_MEMORY_S = 10.0  # finished window ids are remembered this long (late drafts ignored)
NAN = math.nan
TERMINAL = (cs_msg.Caption.STATUS_FINAL, cs_msg.Caption.STATUS_UNVERIFIED)


@dataclass
class WindowState:
    """What the verifier node knows about one window, for its Caption messages."""

    window_id: int
    epoch: int = 0
    t0: int = 0
    t1: int = 0
    channel: DraftChannel = field(default_factory=DraftChannel)
    draft_text: str = ""
    draft_first_token_ms: float = NAN
    draft_done_ms: float = NAN
    first_seen: float = field(default_factory=time.monotonic)
    confirmed_text: str = ""
    status: int = cs_msg.Caption.STATUS_DRAFT
    started: bool = False
    confirmed_first_ms: float = NAN
    confirmed_done_ms: float = NAN
    acceptance: float = NAN


def engine_config(p: dict[str, Any]) -> EngineConfig:
    return EngineConfig(max_new_tokens=p["max_new_tokens"], mode=p["decoding"],
                        temperature=p["temperature"], max_proposal=p["max_proposal"],
                        max_tree_nodes=p["max_tree_nodes"], adaptive=p["adaptive"],
                        proposers=tuple(p["proposers"].split(",")),
                        history_windows=p["history_windows"])


class VerifierNode(Node):
    """See the module docstring. ``verifier``: a loaded model (None: from the parameters);
    ``drafter``: the drafter object when it lives in this process (composed mode; used for
    vocabulary bridging only), else drafts are taken to share the verifier's ids."""

    def __init__(self, verifier: Any = None, drafter: Any = None, *,
                 node_name: str = "crossspec_verifier", parameter_overrides: list | None = None,
                 on_result: Callable[[Any, WindowResult], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(node_name, parameter_overrides=parameter_overrides or [], **kwargs)
        self.params = p = declare_params(self, VERIFIER_NODE_PARAMS)
        if verifier is None:
            from crossspec_ros.models.pair import load_from_params

            verifier = load_from_params(p, drafter=False)[0]
        self.engine = SpeculativeEngine(verifier, drafter, engine_config(p))
        self.on_result = on_result
        self.sync = sync_from_params(p, streams=("rgb",))
        self.queue = WindowQueue(p["max_queued_windows"])
        self._lock = threading.Lock()  # guards windows/finished (executor vs worker thread)
        self.windows: dict[int, WindowState] = {}
        self.finished: dict[int, float] = {}
        self._draft_epoch = self._rgb_epoch = 0
        self.counters = {"windows_verified": 0, "windows_unverified": 0, "bad_frames": 0,
                         "late_drafts": 0, "errors": 0}
        self.last_stats: dict[str, float] = {}
        self.pub_confirmed = self.create_publisher(cs_msg.ConfirmedTokens, p["confirmed_topic"],
                                                   reliable_qos())
        self.pub_caption = self.create_publisher(cs_msg.Caption, p["caption_topic"],
                                                 reliable_qos())
        self.pub_diag = self.create_publisher(DiagnosticArray, p["diagnostics_topic"], 10)
        qos = sensor_qos(p["sensor_qos_depth"])
        self.create_subscription(Image, p["rgb_topic"], self._on_image, qos)
        self.create_subscription(CompressedImage, p["rgb_topic"] + "/compressed",
                                 self._on_compressed, qos)
        self.create_subscription(cs_msg.DraftTokens, p["draft_topic"], self._on_draft,
                                 reliable_qos())
        self.create_timer(0.1, self._tick)
        self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics)
        self.worker = Worker(f"{node_name}-worker", self._step, self._on_error)
        self.worker.start()
        self.get_logger().info(
            f"verifying {p['rgb_topic']} with drafts from {p['draft_topic']} -> "
            f"{p['confirmed_topic']}, {p['caption_topic']}")

    # ------------------------------------------------------------ callbacks (executor)
    def _on_image(self, msg: Image) -> None:
        self._frame(msg, image_to_rgb)

    def _on_compressed(self, msg: CompressedImage) -> None:
        self._frame(msg, compressed_to_rgb)

    def _frame(self, msg: Any, convert: Callable[[Any], Any]) -> None:
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
        frame = StampedFrame(stamp, rgb, "rgb8", msg.header.frame_id)
        windows = self.sync.add_frame(frame)
        if self.sync.epoch != self._rgb_epoch:  # RGB time jumped back: window ids repeat
            self._rgb_epoch = self.sync.epoch
            with self._lock:
                self.finished.clear()
        self._enqueue(windows)

    def _enqueue(self, windows: list) -> None:
        now = time.monotonic()
        for window in windows:
            dropped = self.queue.put(window, now)
            if dropped is not None:
                self.get_logger().warning(
                    f"verifier busy: dropped window {dropped.id} ({self.queue.dropped} so far)")
                self._give_up(dropped)

    def _give_up(self, window: Any) -> None:
        """A window the verifier dropped is final as it is: UNVERIFIED, draft only."""
        wid = int(window.id)
        with self._lock:
            state = self.windows.pop(wid, None) or WindowState(wid)
            state.epoch, state.t0, state.t1 = window.epoch, window.t0, window.t1
            state.status = cs_msg.Caption.STATUS_UNVERIFIED
            self.finished[wid] = time.monotonic()
            self.pub_caption.publish(self._caption_msg(state))
        self.counters["windows_unverified"] += 1

    def _on_draft(self, msg: Any) -> None:
        wid = int(msg.window_id)
        with self._lock:
            if msg.epoch != self._draft_epoch:  # the draft node's time jumped (bag loop)
                self._draft_epoch = msg.epoch
                self.finished.clear()
            state = self.windows.get(wid)
            # FINAL is checked too: the worker publishes it just before it marks the window
            # finished, and a draft slipping in between must not repeat the FINAL caption
            if wid in self.finished or (state is not None and state.status in TERMINAL):
                self.counters["late_drafts"] += 1
                return
            if state is None:
                state = self.windows[wid] = WindowState(
                    wid, int(msg.epoch), msg_to_ns(msg.window_start), msg_to_ns(msg.window_end))
            state.draft_text = msg.text
            state.draft_first_token_ms = msg.first_token_latency_ms
            if msg.done and math.isnan(state.draft_done_ms):
                state.draft_done_ms = (time.monotonic() - state.first_seen) * 1e3
            self.pub_caption.publish(self._caption_msg(state))
        state.channel.set_draft([int(t) for t in msg.token_ids], int(msg.revision), msg.done)

    def _tick(self) -> None:
        self._enqueue(self.sync.poll(time.monotonic_ns()))
        self._expire_unverified()

    def _expire_unverified(self) -> None:
        """Drafted windows the verifier will never see: no RGB came for them."""
        p, now = self.params, time.monotonic()
        patience = p["max_lateness_s"] + p["window_length_s"] + 0.5
        closed = self.sync.closed_before
        waiting = set(self.sync.pending_ids()) | set(self.queue.ids())
        expired = 0
        with self._lock:
            for wid, state in list(self.windows.items()):
                if state.started or wid in waiting:
                    continue
                if (closed is not None and wid < closed) or now - state.first_seen > patience:
                    state.status = cs_msg.Caption.STATUS_UNVERIFIED
                    self.pub_caption.publish(self._caption_msg(self.windows.pop(wid)))
                    self.finished[wid] = now
                    expired += 1
            for wid, t in list(self.finished.items()):
                if now - t > FINISHED_MEMORY_S:
                    del self.finished[wid]
        self.counters["windows_unverified"] += expired

    # ------------------------------------------------------------ worker thread
    def _step(self) -> None:
        item = self.queue.get()
        if item is None:
            return
        window, t_close = item
        wid = int(window.id)
        with self._lock:
            state = self.windows.get(wid)
            if state is None:
                state = self.windows[wid] = WindowState(wid)
            state.epoch, state.t0, state.t1 = window.epoch, window.t0, window.t1
            state.started = True
        result = self.engine.run_window(window, on_event=lambda e: self._on_engine(state, e),
                                        t_close=t_close, draft=state.channel)
        with self._lock:
            self.windows.pop(wid, None)
            self.finished[wid] = time.monotonic()
        self.counters["windows_verified"] += 1
        s = result.stats
        self.last_stats = {"confirmed_done_ms": s.confirmed_done_ms,
                           "verifier_prefill_ms": s.verifier_prefill_ms,
                           "acceptance": s.acceptance, "rounds": s.rounds}
        if self.on_result is not None:
            self.on_result(window, result)

    def _on_engine(self, state: WindowState, event: EngineEvent) -> None:
        if event.kind is not EventKind.CONFIRMED:
            return
        stats = self.engine.current_stats
        # under the lock: the executor's _on_draft updates and publishes the same window, and
        # captions must leave in order (never a PARTIAL after the FINAL)
        with self._lock:
            state.confirmed_text = event.text
            if stats is not None:
                state.acceptance = stats.acceptance
            if event.base == 0:
                state.confirmed_first_ms = event.t_ms
            state.status = cs_msg.Caption.STATUS_FINAL if event.done else \
                cs_msg.Caption.STATUS_PARTIAL
            if event.done:
                state.confirmed_done_ms = event.t_ms
            self.pub_caption.publish(self._caption_msg(state))
        msg = cs_msg.ConfirmedTokens(
            window_id=state.window_id, epoch=int(state.epoch), window_start=ns_to_msg(state.t0),
            window_end=ns_to_msg(state.t1), base_index=event.base,
            new_token_ids=[int(t) for t in event.tokens], text=event.text, done=event.done,
            stats=stats_msg(stats) if stats is not None else cs_msg.WindowStats())
        msg.header.stamp = self.get_clock().now().to_msg()
        self.pub_confirmed.publish(msg)

    def _caption_msg(self, state: WindowState) -> Any:
        """The Caption for ``state`` as it is now; callers hold ``self._lock`` and publish it
        before releasing it, so captions leave in the order their states changed."""
        confirmed, draft = state.confirmed_text, state.draft_text
        unconfirmed = ""
        if state.status != cs_msg.Caption.STATUS_FINAL:
            norm_c, norm_d = " ".join(confirmed.split()), " ".join(draft.split())
            if norm_d.startswith(norm_c):
                unconfirmed = norm_d[len(norm_c):].strip()
        if state.status == cs_msg.Caption.STATUS_DRAFT and confirmed:
            state.status = cs_msg.Caption.STATUS_PARTIAL
        msg = cs_msg.Caption(
            window_id=state.window_id, epoch=int(state.epoch),
            window_start=ns_to_msg(state.t0), window_end=ns_to_msg(state.t1),
            status=state.status, confirmed_text=confirmed, unconfirmed_text=unconfirmed,
            draft_first_token_ms=float(state.draft_first_token_ms),
            draft_done_ms=float(state.draft_done_ms),
            confirmed_first_ms=float(state.confirmed_first_ms),
            confirmed_done_ms=float(state.confirmed_done_ms),
            acceptance=float(state.acceptance))
        msg.header.stamp = self.get_clock().now().to_msg()
        return msg

    def _on_error(self, error: str) -> None:
        if not self.context.ok():
            return  # shutting down mid-window: publishing fails, nothing is wrong
        self.counters["errors"] += 1
        self.get_logger().error(f"verifying a window failed: {error}")

    def _publish_diagnostics(self) -> None:
        s = self.sync.stats
        values = {"queue_depth": len(self.queue), "dropped_windows": self.queue.dropped,
                  "sync_dropped_windows": s.dropped_windows, "late_frames": s.late_frames,
                  "resets": s.resets, **self.counters,
                  **{k: round(v, 3) for k, v in self.last_stats.items()}}
        bad = self.queue.dropped or self.counters["errors"] or self.counters["bad_frames"]
        self.pub_diag.publish(diagnostics(self, "crossspec: verifier", values, 1 if bad else 0,
                                          "degraded" if bad else "ok"))

    def destroy_node(self) -> None:
        self.queue.close()
        with self._lock:
            for state in self.windows.values():
                state.channel.stop()
        self.worker.stop()
        super().destroy_node()
