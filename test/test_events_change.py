"""The scene-change signals between two windows' events (events/change.py)."""

from __future__ import annotations

import math

import numpy as np

from crossspec_ros.bench.change_signal import roc_auc, score, window_pairs
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.change import EventLayout, scene_change


def events(xs: list[int], ys: list[int], width: int = 80, height: int = 60) -> EventBatch:
    n = len(xs)
    return EventBatch(np.arange(n), np.array(xs), np.array(ys), np.ones(n), width, height)


def test_identical_windows_show_no_change():
    a = EventLayout.of(events([1, 40, 79], [0, 30, 59]))
    change = scene_change(a, a)
    assert change.rate == 0.0 and change.layout == 0.0
    assert math.isclose(a.grid.sum(), 1.0) and a.count == 3


def test_events_firing_elsewhere_change_the_layout_and_more_of_them_the_rate():
    left = EventLayout.of(events([1] * 10, [1] * 10))
    right = EventLayout.of(events([79] * 10, [59] * 10))
    assert math.isclose(scene_change(left, right).layout, 2.0)  # disjoint: the most
    assert scene_change(left, right).rate == 0.0
    doubled = EventLayout.of(events([1] * 21, [1] * 21))
    assert math.isclose(scene_change(left, doubled).rate, math.log(22 / 11))
    assert scene_change(left, doubled).layout == 0.0


def test_a_window_without_events_is_a_zero_grid():
    empty = EventLayout.of(EventBatch.empty(80, 60))
    assert empty.count == 0 and not empty.grid.any()
    assert math.isclose(scene_change(empty, EventLayout.of(events([5], [5]))).layout, 1.0)


def test_roc_auc_ranks_positives_above_negatives_with_ties_half():
    assert roc_auc([0.9, 0.8, 0.1, 0.2], [True, True, False, False]) == 1.0
    assert roc_auc([0.1, 0.9], [True, False]) == 0.0
    assert roc_auc([0.5, 0.5], [True, False]) == 0.5
    assert roc_auc([0.5], [True]) is None


def test_consecutive_windows_are_paired_with_whether_their_captions_differ():
    from types import SimpleNamespace

    # windows 0 and 1 alike; window 2: five times the events, elsewhere; 3 is missing, so
    # (2, 4) is no pair
    batches = {0: events([5] * 4, [5] * 4), 1: events([5] * 4, [5] * 4),
               2: events([70] * 20, [50] * 20), 4: events([70] * 20, [50] * 20)}
    windows = [SimpleNamespace(id=i, events=b) for i, b in batches.items()]
    truth = {0: "a car", 1: "a car", 2: "a bus", 4: "a bus"}
    rows = window_pairs(windows, truth)
    assert [(r["window"], r["caption_changed"]) for r in rows] == [(1, False), (2, True)]
    result = score(rows)
    assert result["pairs"] == 2 and result["caption_changed"] == 1
    assert result["rate"]["auc"] == 1.0 and result["layout"]["auc"] == 1.0
    assert result["layout"]["median_unchanged"] == 0.0


def test_the_detector_compares_each_window_with_the_one_right_before_it():
    from crossspec_ros.events.change import CHANGED, STEADY, ChangeDetector

    detector = ChangeDetector(threshold=0.5)
    few, many = events([5] * 10, [5] * 10), events([5] * 40, [5] * 40)
    assert detector.level(0, few) is None          # nothing to compare with
    assert detector.level(1, few) == STEADY        # the same count: rate 0
    assert detector.level(2, many) == CHANGED      # log(41 / 11) = 1.3 > 0.5
    assert detector.level(4, many) is None         # window 3 is missing: no neighbour
    assert detector.level(5, EventBatch.empty(80, 60)) is None  # no events: no signal
    assert detector.level(6, many) is None         # ... and none for the window after it
    assert detector.level(7, many) == STEADY


def test_the_best_threshold_separates_the_labels_as_well_as_any_cut():
    from crossspec_ros.bench.change_signal import best_threshold

    assert best_threshold([0.1, 0.2, 0.8, 0.9], [False, False, True, True]) == 0.5
    # one changed window scores low: the cut still keeps the other two above it
    assert best_threshold([0.1, 0.2, 0.3, 0.8, 0.9], [True, False, False, True, True]) == 0.55
    assert best_threshold([0.1, 0.2], [False, False]) is None
