"""`crossspec eval-draft --leads`: drafts begun a lead before the window's close read only the
events before ``t1 - lead``; the scene-change split; bad leads refused before any model loads;
and small end-to-end runs on the sample bag and on held-out simulated windows."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from synthetic_windows import random_window

from crossspec_ros.cli.distill_cmd import parse_leads
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.models.pair import BUNDLED_PAIR
from crossspec_ros.sync.window import Window
from crossspec_ros.train.evaluate import events_before_lead, lead_quality, scene_changes

REPO = Path(__file__).resolve().parents[1]
SAMPLE_BAG = REPO / "rosbags" / "sample"
RATE_KEYS = ("acceptance", "accepted_per_pass", "token_agreement", "exact_caption_rate")
MS = 1_000_000  # ns


def _window(stamps_ns: list[int], t0: int = 5 * 10**9, t1: int = 6 * 10**9) -> Window:
    n = len(stamps_ns)
    events = EventBatch(np.asarray(stamps_ns), np.zeros(n), np.zeros(n), np.ones(n), 4, 3)
    return Window(5, t0, t1, events, [], n_distinct_frames=0)


def test_a_lead_keeps_only_the_events_before_the_close_minus_the_lead():
    t0, t1 = 5 * 10**9, 6 * 10**9
    stamps = [t0, t0 + 100 * MS, t1 - 400 * MS - 1, t1 - 400 * MS, t1 - 100 * MS, t1 - 1]
    window = _window(stamps)
    assert events_before_lead(window, 0) is window  # lead 0: the whole window, as before
    cut = events_before_lead(window, 400)
    assert cut.events.t.tolist() == stamps[:3]  # stamp < t1 - lead: t1 - 400 ms itself is out
    assert events_before_lead(window, 100).events.t.tolist() == stamps[:4]
    assert events_before_lead(window, 0.5).events.t.tolist() == stamps[:5]
    # only the events change: bounds, frames, id and the sensor size stay
    assert (cut.t0, cut.t1, cut.id, cut.frames) == (window.t0, window.t1, window.id, [])
    assert (cut.events.width, cut.events.height) == (4, 3)
    assert len(window.events) == len(stamps)  # the window itself is not changed
    # a lead as long as the window leaves an empty batch of the same sensor
    empty = events_before_lead(window, 1000)
    assert len(empty.events) == 0 and (empty.events.width, empty.events.height) == (4, 3)


def test_unsorted_events_are_cut_by_their_stamps_too():
    t1 = 6 * 10**9
    window = _window([t1 - 50 * MS, t1 - 500 * MS, t1 - 10 * MS, t1 - 300 * MS])
    assert sorted(events_before_lead(window, 200).events.t.tolist()) == \
        [t1 - 500 * MS, t1 - 300 * MS]


def test_a_scene_change_is_a_reference_unlike_the_previous_windows():
    refs = [[1, 2], [1, 2], [3, 4], [3, 4], [1, 2], [1, 2]]
    keys = [(0, 10), (0, 11), (0, 12), (0, 13), (0, 14), (0, 15)]
    assert scene_changes(keys, refs) == [None, False, True, False, True, False]


def test_no_change_is_told_where_the_previous_window_is_missing():
    refs = [[1], [2], [3], [3], [4]]
    # a gap of ids (a window left out: no frames), and a timeline reset (a new epoch)
    keys = [(0, 3), (0, 4), (0, 6), (0, 7), (1, 8)]
    assert scene_changes(keys, refs) == [None, True, None, False, None]
    assert scene_changes([], []) == []
    with pytest.raises(ValueError, match="references"):
        scene_changes(keys, refs[:2])


def test_leads_are_parsed_sorted_and_without_repeats():
    assert parse_leads("0,100,200,400,600") == [0, 100, 200, 400, 600]
    assert parse_leads(" 400, 0 ,100,100") == [0, 100, 400]
    assert parse_leads("12.5") == [12.5]
    for bad in ("", "-5", "0,-1", "a", "0,,100", "100,", "nan", "inf"):
        with pytest.raises(ValueError, match="--leads"):
            parse_leads(bad)


@pytest.mark.parametrize("leads", ["-5", "", "0,x", "0,,100", "inf"])
def test_bad_leads_are_refused_in_one_line_before_any_model_loads(leads):
    done = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "eval-draft",
                           "--leads", leads], capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("crossspec eval-draft: --leads")
    assert done.stdout == ""


def test_plot_without_leads_is_refused():
    done = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "eval-draft",
                           "--plot", "/tmp/x.png"], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


class _NoEmptyBatches:
    """A drafter that refuses an empty batch in ``prepare`` (as EventGPT does one without a
    sensor size), and fails the test if asked to draft."""

    def prepare(self, window: Window) -> object:
        if len(window.events) == 0:
            raise ValueError("window events have no sensor size (no event seen yet)")
        raise AssertionError("only empty windows here")


def test_a_window_left_empty_is_skipped_where_the_drafter_refuses_an_empty_batch():
    windows = [_window([5 * 10**9 + 10 * MS]), _window([5 * 10**9 + 20 * MS])]
    row = lead_quality(_NoEmptyBatches(), windows, [[1], [1]], 995, changes=[None, False])
    assert (row["windows"], row["skipped"], row["no_events"]) == (0, 2, 0)
    assert all(row[k] is None for k in RATE_KEYS)  # no window: no rate (not a 0)
    assert row["changes"]["windows"] == 0


def test_a_window_left_empty_is_drafted_where_the_drafter_takes_an_empty_batch(distill_pair):
    _, drafter = distill_pair
    window = random_window(0)  # events over [0, 1 s)
    reference = drafter.generate_greedy(drafter.prepare(window), 5)
    shifted = replace(window, id=1)
    row = lead_quality(drafter, [window, shifted], [reference, [*reference, 7]], 1000,
                       proposal=4, changes=[None, True])
    assert (row["windows"], row["no_events"], row["skipped"]) == (2, 2, 0)
    assert row["lead_ms"] == 1000 and 0.0 <= row["acceptance"] <= 1.0
    assert row["changes"]["windows"] == 1 and row["changes"]["no_events"] == 1
    # lead 0 is the whole window: its own greedy caption is accepted whole
    whole = lead_quality(drafter, [window], [reference], 0, proposal=4)
    assert whole["acceptance"] == 1.0 and whole["exact_caption_rate"] == 1.0
    assert whole["changes"] is None and whole["no_events"] == 0


needs_pair = pytest.mark.skipif(not (BUNDLED_PAIR / "verifier").is_dir(),
                                reason="the bundled tiny pair is not built")


def _check_row(row: dict, lead: float) -> None:
    assert row["lead_ms"] == lead
    assert row["windows"] >= 1 and row["skipped"] == 0
    for key in RATE_KEYS[::2]:
        assert 0.0 <= row[key] <= 1.0
    assert row["accepted_per_pass"] >= 0.0


@pytest.mark.slow
@needs_pair
def test_eval_draft_leads_on_the_sample_bag_end_to_end(tmp_path):
    plot = tmp_path / "leads.png"
    done = subprocess.run(
        [sys.executable, "-m", "crossspec_ros.cli.main", "eval-draft", "--bag",
         str(SAMPLE_BAG), "--windows", "4", "--leads", "0,400", "--json", "--plot",
         str(plot)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)  # one JSON object, progress on stderr
    assert report["windows"] == 4 and report["drafter"] == "default"
    assert report["scene_changes_of"] == 3  # the first window has no previous one
    assert 0 <= report["scene_changes"] <= 3
    assert [r["lead_ms"] for r in report["leads"]] == [0, 400]
    for row, lead in zip(report["leads"], (0, 400), strict=True):
        _check_row(row, lead)
        assert row["windows"] == 4
        changes = row["changes"]
        assert set(changes) == {"windows", *RATE_KEYS, "proposal", "no_events"}
        assert changes["windows"] == report["scene_changes"]
        if changes["windows"]:
            assert 0.0 <= changes["acceptance"] <= 1.0
    assert "drafts 400 ms before the close" in done.stderr  # the progress of each lead
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@needs_pair
def test_eval_draft_leads_on_held_out_windows_has_no_scene_change_split(capsys):
    from crossspec_ros.cli.main import main

    assert main(["eval-draft", "--windows", "2", "--workers", "1", "--leads", "300",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["scene_changes"] is None and "--bag" in report["scene_changes_note"]
    assert len(report["leads"]) == 1
    _check_row(report["leads"][0], 300)
    assert report["leads"][0]["changes"] is None
