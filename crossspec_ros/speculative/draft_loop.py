"""A drafter's window decisions, pure: what the draft node runs, without ROS.

Event batches, the verifier's confirmations and the clock come in; drafts go out through the
callback its owner gives, the moment each token exists:

    add_events(packet) --> [held while the verifier in this process has its turn]
                       --> the synchronizer --closed windows--> [queue] --step()--> the drafter
                           \\--a window's end within the lead: its events so far -->/
    on_confirmed(...)  --> the window being drafted re-syncs to the confirmed prefix; a window
                           the verifier finished is not drafted (its caption is FINAL)
    tick()             --> windows closed by the clock; a finished draft nobody confirms is
                           let go

When a window is drafted is ``DraftSchedule``'s decision (speculative/draft_schedule.py): a
lead before its close, from the events seen so far, so that the draft is complete at the close
(the robot's first caption, and what the verifier's early decoding reads); at the close, the
windows not drafted early, unless the verifier finished them (or, ahead, is about to).

A newer window always wins: the drafter leaves the old one as soon as the next window's draft
is due, and says so (a draft ``cut_short``), as it does for a window it drops unstarted, so the
verifier's captions never pass a fragment off as the whole draft. ``step()`` is the worker's
unit of work; everything else comes from the executor. The loop owns no thread and never
waits: its owner gives the clock it decides by and the lock its two callers share, runs
``step`` on a worker (speculative/worker.py) and wakes it through ``wake_worker``; a window
waiting at its close for the verifier is parked, and ``step`` says how long the worker may
sleep. The draft node (``nodes/draft_node.py``) converts messages and publishes what this hands
it; the bench's replay (``bench/live_replay.py``) hands the drafts to a ``VerifierLoop``
directly.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from crossspec_ros.speculative.draft_schedule import (
    Action,
    DataClock,
    DraftSchedule,
)
from crossspec_ros.speculative.drafting import DraftChannel, run_drafter
from crossspec_ros.speculative.events import EngineEvent, EventKind
from crossspec_ros.speculative.loop_clock import LoopClock
from crossspec_ros.speculative.proposers import DraftStream
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.speculative.vocab import confirmed_in_drafter_ids
from crossspec_ros.speculative.worker import UNTIL_WOKEN
from crossspec_ros.stamps import seconds_to_ns
from crossspec_ros.summaries import median, rounded
from crossspec_ros.sync.captions import DraftCursor, WindowKey
from crossspec_ros.sync.window import window_bounds
from crossspec_ros.sync.window_queue import WindowQueue

LINGER_S = 2.0  # how long a finished draft waits for confirmations to re-sync to
FINISHED_KEPT = 256  # windows remembered: the verifier's finished ones, the drafts' timings

# on_draft(window, event, stats, window_state, cut_short): publish one draft of ``window``
DraftOut = Callable[[Any, EngineEvent, WindowStats, Any, bool], None]


@dataclass
class DraftTiming:
    """One window's draft on the local clock: when it started and its first and last token,
    what it read, and the window's close (estimated from the data clock until the window
    closes here, then the real one). ``ms(at)``: ms after the close (< 0: before it)."""

    key: WindowKey
    early: bool              # begun before the close, from the events so far
    started_at: float
    close_at: float
    read_until_ns: int       # the last event stamp the draft read
    events_read: int
    closed: bool = False     # close_at is the real close
    over: bool = False       # its drafting ended (or it was dropped unstarted)
    skipped: bool = False    # the schedule left it out (the drafter rested)
    events_total: int | None = None  # the window's events, once it closed
    first_token_at: float = math.nan
    done_at: float = math.nan  # its last token (NaN: not complete, e.g. cut short)

    def ms(self, at: float) -> float:
        return (at - self.close_at) * 1e3

    @property
    def complete_ms(self) -> float:
        """The draft's last token after the close (NaN: never complete)."""
        return self.ms(self.done_at)

    @property
    def first_token_ms(self) -> float:
        return self.ms(self.first_token_at)

    @property
    def events_unread(self) -> int:
        """Events of the window that came after the draft's start (0 until it closed)."""
        return max(0, (self.events_total or 0) - self.events_read)


