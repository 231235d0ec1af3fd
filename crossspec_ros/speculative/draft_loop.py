"""A drafter's window decisions, pure: what the draft node runs, without ROS.

Event batches, the verifier's confirmations and the clock come in; drafts go out through the
callback its owner gives, the moment each token exists:

    add_events(packet) --> [held while the verifier in this process has its turn]
                       --> the synchronizer --closed windows--> [queue] --step()--> the drafter
    on_confirmed(...)  --> the window being drafted re-syncs to the confirmed prefix; a window
                           the verifier finished is not drafted (its caption is FINAL); while
                           the verifier finishes its captions at their close (it is ahead),
                           the drafter steps aside: a closed window waits a little for its
                           caption before it is drafted (``verifier_ahead``)
    tick()             --> windows closed by time; a finished draft nobody confirms is let go

A newer window always wins: the drafter leaves the old one as soon as the next window closes,
and says so (a draft ``cut_short``), as it does for a window it drops unstarted, so the
verifier's captions never pass a fragment off as the whole draft. ``step()`` is the worker's
unit of work; everything else comes from the executor. The draft node
(``nodes/draft_node.py``) converts messages and publishes what this hands it; the bench's
replay (``bench/live_replay.py``) hands the drafts to a ``VerifierLoop`` directly.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from crossspec_ros.speculative.drafting import DraftChannel, run_drafter
from crossspec_ros.speculative.events import EngineEvent, EventKind
from crossspec_ros.speculative.proposers import DraftStream
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.speculative.vocab import confirmed_in_drafter_ids
from crossspec_ros.sync.captions import DraftCursor, WindowKey
from crossspec_ros.sync.window_queue import WindowQueue

LINGER_S = 2.0  # how long a finished draft waits for confirmations to re-sync to
FINISHED_KEPT = 256  # windows the verifier finished, remembered to skip them (bounded)
# the verifier is ahead while at most one of its last AHEAD_OF captions took longer after
# their close than step_aside_ms or the drafter's own first token, whichever is longer (as
# the verifier measured it, so a busy drafter hearing them late is no matter); a closed
# window then waits up to STEP_ASIDE_WAIT times that long for its caption. Nothing heard yet
# counts as ahead; a window the verifier does not finish within the wait counts as slow, so
# a verifier that is slow or absent stops the waiting after two windows.
AHEAD_OF = 4
STEP_ASIDE_WAIT = 3

# on_draft(window, event, stats, window_state, cut_short): publish one draft of ``window``
DraftOut = Callable[[Any, EngineEvent, WindowStats, Any, bool], None]


class DraftLoop:
    """See the module docstring. ``params``: read at each use (max_new_tokens, draft_head;
    a node's live parameter dict); ``on_draft``: publish a draft (the worker's thread);
    ``warn``/``error``: log lines."""

    def __init__(self, params: Mapping[str, Any], *, on_draft: DraftOut,
                 warn: Callable[[str], None] = lambda _t: None,
                 error: Callable[[str], None] = lambda _t: None) -> None:
        self.params, self.on_draft, self.warn, self.error = params, on_draft, warn, error
        self.drafter: Any = None
        self.process: Any = None  # a DrafterProcess, when the drafter runs in one
        self.sync: Any = None  # the events synchronizer
        self.decode: Callable[[Any], Any] = lambda batch: batch  # a packet -> an EventBatch
        self.cursor = DraftCursor()  # the window being drafted and its confirmed prefix
        self.queue = WindowQueue(params["max_queued_windows"])
        self.held = False  # paused for the verifier (guarded by hold_lock)
        self.hold_lock = threading.Lock()
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
        self.finished_changed = threading.Condition()  # guards verifier_finished's waiters
        # the verifier's latest captions: ms from their close to done (its own clock)
        self.verifier_done_ms: deque[float] = deque(maxlen=AHEAD_OF)
        # the drafter's first token after the close, its last windows (the waits left out)
        self.draft_first_ms: deque[float] = deque(maxlen=AHEAD_OF)
        self.windows_skipped_final = 0  # closed here after the verifier had finished them
        # the verifier was ahead, and finished the window while the drafter waited for it
        self.windows_stepped_aside = 0
        self.drafts_withheld = 0  # drafted after the verifier finished the window: not sent

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
        (the executor's thread: the synchronizer is not thread-safe)."""
        while self.held_packets:
            batch = self.decode(self.held_packets.popleft())
            if len(batch):
                self.enqueue(self.sync.add_events(batch))

    def tick(self) -> None:
        if not self.held:
            self.decode_held()
        self.enqueue(self.sync.poll(time.monotonic_ns()))
        lingering = self.cursor.lingering(time.monotonic(), LINGER_S)
        if lingering is not None:  # a finished draft nobody confirms any more is let go
            lingering.stop()

    def enqueue(self, windows: Iterable[Any]) -> None:
        now = time.monotonic()
        # the draft in progress now: once a window is queued, the worker may take it and
        # begin it before the stop below, and that newer draft must go on
        in_progress = self.cursor.current()
        queued = False
        for window in windows:
            if not window.has_events:
                continue  # nothing to draft (and no reason to stop the current draft)
            queued = True
            dropped = self.queue.put(window, now)
            if dropped is not None:
                self.warn(f"drafter busy: dropped window {dropped.id} "
                          f"({self.queue.dropped} so far)")
                self._cut_short(dropped, None)
        if queued and in_progress is not None:
            in_progress.stop()  # a newer window closed: move on to it

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
        with self.finished_changed:
            if key in self.verifier_finished:
                return
            self.verifier_finished[key] = None
            while len(self.verifier_finished) > FINISHED_KEPT:
                self.verifier_finished.popitem(last=False)
            if not math.isnan(done_ms):
                self.verifier_done_ms.append(done_ms)
            self.finished_changed.notify_all()
        channel, _ = self.cursor.confirmed(key, 0, [], True)  # done: the window's handle
        if channel is not None:
            channel.stop()  # the verifier is done with the window being drafted

    # ------------------------------------------------------------ the verifier's turn
    def hold(self) -> None:
        """The verifier in this process works on a closed window: pause the drafter."""
        with self.hold_lock:
            self.held = True
            channel = self.cursor.current()
            if channel is not None:
                channel.set_lookahead(0)

    def release_hold(self) -> None:
        with self.hold_lock:
            self.held = False
            channel = self.cursor.current()
            if channel is not None:
                channel.set_lookahead(self.params["max_new_tokens"])

    # ------------------------------------------------------------ the worker
    def step(self) -> None:
        """One unit of the worker's work: draft the oldest closed window."""
        item = self.queue.get()
        if item is None:
            return
        window, t_close = item
        if window.key in self.verifier_finished:
            self.windows_skipped_final += 1  # nothing to publish: its caption is FINAL
            return
        waited_from = time.monotonic()
        if self.verifier_ahead() and self._finished_within(window.key, t_close):
            self.windows_stepped_aside += 1  # its caption came first: no compute spent
            return
        waited_ms = (time.monotonic() - waited_from) * 1e3
        max_new = self.params["max_new_tokens"]
        stats = WindowStats(proposer_names=[DraftStream.name])
        state_due = bool(self.params["draft_head"])  # a head in the verifier reads it
        drafting: list[DraftChannel] = []  # the window's channel, once there
        last: list[EngineEvent] = []  # the latest draft published

        def emit(kind: EventKind, **fields: Any) -> EngineEvent:
            nonlocal state_due
            event = EngineEvent(kind, int(window.id), (time.monotonic() - t_close) * 1e3,
                                **fields)
            if kind is EventKind.DRAFT:
                if len(event.tokens) == 1 and event.revision == 0:
                    stats.draft_first_token_ms = event.t_ms  # before the first publication
                state = drafting[0].window_state if state_due and drafting else None
                if state is not None:  # once, with the window's first draft
                    state_due = False
                if self._publish(window, event, stats, state):
                    last[:] = [event]
            elif kind is EventKind.DRAFT_ERROR:
                self.error(f"window {window.id}: drafter failed: {event.text}")
            return event

        with self.hold_lock:  # a window started while the verifier works starts held
            lookahead = 0 if self.held else max_new
            if self.process is not None:
                channel = self.process.start(window, lookahead, max_new, on_draft=emit)
            else:
                channel = DraftChannel(lookahead=lookahead)
            drafting.append(channel)
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
        if not math.isnan(stats.draft_first_token_ms):  # the drafter's own pace, not the wait
            self.draft_first_ms.append(stats.draft_first_token_ms - waited_ms)

    def verifier_ahead(self) -> bool:
        """At most one of the verifier's last ``AHEAD_OF`` captions took longer after its
        close than ``ahead_ms``: a draft of the next window would most likely come after its
        caption (on a CPU with live prefill and early start the verifier has it ready at the
        close; where the verifier decodes past the drafter's first token, as 7B models on a
        GPU do, the drafter drafts at once)."""
        limit = self.ahead_ms()
        return limit > 0 and sum(ms > limit for ms in self.verifier_done_ms) <= 1

    def ahead_ms(self) -> float:
        """step_aside_ms, or the drafter's own first token after the close (the median of
        its last ``AHEAD_OF``, the waits left out) when that is longer: a caption done
        before it would have come is done before any draft (0: never step aside)."""
        limit = self.params.get("step_aside_ms", 0.0)
        if limit <= 0 or not self.draft_first_ms:
            return limit
        return max(limit, statistics.median(self.draft_first_ms))

    def _finished_within(self, key: WindowKey, t_close: float) -> bool:
        """Wait until the verifier finishes ``key``, ``STEP_ASIDE_WAIT`` x ``ahead_ms`` after
        its close here at most (or until the loop stops taking windows); True when it
        finished. Not finished in time: the verifier counts as slow for this window."""
        deadline = t_close + STEP_ASIDE_WAIT * self.ahead_ms() / 1e3
        with self.finished_changed:
            self.finished_changed.wait_for(
                lambda: key in self.verifier_finished or self.queue.closed,
                timeout=max(0.0, deadline - time.monotonic()))
            finished = key in self.verifier_finished
            if not finished and not self.queue.closed:
                self.verifier_done_ms.append(math.inf)
            return finished

    def _publish(self, window: Any, event: EngineEvent, stats: WindowStats,
                 window_state: Any = None, cut_short: bool = False) -> bool:
        """Hand the draft on (False: withheld, the verifier had finished the window)."""
        if window.key in self.verifier_finished:  # a token in flight when its FINAL came
            self.drafts_withheld += 1
            return False
        self.on_draft(window, event, stats, window_state, cut_short)
        if event.done:
            self.cursor.completed(window.key, time.monotonic())
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
        self.queue.close()  # before reading the cursor: see step
        with self.finished_changed:  # a window waiting for its caption waits no longer
            self.finished_changed.notify_all()
        current = self.cursor.current()
        if current is not None:
            current.stop()

    @property
    def diagnostics(self) -> dict[str, Any]:
        """The loop's counters for a node's diagnostics."""
        s = self.sync.stats
        return {"queue_depth": len(self.queue), "dropped_windows": self.queue.dropped,
                "sync_dropped_windows": s.dropped_windows,
                "windows_drafted": self.windows_drafted, "late_events": s.late_events,
                "outlier_events": s.outlier_events, "resets": s.resets,
                "windows_cut_short": self.windows_cut_short,
                "windows_confirmed_before_draft": self.windows_confirmed_before_draft,
                "windows_skipped_final": self.windows_skipped_final,
                "windows_stepped_aside": self.windows_stepped_aside,
                "drafts_withheld": self.drafts_withheld,
                "last_first_token_ms": round(self.last_first_token_ms, 1)}
