"""The caption protocol: what consumers are told about each window, and when (no rclpy).

The verifier node feeds ``CaptionBook`` the drafts it receives, the verifier's progress and
the synchronizer's view of time, and publishes every ``WindowCaption`` it gets back, in the
order returned. A window's caption only moves forward:

    DRAFT --> PARTIAL --> FINAL          the verifier ran: confirmed_text is its caption
      \\----------------> UNVERIFIED     the verifier never will (no RGB came, it was busy,
                                        or it failed): the draft is the caption

- Windows are keyed by ``(epoch, id)`` (see ``sync/window.py``): after a bag loop a late draft
  of the old timeline can never reopen a window of the new one, nor the reverse.
- Exactly one terminal caption (FINAL or UNVERIFIED) per window; drafts that come after it are
  counted as late and dropped. Finished keys are remembered for ``finished_memory_s``, then
  only as a per-epoch floor (ids below it are late), so memory stays bounded however long the
  node runs.
- An UNVERIFIED caption carries the draft and says why it is unverified (``reason``) and how
  much of a draft it carries (``draft_state``): a window the verifier gave up on waits until
  its draft is final (complete, or cut short because the drafter left it for a newer window)
  or ``patience_s`` passed. A caption whose drafter never drafted, or stopped mid-sentence,
  says so (``DraftState.NONE`` / ``CUT_SHORT``) instead of passing a fragment off as the
  draft.
- ``unconfirmed_text`` is the draft's tail exactly as it is shown right after
  ``confirmed_text`` (a space where a new word starts, none inside a word).

The draft node's side (one window drafted at a time, the confirmed prefix it re-syncs to) is
``DraftCursor`` at the end of this module; the windows it drafted that no verifier answers for
end UNVERIFIED there (``VERIFIER_ABSENT``: sync/robot_captions.py). Neither class locks for
``CaptionBook`` (the node publishes under its own lock, so captions leave in the order their
states changed); ``DraftCursor`` is shared by the executor and the worker thread and locks
itself.
"""

from __future__ import annotations

import copy
import math
import threading
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from crossspec_ros.text import single_spaced

NAN = math.nan
WindowKey = tuple[int, int]  # (epoch, window id)


class CaptionStatus(IntEnum):
    """A window caption's status; the values are crossspec/Caption's STATUS_* codes."""

    DRAFT = 0
    PARTIAL = 1
    FINAL = 2
    UNVERIFIED = 3


class UnverifiedReason(IntEnum):
    """Why a window ended UNVERIFIED; the values are crossspec/Caption's REASON_* codes."""

    NONE = 0              # not UNVERIFIED (yet)
    NO_RGB = 1            # no RGB frames came for the window
    VERIFIER_BUSY = 2     # the verifier's queue was full: the window was dropped
    VERIFIER_FAILED = 3   # the verifier failed on the window (its log says why)
    VERIFIER_STOPPED = 4  # the verifier was deactivated or shut down
    VERIFIER_ABSENT = 5   # no verifier answered for the window: the robot's draft node gave
    #                       it up (sync/robot_captions.py); never given by a verifier


class DraftState(IntEnum):
    """How much of a draft a caption carries; crossspec/Caption's DRAFT_* codes."""

    NONE = 0          # no draft text (none yet, or the drafter never drafted the window)
    IN_PROGRESS = 1   # part of the draft; the drafter is still writing it
    CUT_SHORT = 2     # part of the draft; the drafter left the window before finishing it
    COMPLETE = 3      # the drafter's whole caption


def draft_tail(confirmed: str, draft: str) -> str:
    """What ``draft`` says beyond ``confirmed``, to be shown directly after it.

    Whitespace runs are compared as one space. The tail keeps its leading space when it starts
    a new word ("a red car" + " turns") and has none when it finishes one ("a red car tu" +
    "rns"). "" when the draft disagrees with the confirmed text or adds nothing to it.
    """
    said, guessed = single_spaced(confirmed), single_spaced(draft)
    if not guessed.startswith(said) or len(guessed) == len(said):
        return ""
    tail = guessed[len(said):]
    if not said or confirmed[-1:].isspace():  # the confirmed text already ends a word
        tail = tail.lstrip()
    return tail


