"""A run's rows, one per window, made from its captions and the engine's results, and the live
view's lines (`crossspec drive`; `crossspec caption` prints its windows in the same words).

A row is a plain dict, the JSON line a window gets: ``window``, ``epoch``, ``t0``/``t1``
(seconds), ``status`` (DRAFT .. FINAL, UNVERIFIED), ``draft_text``, ``draft_first_token_ms``,
``confirmed_text``, ``confirmed_done_ms``, ``accepted``/``proposed``, and as they come the
complete draft and its agreement with the FINAL caption, the engine's numbers, why a window
was UNVERIFIED and the lossless verdict (run_record.py). run_summary.py summarizes rows.

Pure: no ROS. A caption is anything with crossspec/Caption.msg's fields (the drive hands the
message itself over); a window and a result are the engine's (``key``, ``t0``/``t1``;
``text``, ``tokens``, ``stats``).
"""

from __future__ import annotations

import copy
import math
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from crossspec_ros.run_record import (
    DRAFT_STATE_WORDS,
    FINISHED,
    REASON_WORDS,
    SAMPLED_NOT_CHECKED,
    checkable,
    lossless_verdict,
    status_name,
)
from crossspec_ros.run_summary import DroppedWindows, RunTally, summarize
from crossspec_ros.stamps import ns_to_seconds, stamp_seconds
from crossspec_ros.summaries import rounded, shown_percent
from crossspec_ros.sync.agreement import draft_agreement

# --loop: what the rows keep of windows written out, so a run of any length holds bounded
# memory: unfinished rows at most (the oldest beyond goes out as it stands; a pass of the
# sample bag has 24 windows), and the keys of finished ones, so that a late caption of one
# opens no row again
OPEN_ROWS_KEPT = 256
DONE_KEYS_KEPT = 4096
SAMPLING_NOT_CHECKED = f"crossspec drive: --check-lossless: {SAMPLED_NOT_CHECKED}"

Key = tuple[int, int]  # (epoch, window id): ids repeat after a bag loop, epochs do not
LosslessCheck = Callable[[Any, list[int], str], dict[str, Any]]


