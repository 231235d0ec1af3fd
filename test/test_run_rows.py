"""A run's rows (run_rows.py): captions and engine results into one row per window, the live
view's lines, the lossless check of held windows, and bounded memory under --loop. Plain data:
captions are objects with crossspec/Caption.msg's fields, no ROS graph."""

from __future__ import annotations

import gc
import io
import weakref
from types import SimpleNamespace

import pytest

from crossspec_ros.run_rows import (
    OPEN_ROWS_KEPT,
    WindowRows,
    add_draft_timings,
    check_held_windows,
    window_label,
)
from crossspec_ros.run_summary import summarize

NAN = float("nan")


def _caption(wid: int, status: int, draft: str, draft_done_ms: float, confirmed: str = "",
             done_ms: float = float("nan"), acceptance_rule: str = "", epoch: int = 0):
    stamp = SimpleNamespace(sec=wid, nanosec=0)
    end = SimpleNamespace(sec=wid + 1, nanosec=0)
    return SimpleNamespace(window_id=wid, epoch=epoch, status=status, window_start=stamp,
                           window_end=end,
                           draft_text=draft, draft_first_token_ms=5.0,
                           draft_done_ms=draft_done_ms, confirmed_text=confirmed,
                           confirmed_done_ms=done_ms, acceptance=0.5, unverified_reason=0,
                           draft_state=3, acceptance_rule=acceptance_rule)


def test_a_complete_draft_is_scored_against_its_final_caption_and_a_late_one_is_not():
    out = io.StringIO()
    window_rows = WindowRows(out=out)
    window_rows.tokenize = lambda text: text.split()
    nan = NAN
    # window 1: the draft completes (draft_done_ms set) before the FINAL caption
    window_rows.on_caption(_caption(1, 0, "the ego car waits", nan))
    window_rows.on_caption(_caption(1, 0, "the ego car waits at a light", 12.0))
    window_rows.on_caption(_caption(1, 2, "the ego car waits at a light", 12.0,
                                    "the ego car waits at a red light", 20.0))
    # window 2: FINAL before the draft was complete: nothing to score
    window_rows.on_caption(_caption(2, 0, "a truck", nan))
    window_rows.on_caption(_caption(2, 2, "a truck", nan, "a truck turns left", 9.0))
    first, second = window_rows.rows[(0, 1)], window_rows.rows[(0, 2)]
    assert first["complete_draft"] == "the ego car waits at a light"
    assert first["draft_word_error_rate"] == pytest.approx(1 / 8, abs=0.01)  # one word missing
    assert 0.0 < first["draft_token_agreement"] < 1.0
    assert "complete_draft" not in second and "draft_token_agreement" not in second
    assert "; draft: token agreement " in out.getvalue()
    summary = summarize([first, second])
    assert summary["draft_agreement_windows"] == 1
    assert summary["draft_word_error_rate_median"] == pytest.approx(first["draft_word_error_rate"],
                                                                    abs=0.001)
    assert "complete drafts against their final captions (1 windows)" in summary["line"]
    assert summary["early_started"] == 0 and "early start" not in summary["line"]


def test_a_lossy_caption_is_marked_in_the_terminal_and_the_json_and_checked_apart(capsys):
    out = io.StringIO()
    window_rows = WindowRows(out=out)
    window_rows.on_caption(_caption(1, 2, "", float("nan"), "a car turns", 3.0))
    window_rows.on_caption(_caption(2, 2, "", float("nan"), "a car waits", 3.0,
                                    acceptance_rule="top_k:3"))
    assert "[1] confirmed " in out.getvalue() and "[2] LOSSY (top_k:3) " in out.getvalue()
    rows = [window_rows.rows[(0, 1)], window_rows.rows[(0, 2)]]
    assert [r["acceptance_rule"] for r in rows] == ["", "top_k:3"]
    # the verifier alone says "a car turns" for both windows (token ids 7 and 8)
    for wid, tokens in ((1, [7]), (2, [8])):
        window_rows.awaiting_check[(0, wid)] = (object(), tokens)
    engine = SimpleNamespace(config=SimpleNamespace(mode="greedy"), verifier_only=lambda w: [7],
                             verifier=SimpleNamespace(tokenizer=SimpleNamespace(
                                 decode=lambda ids, skip_special_tokens: "a car turns")))
    check_held_windows(engine, window_rows, rows)
    assert rows[0]["lossless"] is True and "lossless" not in rows[1]
    assert rows[1]["lossy_same_as_verifier"] is False
    assert "NOT LOSSLESS" not in capsys.readouterr().out  # lossy by choice, not a fault
    summary = summarize(rows)
    assert (summary["lossless"], summary["lossless_checked"]) == (1, 1)
    assert summary["lossy_windows"] == 1 and summary["acceptance_rules"] == ["top_k:3"]
    assert "LOSSY (top_k:3): 1 captions under a relaxed acceptance rule, 0 of them the " \
        "verifier's own" in summary["line"]


