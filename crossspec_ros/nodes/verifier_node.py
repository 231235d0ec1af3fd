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
close (speculative/early_start.py). This node only converts messages and runs the engine.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
from crossspec import msg as cs_msg
from diagnostic_msgs.msg import DiagnosticArray
from sensor_msgs.msg import CompressedImage, Image

from crossspec_ros.images import UnsupportedImageError, compressed_to_rgb, image_to_rgb
from crossspec_ros.models.static_runtime import runtime_counters
from crossspec_ros.nodes.caption_action import CaptionWindowServer
from crossspec_ros.nodes.common import (
    NS,
    WindowQueue,
    Worker,
    declare_params,
    diagnostics,
    follow_clock,
    latched_qos,
    msg_to_ns,
    ns_to_msg,
    reliable_qos,
    sensor_qos,
    stats_msg,
    sync_from_params,
)
from crossspec_ros.nodes.lifecycle import ManagedNode
from crossspec_ros.params import VERIFIER_NODE_PARAMS, ParameterError, combination_problem
from crossspec_ros.speculative.drafting import DraftChannel
from crossspec_ros.speculative.early_start import HeldCaption, HeldCaptions, provisional_window
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine, WindowResult
from crossspec_ros.speculative.events import EngineEvent, EventKind
from crossspec_ros.speculative.live_scheduler import LivePrefillScheduler
from crossspec_ros.speculative.verifier_first import VerifierFirst
from crossspec_ros.sync.agreement import AgreementTally, text_to_ids
from crossspec_ros.sync.captions import (
    CaptionBook,
    CaptionStatus,
    UnverifiedReason,
    WindowCaption,
    WindowKey,
)
from crossspec_ros.sync.window import StampedFrame

NAN = math.nan


