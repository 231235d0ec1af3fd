"""The live graph's own loops, replayed without ROS: what `crossspec bench engine --live`
measures.

The windows' messages (their frames, and their events cut into packets) are replayed at their
stamps into the product's loops, as the composed graph runs them: frames into a
``VerifierLoop`` (speculative/verifier_loop.py) configured from the verifier node's parameters
(its synchronizer announces frames, live prefill and early start as the parameters say), event
packets into a ``DraftLoop`` (speculative/draft_loop.py) configured from the draft node's;
each loop's steps run on a worker thread, as in the nodes, and every callback (a draft for the
verifier, the verifier's confirmations for the drafter's re-sync, the clock's tick every
0.1 s) runs on one executor thread, as rclpy's single-threaded executor runs them. So the
synchronizer, the live-prefill scheduler, early start and the drafter's pace are the
product's, not a model of them. A graph is a row of ``LIVE_GRAPHS``: parameters over the
nodes' defaults, and whether a drafter runs.

What a window reports is what the drive reports: the FINAL caption's confirmed_done_ms (after
the verifier's synchronizer closed the window; early start can make it ~0), the draft's first
token after the drafter's close, and whether the draft was complete before the FINAL caption.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from crossspec_ros.comparison import COMPARED, ComparedGraph
from crossspec_ros.composition import build_engine, share_turns, verifier_loop
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.params import DRAFT_NODE_PARAMS, VERIFIER_NODE_PARAMS, validate
from crossspec_ros.speculative.draft_loop import DraftLoop
from crossspec_ros.speculative.engine import WindowResult
from crossspec_ros.speculative.events import EngineEvent
from crossspec_ros.speculative.loop_clock import MONOTONIC
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.speculative.verifier_first import VerifierFirst
from crossspec_ros.speculative.verifier_loop import VerifierLoop
from crossspec_ros.speculative.worker import Worker
from crossspec_ros.stamps import ns_to_seconds
from crossspec_ros.sync.captions import CaptionStatus, WindowCaption, WindowKey
from crossspec_ros.sync.synchronizer import sync_from_params
from crossspec_ros.sync.window import StampedFrame

PACKET_NS = 20_000_000  # the replayed event packets: 50 a second, as a camera driver sends
# the closing messages' distance past the last window: beyond the default reorder slack
# (20 ms), so the synchronizers close it by data as they close every other window
CLOSING_NS = 100_000_000
TICK_S = 0.1  # the nodes' timers
SETTLE_S = 30.0  # after the last message: the longest wait for the last captions


# the compared graphs (crossspec_ros/comparison.py), the same parameters under the bench's
# names (its engine's own modes already hold "crossspec"); a graph of one-row steps runs on the
# bench's one-row runtime (bench/engine.py live_graphs), as drive's nodes prepare theirs
BENCH_NAMES = {"alone": "after_close_alone", "crossspec": "crossspec_live"}
LIVE_GRAPHS = {BENCH_NAMES.get(g.name, g.name): replace(g, name=BENCH_NAMES.get(g.name, g.name))
               for g in COMPARED}


@dataclass
class ReplayedWindow:
    """One window's outcome in one replay."""

    key: WindowKey
    frame_stamps: tuple[int, ...] = ()
    tokens: list[int] | None = None  # the engine's caption (None: never verified)
    stats: WindowStats | None = None
    status: str = ""  # FINAL or UNVERIFIED
    confirmed_done_ms: float = math.nan
    draft_first_token_ms: float = math.nan
    draft_complete_ms: float = math.nan  # after the drafter's real close (< 0: before it)
    draft_first: bool = False  # the draft was complete before the FINAL caption
    window: Any = field(default=None, repr=False)  # the verifier's, for references


def replay_messages(windows: Sequence[Any], packet_ns: int = PACKET_NS
                    ) -> list[tuple[int, str, Any]]:
    """(stamp ns, "rgb" | "events", payload) in stamp order: each distinct frame of the
    windows once, their events cut into ``packet_ns`` packets (stamped with their last
    event), and one frame and one packet ``CLOSING_NS`` past the last window, as the rest of
    a recording brings them, so that the synchronizers close the last window as they close
    every other (by data, not by their idle timeout)."""
    out: list[tuple[int, str, Any]] = []
    seen: set[int] = set()
    for w in windows:
        for frame in w.frames:
            if frame.stamp_ns not in seen:
                seen.add(frame.stamp_ns)
                out.append((frame.stamp_ns, "rgb", frame))
        for start in range(w.t0, w.t1, packet_ns):
            packet = w.events.between(start, start + packet_ns)
            if len(packet):
                out.append((int(packet.t_last), "events", packet))
    out.sort(key=lambda item: item[0])
    last = windows[-1]
    after = last.t1 + CLOSING_NS
    frame = last.frames[-1]
    out.append((after, "rgb", StampedFrame(after, frame.image, frame.encoding, frame.frame_id)))
    if len(last.events):
        e = last.events
        out.append((after, "events", EventBatch(np.array([after]), e.x[-1:].copy(),
                                                 e.y[-1:].copy(), e.p[-1:].copy(),
                                                 e.width, e.height)))
    return out