def test_check_lossless_with_sampling_says_it_compares_greedy_only(capsys):
    engine = SimpleNamespace(config=SimpleNamespace(mode="sampling"))
    rows = [{"window": 1, "status": "FINAL"}]
    check_held_windows(engine, SimpleNamespace(awaiting_check={}), rows)
    assert "only greedy decoding" in capsys.readouterr().err
    assert "lossless" not in rows[0]  # nothing claimed either way


# -- bounded memory under --loop (issue 45, item 22) -------------------------------------------

class _Window:
    """A verified window as the verifier node hands it over; its frames are the bulk."""

    def __init__(self, epoch: int, wid: int) -> None:
        self.epoch, self.id, self.key = epoch, wid, (epoch, wid)
        self.t0, self.t1 = wid * 10**9, (wid + 1) * 10**9
        self.frames = bytearray(256 * 1024)


def _result(tokens: tuple[int, ...] = (7,), rule: str = ""):
    stats = SimpleNamespace(confirmed_done_ms=3.0, total_accepted=2, total_proposed=4, rounds=1,
                            verifier_prefill_ms=1.0, confirmed_first_ms=1.0,
                            live_prefill_frames=8, ready_before_close_ms=float("nan"),
                            acceptance_rule=rule)
    return SimpleNamespace(text="a car turns", tokens=list(tokens), draft_text="a car",
                           stats=stats)


def _finish_window(window_rows, epoch: int, wid: int, result_first: bool, tokens=(7,)):
    """One window's DRAFT caption, then its engine result and FINAL caption in either order
    (they come on different threads); returns a weak reference to the window."""
    window = _Window(epoch, wid)
    window_rows.on_caption(_caption(wid, 0, "a car", float("nan"), epoch=epoch))
    final = _caption(wid, 2, "a car", 5.0, "a car turns", 3.0, epoch=epoch)
    if result_first:
        window_rows.on_result(window, _result(tokens))
        window_rows.on_caption(final)
    else:
        window_rows.on_caption(final)
        window_rows.on_result(window, _result(tokens))
    return weakref.ref(window)


def test_a_drive_without_the_lossless_check_keeps_no_verified_window():
    streamed: list[dict] = []
    window_rows = WindowRows(out=io.StringIO(), on_row=streamed.append)
    windows = [_finish_window(window_rows, 0, wid, wid % 2 == 0) for wid in range(24)]
    gc.collect()
    assert [r["window"] for r in streamed] == list(range(24))
    assert all(ref() is None for ref in windows)  # frames and events let go at once


def test_a_looped_drive_lets_go_of_every_finished_window_however_long_it_runs():
    streamed: list[dict] = []
    window_rows = WindowRows(out=io.StringIO(), on_row=streamed.append, keep_rows=False)
    windows = [_finish_window(window_rows, *divmod(n, 24), result_first=n % 2 == 0)
               for n in range(600)]  # 25 passes over a 24-window bag
    gc.collect()
    # every row went out once, complete, in order; nothing of it stayed behind
    assert [(r["epoch"], r["window"]) for r in streamed] == [divmod(n, 24) for n in range(600)]
    assert all(r["status"] == "FINAL" and r["confirmed_text"] for r in streamed)
    assert all(ref() is None for ref in windows)
    assert not window_rows.rows
    summary = window_rows.summary()
    assert (summary["windows"], summary["final"]) == (600, 600)
    # a late caption of a window that finished long ago opens no row again
    window_rows.on_caption(_caption(3, 0, "a car", float("nan"), epoch=24))
    assert not window_rows.rows


def test_a_looped_drive_keeps_a_bounded_number_of_unfinished_windows():
    streamed: list[dict] = []
    window_rows = WindowRows(out=io.StringIO(), on_row=streamed.append, keep_rows=False)
    for n in range(3 * OPEN_ROWS_KEPT):  # windows whose caption never finishes
        epoch, wid = divmod(n, 24)
        window_rows.on_caption(_caption(wid, 0, "a car", float("nan"), epoch=epoch))
    assert len(window_rows.rows) == OPEN_ROWS_KEPT
    # the oldest went out as they stood, unfinished, and count in the summary as such
    assert [(r["epoch"], r["window"]) for r in streamed] == \
        [divmod(n, 24) for n in range(2 * OPEN_ROWS_KEPT)]
    assert {r["status"] for r in streamed} == {"DRAFT"}
    summary = window_rows.summary()
    assert (summary["windows"], summary["unfinished"]) == (3 * OPEN_ROWS_KEPT,) * 2