@dataclass
class WindowCaption:
    """Everything the caption of one window says; the book returns copies to publish."""

    epoch: int
    window_id: int
    t0: int = 0
    t1: int = 0
    first_seen: float = 0.0          # monotonic seconds: the book first heard of it
    draft_text: str = ""             # the latest draft, whole
    first_complete_draft: str = ""   # the draft as it was when first complete (read first;
    #                                  a re-synced revision repeats the confirmed words)
    draft_complete: bool = False     # the drafter finished it
    draft_cut_short: bool = False    # the drafter left it unfinished: no more will come
    draft_first_token_ms: float = NAN
    draft_done_ms: float = NAN
    confirmed_text: str = ""
    confirmed_first_ms: float = NAN
    confirmed_done_ms: float = NAN
    acceptance: float = NAN
    acceptance_rule: str = ""        # "" lossless; else the relaxed rule: a LOSSY caption
    verifying: bool = False          # the verifier has taken the window
    given_up_at: float | None = None  # the verifier will never caption it (since when)
    reason: UnverifiedReason = UnverifiedReason.NONE  # why, once given up
    outcome: CaptionStatus | None = None  # FINAL or UNVERIFIED once finished
    first_draft_at: float | None = field(default=None, repr=False)

    @property
    def key(self) -> WindowKey:
        return (self.epoch, self.window_id)

    @property
    def status(self) -> CaptionStatus:
        if self.outcome is not None:
            return self.outcome
        return CaptionStatus.PARTIAL if self.confirmed_text else CaptionStatus.DRAFT

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    @property
    def draft_final(self) -> bool:
        """No more draft will come: it is complete, or the drafter left the window."""
        return self.draft_complete or self.draft_cut_short

    @property
    def draft_state(self) -> DraftState:
        if self.draft_complete:
            return DraftState.COMPLETE
        if not self.draft_text:
            return DraftState.NONE
        return DraftState.CUT_SHORT if self.draft_cut_short else DraftState.IN_PROGRESS

    @property
    def unverified_reason(self) -> UnverifiedReason:
        """``reason`` once the caption is UNVERIFIED, else NONE."""
        if self.outcome is CaptionStatus.UNVERIFIED:
            return self.reason
        return UnverifiedReason.NONE

    @property
    def unconfirmed_text(self) -> str:
        if self.outcome is CaptionStatus.FINAL:
            return ""
        return draft_tail(self.confirmed_text, self.draft_text)