def engine_config(p: dict[str, Any], verifier: Any = None,
                  where: str = "parameters") -> EngineConfig:
    """The engine's config from the node's parameters (each checked, and checked together, by
    ``validate``); ``verifier``: the loaded model, whose vocabulary they must fit too, else
    ParameterError naming ``where`` (configure fails in one line, before compiling)."""
    if verifier is not None:
        problem = combination_problem(p, verifier.info.vocab_size)
        if problem is not None:
            raise ParameterError(f"{where}: {problem}")
    proposers = tuple(p["proposers"].split(","))
    if p["draft_head"] and "draft_head" not in proposers:  # the head is asked for: use it
        proposers += ("draft_head",)
    return EngineConfig(max_new_tokens=p["max_new_tokens"], mode=p["decoding"],
                        temperature=p["temperature"], max_proposal=p["max_proposal"],
                        max_tree_nodes=p["max_tree_nodes"], adaptive=p["adaptive"],
                        proposers=proposers, history_windows=p["history_windows"],
                        acceptance=p["acceptance"])


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
        self._next_config: EngineConfig | None = None  # a live change, for the next window
        self._given = (verifier, drafter)
        self.engine: SpeculativeEngine | None = None
        self.caption_action: CaptionWindowServer | None = None
        self.on_result = on_result
        self.queue = WindowQueue(p["max_queued_windows"])
        self.worker: Worker | None = None
        # the caption protocol (sync/captions.py); the lock makes each change and its
        # publication one step (executor vs worker thread), so captions leave in order
        self._lock = threading.Lock()
        self.book = CaptionBook(patience_s=p["max_lateness_s"] + p["window_length_s"] + 0.5)
        self.agreement = AgreementTally()  # the drafts against their FINAL captions
        self.channels: dict[WindowKey, DraftChannel] = {}  # drafts on their way to the engine
        self.counters = {"windows_verified": 0, "bad_frames": 0, "errors": 0,
                         "live_redone": 0}
        self.last_stats: dict[str, float] = {}
        self.sync: Any = None  # the RGB synchronizer (configure); its timeline outlives it
        # the book's FINAL / UNVERIFIED counts at the last diagnostics (is anything verified?)
        self._finished_seen = (0, 0)
        self.live_prefill = False
        self.live: LivePrefillScheduler | None = None  # with live prefill (configure)
        self.held = HeldCaptions()  # early start: captions decoded before their close

    def configure_node(self) -> None:
        p = self.params
        verifier, drafter = self._given
        if verifier is None:
            from crossspec_ros.models.pair import load_from_params

            verifier = load_from_params(p, drafter=False)[0]
        config = engine_config(p, verifier, where=f"node '{self.get_name()}' parameters")
        from crossspec_ros.models.static_runtime import prepare_runtime

        self.get_logger().info(prepare_runtime(verifier, p, "verifier", p["max_new_tokens"]))
        head = None
        if p["draft_head"]:
            from crossspec_ros.models.pair import load_draft_head

            head = load_draft_head(p["draft_head"])
            self.get_logger().info(f"draft head {p['draft_head']}: proposes from the window "
                                   f"state the draft node publishes on {p['draft_topic']}")
        from crossspec_ros.models.pair import load_corpus

        corpus = load_corpus(p["caption_corpus"], verifier)
        if corpus is not None:
            self.get_logger().info(f"caption corpus: {corpus.summary()}")
        self.engine = SpeculativeEngine(verifier, drafter, config, head=head,
                                        corpus=corpus.captions if corpus else ())
        self.agreement.tokenize = text_to_ids(verifier.tokenizer)
        self.live_prefill = p["live_prefill"] and _can_prefill_live(verifier, p)
        if self.live_prefill:
            from crossspec_ros.models.live_prefill import LivePrefill

            self.live = LivePrefillScheduler(lambda: LivePrefill(verifier))
        if p["live_prefill"] and not self.live_prefill:
            self.get_logger().info("live_prefill: this verifier prefills after the close "
                                   "(it needs a Video-LLaVA verifier whose num_frames is "
                                   "frames_per_window)")
        self.sync = sync_from_params(p, streams=("rgb",), announce_frames=self.live_prefill,
                                     previous=self.sync)
        if self.verifier_first is not None:  # its turn's bound (speculative/verifier_first.py)
            self.verifier_first.max_pause_s = p["yield_to_verifier_ms"] / 1e3
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
        self.add_timer(0.1, self._tick)
        self.add_timer(p["diagnostics_period_s"], self._publish_diagnostics)
        if p["follow_clock"]:  # the server of a split: its robot may replay a bag, or not
            self.add_timer(0.5, follow_clock(self))
        self.caption_action = CaptionWindowServer(self, p["caption_action"],
                                                  p["window_length_s"])
        self.get_logger().info(
            f"verifying {p['rgb_topic']} with drafts from {p['draft_topic']} -> "
            f"{p['confirmed_topic']}, {p['caption_topic']}")

    def start(self) -> None:
        self.queue = WindowQueue(self.params["max_queued_windows"])
        self.worker = Worker(f"{self.get_name()}-worker", self._step, self._on_error)
        self.worker.start()

    def stop(self) -> None:
        self.queue.close()
        with self._lock:
            for channel in self.channels.values():
                channel.stop()
        if self.worker is not None:
            self.worker.stop()  # the window in progress ends first
        if self.live is not None:
            self.live.clear()  # their KV caches go with them
        self.held.clear()
        # The windows queued or still open will never be verified: given up now (their frames
        # are let go, and frames that come for them after an activate are late), they end
        # UNVERIFIED with their drafts, which the node relays while inactive (_on_draft).
        # Shutting down, nothing more will be published: they end at once.
        going_on = self.context.ok()
        with self._lock:
            now, stopped = time.monotonic(), []
            epoch = self.sync.epoch
            left = [(w.key, w.t0, w.t1) for w in self.queue.drain()]
            left += [((epoch, wid), t0, t1) for wid, t0, t1 in self.sync.abandon_pending()]
            for key, t0, t1 in left:
                stopped += self.book.on_verifier_gave_up(key, t0, t1, now,
                                                         UnverifiedReason.VERIFIER_STOPPED)
            stopped += self.book.stop(now, wait_for_drafts=going_on)
            if going_on:
                self._publish(stopped)

    def release(self) -> None:
        if self.caption_action is not None:
            self.caption_action.destroy()
            self.caption_action = None
        if self._given[0] is None:  # a verifier this node loaded is let go (a given one
            self.engine = None      # stays with its owner, and its engine readable)

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
        frame = StampedFrame(stamp, rgb, "rgb8", msg.header.frame_id)
        closed = self.sync.add_frame(frame)
        if self.live is not None:
            selected = self.sync.take_frame_selections()
            if selected:  # the worker encodes and prefills them while the window is open
                self.live.add(selected)
                self.queue.wake()
        self._enqueue(closed)

    def _enqueue(self, windows: list) -> None:
        now = time.monotonic()
        for window in windows:
            dropped = self.queue.put(window, now)
            if dropped is not None:
                self.get_logger().warning(
                    f"verifier busy: dropped window {dropped.id} ({self.queue.dropped} so far); "
                    "its draft is published as UNVERIFIED")
                with self._lock:
                    self._publish(self.book.on_verifier_gave_up(
                        dropped.key, dropped.t0, dropped.t1, time.monotonic(),
                        UnverifiedReason.VERIFIER_BUSY))

    def _on_draft(self, msg: Any) -> None:
        key = (int(msg.epoch), int(msg.window_id))
        t0, t1 = msg_to_ns(msg.window_start), msg_to_ns(msg.window_end)
        with self._lock:
            now = time.monotonic()
            captions = self.book.on_draft(key, t0, t1, msg.text, msg.first_token_latency_ms,
                                          msg.done, now, cut_short=msg.cut_short)
            if not self.active:  # stopped: the draft is the caption (UNVERIFIED once final)
                captions += self.book.on_verifier_gave_up(key, t0, t1, now,
                                                          UnverifiedReason.VERIFIER_STOPPED)
                self._publish(captions)
                return
            self._publish(captions)
            if not captions or captions[-1].finished:
                return  # late, or finished as UNVERIFIED: no verifier will read it
            channel = self.channels.setdefault(key, DraftChannel())
        if len(msg.window_state) and self.engine is not None and self.engine.head is not None:
            channel.set_window_state(torch.tensor(msg.window_state, dtype=torch.float32))
        channel.set_draft([int(t) for t in msg.token_ids], int(msg.revision), msg.done)

    def _tick(self) -> None:
        if not self.active:  # windows given up at the deactivate wait for their drafts
            with self._lock:
                self._publish(self.book.expire(time.monotonic(), set(), None))
            return
        self._enqueue(self.sync.poll(time.monotonic_ns()))
        waiting = {(self.sync.epoch, wid) for wid in self.sync.pending_ids()}
        waiting |= set(self.queue.keys())
        closed = self.sync.closed_before
        with self._lock:
            self._publish(self.book.expire(
                time.monotonic(), waiting, None if closed is None else (self.sync.epoch, closed)))

    def _live_refusal(self, values: dict[str, Any]) -> str | None:
        """What the loaded verifier cannot run: a top_k beyond its vocabulary, a live
        max_new_tokens its static caches (sized at configure) cannot hold."""
        if self.engine is None:
            return None
        problem = combination_problem(values, self.engine.verifier.info.vocab_size)
        if problem is not None:
            return problem
        room = self.engine.verifier.generated_room()
        if room is not None and values["max_new_tokens"] > room:
            return (f"max_new_tokens {values['max_new_tokens']} exceeds the {room} tokens the "
                    "verifier's static caches hold (sized at configure): set it in the "
                    "parameter file and configure the node again (cleanup, configure)")
        return None

    def _on_params(self, changed: dict[str, Any]) -> None:
        """``ros2 param set`` of an engine parameter: the next window uses it."""
        with self._lock:
            self._next_config = engine_config(self.params)
        self.get_logger().info(f"parameters {', '.join(sorted(changed))} changed: used from "
                               "the next window on")

    # ------------------------------------------------------------ worker thread
    def _step(self) -> None:
        item = self.queue.get()
        if item is None:
            if self.live is not None:
                self.live.prefill_queued()
                if self.params["early_start"]:
                    self._start_early()
            return
        self._take_config()
        window, t_close = item
        key = window.key
        held = self.held.claim(window)
        if held is not None:
            self._release(held, window, t_close)
            return
        with self._lock:
            started = self.book.on_verifier_start(key, window.t0, window.t1, time.monotonic())
            channel = self.channels.setdefault(key, DraftChannel()) if started else \
                self.channels.pop(key, None)
        if not started:
            if self.live is not None:
                self.live.take(key)  # its live prefill is let go
            return  # its caption already finished without RGB: one caption per window
        try:
            # taken once the book knows the verifier has the window: its queued frames are
            # prefilled here, and one that fails fails the window (never "no RGB")
            live = self.live.take(key) if self.live is not None else None
            result = self._run_engine(window, channel, live, t_close,
                                      on_event=lambda e: self._on_engine(window, e))
        finally:
            with self._lock:
                self.channels.pop(key, None)
                if not self.book.is_finished(key):  # the engine failed mid-window
                    self._publish(self.book.on_verifier_gave_up(
                        key, window.t0, window.t1, time.monotonic(),
                        UnverifiedReason.VERIFIER_FAILED))
        self._finish(window, result)

    def _take_config(self) -> None:
        """A live parameter change, from this window on."""
        with self._lock:
            config, self._next_config = self._next_config, None
        if config is not None:
            self.engine.reconfigure(config)

    def _run_engine(self, window: Any, channel: DraftChannel, live: Any, t_close: float,
                    on_event: Callable[[EngineEvent], None]) -> WindowResult:
        turn = self.verifier_first.turn() if self.verifier_first is not None else nullcontext()
        with turn:
            return self.engine.run_window(
                window, on_event=on_event, t_close=t_close, draft=channel, live=live,
                look=channel.wait_window_state if self.engine.head is not None else None,
                between_rounds=self.live.between_rounds if self.live is not None else None)

    def _start_early(self) -> None:
        """Caption a window whose frames are all decided and prefilled, before it closes; the
        caption is held for the close (speculative/early_start.py)."""
        taken = self.live.take_complete()
        if taken is None:
            return
        key, live, frames = taken
        window = provisional_window(key, frames, self.sync.window_len_ns)
        with self._lock:
            if self.book.is_finished(key):
                return
            channel = self.channels.setdefault(key, DraftChannel())
        self._take_config()
        held = HeldCaption(window)
        try:
            held.done(self._run_engine(window, channel, live, time.monotonic(), held.keep))
        finally:
            with self._lock:
                self.channels.pop(key, None)
        self.held.hold(held)

    def _release(self, held: HeldCaption, window: Any, t_close: float) -> None:
        """Publish the held caption of the closed ``window`` (it read the same frames)."""
        key, now = window.key, time.monotonic()
        with self._lock:
            if not self.book.on_verifier_start(key, window.t0, window.t1, now):
                return  # its caption already finished without RGB: one caption per window
        stats = held.result.stats
        for event in held.release(t_close, now):
            self._on_engine(window, event, stats)
        self._finish(window, held.result)

    def _finish(self, window: Any, result: WindowResult) -> None:
        self.counters["windows_verified"] += 1
        s = result.stats
        self.counters["live_redone"] += s.live_prefill_frames < 0
        self.last_stats = {"confirmed_done_ms": s.confirmed_done_ms,
                           "verifier_prefill_ms": s.verifier_prefill_ms,
                           "acceptance": s.acceptance, "rounds": s.rounds}
        if self.on_result is not None:
            self.on_result(window, result)

    def _on_engine(self, window: Any, event: EngineEvent, stats: Any = None) -> None:
        if event.kind is not EventKind.CONFIRMED:
            return
        stats = stats if stats is not None else self.engine.current_stats
        with self._lock:
            self._publish(self.book.on_confirmed(
                window.key, event.text, event.done, event.t_ms,
                stats.acceptance if stats is not None else NAN, time.monotonic(),
                acceptance_rule=stats.acceptance_rule if stats is not None else ""))
        msg = cs_msg.ConfirmedTokens(
            window_id=int(window.id), epoch=int(window.epoch), window_start=ns_to_msg(window.t0),
            window_end=ns_to_msg(window.t1), base_index=event.base,
            new_token_ids=[int(t) for t in event.tokens], text=event.text, done=event.done,
            acceptance_rule=stats.acceptance_rule if stats is not None else "",
            frame_stamps_sec=[int(f.stamp_ns // NS) for f in window.frames],
            frame_stamps_nanosec=[int(f.stamp_ns % NS) for f in window.frames],
            stats=stats_msg(stats) if stats is not None else cs_msg.WindowStats())
        msg.header.stamp = self.get_clock().now().to_msg()
        self.pub_confirmed.publish(msg)

    def _publish(self, captions: list[WindowCaption]) -> None:
        """Publish ``captions`` in order; callers hold ``self._lock``."""
        for caption in captions:
            if caption.finished:
                self.channels.pop(caption.key, None)
            if caption.status is CaptionStatus.FINAL:
                self.agreement.add(caption.first_complete_draft, caption.confirmed_text)
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
        values = {"queue_depth": len(self.queue), "dropped_windows": self.queue.dropped,
                  "sync_dropped_windows": s.dropped_windows, "late_frames": s.late_frames,
                  "outlier_frames": s.outlier_frames,
                  "resets": s.resets, "callback_errors": self.callback_errors,
                  **self.counters, **self.book.counters,
                  **(self.live.counters if self.live is not None else {}),
                  **self.held.counters,
                  **(runtime_counters(self.engine.verifier) if self.engine is not None else {}),
                  **{k: round(v, 3) for k, v in self.last_stats.items()},
                  **self.agreement.summary()}
        finished = (self.book.counters["windows_final"], self.book.counters["windows_unverified"])
        final_now, unverified_now = (a - b for a, b in zip(finished, self._finished_seen,
                                                            strict=True))
        self._finished_seen = finished
        level, message = 0, "ok"
        if self.queue.dropped or self.counters["errors"] or self.counters["bad_frames"] or \
                self.callback_errors:
            level, message = 1, "degraded"
        if unverified_now and not final_now:  # whatever the cause, nothing is verified
            level, message = 1, (f"no window verified since the last report: {unverified_now} "
                                 "ended UNVERIFIED")
        self.pub_diag.publish(diagnostics(self, "crossspec: verifier", values, level, message))


def _can_prefill_live(verifier: Any, p: dict[str, Any]) -> bool:
    """Live prefill needs a verifier that prefills frame by frame, one frame per slot."""
    from crossspec_ros.models.video_llava import VideoLlavaVerifier

    return isinstance(verifier, VideoLlavaVerifier) and \
        verifier.num_frames == p["frames_per_window"]


def caption_msg(caption: WindowCaption) -> Any:
    """crossspec/Caption for one window's caption (header stamp left to the publisher)."""
    return cs_msg.Caption(
        window_id=caption.window_id, epoch=caption.epoch,
        window_start=ns_to_msg(caption.t0), window_end=ns_to_msg(caption.t1),
        status=int(caption.status), confirmed_text=caption.confirmed_text,
        unconfirmed_text=caption.unconfirmed_text, draft_text=caption.draft_text,
        draft_first_token_ms=caption.draft_first_token_ms,
        draft_done_ms=caption.draft_done_ms, confirmed_first_ms=caption.confirmed_first_ms,
        confirmed_done_ms=caption.confirmed_done_ms, acceptance=caption.acceptance,
        unverified_reason=int(caption.unverified_reason), draft_state=int(caption.draft_state),
        acceptance_rule=caption.acceptance_rule)
