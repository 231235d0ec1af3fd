"""Fidelity: how well a cost profile predicts a real run's window latencies from its trace.

A window's predicted latency is what the emulation would make of it: its measured latency with
each traced device call's measured time replaced by what the profile says that call costs
(``CostProfile.call_ms``). The host's work between the calls stays as measured: on an
emulated run the host computes for real, so the profile answers only for the device's calls.
The error is (predicted - measured) / measured, per window; a mode's median and worst
absolute error are the fidelity the GPU kit reports (target: median <= 10%).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from crossspec_ros.models.call_trace import TracedCall, calls_from_json
from crossspec_ros.models.emulated import ModelCosts

TARGET_MEDIAN_ERROR = 0.10


def predicted_ms(measured_ms: float, calls: Sequence[TracedCall],
                 costs: Mapping[str, ModelCosts]) -> float:
    """The window's latency had each of its device calls cost what ``costs`` (by role) say."""
    return measured_ms + sum(costs[c.role].call_ms(c.kind, c.count) - c.ms for c in calls)


def fidelity(windows: Sequence[dict[str, Any]], costs: Mapping[str, ModelCosts],
             profile: str) -> dict[str, Any]:
    """Per mode, over ``windows`` (the kit's fidelity stage: mode, window, ms, calls; warm-up
    windows left out), the costs of ``profile`` (by role; a CostProfile's ``verifier`` and
    ``drafter``): windows, median and worst absolute error, the median share of a window's
    time its device calls took, and the calls by kind."""
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for entry in windows:
        if not entry.get("warmup"):
            by_mode.setdefault(entry["mode"], []).append(entry)
    modes: dict[str, Any] = {}
    for mode, entries in by_mode.items():
        errors, shares, kinds = [], [], Counter()
        for entry in entries:
            calls = calls_from_json(entry["calls"])
            measured = float(entry["ms"])
            errors.append((predicted_ms(measured, calls, costs) - measured) / measured)
            shares.append(sum(c.ms for c in calls) / measured)
            kinds.update(call.kind for call in calls)
        modes[mode] = {
            "windows": len(entries),
            "median_error": round(statistics.median(abs(e) for e in errors), 4),
            "worst_error": round(max(errors, key=abs), 4),
            "median_signed_error": round(statistics.median(errors), 4),
            "device_share": round(statistics.median(shares), 3),
            "calls": dict(kinds)}
    met = bool(modes) and all(m["median_error"] <= TARGET_MEDIAN_ERROR for m in modes.values())
    return {"profile": profile, "modes": modes, "target_median_error": TARGET_MEDIAN_ERROR,
            "met": met}


def markdown(result: dict[str, Any]) -> list[str]:
    """The report's table: one row per mode."""
    lines = [f"Profile: {result['profile']}. A window's prediction is "
             "its measured latency with each traced device call's time replaced by the "
             "profile's cost for it; the host's time between calls stays as measured.", "",
             "| mode | windows | median error | worst error | device share of a window | "
             "calls traced |", "|---|---:|---:|---:|---:|---|"]
    for mode, m in result["modes"].items():
        calls = ", ".join(f"{kind} {n}" for kind, n in sorted(m["calls"].items()))
        lines.append(f"| {mode} | {m['windows']} | {100 * m['median_error']:.1f}% | "
                     f"{100 * m['worst_error']:+.1f}% | {100 * m['device_share']:.0f}% | "
                     f"{calls} |")
    verdict = "met" if result["met"] else "NOT met"
    lines += ["", f"Target: median error <= {100 * result['target_median_error']:.0f}% in "
              f"every mode: **{verdict}**."]
    return lines