class CaptionBook:
    """The verifier side of the protocol: one ``WindowCaption`` per window until it finishes.

    ``patience_s``: how long a window with a draft but no verifier waits for RGB, and how long a
    window the verifier gave up on waits for its draft to complete.
    """

    def __init__(self, patience_s: float, finished_memory_s: float = 10.0) -> None:
        self.patience_s = patience_s
        self.finished_memory_s = finished_memory_s
        self.windows: dict[WindowKey, WindowCaption] = {}
        self._finished: dict[WindowKey, float] = {}  # key -> when it finished
        # per epoch: ids below this finished long ago and were forgotten (still late)
        self._forgotten_below: dict[int, int] = {}
        self.counters = {"late_drafts": 0, "late_windows": 0, "windows_final": 0,
                         "windows_unverified": 0, "unverified_without_draft": 0,
                         "unverified_draft_cut_short": 0}

    def is_finished(self, key: WindowKey) -> bool:
        if key in self.windows:
            return False
        return key in self._finished or key[1] < self._forgotten_below.get(key[0], key[1])

    # ------------------------------------------------------------ the draft
    def on_draft(self, key: WindowKey, t0: int, t1: int, text: str, first_token_ms: float,
                 complete: bool, now: float, cut_short: bool = False) -> list[WindowCaption]:
        """A draft (revision) for ``key``: its caption now, or [] when the window is already
        finished (a late draft, counted). ``cut_short``: the drafter left the window before
        finishing (``text`` is all it will say; "" when it never drafted it)."""
        if self.is_finished(key):
            self.counters["late_drafts"] += 1
            return []
        state = self._state(key, t0, t1, now)
        if text or not cut_short:  # a cut-short notice without text keeps what came before
            if state.first_draft_at is None:
                state.first_draft_at = now
            state.draft_text = text
            state.draft_first_token_ms = float(first_token_ms)
        if complete and not state.draft_complete:
            state.draft_complete = True
            state.first_complete_draft = state.draft_text
            # close -> first token as the drafter measured it, then this side's clock
            state.draft_done_ms = state.draft_first_token_ms + (now - state.first_draft_at) * 1e3
        state.draft_cut_short = cut_short and not state.draft_complete
        if state.given_up_at is not None and state.draft_final:
            return [self._finish(state, CaptionStatus.UNVERIFIED, now)]
        return [copy.copy(state)]

    # ------------------------------------------------------------ the verifier
    def on_verifier_start(self, key: WindowKey, t0: int, t1: int, now: float) -> bool:
        """The verifier takes ``key``; False when the window already finished without it (its
        RGB came after the book gave up waiting): the verifier should skip it (counted)."""
        if self.is_finished(key):
            self.counters["late_windows"] += 1
            return False
        state = self._state(key, t0, t1, now)
        state.t0, state.t1 = t0, t1
        state.verifying, state.given_up_at = True, None
        state.reason = UnverifiedReason.NONE
        return True

    def on_confirmed(self, key: WindowKey, text: str, done: bool, t_ms: float,
                     acceptance: float, now: float, acceptance_rule: str = ""
                     ) -> list[WindowCaption]:
        """A verification round confirmed ``text`` (the whole confirmed caption so far);
        ``acceptance_rule``: the relaxed rule it was accepted under ("" exact: lossless)."""
        state = self.windows.get(key)
        if state is None:
            return []
        state.confirmed_text = text
        state.acceptance = float(acceptance)
        state.acceptance_rule = acceptance_rule
        if math.isnan(state.confirmed_first_ms):
            state.confirmed_first_ms = float(t_ms)
        if done:
            state.confirmed_done_ms = float(t_ms)
            return [self._finish(state, CaptionStatus.FINAL, now)]
        return [copy.copy(state)]

    def on_verifier_gave_up(self, key: WindowKey, t0: int, t1: int, now: float,
                            reason: UnverifiedReason) -> list[WindowCaption]:
        """The verifier will not caption ``key`` (``reason``: dropped while busy, it failed,
        it stopped): UNVERIFIED now if its draft is final, else once the draft is final or
        ``patience_s`` passes."""
        if self.is_finished(key):
            return []
        state = self._state(key, t0, t1, now)
        state.verifying, state.given_up_at, state.reason = False, now, reason
        if state.draft_final:
            return [self._finish(state, CaptionStatus.UNVERIFIED, now)]
        return []

    def stop(self, now: float, wait_for_drafts: bool = False) -> list[WindowCaption]:
        """The verifier stops: every open window is given up (``VERIFIER_STOPPED``).
        ``wait_for_drafts`` (deactivate: the node still relays drafts): a window ends
        UNVERIFIED once its draft is final or ``patience_s`` passed (``expire``), so it carries
        the draft; else (shutdown: nothing more will be published) every one ends now."""
        out = []
        for state in list(self.windows.values()):
            state.verifying, state.given_up_at = False, now
            state.reason = UnverifiedReason.VERIFIER_STOPPED
            if state.draft_final or not wait_for_drafts:
                out.append(self._finish(state, CaptionStatus.UNVERIFIED, now))
        return out

    def give_up_now(self, key: WindowKey, now: float, reason: UnverifiedReason
                    ) -> list[WindowCaption]:
        """``key`` ends UNVERIFIED now (``reason``) with the draft it has; [] when it is not
        open here."""
        state = self.windows.get(key)
        if state is None:
            return []
        state.verifying, state.given_up_at, state.reason = False, now, reason
        return [self._finish(state, CaptionStatus.UNVERIFIED, now)]

    def finished_elsewhere(self, key: WindowKey, outcome: CaptionStatus, now: float) -> None:
        """``key`` got its terminal caption from another book (the verifier's, heard on the
        robot): it ends here without a caption of this book's, and its drafts after this
        are late, also when this book never heard of it."""
        if self.is_finished(key):
            return
        state = self.windows.get(key)
        if state is not None:
            self._finish(state, outcome, now)
        else:
            self._finished[key] = now

    # ------------------------------------------------------------ time passing
    def expire(self, now: float, waiting: set[WindowKey], closed: WindowKey | None
               ) -> list[WindowCaption]:
        """Finish the windows the verifier will never see. ``waiting``: keys the verifier still
        has pending or queued; ``closed``: (epoch, id) below which the verifier's RGB
        synchronizer has closed every window (older epochs included), None before any."""
        out = []
        for key, state in list(self.windows.items()):
            if state.verifying or key in waiting:
                continue
            if state.given_up_at is None:
                no_rgb = closed is not None and key < closed
                if not no_rgb and now - state.first_seen <= self.patience_s:
                    continue
                state.given_up_at, state.reason = now, UnverifiedReason.NO_RGB
            if state.draft_final or now - state.given_up_at > self.patience_s:
                out.append(self._finish(state, CaptionStatus.UNVERIFIED, now))
        self.forget_finished(now)
        return out

    def forget_finished(self, now: float) -> None:
        """Finished keys older than ``finished_memory_s`` are kept only as their epoch's
        floor (ids below it stay late): memory stays bounded however long the node runs."""
        for (epoch, wid), t in list(self._finished.items()):
            if now - t > self.finished_memory_s:
                del self._finished[(epoch, wid)]
                self._forgotten_below[epoch] = max(self._forgotten_below.get(epoch, wid), wid + 1)

    def _state(self, key: WindowKey, t0: int, t1: int, now: float) -> WindowCaption:
        state = self.windows.get(key)
        if state is None:
            state = self.windows[key] = WindowCaption(key[0], key[1], t0, t1, first_seen=now)
        return state

    def _finish(self, state: WindowCaption, outcome: CaptionStatus, now: float
                ) -> WindowCaption:
        state.outcome = outcome
        self.windows.pop(state.key, None)
        self._finished[state.key] = now
        if outcome is CaptionStatus.FINAL:
            self.counters["windows_final"] += 1
        else:
            self.counters["windows_unverified"] += 1
            if not state.draft_text:
                self.counters["unverified_without_draft"] += 1
            elif not state.draft_complete:  # this caption will not wait for the rest
                state.draft_cut_short = True
                self.counters["unverified_draft_cut_short"] += 1
        return copy.copy(state)


