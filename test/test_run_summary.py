"""A run's summary (run_summary.py): the numbers every command reports from its rows, the drive's
line and caption's line. Plain rows, no ROS graph."""

from __future__ import annotations

from crossspec_ros.comparison import compare_graphs, compare_line
from crossspec_ros.run_record import verdict
from crossspec_ros.run_summary import (
    DroppedWindows,
    RunTally,
    add_drafter_decisions,
    captioned_line,
    summarize,
)


def test_the_summary_says_how_many_captions_were_decoded_before_their_close():
    rows = [{"window": w, "status": "FINAL", "draft_first_token_ms": 8.0,
             "confirmed_done_ms": 0.3, "ready_before_close_ms": ahead}
            for w, ahead in ((1, 30.0), (2, 10.0), (3, None))]
    summary = summarize(rows)
    assert summary["early_started"] == 2 and summary["ready_before_close_ms_median"] == 20.0
    assert "2 of 3 captions decoded before the close (early start), complete a median " \
        "20.0 ms before it" in summary["line"]


# -- the summary's numbers (item 27) ----------------------------------------------------------

def test_only_captions_complete_before_the_close_count_as_decoded_before_it():
    rows = [{"window": w, "status": "FINAL", "draft_first_token_ms": 8.0,
             "confirmed_done_ms": 0.3, "ready_before_close_ms": ahead}
            for w, ahead in ((1, 30.0), (2, -300.0), (3, None))]
    summary = summarize(rows)
    assert (summary["early_started"], summary["ready_before_close"]) == (2, 1)
    assert summary["ready_before_close_ms_median"] == 30.0
    assert summary["early_started_done_after_close_ms_median"] == 300.0
    line = summary["line"]
    assert "1 of 3 captions decoded before the close (early start), complete a median " \
        "30.0 ms before it" in line
    assert "1 started early completed only after the close (a median 300.0 ms after it)" \
        in line
    assert "-300" not in line


def test_the_summary_names_each_nodes_dropped_windows_apart():
    rows = [{"window": 1, "status": "UNVERIFIED", "draft_first_token_ms": None}]
    summary = summarize(rows, DroppedWindows(verifier=22, drafter=5))
    assert (summary["verifier_dropped_windows"], summary["drafter_dropped_windows"]) == (22, 5)
    assert "dropped by the busy verifier 22, by the busy drafter 5" in summary["line"]
    assert "27" not in summary["line"]


def test_the_summary_counts_drafts_that_came_after_their_caption_was_finished():
    rows = [{"window": 1, "status": "FINAL", "draft_first_token_ms": 5.0}]
    quiet = summarize(rows)
    assert quiet["drafts_after_final"] == 0 and "after their caption" not in quiet["line"]
    late = summarize(rows, DroppedWindows(late_drafts=3))
    assert late["drafts_after_final"] == 3
    assert "3 drafts came after their caption was finished" in late["line"]


def test_a_summary_without_measurements_says_n_a():
    rows = [{"window": 1, "status": "UNVERIFIED", "draft_first_token_ms": None},
            {"window": 2, "status": "DRAFT", "draft_first_token_ms": None}]
    summary = summarize(rows)
    assert summary["unfinished"] == 1
    assert "None" not in summary["line"] and "p50 n/a, p95 n/a" in summary["line"]
    assert "confirmed after the close median n/a" in summary["line"]
    results = {(name, 0): rows for name in ("alone", "live_alone", "text_only", "crossspec")}
    assert "None" not in compare_line(compare_graphs(results, range(1)))


def test_the_summary_of_rows_taken_one_by_one_is_the_summary_of_them_all():
    rows = [{"window": w, "status": status, "draft_text": "d" if w % 2 else "",
             "draft_first_token_ms": 4.0 + w, "confirmed_done_ms": 10.0 * w,
             "accepted": w, "proposed": 2 * w, **verdict(w != 3)}
            for w, status in ((1, "FINAL"), (2, "FINAL"), (3, "FINAL"), (4, "UNVERIFIED"))]
    tally = RunTally()
    for row in rows:
        tally.add(row)
    summary = summarize(rows)
    assert tally.summary() == summary
    assert (summary["windows"], summary["final"], summary["unverified"]) == (4, 3, 1)
    assert summary["confirmed_done_ms_median"] == 20.0  # FINAL windows only
    assert summary["draft_first_token_ms_p50"] == 6.5  # every window's draft
    assert summary["draft_first_token_ms_p95"] == 7.8
    assert (summary["accepted"], summary["proposed"], summary["acceptance"]) == (6, 12, 0.5)
    assert (summary["lossless"], summary["lossless_checked"]) == (2, 3)
    assert "; lossless 2/3" in summary["line"]


def test_the_drafters_decisions_are_named_at_the_end_of_the_line():
    summary = summarize([{"window": 1, "status": "FINAL"}])
    add_drafter_decisions(summary, {"lead_ms": 51.7, "early": 20, "at_close": 4})
    assert summary["drafter"] == {"lead_ms": 51.7, "early": 20, "at_close": 4}
    assert summary["line"].endswith("; drafter: 20 drafted before the close, 4 at the close "
                                    "(lead 51.7 ms)")


def test_caption_says_how_many_final_windows_had_no_draft_token_and_counts_lossy_apart():
    rows = [{"window": 1, "status": "FINAL", "draft_first_token_ms": 5.0,
             "confirmed_done_ms": 10.0, "accepted": 2, "proposed": 5, **verdict(True)},
            {"window": 2, "status": "FINAL", "draft_first_token_ms": None,
             "confirmed_done_ms": 30.0, "accepted": 1, "proposed": 1,
             "acceptance_rule": "top_k:2", **verdict(False, "top_k:2")},
            {"window": 3, "status": "UNVERIFIED", "draft_text": "", "confirmed_text": ""}]
    assert captioned_line(rows) == (
        "2 windows captioned: confirmed median 20.0 ms, draft first token median 5.0 ms "
        "(1 of 2 windows without a draft token: no events, the drafter off or failing, or the "
        "caption confirmed first), acceptance 3/6, lossless 1/1, LOSSY (top_k:2): 1 captions "
        "under a relaxed acceptance rule, 0 of them the verifier's own")
    assert captioned_line(rows[2:]) == "no window with RGB was captioned"