class WindowRows:
    """Collects a run's outputs into one row per window and prints the live view.

    A window's row is made from its captions (``on_caption``; the drive's subscription, on
    the executor's thread) and the engine's result (``on_result``, on the verifier's worker
    thread), which come in either order; the row goes to ``on_row`` once, when it is
    complete. What stays after that:

    - ``keep_rows`` (a pass that ends; the summary, --compare and the lossless check read the
      rows afterwards): every row stays in ``rows``; with ``hold_windows`` each verified
      window and its tokens wait in ``awaiting_check`` until ``check_held_windows`` takes
      them.
    - otherwise (--loop): a finished row is counted in ``tally`` and let go; at most
      OPEN_ROWS_KEPT unfinished rows stay (the oldest beyond goes out as it stands). ``check``
      compares each window with the verifier alone as its result comes (on the verifier's
      thread, before it takes its next window) and only the verdict stays, in the row.

    No window (frames, events) is kept otherwise: they were 2.2 MB a window of a --loop run.
    """

    def __init__(self, out: Any = sys.stdout, on_row: Callable[[dict], None] | None = None,
                 label: str = "", *, keep_rows: bool = True, hold_windows: bool = False,
                 check: LosslessCheck | None = None) -> None:
        self.on_row = on_row
        self.prefix = f"[{label}] " if label else ""  # which graph (drive --compare)
        self.keep_rows, self.hold_windows, self.check = keep_rows, hold_windows, check
        self.rows: dict[Key, dict[str, Any]] = {}
        self.done_keys: OrderedDict[Key, None] = OrderedDict()  # written out
        self.results_in: set[Key] = set()  # open rows whose engine result came
        self.awaiting_check: dict[Key, tuple[Any, list[int]]] = {}
        self.drafts_shown: set[Key] = set()
        self.tally = RunTally()  # the rows let go (not keep_rows)
        self.finished_windows = 0  # FINAL or UNVERIFIED captions seen (--max-windows)
        # the verifier's text -> ids, for the drafts' token agreement (set once it is loaded)
        self.tokenize: Callable[[str], Any] | None = None
        self.lock = threading.Lock()
        self.last_activity = time.monotonic()
        self.out = out

    def finished(self) -> int:
        with self.lock:
            return self.finished_windows

    def on_caption(self, caption: Any) -> None:
        """A caption into its window's row (the live view says what changed)."""
        status = status_name(caption.status)
        key = (int(caption.epoch), int(caption.window_id))
        finished = status in FINISHED
        lines: list[str] = []
        outgoing: list[dict] = []
        with self.lock:
            self.last_activity = time.monotonic()
            if key in self.done_keys and key not in self.rows:
                return  # written out and let go (--loop): a late caption opens no row
            row = self._row(key, lambda: _row_opened_by_caption(key, caption), outgoing)
            if row["t0"] == 0.0:  # opened by the engine's result, before any caption
                row["t0"], row["t1"] = (stamp_seconds(caption.window_start),
                                        stamp_seconds(caption.window_end))
            lines += self._take_draft(key, row, caption, status, finished)
            if status == "FINAL" and row["status"] != "FINAL":
                lines.append(self._take_final(key, row, caption))
            elif status == "UNVERIFIED" and row["status"] != "UNVERIFIED":
                lines.append(_take_unverified(key, row, caption))
            if row["status"] not in FINISHED:
                self.finished_windows += finished
                row["status"] = status
            outgoing += self._row_done(key)
        self._say(lines)
        self._hand_out(outgoing)

    def _take_draft(self, key: Key, row: dict, caption: Any, status: str, finished: bool
                    ) -> list[str]:
        """The caption's draft into the row; its live line, once: when it is complete, or
        when the caption finishes before it was."""
        row["draft_text"] = caption.draft_text or row["draft_text"]
        row["draft_first_token_ms"] = rounded(caption.draft_first_token_ms)
        complete = not math.isnan(caption.draft_done_ms)
        if "complete_draft" not in row and complete:
            row["complete_draft"] = caption.draft_text  # as first complete: read first
            # the verifier publishes in order: complete before its FINAL, or with it
            row["draft_before_confirmed"] = status != "FINAL"
            # as the caption says it (an estimate for a draft before the close: the
            # pass's end replaces it with draft_complete_ms, against the real close)
            row["draft_done_ms"] = rounded(caption.draft_done_ms)
        if not row["draft_text"] or key in self.drafts_shown or not (complete or finished):
            return []
        self.drafts_shown.add(key)
        return [draft_line(window_label(*key), caption.draft_first_token_ms, row["draft_text"])]

    def _take_final(self, key: Key, row: dict, caption: Any) -> str:
        """The FINAL caption into the row; its live line."""
        row["confirmed_text"] = caption.confirmed_text
        row["confirmed_done_ms"] = rounded(caption.confirmed_done_ms)
        row["acceptance"] = rounded(caption.acceptance)
        row["acceptance_rule"] = caption.acceptance_rule  # "": the verifier's own
        agreement = self._agreement(row)
        # a caption made under a relaxed rule is never shown as the verifier's own
        what = f"LOSSY ({caption.acceptance_rule})" if caption.acceptance_rule else "confirmed"
        return (f"[{window_label(*key)}] {what} {_ms(caption.confirmed_done_ms)}  "
                f"{caption.confirmed_text}   (acceptance {shown_percent(caption.acceptance)}"
                f"{agreement})")

    def _agreement(self, row: dict) -> str:
        """Score the window's complete draft against its FINAL caption (row fields
        ``draft_token_agreement``, ``draft_word_error_rate``); the terminal's words for it."""
        draft = row.get("complete_draft")
        if not draft:
            return ""
        score = draft_agreement(draft, row["confirmed_text"], self.tokenize)
        row["draft_token_agreement"] = rounded(score.token_agreement)
        row["draft_word_error_rate"] = rounded(score.word_error_rate)
        return (f"; draft: token agreement {rounded(score.token_agreement)}, WER "
                f"{rounded(score.word_error_rate)}")

    def _row(self, key: Key, fresh: Callable[[], dict], outgoing: list[dict]) -> dict:
        """The row of ``key``, opened with ``fresh()`` when it has none; without keep_rows,
        the oldest open row beyond OPEN_ROWS_KEPT goes to ``outgoing`` as it stands. Under
        the lock."""
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = fresh()
            while not self.keep_rows and len(self.rows) > OPEN_ROWS_KEPT:
                outgoing.append(self._write_out(next(iter(self.rows))))
        return row

    def _row_done(self, key: Key) -> list[dict]:
        """[the row], once and only once, when it is complete: UNVERIFIED, or FINAL with the
        engine's result too (they arrive on different threads, in either order). Under the
        lock."""
        row = self.rows[key]
        complete = row["status"] == "UNVERIFIED" or (row["status"] == "FINAL"
                                                    and key in self.results_in)
        if not complete or key in self.done_keys:
            return []
        return [self._write_out(key)]

    def _write_out(self, key: Key) -> dict:
        """A copy of the row of ``key`` for ``on_row``; without keep_rows, the row is counted
        in ``tally`` and let go. Under the lock."""
        self.done_keys[key] = None
        self.results_in.discard(key)
        if self.keep_rows:
            return dict(self.rows[key])
        row = self.rows.pop(key)
        self.tally.add(row)
        self.drafts_shown.discard(key)
        while len(self.done_keys) > DONE_KEYS_KEPT:
            self.done_keys.popitem(last=False)
        return dict(row)

    def _hand_out(self, rows: list[dict]) -> None:
        if self.on_row is not None:
            for row in rows:
                self.on_row(row)

    def on_result(self, window: Any, result: Any) -> None:
        """The engine's result for ``window`` into its row (and, with ``check``, the verdict
        of the verifier alone on it)."""
        key = window.key
        # the verifier alone, on this (the verifier's) thread, outside the lock: it takes a
        # while, and the captions keep coming meanwhile
        verdict = None if self.check is None else \
            self.check(window, list(result.tokens), result.stats.acceptance_rule or "")
        lines: list[str] = []
        outgoing: list[dict] = []
        with self.lock:
            if key in self.done_keys and key not in self.rows:
                return
            if self.hold_windows:
                self.awaiting_check[key] = (window, list(result.tokens))
            # status FINAL comes with the caption (printed then), which may come after this
            row = self._row(key, lambda: _row_opened_by_result(window, result), outgoing)
            row.update(_result_fields(result))
            if verdict is not None:
                row.update(verdict)
                if verdict.get("lossless") is False:
                    lines.append(not_lossless_line(window_label(*key),
                                                   verdict["verifier_only_text"]))
            self.results_in.add(key)
            self.last_activity = time.monotonic()
            outgoing += self._row_done(key)
        self._say(lines)
        self._hand_out(outgoing)

    def write_out_open_rows(self) -> None:
        """At the end of a --loop run: the rows still open go to ``on_row`` as they stand."""
        with self.lock:
            outgoing = [self._write_out(key) for key in list(self.rows)
                        if key not in self.done_keys]
        self._hand_out(outgoing)

    def summary(self, dropped: DroppedWindows | None = None) -> dict[str, Any]:
        """The pass's summary: of every row (keep_rows), else of those let go and the open
        ones."""
        with self.lock:
            if self.keep_rows:
                return summarize(self.in_order(), dropped)
            tally = copy.deepcopy(self.tally)
            for key, row in self.rows.items():
                if key not in self.done_keys:
                    tally.add(row)
        return tally.summary(dropped)

    def in_order(self) -> list[dict]:
        """The rows kept (keep_rows), in window order."""
        return [self.rows[key] for key in sorted(self.rows)]

    def _say(self, lines: list[str]) -> None:
        for line in lines:
            print(self.prefix + line, file=self.out, flush=True)


