"""A run's summary from its rows (run_rows.py's, one per window): one tally of the numbers every
command that captions windows reports (windows FINAL and UNVERIFIED, the confirmed caption's
latency after the close, the draft's first token p50/p95, accepted draft tokens, early start,
the lossless tally), and the lines `crossspec drive` and `crossspec caption` print from it.
`bench split` takes its counts and latencies from the same tally.

Pure: no ROS, no models; a row is a plain dict (run_rows.py names its fields).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from crossspec_ros import summaries
from crossspec_ros.run_record import FINISHED, LosslessTally, lossy_words
from crossspec_ros.summaries import (
    BoundedSample,
    median_ms,
    percentile_ms,
    shown,
    shown_ms,
    shown_percent,
)
from crossspec_ros.summaries import against_close as _where

# the draft node's decisions (DraftSchedule's reasons), as the summary line says them
DRAFT_DECISION_WORDS = {"early": "drafted before the close", "at_close": "at the close",
                        "drafted_early": "not drafted again at the close",
                        "verifier_finished": "not drafted (the verifier had finished them)",
                        "stepped_aside": "stepped aside (the verifier finished them meanwhile)",
                        "verifier_behind": "rested (the verifier fell behind while it drafted)"}


@dataclass(frozen=True)
class DroppedWindows:
    """Windows a busy node let go, per node (they mean different things, so they are never
    added): the verifier's were published UNVERIFIED ("verifier busy"), the drafter's were
    never drafted (their captions come without a draft)."""

    verifier: int = 0
    drafter: int = 0
    # drafts that reached the verifier after their window's caption was finished (its caption
    # book's late_drafts): drafting nobody would read
    late_drafts: int = 0


class RunTally:
    """A pass's summary numbers, taken row by row (``add``): counts and sums exact, medians
    and percentiles over ``BoundedSample``s, so a --loop run of any length summarizes in
    bounded memory. ``summary`` gives the JSON's numbers and the terminal's line.

    ``confirmed_done_ms``: the window closing (its synchronizer) to its last confirmed token;
    ``draft_first_token_ms``: the window closing (the draft node's synchronizer) to the first
    draft token; ``ready_before_close_ms`` (early start): how long before the close a caption
    was complete (negative: it started before the close and completed after it)."""

    def __init__(self) -> None:
        self.windows = self.final = self.unverified = self.unfinished = 0
        self.draft_came_first = 0  # FINAL windows whose draft's first token came before it
        self.drafted = 0  # windows with a draft caption
        self.draft_before_confirmed = 0  # FINAL windows whose draft was complete before it
        self.draft_complete = BoundedSample()  # ms after the drafter's close (< 0: before)
        self.accepted = self.proposed = 0
        self.draft_first = BoundedSample()
        self.confirmed_done = BoundedSample()
        self.early_started = 0
        self.ready_before = BoundedSample()   # ms before the close, complete before it
        self.done_after = BoundedSample()     # ms after the close, early-started ones
        self.scored = 0
        self.token_agreement = BoundedSample()
        self.word_error_rate = BoundedSample()
        self.lossless = LosslessTally()
        self.verifier_only_ms = BoundedSample()

    def add(self, row: dict[str, Any]) -> None:
        self.windows += 1
        status = row["status"]
        self.unverified += status == "UNVERIFIED"
        self.unfinished += status not in FINISHED
        self.draft_first.add(row.get("draft_first_token_ms"))
        if row.get("draft_text"):
            self.drafted += 1
            self.draft_complete.add(row.get("draft_complete_ms", row.get("draft_done_ms")))
        if status == "FINAL":
            self._add_final(row)

    def _add_final(self, row: dict[str, Any]) -> None:
        self.final += 1
        self.draft_before_confirmed += bool(row.get("draft_before_confirmed"))
        first, done = row.get("draft_first_token_ms"), row.get("confirmed_done_ms")
        self.draft_came_first += first is not None and done is not None and first < done
        self.accepted += row.get("accepted", 0)
        self.proposed += row.get("proposed", 0)
        self.confirmed_done.add(done)
        ahead = row.get("ready_before_close_ms")
        if ahead is not None:
            self.early_started += 1
            if ahead > 0:
                self.ready_before.add(ahead)
            else:
                self.done_after.add(-ahead)
        if row.get("draft_word_error_rate") is not None:
            self.scored += 1
            self.word_error_rate.add(row["draft_word_error_rate"])
            self.token_agreement.add(row.get("draft_token_agreement"))
        self.lossless.add(row, (row.get("epoch", 0), row["window"]))
        if "lossless" in row:
            self.verifier_only_ms.add(row.get("verifier_only_ms"))

    def summary(self, dropped: DroppedWindows | None = None) -> dict[str, Any]:
        dropped = dropped or DroppedWindows()
        first = self.draft_first.values
        summary: dict[str, Any] = {
            "windows": self.windows, "final": self.final, "unverified": self.unverified,
            "unfinished": self.unfinished,
            "verifier_dropped_windows": dropped.verifier,
            "drafter_dropped_windows": dropped.drafter,
            "drafts_after_final": dropped.late_drafts,
            "draft_came_first": self.draft_came_first,
            "draft_windows": self.drafted,
            "draft_complete_ms_median": median_ms(self.draft_complete.values),
            "draft_complete_before_close": sum(ms <= 0 for ms in self.draft_complete.values),
            "draft_before_confirmed": self.draft_before_confirmed,
            "draft_first_token_ms_p50": median_ms(first),
            "draft_first_token_ms_p95": percentile_ms(first, 95),
            "confirmed_done_ms_median": median_ms(self.confirmed_done.values),
            "acceptance": round(self.accepted / self.proposed, 3) if self.proposed else None,
            "accepted": self.accepted, "proposed": self.proposed,
            # early start: captions started before their window closed; of them, those
            # complete before it, and how long before; the others, how long after
            "early_started": self.early_started,
            "ready_before_close": self.ready_before.count,
            "ready_before_close_ms_median": median_ms(self.ready_before.values),
            "early_started_done_after_close_ms_median": median_ms(self.done_after.values),
            "draft_agreement_windows": self.scored,
            "draft_token_agreement_median": summaries.rounded(
                summaries.median(self.token_agreement.values), 3),
            "draft_word_error_rate_median": summaries.rounded(
                summaries.median(self.word_error_rate.values), 3)}
        summary.update(self._lossless_numbers())
        samples = (self.draft_first, self.draft_complete, self.confirmed_done,
                   self.ready_before, self.done_after, self.token_agreement,
                   self.word_error_rate, self.verifier_only_ms)
        if any(sample.sampled for sample in samples):  # a very long --loop
            summary["medians_over_a_sample_of"] = self.draft_first.capacity
        summary["line"] = drive_line(self, summary)
        return summary

    def _lossless_numbers(self) -> dict[str, Any]:
        """The lossless tally's keys the summary carries: the lossy ones where a caption was
        made under a relaxed rule, the checked ones where any was checked."""
        lossless = self.lossless.summary()
        numbers: dict[str, Any] = {}
        if "lossy_windows" in lossless:  # relaxed acceptance: never counted as lossless
            numbers.update((k, lossless[k]) for k in
                           ("lossy_windows", "lossy_same_as_verifier", "acceptance_rules"))
        if self.lossless.checked:
            numbers["lossless"] = lossless["lossless"]
            numbers["lossless_checked"] = lossless["lossless_checked"]
            # the reference run's own time, alone on the machine after the drive: not a
            # latency after the close, so it never stands beside confirmed_done_ms in the line
            numbers["lossless_check_verifier_ms_median"] = median_ms(
                self.verifier_only_ms.values)
        return numbers


def summarize(rows: Iterable[dict], dropped: DroppedWindows | None = None) -> dict[str, Any]:
    """One pass's summary from its rows (``RunTally``)."""
    return tally_of(rows).summary(dropped)


def tally_of(rows: Iterable[dict]) -> RunTally:
    """``rows`` counted in a fresh ``RunTally``."""
    tally = RunTally()
    for row in rows:
        tally.add(row)
    return tally


def drive_line(tally: RunTally, summary: dict[str, Any]) -> str:
    """`crossspec drive`'s summary line: the counts, the draft against the close and the
    confirmed caption, the confirmed latency, early start, draft agreement, lossless."""
    counts = f"{tally.final} FINAL, {tally.unverified} UNVERIFIED"
    if tally.unfinished:
        counts += f", {tally.unfinished} unfinished"
    verifier, drafter = (summary["verifier_dropped_windows"],
                         summary["drafter_dropped_windows"])
    if verifier or drafter:
        counts += f"; dropped by the busy verifier {verifier}, by the busy drafter {drafter}"
    if summary["drafts_after_final"]:
        counts += f"; {summary['drafts_after_final']} drafts came after their caption " \
            "was finished"
    line = (f"{tally.windows} windows ({counts}): a draft caption in {tally.drafted}, "
            f"complete {_where(summary['draft_complete_ms_median'])} the close (median; "
            f"before it in {summary['draft_complete_before_close']}), complete before the "
            f"confirmed caption in {tally.draft_before_confirmed} of {tally.final} FINAL "
            f"windows; draft first token after the close p50 "
            f"{shown_ms(summary['draft_first_token_ms_p50'])}, p95 "
            f"{shown_ms(summary['draft_first_token_ms_p95'])}, before the confirmed "
            f"caption in {tally.draft_came_first}; confirmed after the close median "
            f"{shown_ms(summary['confirmed_done_ms_median'])}; accepted draft "
            f"tokens {tally.accepted} of {tally.proposed} proposed "
            f"({shown_percent(summary['acceptance'] or math.nan)})")
    return line + _early_start_words(tally, summary) + _checked_words(tally, summary)


def _early_start_words(tally: RunTally, summary: dict[str, Any]) -> str:
    """The drive line's words on early start and on the drafts' agreement."""
    words = ""
    if tally.ready_before.count:
        words += (f"; {tally.ready_before.count} of {tally.final} captions decoded before the "
                  f"close (early start), complete a median "
                  f"{shown_ms(summary['ready_before_close_ms_median'])} before it")
    if tally.done_after.count:
        words += (f"; {tally.done_after.count} started early completed only after the close "
                  f"(a median {shown_ms(summary['early_started_done_after_close_ms_median'])}"
                  f" after it)")
    if tally.scored:
        words += (f"; complete drafts against their final captions ({tally.scored} "
                  f"windows): token agreement median "
                  f"{shown(summary['draft_token_agreement_median'], '.3g')}, word error "
                  f"rate median {shown(summary['draft_word_error_rate_median'], '.3g')}")
    return words


def _checked_words(tally: RunTally, summary: dict[str, Any]) -> str:
    """The drive line's words on the lossless check, lossy captions and sampled medians."""
    words = ""
    if tally.lossless.checked:
        words += f"; lossless {tally.lossless.lossless}/{tally.lossless.checked}"
    if tally.lossless.lossy:
        words += "; " + lossy_words(summary)
    if "medians_over_a_sample_of" in summary:
        words += (f" (medians over a uniform sample of "
                  f"{summary['medians_over_a_sample_of']} windows)")
    return words


def add_drafter_decisions(summary: dict[str, Any], decisions: dict[str, Any]) -> None:
    """The draft node's decisions (windows per reason, and its lead) into ``summary``: the
    key ``drafter`` and their words at the end of its line."""
    summary["drafter"] = decisions
    summary["line"] += "; drafter: " + ", ".join(
        f"{n} {DRAFT_DECISION_WORDS.get(reason, reason)}"
        for reason, n in decisions.items() if reason != "lead_ms") + \
        f" (lead {decisions['lead_ms']} ms)"


def captioned_line(rows: Iterable[dict]) -> str:
    """`crossspec caption`'s summary line over its windows. A window may have no draft
    latency (no events, or the verifier confirmed the caption before the drafter's first
    token, which load makes likelier; the adaptive gate also runs windows without the
    drafter): the medians are over the windows that have one, "n/a" over none."""
    tally = tally_of(rows)
    if not tally.final:
        return "no window with RGB was captioned"
    summary = tally.summary()
    # caption's rows carry a draft latency on FINAL windows only (without RGB no engine ran)
    without = tally.final - tally.draft_first.count
    line = (f"{tally.final} windows captioned: confirmed median "
            f"{shown_ms(summary['confirmed_done_ms_median'])}, draft first token median "
            f"{shown_ms(summary['draft_first_token_ms_p50'])}")
    if without:
        line += (f" ({without} of {tally.final} windows without a draft token: no events, "
                 "the drafter off or failing, or the caption confirmed first)")
    line += f", acceptance {tally.accepted}/{tally.proposed}"
    if tally.lossless.checked:
        line += f", lossless {tally.lossless.lossless}/{tally.lossless.checked}"
    if tally.lossless.lossy:
        line += ", " + lossy_words(summary)
    return line
