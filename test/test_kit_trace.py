"""The GPU kit's trace stage's arithmetic (bench/kit_trace.py), on made-up profiler events: the
device's busy share, the idle time between kernels, the top kernels and the bound."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from crossspec_ros.bench.kit_trace import (
    Workload,
    achieved,
    device_peaks,
    kernel_timeline,
    report_lines,
    without_run_mark,
)


def _event(name: str, start: float, end: float, device: str = "CUDA", children=()) -> Any:
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end),
                           device_type=f"DeviceType.{device}", cpu_children=list(children))



def test_the_timeline_counts_busy_time_once_and_the_host_gaps_between_kernels():
    events = [
        _event("crossspec_trace_run", 0, 100, "CPU"),
        _event("crossspec_trace_run", 10, 70),  # the mark's device-side range: no kernel
        _event("gemm", 10, 30), _event("gemm", 25, 40),  # overlapping: 30 us busy, not 35
        _event("norm", 60, 70),  # 20 us idle before it
        _event("crossspec_trace_run", 200, 300, "CPU"),
        _event("gemm", 210, 250),
        _event("launch", 5, 6, "CPU"),  # a CPU operator: not a kernel on a GPU
    ]
    timeline = kernel_timeline(events, cuda=True, repeats=2)
    assert timeline["profiled_calls"] == 2 and timeline["kernels_per_call"] == 2
    # run 1: busy 30 + 10 over a span of 60; run 2: 40 over 40
    assert timeline["busy_share"] == pytest.approx(80 / 100)
    assert timeline["kernel_ms_per_call"] == pytest.approx(0.04)
    assert timeline["idle_between_kernels_ms_per_call"] == pytest.approx(0.01)
    assert timeline["largest_gap_ms"] == pytest.approx(0.02)
    assert [k["name"] for k in timeline["top_kernels"]] == ["gemm", "norm"]
    assert timeline["top_kernels"][0]["share"] == pytest.approx(75 / 85, abs=1e-4)


def test_on_a_cpu_the_kernels_are_the_leaf_operators():
    leaf = _event("aten::mm", 10, 20, "CPU")
    events = [_event("crossspec_trace_run", 0, 50, "CPU"),
              _event("aten::linear", 5, 25, "CPU", children=[leaf]), leaf]
    timeline = kernel_timeline(events, cuda=False, repeats=1)
    assert [k["name"] for k in timeline["top_kernels"]] == ["aten::mm"]
    assert timeline["kernels_are"] == "leaf CPU operators"


def test_the_bound_is_the_slower_of_reading_the_weights_and_doing_the_flops():
    assert device_peaks("NVIDIA H200") == (4.8e12, 989e12)
    assert device_peaks("NVIDIA H100 PCIe") == (2.0e12, 756e12)
    assert device_peaks(None) is None and device_peaks("Tesla T4") is None
    step = Workload("step", lambda: None, 1, weight_bytes=int(13.5e9), flops=2 * 6.7e9)
    out = achieved(step, 9.4, device_peaks("NVIDIA H200"))
    assert out["bound_by"] == "memory" and out["bound_ms"] == pytest.approx(2.8125)
    assert out["x_bound"] == pytest.approx(9.4 / 2.8125, abs=0.01)
    assert out["achieved_gb_per_s"] == pytest.approx(13.5e9 / 9.4e-3 / 1e9, abs=0.01)
    chunk = Workload("chunk", lambda: None, 257, weight_bytes=int(13.5e9),
                     flops=2 * 6.7e9 * 257)
    assert achieved(chunk, 34.0, device_peaks("NVIDIA H200"))["bound_by"] == "compute"
    assert achieved(step, 9.4, None)["bound_ms"] is None  # no peaks: no bound claimed


def test_the_report_gives_a_row_per_call_and_says_when_no_bound_is_known():
    workload = {"wall_ms": 9.4, "tokens": 1, "bound_ms": None, "bound_by": None,
                "x_bound": None, "achieved_gb_per_s": 1436.2, "achieved_tflop_per_s": 1.4,
                "kernels_per_call": 290, "busy_share": 0.5,
                "idle_between_kernels_ms_per_call": 4.7,
                "top_kernels": [{"name": "gemv", "ms_per_call": 3.0, "share": 0.6}]}
    lines = report_lines({"device": "cpu", "dtype": "bfloat16", "peaks": None,
                          "workloads": {"verifier step, 1 row": workload}})
    assert lines[0] == "## Where each step's time goes (cpu, bfloat16)"
    assert "No bound" in lines[2]
    assert ("| verifier step, 1 row | 1 | 9.400 | n/a | n/a | 1436.2 | 1.4 | 290 "
            "| 50% | 4.700 | `gemv` (60%) |") in lines
    assert "- verifier step, 1 row: `gemv` 3.000 (60%)" in lines
    assert not any("before 2026-11-29's fix" in line for line in lines)
    assert report_lines(None) == []


def test_a_trace_that_counted_its_own_mark_is_reported_without_it():
    # the first H200 trace (2026-11-29): the mark's device-side range, 10 ms a call, was
    # counted with 8 ms of kernels, so every share was over 18 ms
    workload = {"wall_ms": 9.5, "tokens": 32, "bound_ms": 2.75, "bound_by": "memory",
                "x_bound": 3.45, "achieved_gb_per_s": 1392.2, "achieved_tflop_per_s": 44.6,
                "kernels_per_call": 658, "busy_share": 1.0,
                "idle_between_kernels_ms_per_call": 0.0,
                "top_kernels": [{"name": "crossspec_trace_run", "ms_per_call": 10.0,
                                 "share": 10 / 18},
                                {"name": "fmha", "ms_per_call": 3.2, "share": 3.2 / 18},
                                {"name": "gemm", "ms_per_call": 4.0, "share": 4.0 / 18}]}
    fixed = without_run_mark(workload)
    assert [k["name"] for k in fixed["top_kernels"]] == ["fmha", "gemm"]
    assert fixed["kernel_ms_per_call"] == pytest.approx(8.0)
    assert fixed["top_kernels"][0]["share"] == pytest.approx(0.4)
    assert fixed["busy_share"] == pytest.approx(0.8)
    assert fixed["idle_between_kernels_ms_per_call"] == pytest.approx(2.0)
    lines = report_lines({"device": "NVIDIA H200", "dtype": "bfloat16",
                          "peaks": {"bytes_per_s": 4.8e12, "flop_per_s": 989e12},
                          "workloads": {"verifier step, 32 rows": workload}})
    assert any("| 80% | 2.000 | `fmha` (40%) |" in line for line in lines)
    assert any("before 2026-11-29's fix" in line for line in lines)
    assert without_run_mark({**workload, "top_kernels": workload["top_kernels"][1:]}) == {
        **workload, "top_kernels": workload["top_kernels"][1:]}
