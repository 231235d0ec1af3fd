"""What one robot's link outage does to the other robots' captions (``crossspec bench split
--robots N --fault none link-down``).

The other robots replay the same stretch of the bag in both runs, so their windows pair up:
each window's confirmed caption at the robot (its close on the robot -> the FINAL caption's
arrival there, the link both ways included) with the first robot's link down, against the
same window in the run of the same repeat without the fault. Reported per robot: the medians
over the paired windows, their ratio (the target: within 10%; a robot cut off leaves the
server less work, so the others may come out faster, which the row tells apart from slower),
and the spread of the paired differences. Pure: it reads the rows ``split.run_once`` made.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from crossspec_ros.summaries import median, quartiles, rounded

FAULT = "link-down"
WITHIN = 0.10  # the target: the others' latency within 10% of a run without the outage


def outage_effects(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One effect per robot that kept its link, link cap and image mode where both a run with
    the first robot's link down and one without it were made (none otherwise). Rows need
    ``_at_robot`` (window -> ms), as ``split.summarize`` gives them."""
    rows = [r for r in rows if "fault_here" in r]
    runs: dict[tuple, dict[int, dict[int, float]]] = {}  # (group, fault) -> repeat -> latencies
    for row in rows:
        if row["fault"] not in ("none", FAULT) or row["fault_here"]:
            continue
        key = (row["link_mbit"], row["images"], row["robot"], row["fault"])
        runs.setdefault(key, {})[row["repeat"]] = row.get("_at_robot") or {}
    effects = []
    for (mbit, images, robot, fault), by_repeat in sorted(runs.items()):
        baseline = runs.get((mbit, images, robot, "none"))
        if fault != FAULT or baseline is None:
            continue
        effects.append(_effect(baseline, by_repeat) | {
            "kind": "outage_effect", "robot": robot, "link_mbit": mbit, "images": images,
            "outage_on": _faulted_robot(rows, mbit, images)})
    return effects


def _effect(without: dict[int, dict[int, float]], with_outage: dict[int, dict[int, float]]
            ) -> dict[str, Any]:
    """The paired comparison over the repeats both sides have."""
    pairs = [(before[w], after[w])
             for repeat, after in with_outage.items() if repeat in without
             for before in (without[repeat],) for w in after if w in before]
    before_ms = median(b for b, _ in pairs)
    after_ms = median(a for _, a in pairs)
    ratio = after_ms / before_ms if before_ms and after_ms is not None else None
    q25, q50, q75 = quartiles(a - b for b, a in pairs) or (None, None, None)
    return {"windows_paired": len(pairs), "repeats": len(set(with_outage) & set(without)),
            "without_ms_median": rounded(before_ms, 1), "with_ms_median": rounded(after_ms, 1),
            "ratio": rounded(ratio, 3),
            "paired_diff_ms": {"median": rounded(q50, 1), "q25": rounded(q25, 1),
                               "q75": rounded(q75, 1)},
            # the target, as written (two-sided), and the harm it guards against (one-sided:
            # the server has less work while a robot is cut off, so the others may get faster)
            "within_10pct": ratio is not None and abs(ratio - 1) <= WITHIN,
            "slower_by_over_10pct": ratio is not None and ratio > 1 + WITHIN}


def _faulted_robot(rows: list[dict[str, Any]], mbit: float, images: str) -> str | None:
    return next((r["robot"] for r in rows if r["fault"] == FAULT and r["fault_here"]
                 and r["link_mbit"] == mbit and r["images"] == images), None)


def effect_line(effect: dict[str, Any]) -> str:
    """The effect in one line, as the bench prints it."""
    if not effect["windows_paired"]:
        return (f"{effect['robot']}: no window had a FINAL caption in both runs: the outage's "
                "effect on it is not measured")
    diff = effect["paired_diff_ms"]
    verdict = "within" if effect["within_10pct"] else \
        "slower by more than" if effect["slower_by_over_10pct"] else "faster by more than"
    return (f"{effect['robot']} with {effect['outage_on']}'s link down for a while: confirmed "
            f"at the robot a median {effect['with_ms_median']} ms after its close against "
            f"{effect['without_ms_median']} ms without the outage (x{effect['ratio']}: "
            f"{verdict} {WITHIN:.0%}; paired by window, {effect['windows_paired']} windows in "
            f"{effect['repeats']} repeats: {diff['median']} ms, IQR {diff['q25']} to "
            f"{diff['q75']}; link {effect['link_mbit']:g} Mbit/s, {effect['images']} images)")
