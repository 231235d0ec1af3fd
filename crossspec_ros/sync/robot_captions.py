"""The robot's side of the caption protocol (no rclpy): every window the draft node drafted
ends in a terminal caption on the robot, also when no verifier answers for it.

The verifier's ``CaptionBook`` (sync/captions.py) ends every window it hears of in exactly one
FINAL or UNVERIFIED caption. A window it never hears of (the verifier unconfigured, its process
dead or restarting, the link down longer than its writers keep messages) ended in nothing, and
a robot cannot tell "late" from "never" except by waiting. So the draft node keeps a
``RobotCaptionBook`` of the windows it drafted and hears the verifier's captions and confirmed
tokens:

- a window is given up once ``silence_s`` passed without news of it (a draft revision, or the
  verifier's caption or confirmed tokens for it): it ends UNVERIFIED with reason
  ``VERIFIER_ABSENT`` and the draft it has, published by the draft node on the caption topics;
- a terminal caption from the verifier ends the window here without one of the robot's;
- a terminal caption from the verifier for a window the robot already gave up (the link came
  back with the verifier's answer) cannot be held back (one topic, two writers): it
  **supersedes** the robot's UNVERIFIED and is counted (``late_answers``); a window has then
  two terminal captions, the robot's first;
- captions with reason ``VERIFIER_ABSENT`` are the robot's own (a verifier never gives it).

``silence_s`` is what a verifier that heard the window can take before its caption ends it
(``verifier_silence_s``): when the verifier is up, the robot never speaks. Not thread-safe:
the draft node calls it under one lock from its executor and its drafting worker.

    book = RobotCaptionBook(silence_s=7.0)
    book.on_draft((0, 5), t0, t1, "a red car", 12.0, complete=True, now=100.0)
    book.expire(now=104.0)   # []: the verifier may still answer
    book.expire(now=107.5)   # [window 5 UNVERIFIED, VERIFIER_ABSENT, draft "a red car"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossspec_ros.sync.captions import (
    CaptionBook,
    CaptionStatus,
    UnverifiedReason,
    WindowCaption,
    WindowKey,
)

TERMINAL = (CaptionStatus.FINAL, CaptionStatus.UNVERIFIED)


def verifier_silence_s(p: Mapping[str, Any], caption_patience_s: float) -> float:
    """How long a drafted window waits for news from the verifier before the robot ends it:
    what the verifier's book may take for a window it heard of (one patience for its RGB,
    one for its draft) and the windows queued ahead of it (each verified within about a
    window's length when the verifier keeps up; one that does not drops them, saying so)."""
    return 2 * caption_patience_s + p["max_queued_windows"] * p["window_length_s"]


class RobotCaptionBook:
    """See the module docstring. ``memory_s``: how long finished windows are remembered (a
    late draft stays late; a late answer from the verifier is recognized and counted)."""

    def __init__(self, silence_s: float, memory_s: float = 60.0) -> None:
        self.silence_s = silence_s
        self.memory_s = memory_s
        # the drafts as the verifier's book keeps them (text, completeness, latencies)
        self.book = CaptionBook(patience_s=silence_s, finished_memory_s=memory_s)
        self._news: dict[WindowKey, float] = {}      # open window -> its latest news
        self._given_up: dict[WindowKey, float] = {}  # ended here, UNVERIFIED -> when
        self.counters = {"windows_answered": 0, "windows_given_up": 0, "late_answers": 0}

    @property
    def open_windows(self) -> list[WindowKey]:
        return list(self.book.windows)

    def on_draft(self, key: WindowKey, t0: int, t1: int, text: str, first_token_ms: float,
                 complete: bool, now: float, cut_short: bool = False) -> None:
        """A draft (revision, or a cut-short notice) the draft node publishes for ``key``."""
        if self.book.on_draft(key, t0, t1, text, first_token_ms, complete, now,
                              cut_short=cut_short):
            self._news[key] = now

    def on_verifier_word(self, key: WindowKey, now: float) -> None:
        """The verifier published about ``key`` without ending it (a DRAFT or PARTIAL
        caption, confirmed tokens): it has the window."""
        if key in self.book.windows:
            self._news[key] = now

    def on_caption(self, key: WindowKey, status: CaptionStatus, reason: UnverifiedReason,
                   now: float) -> None:
        """A caption heard on the caption topic (the verifier's, or this book's own)."""
        if reason is UnverifiedReason.VERIFIER_ABSENT:
            return  # the robot's own: no verifier gives this reason
        if status not in TERMINAL:
            self.on_verifier_word(key, now)
        elif key in self._given_up:
            del self._given_up[key]  # the verifier answered after all: it supersedes
            self.counters["late_answers"] += 1
        elif not self.book.is_finished(key):
            if key in self.book.windows:
                self.counters["windows_answered"] += 1
            self.book.finished_elsewhere(key, status, now)
            self._news.pop(key, None)

    def expire(self, now: float) -> list[WindowCaption]:
        """The windows given up now, to publish in order: UNVERIFIED, ``VERIFIER_ABSENT``."""
        out = []
        for key in [k for k, at in self._news.items() if now - at > self.silence_s]:
            out += self.book.give_up_now(key, now, UnverifiedReason.VERIFIER_ABSENT)
            del self._news[key]
            self._given_up[key] = now
            self.counters["windows_given_up"] += 1
        self.book.forget_finished(now)
        for key in [k for k, at in self._given_up.items() if now - at > self.memory_s]:
            del self._given_up[key]
        return out

    @property
    def diagnostics(self) -> dict[str, int]:
        return {**self.counters, "windows_awaiting_verifier": len(self.book.windows),
                "late_drafts_after_caption": self.book.counters["late_drafts"]}