def window_keys(windows: Sequence[Any], window_len_ns: int) -> dict[WindowKey, Any]:
    """The key each of ``windows`` gets from the loops' synchronizers (ids from time), and
    the window; windows must lie on the synchronizers' grid."""
    keys = {}
    for w in windows:
        if w.t0 % window_len_ns or w.t1 - w.t0 != window_len_ns:
            raise ValueError(f"window [{w.t0}, {w.t1}) is not on the live graph's "
                             f"{ns_to_seconds(window_len_ns):g} s grid")
        keys[(0, w.t0 // window_len_ns)] = w
    return keys


def record_captions(windows: dict[WindowKey, ReplayedWindow],
                    captions: list[WindowCaption]) -> None:
    """What a verifier loop's finished captions say, into ``windows`` (the loop's lock is
    held: record only)."""
    for caption in captions:
        if not caption.finished:
            continue
        row = windows.setdefault(caption.key, ReplayedWindow(caption.key))
        row.status = caption.status.name
        if caption.status is CaptionStatus.FINAL:
            row.confirmed_done_ms = caption.confirmed_done_ms
            row.draft_first = bool(caption.first_complete_draft)
        row.draft_first_token_ms = caption.draft_first_token_ms


def record_result(windows: dict[WindowKey, ReplayedWindow], window: Any,
                  result: WindowResult) -> None:
    """A verified window's caption and statistics, into ``windows``."""
    row = windows.setdefault(window.key, ReplayedWindow(window.key))
    row.tokens, row.stats, row.window = list(result.tokens), result.stats, window
    row.frame_stamps = tuple(f.stamp_ns for f in window.frames)


class ReplayExecutor:
    """The replay's executor thread, as rclpy's single-threaded executor runs a node's
    callbacks: what the loops post (``inbox``), and the nodes' timers (``ticks``, every
    TICK_S)."""

    def __init__(self, ticks: Sequence[Callable[[], None]]) -> None:
        self.inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.ticks = ticks
        self._next_tick = 0.0

    def run_until(self, until: float) -> None:
        """Run the callbacks and ticks until ``until`` (monotonic s)."""
        while True:
            now = time.monotonic()
            if now >= self._next_tick:
                self._next_tick = now + TICK_S
                for tick in self.ticks:
                    tick()
            wait = min(until, self._next_tick) - now
            if wait <= 0 and now >= until:
                return
            try:
                callback = self.inbox.get(timeout=max(wait, 0.0))
            except queue.Empty:
                continue
            callback()


class LiveReplay:
    """One replay of ``messages`` through ``graph``'s loops (``verifier``/``drafter``: the
    loaded models; the drafter is also the engine's vocabulary bridge, as in the composed
    graph). ``run()`` returns every window the verifier's book finished, by key."""

    def __init__(self, graph: ComparedGraph, verifier: Any, drafter: Any, *, max_new_tokens: int,
                 max_proposal: int, corpus: Sequence[Sequence[int]] = (), rate: float = 1.0,
                 log: Callable[[str], None] = print) -> None:
        self.graph, self.rate, self.log = graph, rate, log
        base = {"max_new_tokens": max_new_tokens, "max_proposal": max_proposal}
        where = f"live graph {graph.name}"
        self.params = validate({**base, **graph.verifier_params}, VERIFIER_NODE_PARAMS, where)
        self.draft_params = validate({"max_new_tokens": max_new_tokens}, DRAFT_NODE_PARAMS,
                                     where)
        with_drafter = graph.drafter and drafter is not None
        # composed as the nodes compose it; the bench prepared its runtimes itself
        self.engine = build_engine(self.params, verifier, drafter if with_drafter else None,
                                   where=where, runtimes=(), corpus=corpus)
        self.drafter = drafter if with_drafter else None
        self.executor = ReplayExecutor([])
        self.inbox = self.executor.inbox
        self.windows: dict[WindowKey, ReplayedWindow] = {}
        self.errors: list[str] = []
        self.draft_loop: DraftLoop | None = None  # the last run's (its counters)

    # ------------------------------------------------------------ what the loops hand out
    def _window(self, key: WindowKey) -> ReplayedWindow:
        return self.windows.setdefault(key, ReplayedWindow(key))

    def _on_captions(self, captions: list[WindowCaption]) -> None:
        record_captions(self.windows, captions)

    def _on_result(self, window: Any, result: WindowResult) -> None:
        record_result(self.windows, window, result)

    def _on_error(self, error: str) -> None:
        self.errors.append(error)
        self.log(f"{self.graph.name}: {error}")

    # ------------------------------------------------------------ the replay
    def run(self, messages: Sequence[tuple[int, str, Any]],
            expected: set[WindowKey]) -> dict[WindowKey, ReplayedWindow]:
        """Replay ``messages`` at their stamps (``rate`` times real time) and wait until
        the verifier's book finished every window of ``expected`` (at most SETTLE_S after the
        last message)."""
        p = self.params
        verifier_first = VerifierFirst(0.0) if self.drafter is not None else None
        vloop = verifier_loop(p, on_captions=self._on_captions,
                              on_confirmed=lambda w, e, _s: self._post_confirmed(dloop, w, e),
                              clock=MONOTONIC, lock=threading.Lock(), warn=self.log,
                              on_result=self._on_result)
        vloop.configure_from_params(p, self.engine, verifier_first=verifier_first)
        vloop.start(p["max_queued_windows"])
        dloop = None
        workers = [Worker.serving(f"{self.graph.name}-verifier", vloop, self._on_error)]
        if self.drafter is not None:
            dloop = DraftLoop(self.draft_params, on_draft=lambda *a: self._post_draft(vloop, *a),
                              clock=MONOTONIC, lock=threading.Lock(),
                              warn=self.log, error=self._on_error)
            dloop.configure(self.drafter, sync_from_params(self.draft_params, ("events",)))
            dloop.start()
            self.draft_loop = dloop
            share_turns(verifier_first, dloop)
            workers.append(Worker.serving(f"{self.graph.name}-draft", dloop, self._on_error))
        self.executor.ticks = [vloop.tick] + ([dloop.tick] if dloop is not None else [])
        for worker in workers:
            worker.start()
        try:
            self._feed(messages, vloop, dloop)
            deadline = time.monotonic() + SETTLE_S
            while not self._finished(vloop, expected) and time.monotonic() < deadline:
                self.executor.run_until(time.monotonic() + TICK_S)
        finally:
            vloop.stop_taking()
            if dloop is not None:
                dloop.stop_taking()
            for worker in workers:
                worker.stop()
        for timing in dloop.timings if dloop is not None else ():
            self._window(timing.key).draft_complete_ms = timing.complete_ms
        return self.windows

    @property
    def draft_counters(self) -> dict[str, int]:
        """The draft loop's counters of the last run (none without a drafter)."""
        d = self.draft_loop
        if d is None:
            return {}
        return {"windows_drafted": d.windows_drafted,
                "windows_skipped_final": d.windows_skipped_final,
                "windows_stepped_aside": d.windows_stepped_aside,
                "drafts_withheld": d.drafts_withheld,
                "windows_cut_short": d.windows_cut_short}

    def _feed(self, messages: Sequence[tuple[int, str, Any]], vloop: VerifierLoop,
              dloop: DraftLoop | None) -> None:
        t_first = messages[0][0]
        start = time.monotonic()
        for stamp, kind, payload in messages:
            self.executor.run_until(start + ns_to_seconds(stamp - t_first) / self.rate)
            if kind == "rgb":
                vloop.add_frame(payload)
            elif dloop is not None:
                dloop.add_events(payload)

    def _post_draft(self, vloop: VerifierLoop, window: Any, event: EngineEvent,
                    stats: WindowStats, window_state: Any, cut_short: bool) -> None:
        """The draft loop's draft, delivered to the verifier loop by the executor (as the
        draft topic delivers it)."""
        state = None if window_state is None else window_state.detach().float().cpu().numpy()
        first_ms = stats.draft_first_token_ms
        self.inbox.put(lambda: vloop.on_draft(
            window.key, window.t0, window.t1, text=event.text, first_token_ms=first_ms,
            done=event.done, cut_short=cut_short, tokens=list(event.tokens),
            revision=event.revision, window_state=state))

    def _post_confirmed(self, dloop: DraftLoop | None, window: Any, event: EngineEvent
                        ) -> None:
        if dloop is not None:  # the drafter re-syncs to the verifier's confirmed tokens
            self.inbox.put(lambda: dloop.on_confirmed(window.key, event.base, list(event.tokens),
                                                      event.text, event.done, event.t_ms))

    def _finished(self, vloop: VerifierLoop, expected: set[WindowKey]) -> bool:
        """Every expected window's caption finished, and a FINAL one's result is in (it
        comes after its caption)."""
        return all(vloop.book.is_finished(key) and (
            self._window(key).status != "FINAL" or self._window(key).tokens is not None)
            for key in expected)