def _row_opened_by_caption(key: Key, caption: Any) -> dict[str, Any]:
    """A window's row as its first caption opens it."""
    return {"window": key[1], "epoch": key[0], "t0": stamp_seconds(caption.window_start),
            "t1": stamp_seconds(caption.window_end),
            "draft_text": "", "draft_first_token_ms": None, "confirmed_text": "",
            # the status it had before this caption: a FINAL may be the first one seen
            # (a caption confirmed whole at once, no draft before it)
            "confirmed_done_ms": None, "accepted": 0, "proposed": 0, "status": "DRAFT"}


def _row_opened_by_result(window: Any, result: Any) -> dict[str, Any]:
    """A window's row as the engine's result opens it (before any caption of it came)."""
    return {"window": window.id, "epoch": window.epoch, "t0": ns_to_seconds(window.t0),
            "t1": ns_to_seconds(window.t1), "status": "PARTIAL", "draft_text": result.draft_text,
            "draft_first_token_ms": None}


def _result_fields(result: Any) -> dict[str, Any]:
    """The row fields of the engine's result for a window: the confirmed caption and its
    numbers."""
    s = result.stats
    return {"confirmed_text": result.text, "confirmed_done_ms": rounded(s.confirmed_done_ms),
            "accepted": s.total_accepted, "proposed": s.total_proposed, "rounds": s.rounds,
            # of the first proposal, accepted in its own pass
            "prefill_accepted": getattr(s, "prefill_accepted", None),
            "verifier_prefill_ms": rounded(s.verifier_prefill_ms),
            "confirmed_first_ms": rounded(s.confirmed_first_ms),
            "final_draft_text": result.draft_text,
            "live_prefill_frames": s.live_prefill_frames,
            "ready_before_close_ms": rounded(s.ready_before_close_ms),
            # whose tokens the verifier took: the drafter's against the text's
            "accepted_by": {n: k for n, k in getattr(s, "accepted", {}).items() if k},
            "proposed_by": {n: k for n, k in getattr(s, "proposed", {}).items() if k}}