class DraftCursor:
    """The draft node's side: the one window being drafted (with a handle, e.g. its
    DraftChannel), the verifier's confirmed prefix for it, assembled from ConfirmedTokens
    rounds, and when its draft completed. Thread-safe: the executor and the worker share it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: WindowKey | None = None
        self._handle: Any = None
        self._confirmed: list[int] = []
        self._completed_at: float | None = None
        self._verifier_done = False

    def begin(self, key: WindowKey, handle: Any) -> None:
        """Start drafting ``key``: what came before is forgotten."""
        with self._lock:
            self._key, self._handle = key, handle
            self._confirmed, self._completed_at = [], None
            self._verifier_done = False

    def end(self, key: WindowKey) -> bool:
        """Drafting ``key`` is over; True when the verifier had finished the window (a draft
        cut short then is of no use to anyone, and no notice of it is needed)."""
        with self._lock:
            verifier_done = self._key == key and self._verifier_done
            if self._key == key:
                self._key = self._handle = None
            return verifier_done

    def current(self) -> Any:
        """The handle of the window being drafted, or None."""
        with self._lock:
            return self._handle

    def completed(self, key: WindowKey, now: float) -> None:
        """The drafter finished ``key``'s draft (it may still re-sync to confirmations)."""
        with self._lock:
            if self._key == key and self._completed_at is None:
                self._completed_at = now

    def lingering(self, now: float, linger_s: float) -> Any:
        """The handle of a window whose draft completed over ``linger_s`` ago, else None."""
        with self._lock:
            if self._completed_at is not None and now - self._completed_at > linger_s:
                return self._handle
            return None

    def confirmed(self, key: WindowKey, base_index: int, new_tokens: list[int], done: bool
                  ) -> tuple[Any, list[int] | None]:
        """One confirmation round for ``key``: (handle, confirmed prefix so far), (handle,
        None) when the verifier is done with it, (None, None) when it is not the window being
        drafted. Rounds arrive in order on a reliable topic, each at its base index."""
        with self._lock:
            if self._key != key:
                return None, None
            if done:
                self._verifier_done = True
                return self._handle, None
            self._confirmed = self._confirmed[:base_index] + [int(t) for t in new_tokens]
            return self._handle, list(self._confirmed)
