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
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Any

from crossspec import msg as cs_msg
from diagnostic_msgs.msg import DiagnosticArray
from event_camera_msgs.msg import EventPacket

from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.packet import from_msg
from crossspec_ros.models.static_runtime import runtime_counters
from crossspec_ros.models.streams import assign_cuda_streams
from crossspec_ros.nodes.common import (
    Worker,
    declare_params,
    diagnostics,
    follow_clock,
    ns_to_msg,
    reliable_qos,
    sensor_qos,
    sync_from_params,
)
from crossspec_ros.nodes.lifecycle import ManagedNode
from crossspec_ros.params import DRAFT_NODE_PARAMS
from crossspec_ros.speculative.drafting import DraftChannel, run_drafter
from crossspec_ros.speculative.events import EngineEvent, EventKind
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.speculative.verifier_first import VerifierFirst
from crossspec_ros.speculative.vocab import confirmed_in_drafter_ids
from crossspec_ros.sync.captions import DraftCursor
from crossspec_ros.sync.window_queue import WindowQueue

LINGER_S = 2.0  # how long a finished draft waits for confirmations to re-sync to


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
        self._held = False  # paused for the verifier (guarded by _hold_lock)
        self._hold_lock = threading.Lock()
        # event packets that came while held, in order (bounded: at most the pause's length
        # of the camera's packets; the pause is yield_to_verifier_ms at most)
        self._held_packets: deque[Any] = deque()
        self._given_drafter = self.drafter = drafter
        self.cursor = DraftCursor()  # the window being drafted and its confirmed prefix
        self.queue = WindowQueue(self.params["max_queued_windows"])
        self.worker: Worker | None = None
        self.windows_drafted = 0
        self.last_first_token_ms = float("nan")
        self.process: Any = None  # a DrafterProcess, when the drafter runs in one
        self.sync: Any = None  # the events synchronizer (configure); its timeline outlives it
        self.windows_cut_short = 0  # left unfinished for a newer window, or dropped unstarted
        # the verifier finished the window before its first draft token: nothing published
        self.windows_confirmed_before_draft = 0
        self.drafter_runs_in = "a thread"  # where the last configure put it (for reports)

    def configure_node(self) -> None:
        p = self.params
        if self.drafter is None:
            from crossspec_ros.models.pair import load_from_params

            self.drafter = load_from_params(p, verifier=False)[1]
        assign_cuda_streams(self.drafter)  # its own CUDA stream, also when composed
        from crossspec_ros.models.static_runtime import prepare_runtime, runtime_options

        if p["drafter_process"] and p["device"] == "cpu":
            from crossspec_ros.models.pair import drafter_source
            from crossspec_ros.speculative.drafter_process import DrafterProcess

            # this process keeps its drafter for the tokenizer (re-syncs) and reports
            self.process = DrafterProcess(drafter_source(p), device="cpu", dtype=p["dtype"],
                                          runtime=runtime_options(p, "drafter"),
                                          max_new_tokens=p["max_new_tokens"])
        else:
            self.get_logger().info(prepare_runtime(self.drafter, p, "drafter",
                                                   p["max_new_tokens"]))
        self.drafter_runs_in = "a child process" if self.process is not None else "a thread"
        self.sync = sync_from_params(p, streams=("events",), previous=self.sync)
        self.decoder = EventPacketDecoder(name=p["event_topic"])
        self.pub_draft = self.add_publisher(cs_msg.DraftTokens, p["draft_topic"],
                                            reliable_qos())
        self.pub_diag = self.add_publisher(DiagnosticArray, p["diagnostics_topic"], 10)
        self.add_subscription(EventPacket, p["event_topic"], self._on_events,
                              sensor_qos(p["event_qos_depth"]))
        self.add_subscription(cs_msg.ConfirmedTokens, p["confirmed_topic"],
                              self._on_confirmed, reliable_qos())
        self.add_timer(0.1, self._tick)
        self.add_timer(p["diagnostics_period_s"], self._publish_diagnostics)
        if p["follow_clock"]:  # the server of a split: its robot may replay a bag, or not
            self.add_timer(0.5, follow_clock(self))
        if self.verifier_first is not None:
            self.verifier_first.add_drafter(self._hold, self._release_hold)
        self.get_logger().info(
            f"drafting {p['event_topic']} -> {p['draft_topic']} "
            f"({type(self.drafter).__name__} on {getattr(self.drafter, 'device', 'cpu')}, "
            f"in {self.drafter_runs_in})")

    def start(self) -> None:
        self.queue = WindowQueue(self.params["max_queued_windows"])
        self.worker = Worker(f"{self.get_name()}-worker", self._step,
                             lambda e: self.get_logger().error(f"drafting failed: {e}"))
        self.worker.start()

    def stop(self) -> None:
        self.queue.close()  # before reading the cursor: see _step
        current = self.cursor.current()
        if current is not None:
            current.stop()
        if self.worker is not None:
            self.worker.stop()

    def release(self) -> None:
        if self.verifier_first is not None:
            self.verifier_first.remove_drafters()
        self.drafter = self._given_drafter  # a model this node loaded is let go
        if self.process is not None:
            self.process.close()
            self.process = None

    # ------------------------------------------------------------ callbacks (executor)
    def _on_events(self, msg: EventPacket) -> None:
        if not self.active:
            return  # inactive: inputs are ignored
        self._held_packets.append(msg)
        if not self._held:  # held: decoded once the verifier's turn ends (its compute)
            self._decode_held()

    def _decode_held(self) -> None:
        """Decode the packets that came while the verifier had its turn, then the new one
        (executor thread: the synchronizer is not thread-safe)."""
        while self._held_packets:
            batch = self.decoder.decode(from_msg(self._held_packets.popleft()))
            if len(batch):
                self._enqueue(self.sync.add_events(batch))

    def _tick(self) -> None:
        if not self.active:
            return
        if not self._held:
            self._decode_held()
        self._enqueue(self.sync.poll(time.monotonic_ns()))
        lingering = self.cursor.lingering(time.monotonic(), LINGER_S)
        if lingering is not None:  # a finished draft nobody confirms any more is let go
            lingering.stop()

    def _enqueue(self, windows: list) -> None:
        now = time.monotonic()
        queued = False
        for window in windows:
            if not window.has_events:
                continue  # nothing to draft (and no reason to stop the current draft)
            queued = True
            dropped = self.queue.put(window, now)
            if dropped is not None:
                self.get_logger().warning(
                    f"drafter busy: dropped window {dropped.id} ({self.queue.dropped} so far)")
                self._publish_cut_short(dropped, None)
        current = self.cursor.current() if queued else None
        if current is not None:
            current.stop()  # a newer window closed: move on to it

    def _on_confirmed(self, msg: Any) -> None:
        channel, confirmed = self.cursor.confirmed(
            (int(msg.epoch), int(msg.window_id)), int(msg.base_index), list(msg.new_token_ids),
            msg.done)
        if channel is None:
            return  # not the window being drafted
        if confirmed is None:
            channel.stop()  # the verifier is done with it
        else:
            channel.push_confirmed(confirmed_in_drafter_ids(self.drafter, confirmed, msg.text))

    # ------------------------------------------------------------ worker thread
    def _step(self) -> None:
        item = self.queue.get()
        if item is None:
            return
        window, t_close = item
        max_new = self.params["max_new_tokens"]
        stats = WindowStats(proposer_names=["draft_stream"])
        state_due = bool(self.params["draft_head"])  # a head in the verifier reads it
        drafting: list[DraftChannel] = []  # the window's channel, once there
        last: list[EngineEvent] = []  # the latest draft published

        def emit(kind: EventKind, **fields: Any) -> EngineEvent:
            nonlocal state_due
            event = EngineEvent(kind, int(window.id), (time.monotonic() - t_close) * 1e3,
                                **fields)
            if kind is EventKind.DRAFT:
                last[:] = [event]
                if len(event.tokens) == 1 and event.revision == 0:
                    stats.draft_first_token_ms = event.t_ms  # before the first publication
                state = drafting[0].window_state if state_due and drafting else None
                if state is not None:  # once, with the window's first draft
                    state_due = False
                self._publish_draft(window, event, stats, state)
            elif kind is EventKind.DRAFT_ERROR:
                self.get_logger().error(f"window {window.id}: drafter failed: {event.text}")
            return event

        with self._hold_lock:  # a window started while the verifier works starts held
            lookahead = 0 if self._held else max_new
            if self.process is not None:
                channel = self.process.start(window, lookahead, max_new, on_draft=emit)
            else:
                channel = DraftChannel(lookahead=lookahead)
            drafting.append(channel)
            self.cursor.begin(window.key, channel)
        if self.queue.closed:  # stopping after this window was taken (stop() closes the
            channel.stop()     # queue, then stops the current draft: one of them sees it)
        try:
            if self.process is not None:
                self.process.wait_idle()  # the draft arrives through emit; until stopped
            else:
                run_drafter(self.drafter, window, channel, emit, stats, max_new)
        finally:
            verifier_done = self.cursor.end(window.key)
        if not (last and last[0].done) and not verifier_done:
            self._publish_cut_short(window, last[0] if last else None, stats)
        self.windows_confirmed_before_draft += verifier_done and not last
        self.windows_drafted += 1
        self.last_first_token_ms = stats.draft_first_token_ms

    def _publish_draft(self, window: Any, event: EngineEvent, stats: WindowStats,
                       window_state: Any = None, cut_short: bool = False) -> None:
        msg = cs_msg.DraftTokens(
            window_id=int(window.id), epoch=int(window.epoch),
            window_start=ns_to_msg(window.t0), window_end=ns_to_msg(window.t1),
            revision=event.revision, base_index=0, token_ids=[int(t) for t in event.tokens],
            log_probs=[float(x) for x in event.log_probs],
            text=event.text, done=event.done, cut_short=cut_short,
            first_token_latency_ms=float(stats.draft_first_token_ms))
        if window_state is not None:
            msg.window_state = window_state.detach().float().cpu().numpy()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = "event_camera"
        self.pub_draft.publish(msg)
        if event.done:
            self.cursor.completed(window.key, time.monotonic())

    def _hold(self) -> None:
        """The verifier in this process works on a closed window: pause the drafter."""
        with self._hold_lock:
            self._held = True
            channel = self.cursor.current()
            if channel is not None:
                channel.set_lookahead(0)

    def _release_hold(self) -> None:
        with self._hold_lock:
            self._held = False
            channel = self.cursor.current()
            if channel is not None:
                channel.set_lookahead(self.params["max_new_tokens"])

    def _publish_cut_short(self, window: Any, last: EngineEvent | None,
                           stats: WindowStats | None = None) -> None:
        """The drafter leaves ``window`` unfinished (``last``: its latest draft, None when
        it never drafted it): no more tokens will come for it."""
        self.windows_cut_short += 1
        if not self.context.ok():
            return  # the process is going down: nobody is listening
        notice = EngineEvent(EventKind.DRAFT, int(window.id), math.nan,
                             tokens=list(last.tokens) if last else [],
                             revision=last.revision if last else 0, done=False,
                             text=last.text if last else "",
                             log_probs=list(last.log_probs) if last else [])
        self._publish_draft(window, notice, stats or WindowStats(), cut_short=True)

    def _publish_diagnostics(self) -> None:
        s = self.sync.stats
        values = {"queue_depth": len(self.queue), "dropped_windows": self.queue.dropped,
                  "sync_dropped_windows": s.dropped_windows, "windows_drafted":
                  self.windows_drafted, "late_events": s.late_events,
                  "outlier_events": s.outlier_events, "resets": s.resets,
                  "windows_cut_short": self.windows_cut_short,
                  "windows_confirmed_before_draft": self.windows_confirmed_before_draft,
                  "callback_errors": self.callback_errors,
                  "bad_packets": self.decoder.stats.bad_packets,
                  "missing_packets": self.decoder.stats.missing_packets,
                  "last_first_token_ms": round(self.last_first_token_ms, 1),
                  **runtime_counters(self.drafter)}  # eager_steps: not compiled, see its log
        stats = self.decoder.stats
        level = 1 if self.queue.dropped or stats.bad_packets or stats.missing_packets or \
            self.callback_errors else 0
        message = "dropping windows" if self.queue.dropped else \
            "event packets missing (raise event_qos_depth)" if stats.missing_packets else \
            "callbacks failed (see the log)" if self.callback_errors else "ok"
        self.pub_diag.publish(diagnostics(self, "crossspec: draft", values, level, message))
