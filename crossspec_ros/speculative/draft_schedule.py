"""When the drafter computes: one decision object for every window, fed what happened and the
time (pure: no thread, no clock of its own).

The drafter is worth its compute only for a draft that comes before the verifier's caption.
With live prefill and early start the verifier decodes before a window closes, and on the
target the drafter's token costs ~0.85 of the verifier's (H200: 8.0 against 9.4 ms), so a
draft begun at the close never arrives first: measured 2026-11-28, on the CPU default no draft
was published at all (the drafter stepped aside), on the emulated H200 the draft's first token
came ~97 ms after the close, after every confirmed caption. A draft is only a proposal, so it
may be inexact: begun a *lead* before the close, from the events seen so far, it is complete at
the close, it is the robot's first caption, and the verifier's early decoding reads it.

    before_close(id, t1, now)   START   the window's end is within the lead: draft it now,
                                        from its events so far
                                WAIT    not yet
                                SKIP    the drafter rests: the verifier fell behind while it
                                        drafted (the device is full, and the drafter's compute
                                        is what it lacks)
    at_close(key, ...)          SKIP    drafted before the close (the events after its start
                                        are counted, not drafted again), or the verifier
                                        finished it already: a draft would come after FINAL
                                WAIT    the verifier is ahead (its last captions came within
                                        ahead_ms of their close): wait, at most wait_s, for
                                        its caption before drafting (stepping aside)
                                START   draft it now, from all its events

The lead is ``lead_ms`` when set (> 0), else measured: the drafter's time per caption (from its
start to its last token, its pauses included, the median of its last LEAD_WINDOWS) plus
LEAD_MARGIN, never more than MAX_LEAD_SHARE of the window (a draft reads at least the rest).
``lead_ms`` 0 drafts at the close, as crossspec did before. The lead is wall time; the
windows' end is data time: ``DataClock`` maps one to the other (a bag replayed at rate 2 brings
a window's end twice as soon).

A drafter inside the engine (``SpeculativeEngine`` with a local drafter: `crossspec caption`,
the bench's engine modes) drafts each window as the engine takes it, after its close; there
``local_draft`` decides, from the window's change level (events/change.py) and what drafting
measurably cost (``DrafterGate``, one per level):

    local_draft(level)          SKIP    a steady scene where the cascade leaves the drafter
                                        out (earlier captions propose), or drafting did not
                                        pay in this process (the gate's measured latency)
                                START   draft it

The drafter shares the device with the verifier. Where the two together need more of it than
a window lasts, drafting through the open window starves the verifier's live prefill: on the
emulated eager H100 (2026-11-29) the verifier then confirmed ~1.9 s after the close instead of
~0.1 s. So when a caption of the verifier's comes more than BEHIND_SHARE of a window after its
close while the drafter drafts, the drafter rests REST_WINDOWS windows, twice as many each time
it happens again (at most MAX_REST_WINDOWS), and the count starts over after a long enough
spell without it.

Every START and SKIP is counted by its reason (``counts``, for /diagnostics and summaries).
What this object does not decide is the verifier's turn in a composed graph: the drafter
pauses while the verifier works on a window (speculative/verifier_first.py), a pause of a
draft already begun, counted there.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from crossspec_ros.events.change import STEADY
from crossspec_ros.speculative.adaptive import DrafterGate
from crossspec_ros.stamps import SECOND_NS, ns_to_seconds

LEAD_WINDOWS = 8  # drafts whose durations set the measured lead
LEAD_MARGIN = 1.25  # the measured lead: this times the drafter's median caption time ...
LEAD_SLACK_MS = 5.0  # ... plus this (the close comes a packet early, a draft a token late)
FIRST_LEAD_SHARE = 0.25  # before any draft was measured: this share of the window
MAX_LEAD_SHARE = 0.6  # the lead never exceeds this share of the window
# the verifier is ahead while at most one of its last AHEAD_OF captions took longer after
# their close than ahead_ms; a closed window then waits up to STEP_ASIDE_WAIT x ahead_ms for
# its caption. A window the verifier does not finish within the wait counts as slow.
AHEAD_OF = 4
STEP_ASIDE_WAIT = 3
BEHIND_SHARE = 0.25  # a caption this share of a window after its close: the verifier is behind
REST_WINDOWS = 4  # windows the drafter rests the first time; doubling, at most:
MAX_REST_WINDOWS = 64

# why a window was drafted, or not: what /diagnostics and the summaries count
REASONS = {
    "early": "drafted before the close, from the events so far (the lead)",
    "at_close": "drafted at the close, from all its events",
    "drafted_early": "not drafted again at the close: drafted before it",
    "verifier_finished": "not drafted: the verifier finished it first",
    "stepped_aside": "not drafted: the verifier was ahead and finished it while the drafter "
                     "waited",
    "verifier_behind": "not drafted: the drafter rests, the verifier fell behind while it "
                       "drafted (the device is full)",
    "steady_scene": "not drafted (engine): a steady scene, earlier captions propose",
    "gated_off": "not drafted (engine): the drafter gate went without it (each choice "
                 "tried, then the faster one, the slower re-tried ever less often)",
    "local": "drafted (engine) as the engine took the window",
}


class Action(Enum):
    START = "start"
    WAIT = "wait"
    SKIP = "skip"


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str = ""     # a key of REASONS for START and SKIP
    wait_s: float = 0.0  # WAIT at the close: how long, at most, from the close


WAIT = Decision(Action.WAIT)


@dataclass
class DataClock:
    """The windows' data time (event stamps) against the local monotonic clock: the latest
    event stamp and when it came, and the rate data time passes at (1 for a live camera; a
    bag replayed at --rate r, r), measured over at least ``span_s``."""

    span_s: float = 0.5
    latest_ns: int | None = None
    latest_at: float = 0.0
    rate: float = 1.0
    _since: tuple[int, float] | None = None

    def observe(self, t_ns: int, now: float) -> None:
        """Data up to ``t_ns`` came at ``now``."""
        if self.latest_ns is not None and t_ns < self.latest_ns - SECOND_NS:
            self._since = None  # time went back (a bag loop): measure the rate afresh
        elif self.latest_ns is not None and t_ns <= self.latest_ns:
            return
        self.latest_ns, self.latest_at = t_ns, now
        if self._since is None:
            self._since = (t_ns, now)
            return
        t0, at0 = self._since
        if now - at0 >= self.span_s and t_ns > t0:
            self.rate = ns_to_seconds(t_ns - t0) / (now - at0)
            self._since = (t_ns, now)

    def now_ns(self, now: float) -> int | None:
        """Data time at ``now``: the latest stamp, advanced at the rate since it came."""
        if self.latest_ns is None:
            return None
        return self.latest_ns + int((now - self.latest_at) * self.rate * SECOND_NS)

    def at(self, t_ns: int) -> float:
        """When (local clock) data time reaches ``t_ns``."""
        ahead_s = ns_to_seconds(t_ns - (self.latest_ns or t_ns))
        return self.latest_at + ahead_s / max(self.rate, 1e-9)


@dataclass
class DraftSchedule:
    """See the module docstring. ``window_len_ns``: the windows' length; ``lead_ms``: > 0 a
    fixed lead, 0 drafting at the close, < 0 measured; ``step_aside_ms``: the verifier counts
    as ahead while its captions come within max(this, the drafter's first token) of their
    close (0: never step aside)."""

    window_len_ns: int = SECOND_NS
    lead_ms: float = -1.0
    step_aside_ms: float = 30.0
    counts: Counter = field(default_factory=Counter)
    gates: dict = field(default_factory=dict)  # the engine's DrafterGate per change level
    rest_windows: int = REST_WINDOWS  # how long the next rest lasts
    resume_at: int | None = None  # resting: the first window drafted again
    _last_window: int | None = None  # the latest window decided before its close
    _calm: int = 0  # captions in time since the last rest began
    durations_ms: deque = field(default_factory=lambda: deque(maxlen=LEAD_WINDOWS))
    draft_first_ms: deque = field(default_factory=lambda: deque(maxlen=AHEAD_OF))
    verifier_done_ms: deque = field(default_factory=lambda: deque(maxlen=AHEAD_OF))

    # ------------------------------------------------------------ what happened
    def drafted(self, duration_ms: float, first_token_ms: float = math.nan) -> None:
        """A draft finished ``duration_ms`` after it started (its first token
        ``first_token_ms`` after its start: the drafter's own pace, for stepping aside)."""
        if math.isfinite(duration_ms):
            self.durations_ms.append(duration_ms)
        if math.isfinite(first_token_ms):
            self.draft_first_ms.append(first_token_ms)

    def verifier_done(self, done_ms: float) -> None:
        """The verifier finished a window ``done_ms`` after its close (inf: not within the
        wait, a slow verifier). Behind while the drafter drafts: the drafter rests."""
        if math.isnan(done_ms):
            return
        self.verifier_done_ms.append(done_ms)
        behind = done_ms > BEHIND_SHARE * self.window_len_ns / 1e6
        if not behind:
            self._calm += 1
            if self._calm >= 2 * MAX_REST_WINDOWS:  # a long calm spell: forgiven
                self.rest_windows = REST_WINDOWS
            return
        if self.early and not self.resting(self._last_window) and \
                self._last_window is not None:
            self.resume_at = self._last_window + 1 + self.rest_windows
            self.rest_windows = min(2 * self.rest_windows, MAX_REST_WINDOWS)
            self._calm = 0

    def resting(self, window_id: int | None) -> bool:
        """The drafter rests for window ``window_id`` (the verifier fell behind)."""
        return self.resume_at is not None and window_id is not None and \
            window_id < self.resume_at

    # ------------------------------------------------------------ the lead
    @property
    def early(self) -> bool:
        return self.lead_ms != 0

    def lead_wall_ms(self) -> float:
        """How long before its close a window's draft starts (local clock, ms)."""
        window_ms = self.window_len_ns / 1e6
        if self.lead_ms > 0:
            return min(self.lead_ms, window_ms)
        if self.lead_ms == 0:
            return 0.0
        if not self.durations_ms:
            return FIRST_LEAD_SHARE * window_ms
        measured = LEAD_MARGIN * statistics.median(self.durations_ms) + LEAD_SLACK_MS
        return min(measured, MAX_LEAD_SHARE * window_ms)

    # ------------------------------------------------------------ decisions
    def due(self, t1_ns: int, data_now_ns: int | None, rate: float = 1.0) -> bool:
        """Whether a window ending at ``t1_ns`` is within the lead of data time
        ``data_now_ns`` (passing at ``rate``): asked before anything is counted."""
        return self.early and data_now_ns is not None and \
            data_now_ns >= t1_ns - self.lead_wall_ms() * rate * 1e6

    def before_close(self, window_id: int, t1_ns: int, data_now_ns: int | None,
                     rate: float = 1.0) -> Decision:
        """Whether to start drafting the open window ``window_id``, ending at ``t1_ns``, now
        (data time ``data_now_ns``, passing at ``rate``): once its end is within the lead,
        START, or SKIP while the drafter rests (each counted once: ask again only after
        WAIT)."""
        if not self.due(t1_ns, data_now_ns, rate):
            return WAIT
        self._last_window = window_id
        if self.resting(window_id):
            return self._count(Decision(Action.SKIP, "verifier_behind"))
        return self._count(Decision(Action.START, "early"))

    def at_close(self, drafted_early: bool, verifier_finished: bool) -> Decision:
        """What to do with a window as it closes (or as the worker takes it: the verifier
        may have finished it meanwhile)."""
        if drafted_early:
            return self._count(Decision(Action.SKIP, "drafted_early"))
        if verifier_finished:
            return self._count(Decision(Action.SKIP, "verifier_finished"))
        if self.verifier_ahead():
            return Decision(Action.WAIT, "stepped_aside",
                            STEP_ASIDE_WAIT * self.ahead_ms() / 1e3)
        return self._count(Decision(Action.START, "at_close"))

    def after_wait(self, verifier_finished: bool) -> Decision:
        """The close's WAIT is over: skip what the verifier finished meanwhile, else draft
        (and the verifier counts as slow for this window)."""
        if verifier_finished:
            return self._count(Decision(Action.SKIP, "stepped_aside"))
        self.verifier_done_ms.append(math.inf)
        return self._count(Decision(Action.START, "at_close"))

    def verifier_ahead(self) -> bool:
        """At most one of the verifier's last AHEAD_OF captions took longer after its close
        than ``ahead_ms``: a draft begun at the close would most likely come after its
        caption (nothing heard yet counts as ahead)."""
        limit = self.ahead_ms()
        return limit > 0 and sum(ms > limit for ms in self.verifier_done_ms) <= 1

    def ahead_ms(self) -> float:
        """step_aside_ms, or the drafter's own first token (the median of its last
        AHEAD_OF) when that is longer (0: never step aside)."""
        if self.step_aside_ms <= 0 or not self.draft_first_ms:
            return self.step_aside_ms
        return max(self.step_aside_ms, statistics.median(self.draft_first_ms))

    def local_draft(self, level: str | None, *, cascade: bool, gated: bool) -> Decision:
        """Whether the engine's own drafter drafts a window of change ``level`` (None: not
        told): not in a steady scene under the ``cascade``; with ``gated``, only while
        drafting measurably pays at that level (``DrafterGate``: each choice tried, the
        slower re-tried ever less often)."""
        if cascade and level == STEADY:
            return self._count(Decision(Action.SKIP, "steady_scene"))
        if gated and not self.gate(level if cascade else None).should_draft():
            return self._count(Decision(Action.SKIP, "gated_off"))
        return self._count(Decision(Action.START, "local"))

    def gate(self, level: str | None) -> DrafterGate:
        """The drafter gate of change ``level`` (one per level with the cascade)."""
        return self.gates.setdefault(level, DrafterGate())

    def _count(self, decision: Decision) -> Decision:
        self.counts[decision.reason] += 1
        return decision

    @property
    def diagnostics(self) -> dict[str, Any]:
        return {"draft_lead_ms": round(self.lead_wall_ms(), 1),
                **{f"windows_{reason}": self.counts[reason] for reason in REASONS}}