def test_a_looped_drive_checks_each_window_as_it_finishes_and_keeps_only_the_verdict():
    checked: list[tuple[int, int]] = []

    def check(window, tokens, lossy):  # the verifier alone says token 7 for every window
        checked.append(window.key)
        return {"verifier_only_ms": 1.0, "verifier_only_text": "a car turns",
                "lossy_same_as_verifier" if lossy else "lossless": tokens == [7]}

    out, streamed = io.StringIO(), []
    window_rows = WindowRows(out=out, on_row=streamed.append, keep_rows=False, check=check)
    windows = [_finish_window(window_rows, 0, 1, True),
               _finish_window(window_rows, 0, 2, False, (8,))]
    gc.collect()
    assert checked == [(0, 1), (0, 2)]
    assert [r["lossless"] for r in streamed] == [True, False]
    assert all(ref() is None for ref in windows)
    assert "[2] NOT LOSSLESS: verifier alone says a car turns" in out.getvalue()
    summary = window_rows.summary()
    assert (summary["lossless"], summary["lossless_checked"]) == (1, 2)


# -- rows from captions and results in either order, the live view --------------------------

def test_a_row_opened_by_the_engines_result_takes_its_span_and_status_from_the_captions():
    streamed: list[dict] = []
    window_rows = WindowRows(out=io.StringIO(), on_row=streamed.append)
    window = _Window(0, 4)
    window_rows.on_result(window, _result())
    row = window_rows.rows[(0, 4)]
    assert (row["status"], row["t0"], row["t1"]) == ("PARTIAL", 4.0, 5.0)
    assert not streamed  # FINAL comes with the caption: not complete yet
    window_rows.on_caption(_caption(4, 2, "a car", 5.0, "a car turns", 3.0))
    assert [r["status"] for r in streamed] == ["FINAL"]
    assert streamed[0]["confirmed_done_ms"] == 3.0 and streamed[0]["accepted"] == 2
    assert window_rows.finished() == 1


def test_a_final_caption_seen_first_opens_a_row_shows_its_unfinished_draft_and_counts_once():
    out = io.StringIO()
    window_rows = WindowRows(out=out, label="crossspec")
    final = _caption(2, 2, "a truck", NAN, "a truck turns", 9.0)  # its draft never complete
    window_rows.on_caption(final)
    window_rows.on_caption(final)  # published again: neither a second line nor a count
    row = window_rows.rows[(0, 2)]
    assert row["status"] == "FINAL" and "complete_draft" not in row
    assert (row["t0"], row["t1"]) == (2.0, 3.0)
    lines = out.getvalue().splitlines()
    assert lines == ["[crossspec] [2] draft        5.0 ms  a truck",
                     "[crossspec] [2] confirmed    9.0 ms  a truck turns   (acceptance 50%)"]
    assert window_rows.finished() == 1


def test_an_unverified_caption_says_why_and_what_became_of_its_draft():
    out = io.StringIO()
    window_rows = WindowRows(out=out)
    busy, no_rgb = _caption(5, 3, "", NAN, epoch=1), _caption(6, 3, "a bus", NAN)
    busy.unverified_reason, busy.draft_state = 2, 0
    no_rgb.unverified_reason, no_rgb.draft_state = 1, 2
    window_rows.on_caption(busy)
    window_rows.on_caption(no_rgb)
    assert window_rows.rows[(1, 5)]["unverified_reason"] == "verifier busy"
    assert window_rows.rows[(0, 6)]["draft_state"] == "cut short"
    assert "[5@1] UNVERIFIED (verifier busy)  (no draft: the drafter never drafted it)" in \
        out.getvalue()
    assert "[6] UNVERIFIED (no RGB)  a bus [draft cut short]" in out.getvalue()
    assert window_label(1, 5) == "5@1" and window_label(0, 5) == "5"


def test_a_drafted_row_takes_the_draft_nodes_timing_against_the_real_close():
    timing = SimpleNamespace(started_at=1.0, complete_ms=-12.345, early=True, events_unread=3,
                             ms=lambda at: at * 1000.0 - 1020.0)
    rows = [{"window": 1, "epoch": 0, "draft_text": "a car"},
            {"window": 2, "epoch": 0, "draft_text": ""}]  # no draft: nothing to time
    add_draft_timings(rows, {(0, 1): timing, (0, 2): timing})
    assert rows[0] == {"window": 1, "epoch": 0, "draft_text": "a car",
                       "draft_started_ms": -20.0, "draft_complete_ms": -12.35,
                       "draft_early": True, "events_not_drafted": 3}
    assert "draft_started_ms" not in rows[1]
