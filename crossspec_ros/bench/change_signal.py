"""`crossspec bench change-signal`: how well the event stream predicts that a caption changes.

For each bag with ground-truth captions (the sample bag, `crossspec make-sample` drives),
every pair of consecutive windows gets the two scene-change signals of
``events/change.py`` (event rate, event layout) and a label: does the window's ground-truth
caption differ from the window before's? Per bag and signal: the ROC AUC (0.5: no better than
chance, 1: perfect), the share of windows whose caption changed, and the signal's median on
changed and unchanged windows, and the threshold that separates them best (largest true-positive
minus false-positive rate): the calibration of the engine's event-aware mode
(``events/change.py``'s ``CHANGE_RATE_THRESHOLD``).
"""

from __future__ import annotations

import argparse
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

from crossspec_ros import summaries
from crossspec_ros.paths import sample_bag

SIGNALS = ("rate", "layout")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "change-signal", help="how well event rate and layout predict that a window's caption "
        "differs from the last (ROC AUC per bag)",
        description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("bags", type=Path, nargs="*", default=[sample_bag()],
                        help="bags with a /crossspec/ground_truth topic (default: the sample "
                        "bag)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the numbers as JSON")
    parser.set_defaults(func=run)


def roc_auc(scores: list[float], labels: list[bool]) -> float | None:
    """P(a positive scores above a negative), ties half (None without both classes)."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return None
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def best_threshold(scores: list[float], labels: list[bool]) -> float | None:
    """The cut (midway between two neighbouring scores) with the largest true-positive minus
    false-positive rate when "score > cut" predicts a positive (None without both classes)."""
    positives = sum(labels)
    negatives = len(labels) - positives
    if not positives or not negatives:
        return None
    ranked = sorted(set(scores))
    cuts = [(a + b) / 2 for a, b in pairwise(ranked)] or [ranked[0]]

    def youden(cut: float) -> float:
        tp = sum(s > cut for s, y in zip(scores, labels, strict=True) if y)
        fp = sum(s > cut for s, y in zip(scores, labels, strict=True) if not y)
        return tp / positives - fp / negatives
    return max(cuts, key=youden)


def window_pairs(windows: list[Any], truth: dict[int, str]) -> list[dict[str, Any]]:
    """Consecutive windows (ids one apart, both with ground truth): signals and label."""
    from crossspec_ros.events.change import EventLayout, scene_change

    rows, before = [], None
    for window in windows:
        layout = EventLayout.of(window.events)
        if before is not None and window.id == before[0] + 1 and window.id in truth \
                and before[0] in truth:
            change = scene_change(before[1], layout)
            rows.append({"window": window.id, "rate": change.rate, "layout": change.layout,
                         "caption_changed": truth[window.id] != truth[before[0]]})
        before = (window.id, layout)
    return rows


def score(rows: list[dict[str, Any]]) -> dict[str, Any]:
    labels = [r["caption_changed"] for r in rows]
    out: dict[str, Any] = {"pairs": len(rows), "caption_changed": sum(labels)}
    for name in SIGNALS:
        values = [r[name] for r in rows]
        auc = roc_auc(values, labels)
        cut = best_threshold(values, labels)
        out[name] = {
            "auc": None if auc is None else round(auc, 3),
            "best_threshold": summaries.rounded(cut, 3),
            "median_changed": summaries.rounded(summaries.median(
                v for v, y in zip(values, labels, strict=True) if y), 3),
            "median_unchanged": summaries.rounded(summaries.median(
                v for v, y in zip(values, labels, strict=True) if not y), 3)}
    return out


def run(args: argparse.Namespace) -> int:
    from crossspec_ros.bags.inputs import iter_bag_windows, read_ground_truth
    from crossspec_ros.bench.outputs import save_outputs
    from crossspec_ros.events.errors import EventSourceError
    from crossspec_ros.sync.synchronizer import WindowSynchronizer

    report: dict[str, Any] = {"bags": {}}
    for bag in args.bags:
        try:
            truth = read_ground_truth(bag)
            windows = list(iter_bag_windows(bag, WindowSynchronizer()))
        except EventSourceError as err:
            print(f"crossspec bench change-signal: {err}", file=sys.stderr)
            return 2
        if not truth:
            print(f"crossspec bench change-signal: {bag} has no /crossspec/ground_truth "
                  "captions to score against (`crossspec make-sample` bags have them)",
                  file=sys.stderr)
            return 2
        result = score(window_pairs(windows, truth))
        report["bags"][str(bag)] = result
        print(f"{bag}: caption changed in {result['caption_changed']} of {result['pairs']} "
              "window pairs; ROC AUC " + ", ".join(
                  f"{name} {result[name]['auc']} (median changed {result[name]['median_changed']}"
                  f", unchanged {result[name]['median_unchanged']}, best threshold "
                  f"{result[name]['best_threshold']})" for name in SIGNALS))
    save_outputs(report, args.json)
    return 0