class DraftLoop:
    """See the module docstring. ``params``: read at each use (max_new_tokens, draft_head;
    a node's live parameter dict); ``on_draft``: publish a draft (the worker's thread);
    ``warn``/``error``: log lines; ``clock``: the time it decides by; ``lock``: shared by the
    executor, the worker and the verifier's turn (a real lock; ``nullcontext()`` for
    one thread)."""

    def __init__(self, params: Mapping[str, Any], *, on_draft: DraftOut, clock: LoopClock,
                 lock: AbstractContextManager,
                 warn: Callable[[str], None] = lambda _t: None,
                 error: Callable[[str], None] = lambda _t: None) -> None:
        self.params, self.on_draft, self.warn, self.error = params, on_draft, warn, error
        self.clock, self.lock = clock, lock
        self.wake_worker: Callable[[], None] = lambda: None  # new work: the owner's worker
        self.drafter: Any = None
        self.process: Any = None  # a DrafterProcess, when the drafter runs in one
        self.sync: Any = None  # the events synchronizer
        self.decode: Callable[[Any], Any] = lambda batch: batch  # a packet -> an EventBatch
        self.cursor = DraftCursor()  # the window being drafted and its confirmed prefix
        self.queue = WindowQueue(params["max_queued_windows"])
        self.schedule = DraftSchedule(seconds_to_ns(params["window_length_s"]),
                                      lead_ms=params["draft_lead_ms"],
                                      step_aside_ms=params["step_aside_ms"])
        self.data_clock = DataClock()
        self.held = False  # paused for the verifier (guarded by the lock)
        # packets that came while held, in order (bounded: at most the pause's length of the
        # camera's packets; the pause is yield_to_verifier_ms at most)
        self.held_packets: deque[Any] = deque()
        self.windows_drafted = 0
        self.windows_cut_short = 0  # left unfinished for a newer window, or dropped unstarted
        # the verifier finished the window before its first draft token: nothing published
        self.windows_confirmed_before_draft = 0
        self.last_first_token_ms = math.nan
        # windows whose caption the verifier finished (its last confirmation said done): a
        # draft of one would only come after its FINAL caption, so none is drafted
        self.verifier_finished: OrderedDict[WindowKey, None] = OrderedDict()
        # a window queued at its close that waits for the verifier to finish it (the window,
        # its timing, the local time the wait ends): the next steps look at it first
        self.parked: tuple[Any, DraftTiming, float] | None = None
        # the drafts begun or queued, by window (bounded), and those whose timing is whole
        # (complete or left, and closed): what the node's summary reads
        self.drafts: OrderedDict[WindowKey, DraftTiming] = OrderedDict()
        self.timings: deque[DraftTiming] = deque(maxlen=FINISHED_KEPT)
        self.drafts_withheld = 0  # drafted after the verifier finished the window: not sent
        # the last windows that closed after their draft was queued early: a draft not begun
        # by then reads the whole window
        self._closed_windows: OrderedDict[WindowKey, Any] = OrderedDict()

    windows_skipped_final = property(lambda self: self.schedule.counts["verifier_finished"])
    windows_stepped_aside = property(lambda self: self.schedule.counts["stepped_aside"])

    def configure(self, drafter: Any, sync: Any, *, process: Any = None,
                  decode: Callable[[Any], Any] | None = None) -> None:
        """The drafter (``process``: a DrafterProcess running it instead; this one stays for
        the tokenizer), the synchronizer of the windows and how a packet becomes a batch."""
        self.drafter, self.sync, self.process = drafter, sync, process
        if decode is not None:
            self.decode = decode

    def start(self) -> None:
        self.queue = WindowQueue(self.params["max_queued_windows"])

    # ------------------------------------------------------------ inputs (executor)
    def add_events(self, packet: Any) -> None:
        self.held_packets.append(packet)
        if not self.held:  # held: decoded once the verifier's turn ends (its compute)
            self.decode_held()

    def decode_held(self) -> None:
        """Decode the packets that came while the verifier had its turn, then the new one
        (the executor's thread: the synchronizer is not thread-safe); then start the open
        window whose draft is due."""
        decoded = False
        while self.held_packets:
            batch = self.decode(self.held_packets.popleft())
            if len(batch):
                decoded = True
                self.data_clock.observe(int(batch.t_last), self.clock.now())
                self.enqueue(self.sync.add_events(batch))
        if decoded:
            self._start_early(self.clock.now())

    def tick(self) -> None:
        if not self.held:
            self.decode_held()
        self.enqueue(self.sync.poll(self.clock.now_ns()))
        lingering = self.cursor.lingering(self.clock.now(), LINGER_S)
        if lingering is not None:  # a finished draft nobody confirms any more is let go
            lingering.stop()

    def _start_early(self, now: float) -> None:
        """Queue the open window whose draft is due (its end within the lead), from the
        events it has so far."""
        if not self.schedule.early:
            return
        data_now = self.data_clock.now_ns(now)
        for wid in self.sync.pending_ids():
            key = (self.sync.epoch, wid)
            if key in self.drafts:
                continue
            # decided on the window's end first: its snapshot is built only once it is due
            # (this runs for every event packet)
            t1 = window_bounds(wid, self.sync.window_len_ns)[1]
            if not self.schedule.due(t1, data_now, self.data_clock.rate):
                return  # a later window's end is later still
            window = self.sync.open_window(wid)
            if window is None or not window.has_events:
                continue
            decision = self.schedule.before_close(wid, window.t1, data_now,
                                                  self.data_clock.rate)
            close_at = self.data_clock.at(window.t1 + self.sync.reorder_slack_ns)
            timing = DraftTiming(key, True, math.nan, close_at, int(window.events.t_last),
                                 len(window.events))
            if decision.action is Action.SKIP:  # resting: not drafted, at its close neither
                timing.skipped = timing.over = True
                with self.lock:
                    self.drafts[key] = timing
                continue
            self._queue(window, timing)

    def enqueue(self, windows: Iterable[Any]) -> None:
        """Windows that closed: each drafted early is only timed; the others are queued (the
        worker asks the schedule whether to draft them when it takes them)."""
        now = self.clock.now()
        for window in windows:
            early = self._closed(window, now)
            if not window.has_events or early:
                continue  # nothing to draft (or drafted already): the current draft goes on
            self._queue(window, DraftTiming(window.key, False, math.nan, now,
                                            int(window.events.t_last), len(window.events),
                                            closed=True, events_total=len(window.events)))

    def _closed(self, window: Any, now: float) -> bool:
        """``window`` closed here now: its early draft's timing learns the real close (and
        its whole window, for a draft not begun yet). True when it was drafted early."""
        with self.lock:
            timing = self.drafts.get(window.key)
            if timing is None or not timing.early:
                return False
            if timing.skipped:  # decided before the close: not drafted at it either
                self.drafts.pop(window.key)
                return True
            timing.close_at, timing.closed = now, True
            timing.events_total = len(window.events)
            self._settled(timing)
            self._closed_windows[window.key] = window
            while len(self._closed_windows) > 4:
                self._closed_windows.popitem(last=False)
        self.schedule.at_close(True, False)  # counted: not drafted again
        return True

    def _queue(self, window: Any, timing: DraftTiming) -> None:
        """Queue ``window``'s draft; the draft in progress (an older window's) stops."""
        # the draft in progress now: once a window is queued, the worker may take it and
        # begin it before the stop below, and that newer draft must go on
        in_progress = self.cursor.current()
        with self.lock:
            self.drafts[window.key] = timing
            while len(self.drafts) > FINISHED_KEPT:
                self.drafts.popitem(last=False)
        dropped = self.queue.put(window, timing)
        self.wake_worker()
        if dropped is not None:
            self.warn(f"drafter busy: dropped window {dropped.id} "
                      f"({self.queue.dropped} so far)")
            self._cut_short(dropped, None)
            with self.lock:  # never drafted: its timing is over
                left = self.drafts.get(dropped.key)
                if left is not None:
                    left.over = True
                    self._settled(left)
        if in_progress is not None:
            in_progress.stop()  # a newer window is due: move on to it

    def on_confirmed(self, key: WindowKey, base_index: int, tokens: list[int], text: str,
                     done: bool, done_ms: float = math.nan) -> None:
        """One round of the verifier's confirmed tokens of window ``key`` (``done_ms``, with
        the last: how long after the window's close the verifier finished it)."""
        if done:
            self.on_finished(key, done_ms)
            return
        channel, confirmed = self.cursor.confirmed(key, base_index, tokens, False)
        if channel is not None and confirmed is not None:  # the window being drafted
            channel.push_confirmed(confirmed_in_drafter_ids(self.drafter, confirmed, text))

    def on_finished(self, key: WindowKey, done_ms: float = math.nan) -> None:
        """The verifier finished window ``key``, ``done_ms`` after its close (its last
        confirmation; or, in one process with it, straight from its loop: ``VerifierFirst``).
        Heard twice, it counts once."""
        with self.lock:
            if key in self.verifier_finished:
                return
            self.verifier_finished[key] = None
            while len(self.verifier_finished) > FINISHED_KEPT:
                self.verifier_finished.popitem(last=False)
            self.schedule.verifier_done(done_ms)
        self.wake_worker()  # a window parked for this one is decided
        channel, _ = self.cursor.confirmed(key, 0, [], True)  # done: the window's handle
        if channel is not None:
            channel.stop()  # the verifier is done with the window being drafted

    # ------------------------------------------------------------ the verifier's turn
    def hold(self) -> None:
        """The verifier in this process works on a closed window: pause the drafter."""
        with self.lock:
            self.held = True
            channel = self.cursor.current()
            if channel is not None:
                channel.set_lookahead(0)

    def release_hold(self) -> None:
        with self.lock:
            self.held = False
            channel = self.cursor.current()
            if channel is not None:
                channel.set_lookahead(self.params["max_new_tokens"])

    # ------------------------------------------------------------ the worker
    def step(self) -> float:
        """One unit of the worker's work: decide on the window parked at its close, or draft
        the oldest window queued. Returns how long the worker may wait for new work before
        the next step (0: step again at once)."""
        if self.parked is not None:
            return self._step_parked(*self.parked)
        item = self.queue.get()
        if item is None:
            return UNTIL_WOKEN
        window, timing = item
        if timing.early:  # closed since it was queued: the whole window then
            with self.lock:
                window = self._closed_windows.pop(window.key, window)
            self._draft(window, timing)
            return 0.0
        decision = self.schedule.at_close(False, window.key in self.verifier_finished)
        if decision.action is Action.WAIT:  # the verifier is ahead: it may finish it first
            self.parked = (window, timing, timing.close_at + decision.wait_s)
            return 0.0
        self._draft_if(decision.action is Action.START, window, timing)
        return 0.0

    def _step_parked(self, window: Any, timing: DraftTiming, until: float) -> float:
        """The window waiting at its close for the verifier: drafted once the wait is over
        and the verifier did not finish it; let go when it did, or the loop stops."""
        finished = window.key in self.verifier_finished
        if not finished and not self.queue.closed and self.clock.now() < until:
            return until - self.clock.now()
        self.parked = None
        if self.queue.closed:
            self._draft_if(False, window, timing)
            return 0.0
        decision = self.schedule.after_wait(finished)
        self._draft_if(decision.action is Action.START, window, timing)
        return 0.0

    def _draft_if(self, start: bool, window: Any, timing: DraftTiming) -> None:
        if start:
            self._draft(window, timing)
            return
        with self.lock:  # not drafted: its timing is over
            timing.over = True
            self._settled(timing)

    def _draft(self, window: Any, timing: DraftTiming) -> None:
        """Draft ``window`` now, publishing each token as it comes, until its last token, a
        newer window, the verifier finishing it, or the stop."""
        timing.started_at = self.clock.now()
        timing.read_until_ns, timing.events_read = int(window.events.t_last), len(window.events)
        max_new = self.params["max_new_tokens"]
        stats = WindowStats(proposer_names=[DraftStream.name])
        last: list[EngineEvent] = []  # the latest draft published
        emit = DraftEmitter(self, window, timing, stats, last)
        with self.lock:  # a window started while the verifier works starts held
            lookahead = 0 if self.held else max_new
            if self.process is not None:
                channel = self.process.start(window, lookahead, max_new, on_draft=emit)
            else:
                channel = DraftChannel(lookahead=lookahead)
            emit.channel = channel
            self.cursor.begin(window.key, channel)
        if self.queue.closed:  # stopping after this window was taken (stop_taking closes
            channel.stop()     # the queue, then stops the current draft: one of them sees it)
        try:
            if self.process is not None:
                self.process.wait_idle()  # the draft arrives through emit; until stopped
            else:
                run_drafter(self.drafter, window, channel, emit, stats, max_new)
        finally:
            verifier_done = self.cursor.end(window.key)
        if not (last and last[0].done) and not verifier_done:
            self._cut_short(window, last[0] if last else None, stats)
        self.windows_confirmed_before_draft += verifier_done and not last
        self.windows_drafted += 1
        self.last_first_token_ms = stats.draft_first_token_ms
        # the drafter's own pace (its start to its last token), for the lead and stepping
        # aside; a draft stopped before its last token (a newer window, or the verifier
        # finished first) took at least this long
        ended = timing.done_at if not math.isnan(timing.done_at) else \
            math.nan if self.queue.closed else self.clock.now()
        self.schedule.drafted((ended - timing.started_at) * 1e3,
                              (timing.first_token_at - timing.started_at) * 1e3)
        with self.lock:
            timing.over = True
            self._settled(timing)

    def _settled(self, timing: DraftTiming) -> None:
        """Under the lock: a draft whose window closed and whose drafting is over (or
        never began) is whole: kept in ``timings`` (once)."""
        if timing.closed and timing.over and timing.key in self.drafts:
            self.drafts.pop(timing.key)
            self.timings.append(timing)

    def _publish(self, window: Any, event: EngineEvent, stats: WindowStats,
                 window_state: Any = None, timing: DraftTiming | None = None,
                 cut_short: bool = False) -> bool:
        """Hand the draft on (False: withheld, the verifier had finished the window)."""
        if window.key in self.verifier_finished:  # a token in flight when its FINAL came
            self.drafts_withheld += 1
            return False
        self.on_draft(window, event, stats, window_state, cut_short)
        if event.done:
            self.cursor.completed(window.key, self.clock.now())
        return True

    def _cut_short(self, window: Any, last: EngineEvent | None,
                   stats: WindowStats | None = None) -> None:
        """The drafter leaves ``window`` unfinished (``last``: its latest draft, None when
        it never drafted it): no more tokens will come for it."""
        self.windows_cut_short += 1
        notice = EngineEvent(EventKind.DRAFT, int(window.id), math.nan,
                             tokens=list(last.tokens) if last else [],
                             revision=last.revision if last else 0, done=False,
                             text=last.text if last else "",
                             log_probs=list(last.log_probs) if last else [])
        self._publish(window, notice, stats or WindowStats(), cut_short=True)

    # ------------------------------------------------------------ stopping
    def stop_taking(self) -> None:
        """Take no more windows, and stop the draft in progress."""
        self.queue.close()  # before reading the cursor: see _draft
        self.wake_worker()  # a window parked at its close waits no longer
        current = self.cursor.current()
        if current is not None:
            current.stop()

    def draft_summary(self) -> dict[str, Any]:
        """The drafts whose windows closed, as a summary reads them (exact: on the local
        clock, against each window's real close): how many, how many complete before their
        close, the median of their completion after the close, of the lead they began
        with, and the events they did not read."""
        with self.lock:
            timings = list(self.timings)
        complete = [t.complete_ms for t in timings if math.isfinite(t.complete_ms)]
        early = [t for t in timings if t.early]
        return {"drafts": len(timings), "early": len(early),
                "complete": len(complete),
                "complete_before_close": sum(ms <= 0 for ms in complete),
                "complete_ms_median": _median(complete),
                "first_token_ms_median": _median(
                    t.first_token_ms for t in timings if math.isfinite(t.first_token_ms)),
                "lead_ms_median": _median(
                    (t.close_at - t.started_at) * 1e3 for t in early
                    if math.isfinite(t.started_at)),
                "events_unread": sum(t.events_unread for t in early),
                "events_total": sum(t.events_total or 0 for t in timings)}

    @property
    def diagnostics(self) -> dict[str, Any]:
        """The loop's counters for a node's diagnostics."""
        s = self.sync.stats
        summary = self.draft_summary()
        return {"queue_depth": len(self.queue), "dropped_windows": self.queue.dropped,
                "sync_dropped_windows": s.dropped_windows,
                "windows_drafted": self.windows_drafted, "late_events": s.late_events,
                "outlier_events": s.outlier_events, "resets": s.resets,
                "rejected_events": s.rejected_events,  # another sensor size than the stream's
                "windows_cut_short": self.windows_cut_short,
                "windows_confirmed_before_draft": self.windows_confirmed_before_draft,
                "windows_skipped_final": self.windows_skipped_final,
                "drafts_withheld": self.drafts_withheld,
                "last_first_token_ms": round(self.last_first_token_ms, 1),
                **self.schedule.diagnostics,
                "drafts_complete_before_close": summary["complete_before_close"],
                "events_not_drafted": summary["events_unread"]}