def _take_unverified(key: Key, row: dict, caption: Any) -> str:
    """The UNVERIFIED caption's reason and draft state into the row; its live line."""
    reason = REASON_WORDS.get(caption.unverified_reason, str(caption.unverified_reason))
    draft = DRAFT_STATE_WORDS.get(caption.draft_state, str(caption.draft_state))
    row.update(unverified_reason=reason, draft_state=draft)
    shown_draft = {"none": "(no draft: the drafter never drafted it)",
                   "cut short": f"{caption.draft_text} [draft cut short]"}.get(
                       draft, caption.draft_text)
    return f"[{window_label(*key)}] UNVERIFIED ({reason})  {shown_draft}"


def add_draft_timings(rows: list[dict], timings: Mapping[Key, Any]) -> None:
    """Each drafted row's draft as the draft node timed it against the window's real close
    (its messages before the close carry an estimate from the event stream's clock):
    ``timings``, window key -> the draft loop's timing. When it began and was complete (ms
    after the close; < 0: before it), whether it began before the close, and the window's
    events it did not read."""
    for row in rows:
        timing = timings.get((row.get("epoch", 0), row["window"]))
        if timing is None or not row.get("draft_text"):
            continue
        row.update(draft_started_ms=rounded(timing.ms(timing.started_at)),
                   draft_complete_ms=rounded(timing.complete_ms), draft_early=timing.early,
                   events_not_drafted=timing.events_unread)


def check_held_windows(engine: Any, window_rows: WindowRows, rows: list[dict]) -> None:
    """The verifier alone on each verified window ``window_rows`` held, after the pass, in
    the same process (its runs never load the machine while the pass is measured): the
    verdict into ``rows``; each window is let go once checked."""
    if engine is not None and not checkable(engine):
        print(SAMPLING_NOT_CHECKED, file=sys.stderr)
        window_rows.awaiting_check.clear()
        return
    for row in rows:
        key = (row.get("epoch", 0), row["window"])
        held = window_rows.awaiting_check.pop(key, None)
        if held is None or engine is None:
            continue
        window, tokens = held
        row.update(lossless_verdict(engine, window, tokens, row.get("acceptance_rule") or ""))
        if row.get("lossless") is False:
            print(not_lossless_line(window_label(*key), row["verifier_only_text"]))


def checker_as_they_finish(engine: Any) -> LosslessCheck | None:
    """--loop's lossless check, window by window as each finishes (nothing is kept for
    later); None, said once, where the decoding is not greedy."""
    if not checkable(engine):
        print(SAMPLING_NOT_CHECKED, file=sys.stderr)
        return None

    def check(window: Any, tokens: list[int], rule: str) -> dict[str, Any]:
        try:
            return lossless_verdict(engine, window, tokens, rule)
        except Exception as err:  # the row still finishes, unchecked, saying why
            return {"lossless_check_failed": f"{type(err).__name__}: {err}"}
    return check


def window_label(epoch: int, window_id: int) -> str:
    """How the terminal names a window: its id, and after a bag loop the pass it came in."""
    return str(window_id) if epoch == 0 else f"{window_id}@{epoch}"


def draft_line(label: str, first_token_ms: float, text: str) -> str:
    """The live view's line of a window's draft, with its first token's latency."""
    return f"[{label}] draft     {_ms(first_token_ms)}  {text}"


def not_lossless_line(label: str, verifier_text: str) -> str:
    """The line a caption that differs from the verifier alone gets."""
    return f"[{label}] NOT LOSSLESS: verifier alone says {verifier_text}"


def _ms(x: float) -> str:
    """A live-view latency, aligned; dashes where not measured (NaN)."""
    return "   --   " if x != x else f"{x:6.1f} ms"
