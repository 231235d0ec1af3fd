"""A verifier's window decisions, pure: what the verifier node runs, without ROS.

Frames, drafts and the time (its owner's ``clock``) come in; captions (``sync/captions.py``)
and confirmed tokens go out through the two callbacks its owner gives, in the order they must
be published:

    add_frame(frame) --> the synchronizer --closed windows--> [queue] --step()--> the engine
         \\--frame selections--> the live-prefill scheduler (prefilled by step() while the
                                 window is open; early start captions a window whose frames
                                 are all in before it closes, held for the close)
    on_draft(...)    --> the caption book (DRAFT/PARTIAL) and the window's draft channel
    tick()           --> closes by the clock; the book's patience with windows nobody verifies

``step()`` is the worker's unit of work (one window, or the live prefill of queued frames and
an early start); everything else comes from the executor. The loop owns no thread and never
waits: its owner runs ``step`` on a worker (speculative/worker.py), wakes it through
``wake_worker`` and gives the lock under which every change of the caption book and its
publication happen, so captions leave in order. The verifier node (``nodes/verifier_node.py``)
converts messages and publishes what this hands it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from crossspec_ros.models.device_turns import StreamDue, due_by
from crossspec_ros.speculative.drafting import DraftChannel
from crossspec_ros.speculative.early_start import HeldCaption, HeldCaptions, provisional_window
from crossspec_ros.speculative.engine import SpeculativeEngine, WindowResult
from crossspec_ros.speculative.events import EngineEvent, EventKind
from crossspec_ros.speculative.live_scheduler import LivePrefillScheduler
from crossspec_ros.speculative.loop_clock import LoopClock
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.speculative.worker import UNTIL_WOKEN
from crossspec_ros.sync.agreement import AgreementTally
from crossspec_ros.sync.captions import (
    CaptionBook,
    CaptionStatus,
    UnverifiedReason,
    WindowCaption,
    WindowKey,
)
from crossspec_ros.sync.window import StampedFrame
from crossspec_ros.sync.window_queue import WindowQueue

NAN = math.nan

CaptionsOut = Callable[[list[WindowCaption]], None]
ConfirmedOut = Callable[[Any, EngineEvent, WindowStats | None], None]


class VerifierLoop:
    """See the module docstring. ``on_captions(captions)``: publish them (called with the lock
    held, in order); ``on_confirmed(window, event, stats)``: publish a CONFIRMED event's tokens
    (after its captions); ``warn(text)``: a warning for the log; ``clock``: the time it decides
    by; ``lock``: held over the caption book's changes (a real lock where the executor
    and a worker call in; ``nullcontext()`` for one thread)."""

    def __init__(self, *, patience_s: float, max_queued: int, on_captions: CaptionsOut,
                 on_confirmed: ConfirmedOut, clock: LoopClock, lock: AbstractContextManager,
                 warn: Callable[[str], None] = lambda _t: None,
                 on_result: Callable[[Any, WindowResult], None] | None = None,
                 due: StreamDue | None = None) -> None:
        self.on_captions, self.on_confirmed, self.warn = on_captions, on_confirmed, warn
        self.due = due  # several streams on one device: when each call of this one is due
        self.on_result = on_result
        self.clock, self.lock = clock, lock
        self.wake_worker: Callable[[], None] = lambda: None  # new work: the owner's worker
        self.book = CaptionBook(patience_s=patience_s)
        self.agreement = AgreementTally()  # the drafts against their FINAL captions
        self.channels: dict[WindowKey, DraftChannel] = {}  # drafts on their way to the engine
        self.queue = WindowQueue(max_queued)
        self.held = HeldCaptions()  # early start: captions decoded before their close
        self.counters = {"windows_verified": 0, "live_redone": 0, "windows_shed": 0}
        self.last_stats: dict[str, float] = {}
        self.engine: SpeculativeEngine | None = None
        self.sync: Any = None
        self.live: LivePrefillScheduler | None = None
        self.early_start: Callable[[], bool] = lambda: False
        self.verifier_first: Any = None
        self.running = False  # between start() and stop(): windows are verified
        self._next_config: Any = None  # a live change of the engine's config, next window on

    def configure(self, engine: SpeculativeEngine, sync: Any,
                  live: LivePrefillScheduler | None = None,
                  early_start: Callable[[], bool] = lambda: False,
                  verifier_first: Any = None) -> None:
        """The engine and the synchronizer of the windows (``live``: with live prefill;
        ``early_start()``: whether to caption windows before their close, read each time;
        ``verifier_first``: the drafter in this process pauses while a window decodes)."""
        self.engine, self.sync, self.live = engine, sync, live
        self.early_start = early_start
        self.verifier_first = verifier_first

    def configure_from_params(self, p: Mapping[str, Any], engine: SpeculativeEngine, *,
                              previous_sync: Any = None, verifier_first: Any = None) -> bool:
        """As the verifier node configures from its parameters ``p`` (read again for
        early_start each time): the RGB stream's synchronizer (``previous_sync``: the one whose
        timeline it carries on), live prefill where the verifier can; returns whether it
        prefills live."""
        from crossspec_ros.models.live_prefill import LivePrefill
        from crossspec_ros.sync.synchronizer import sync_from_params

        verifier = engine.verifier
        live_prefill = bool(p["live_prefill"]) and can_prefill_live(verifier,
                                                                    p["frames_per_window"])
        live = LivePrefillScheduler(lambda: LivePrefill(verifier)) if live_prefill else None
        sync = sync_from_params(p, streams=("rgb",), announce_frames=live_prefill,
                                previous=previous_sync)
        self.configure(engine, sync, live, lambda: p["early_start"], verifier_first)
        if verifier_first is not None:  # its turn's bound (speculative/verifier_first.py)
            verifier_first.max_pause_s = p["yield_to_verifier_ms"] / 1e3
        return live_prefill

    def start(self, max_queued: int) -> None:
        self.queue = WindowQueue(max_queued)
        self.running = True

    def reconfigure(self, config: Any) -> None:
        """A live parameter change: the engine takes it from the next window on."""
        with self.lock:
            self._next_config = config

    # ------------------------------------------------------------ publishing
    def publish(self, captions: list[WindowCaption]) -> None:
        """Hand ``captions`` on in order; callers hold ``self.lock``."""
        for caption in captions:
            if caption.finished:
                self.channels.pop(caption.key, None)
            if caption.status is CaptionStatus.FINAL:
                self.agreement.add(caption.first_complete_draft, caption.confirmed_text)
        if captions:
            self.on_captions(captions)

    # ------------------------------------------------------------ inputs (executor)
    def add_frame(self, frame: StampedFrame) -> None:
        closed = self.sync.add_frame(frame)
        if self.live is not None:
            selected = self.sync.take_frame_selections()
            if selected:  # the worker encodes and prefills them while the window is open
                self.live.add(selected)
                self.wake_worker()
        self.enqueue(closed)

    def enqueue(self, windows: Iterable[Any]) -> None:
        now = self.clock.now()
        for window in windows:
            dropped = self.queue.put(window, now)
            self.wake_worker()
            if dropped is not None:
                self.warn(f"verifier busy: dropped window {dropped.id} ({self.queue.dropped} "
                          "so far); its draft is published as UNVERIFIED")
                with self.lock:
                    self.publish(self.book.on_verifier_gave_up(
                        dropped.key, dropped.t0, dropped.t1, self.clock.now(),
                        UnverifiedReason.VERIFIER_BUSY))

    def on_draft(self, key: WindowKey, t0: int, t1: int, *, text: str, first_token_ms: float,
                 done: bool, cut_short: bool, tokens: list[int], revision: int,
                 window_state: Any = None) -> None:
        """A draft of window ``key`` (``window_state``: the drafter's, for a draft head)."""
        with self.lock:
            now = self.clock.now()
            captions = self.book.on_draft(key, t0, t1, text, first_token_ms, done, now,
                                          cut_short=cut_short)
            if not self.running:  # stopped: the draft is the caption (UNVERIFIED once final)
                captions += self.book.on_verifier_gave_up(key, t0, t1, now,
                                                          UnverifiedReason.VERIFIER_STOPPED)
                self.publish(captions)
                return
            self.publish(captions)
            if not captions or captions[-1].finished:
                return  # late, or finished as UNVERIFIED: no verifier will read it
            channel = self.channels.setdefault(key, DraftChannel())
        if window_state is not None and len(window_state) and self.engine is not None \
                and self.engine.head is not None:
            channel.set_window_state(torch.tensor(window_state, dtype=torch.float32))
        channel.set_draft(tokens, revision, done)

    def tick(self) -> None:
        """The clock: windows closed by time, and the book's patience."""
        if not self.running:  # windows given up at the stop wait for their drafts
            with self.lock:
                self.publish(self.book.expire(self.clock.now(), set(), None))
            return
        self.enqueue(self.sync.poll(self.clock.now_ns()))
        waiting = {(self.sync.epoch, wid) for wid in self.sync.pending_ids()}
        waiting |= set(self.queue.keys())
        closed = self.sync.closed_before
        with self.lock:
            self.publish(self.book.expire(
                self.clock.now(), waiting, None if closed is None else (self.sync.epoch, closed)))

    # ------------------------------------------------------------ the worker
    def step(self) -> float:
        """One unit of the worker's work: the oldest closed window, or (none waiting) the
        queued frames' live prefill and an early start. Returns how long the worker may wait
        for new work before the next step (0: step again at once)."""
        item = self.queue.get()
        if item is None:
            if self.live is not None:
                with self._due_by(self.clock.now() + self._open_due_s):
                    self.live.prefill_queued()
                    if self.early_start():
                        self._start_early()
            return UNTIL_WOKEN
        with self._due_by(item[1] + (self.due.budget_s if self.due is not None else 0.0)):
            self._verify(*item)
        return 0.0

    @property
    def _open_due_s(self) -> float:
        return self.due.open_s if self.due is not None else 0.0

    def _due_by(self, deadline: float) -> AbstractContextManager:
        """The device calls inside are due at ``deadline`` (when streams share a device)."""
        return due_by(deadline) if self.due is not None else nullcontext()

    def _verify(self, window: Any, t_close: float) -> None:
        """Caption the closed ``window`` (closed at ``t_close``), or publish its held one."""
        self._take_config()
        key = window.key
        held = self.held.claim(window)
        if held is not None:
            self._release(held, window, t_close)
            return
        if self._past_shedding(t_close):
            self._shed(window)
            return
        with self.lock:
            started = self.book.on_verifier_start(key, window.t0, window.t1, self.clock.now())
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
            with self.lock:
                self.channels.pop(key, None)
                if not self.book.is_finished(key):  # the engine failed mid-window
                    self.publish(self.book.on_verifier_gave_up(
                        key, window.t0, window.t1, self.clock.now(),
                        UnverifiedReason.VERIFIER_FAILED))
        self._finish(window, result)

    def _past_shedding(self, t_close: float) -> bool:
        """Several streams on one device, overloaded: the window closed at ``t_close`` is
        already ``shed_s`` past its due time (``StreamDue``)."""
        due = self.due
        return due is not None and due.shed_s > 0 and \
            self.clock.now() > t_close + due.budget_s + due.shed_s

    def _shed(self, window: Any) -> None:
        """Give the late ``window`` up unverified (its draft is its caption), so that the
        device serves windows that can still be in time rather than every window late."""
        if self.live is not None:
            self.live.let_go(window.key)
        self.counters["windows_shed"] += 1
        self.warn(f"verifier behind: window {window.id} shed, past its due time "
                  f"({self.counters['windows_shed']} so far); its draft is published as "
                  "UNVERIFIED")
        with self.lock:
            self.publish(self.book.on_verifier_gave_up(
                window.key, window.t0, window.t1, self.clock.now(),
                UnverifiedReason.VERIFIER_BUSY))

    def _take_config(self) -> None:
        with self.lock:
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
        with self.lock:
            if self.book.is_finished(key):
                return
            channel = self.channels.setdefault(key, DraftChannel())
        self._take_config()
        held = HeldCaption(window)
        try:
            held.done(self._run_engine(window, channel, live, self.clock.now(), held.keep))
        finally:
            with self.lock:
                self.channels.pop(key, None)
        self.held.hold(held)

    def _release(self, held: HeldCaption, window: Any, t_close: float) -> None:
        """Publish the held caption of the closed ``window`` (it read the same frames)."""
        key, now = window.key, self.clock.now()
        with self.lock:
            if not self.book.on_verifier_start(key, window.t0, window.t1, now):
                return  # its caption already finished without RGB: one caption per window
        stats = held.result.stats
        for event in held.release(t_close, now):
            self._on_engine(window, event, stats)
        self._finish(window, held.result)

    def _on_engine(self, window: Any, event: EngineEvent, stats: Any = None) -> None:
        if event.kind is not EventKind.CONFIRMED:
            return
        stats = stats if stats is not None else self.engine.current_stats
        if event.done and self.verifier_first is not None:  # before the FINAL leaves
            self.verifier_first.finished(window.key, event.t_ms)
        with self.lock:
            self.publish(self.book.on_confirmed(
                window.key, event.text, event.done, event.t_ms,
                stats.acceptance if stats is not None else NAN, self.clock.now(),
                acceptance_rule=stats.acceptance_rule if stats is not None else ""))
        self.on_confirmed(window, event, stats)

    def _finish(self, window: Any, result: WindowResult) -> None:
        self.counters["windows_verified"] += 1
        s = result.stats
        self.counters["live_redone"] += s.live_prefill_frames < 0
        self.last_stats = {"confirmed_done_ms": s.confirmed_done_ms,
                           "verifier_prefill_ms": s.verifier_prefill_ms,
                           "acceptance": s.acceptance, "rounds": s.rounds}
        if self.on_result is not None:
            self.on_result(window, result)

    # ------------------------------------------------------------ stopping
    def stop_taking(self) -> None:
        """Take no more windows: drafts on their way stop, the worker is woken."""
        self.running = False
        self.queue.close()
        self.wake_worker()
        with self.lock:
            for channel in self.channels.values():
                channel.stop()

    def end_open_windows(self, publish: bool, wait_for_drafts: bool = True) -> None:
        """Once the worker has stopped: the windows queued or still open will never be
        verified. Given up now (their frames are let go, and frames that come for them after
        a restart are late), they end UNVERIFIED with their drafts, which ``on_draft`` relays
        while stopped (``wait_for_drafts``; else each now, with the draft it has); with
        ``publish`` False (the process is ending), nothing more is published."""
        if self.live is not None:
            self.live.clear()  # their KV caches go with them
        self.held.clear()
        with self.lock:
            now, stopped = self.clock.now(), []
            epoch = self.sync.epoch
            left = [(w.key, w.t0, w.t1) for w in self.queue.drain()]
            left += [((epoch, wid), t0, t1) for wid, t0, t1 in self.sync.abandon_pending()]
            for key, t0, t1 in left:
                stopped += self.book.on_verifier_gave_up(key, t0, t1, now,
                                                         UnverifiedReason.VERIFIER_STOPPED)
            stopped += self.book.stop(now, wait_for_drafts=publish and wait_for_drafts)
            if publish:
                self.publish(stopped)

    @property
    def diagnostics(self) -> dict[str, Any]:
        """The loop's counters for a node's diagnostics."""
        return {"queue_depth": len(self.queue), "dropped_windows": self.queue.dropped,
                **self.counters, **self.book.counters,
                **(self.live.counters if self.live is not None else {}),
                **self.held.counters,
                **{k: round(v, 3) for k, v in self.last_stats.items()},
                **self.agreement.summary()}


def can_prefill_live(verifier: Any, frames_per_window: int) -> bool:
    """Live prefill needs a verifier that prefills frame by frame, one frame per slot."""
    from crossspec_ros.models.video_llava import VideoLlavaVerifier

    return isinstance(verifier, VideoLlavaVerifier) and verifier.num_frames == frames_per_window