class DraftEmitter:
    """What the drafter calls with each event of one window's draft (``emit(kind, **fields)``,
    from the worker or a drafter process's reader thread): times the draft's first and last
    token, publishes each draft (the window state once, with the first), logs a failure."""

    def __init__(self, loop: DraftLoop, window: Any, timing: DraftTiming, stats: WindowStats,
                 last: list[EngineEvent]) -> None:
        self.loop, self.window, self.timing, self.stats, self.last = \
            loop, window, timing, stats, last
        self.channel: DraftChannel | None = None  # the window's channel, once there
        self.state_due = bool(loop.params["draft_head"])  # a head in the verifier reads it

    def __call__(self, kind: EventKind, **fields: Any) -> EngineEvent:
        now, timing = self.loop.clock.now(), self.timing
        event = EngineEvent(kind, int(self.window.id), timing.ms(now), **fields)
        if kind is EventKind.DRAFT:
            if len(event.tokens) == 1 and event.revision == 0:
                self.stats.draft_first_token_ms = event.t_ms  # before the first publication
                timing.first_token_at = now
            if event.done and math.isnan(timing.done_at):
                timing.done_at = now
            state = self.channel.window_state if self.state_due and self.channel else None
            if state is not None:  # once, with the window's first draft
                self.state_due = False
            if self.loop._publish(self.window, event, self.stats, state, timing):
                self.last[:] = [event]
        elif kind is EventKind.DRAFT_ERROR:
            self.loop.error(f"window {self.window.id}: drafter failed: {event.text}")
        return event


def _median(values: Iterable[float]) -> float | None:
    return rounded(median(values), 1)
