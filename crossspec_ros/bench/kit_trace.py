"""The GPU kit's ``trace`` stage (issue 55, §2): where each step's time goes.

``torch.profiler`` over one of each call the product makes on the device, after warm-ups:

  verifier step, 1 row      a decoding step of the exact runtime fed one token
  verifier step, R rows     the same fed ``step_rows`` tokens (a verification pass)
  vision, 1 frame           the verifier's vision tower on one frame
  prompt chunk              one frame's tokens prefilled into a cache (live prefill's chunk)
  drafter step              the drafter's decoding step fed one token (when it was loaded)
  drafter prefill           the drafter's whole prefill of a window (its vision included)

For each: the wall ms (median, no profiler), the top kernels (name, ms per call, share of the
device time), the device's busy share between the call's first kernel and its last (what is
left is the host between launches: a launch-bound step's time), the achieved weight bandwidth
and FLOP rate, and, on a device whose peaks are known (``DEVICE_PEAKS``, public specs), its
bound and the call's distance from it. The bytes are the weights the call reads once (the KV
cache's reads are left out: a few percent at a window's context) and the FLOPs 2 x those
weights' parameters x tokens (attention over the context left out): both a floor, so the
bound is optimistic and a distance of 1.0 is out of reach.

On a CPU (the rehearsal) the kernels are the profiler's leaf CPU operators and no bound is
given. This is how the next session learns why a step costs what it costs, instead of
guessing (docs/gpu.md).
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crossspec_ros.bench.gpu_kit import _close

# (name as torch.cuda.get_device_name says it, HBM bytes/s, dense bf16 FLOP/s), most specific
# first: public specifications, not measurements
DEVICE_PEAKS = (
    ("H200", 4.8e12, 989e12),
    ("H100 NVL", 3.9e12, 835e12),
    ("H100 PCIe", 2.0e12, 756e12),
    ("H100", 3.35e12, 989e12),
    ("A100", 2.0e12, 312e12),
)
TOP_KERNELS = 8
RUN_MARK = "crossspec_trace_run"  # record_function around each profiled call
GIGA = 10.0 ** 9  # bytes in a GB, FLOPs in a GFLOP
VISION_MODULE_WORDS = ("vision", "video_tower", "image_tower", "multi_modal_projector",
                       "event_tower", "projector")


@dataclass
class Workload:
    """One call to trace: ``call`` runs it once (the device synchronized after it), on
    ``tokens`` tokens, reading ``weight_bytes`` of weights and doing at least ``flops``."""

    name: str
    call: Callable[[], Any]
    tokens: int
    weight_bytes: int
    flops: float
    close: Callable[[], None] = lambda: None


def stage_trace(kit: Any) -> dict[str, Any]:
    """The ``trace`` stage: each workload's profile (see the module docstring)."""
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    peaks = device_peaks(gpu)
    report: dict[str, Any] = {
        "device": gpu or "cpu", "dtype": kit.dtype, "repeats": kit.repeats,
        "peaks": None if peaks is None else {"bytes_per_s": peaks[0], "flop_per_s": peaks[1],
                                             "from": "public specifications"},
        "workloads": {}}
    for workload in workloads(kit):
        try:
            report["workloads"][workload.name] = trace(workload, kit.repeats, peaks,
                                                       cuda=gpu is not None)
            kit.log(f"trace {workload.name}: "
                    f"{report['workloads'][workload.name]['wall_ms']:.3f} ms")
        finally:
            workload.close()
    return report


def device_peaks(name: str | None) -> tuple[float, float] | None:
    """(bytes/s, FLOP/s) of the GPU called ``name``, or None (a CPU, or not in the table)."""
    if not name:
        return None
    for key, bandwidth, flops in DEVICE_PEAKS:
        if key in name:
            return bandwidth, flops
    return None


def workloads(kit: Any) -> list[Workload]:
    """The calls to trace, on the kit's exact runtime and its drafter (when loaded)."""
    found = [*_verifier_workloads(kit)]
    if kit.drafter is not None:
        found += _drafter_workloads(kit)
    return found


def _verifier_workloads(kit: Any) -> list[Workload]:
    import torch

    from crossspec_ros.models.streams import inference

    model, window = kit.exact, kit.windows[0]
    language, vision = weight_split(model.model)
    session = model.prefill(model.prepare(window))
    token = int(session.last_logits.argmax())
    steps = [_step(f"verifier step, {rows} row{'s' if rows > 1 else ''}", model, session,
                   [token] * rows, language)
             for rows in sorted({1, kit.step_rows})]
    steps[-1].close = lambda: _close(session)
    _, chunks = model.prompt_layout()
    image = window.frames[0].image
    with inference(model.device, model.stream):
        pixels = model.preprocess([image]).unsqueeze(0).to(model.device, model.vision_dtype)
        encoded = model._encode(pixels)
        ids = torch.full((1, chunks[1]), model.placeholder_id, device=model.device)
        embeds = model.merged_embeds(ids, encoded)
    slot = model.runtime.acquire()

    def chunk() -> None:  # the same positions each time: their cost, not their content
        model.runtime.chain(slot, chunks[0], embeds, last_only=True)

    return [*steps,
            Workload("vision, 1 frame", _synced(model, lambda: model._encode(pixels)),
                     model.tokens_per_frame, vision[0], 2.0 * vision[1] * model.tokens_per_frame),
            Workload("prompt chunk", _synced(model, chunk), chunks[1], language[0],
                     2.0 * language[1] * chunks[1],
                     close=lambda: model.runtime.release(slot, slot.lease))]


def _drafter_workloads(kit: Any) -> list[Workload]:
    drafter, window = kit.drafter, kit.windows[0]
    language, vision = weight_split(drafter.model)
    inputs = drafter.prepare(window)
    session = drafter.prefill(inputs)
    step = _step("drafter step", drafter, session, [int(session.last_logits.argmax())],
                 language)
    step.close = lambda: _close(session)
    tokens = drafter.prompt_layout()[0]

    def prefill() -> None:
        _close(drafter.prefill(inputs))

    return [step, Workload("drafter prefill", _synced(drafter, prefill), tokens,
                           language[0] + vision[0], 2.0 * language[1] * tokens)]


def _step(name: str, model: Any, session: Any, ids: list[int],
          language: tuple[int, int]) -> Workload:
    def step() -> None:
        session.feed(ids)
        session.rollback(0)

    return Workload(name, _synced(model, step), len(ids), language[0],
                    2.0 * language[1] * len(ids))


def _synced(model: Any, call: Callable[[], Any]) -> Callable[[], None]:
    from crossspec_ros.models.streams import inference, synchronize

    def run() -> None:
        with inference(model.device, model.stream):
            call()
        synchronize(model.device, model.stream)
    return run


def weight_split(module: Any) -> tuple[tuple[int, int], tuple[int, int]]:
    """((bytes, parameters) of the language model less its input embeddings, (bytes,
    parameters) of the vision side): what a decoding step and a vision call read."""
    language, vision = [0, 0], [0, 0]
    for name, parameter in module.named_parameters():
        if "embed_tokens" in name:
            continue  # a step reads a few rows of it, not all
        side = vision if any(w in name for w in VISION_MODULE_WORDS) else language
        side[0] += parameter.numel() * parameter.element_size()
        side[1] += parameter.numel()
    return (language[0], language[1]), (vision[0], vision[1])


def trace(workload: Workload, repeats: int, peaks: tuple[float, float] | None,
          cuda: bool) -> dict[str, Any]:
    """The workload's wall ms, kernels and distance from its bound (module docstring)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(2):  # caches, allocators and lazy compiles warmed up
        workload.call()
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        workload.call()
        walls.append((time.perf_counter() - t0) * 1e3)
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as prof:
        for _ in range(repeats):
            with record_function(RUN_MARK):
                workload.call()
    wall_ms = statistics.median(walls)
    timeline = kernel_timeline(prof.events(), cuda, repeats)
    return {"wall_ms": round(wall_ms, 3), "tokens": workload.tokens,
            "weight_gb": round(workload.weight_bytes / GIGA, 6),
            "gflop": round(workload.flops / GIGA, 6), **timeline,
            **achieved(workload, wall_ms, peaks)}


def achieved(workload: Workload, wall_ms: float, peaks: tuple[float, float] | None
             ) -> dict[str, Any]:
    """GB/s and TFLOP/s achieved, and with known peaks the bound and the distance from it."""
    seconds = wall_ms / 1e3
    out: dict[str, Any] = {
        "achieved_gb_per_s": round(workload.weight_bytes / seconds / GIGA, 2),
        "achieved_tflop_per_s": round(workload.flops / seconds / 1e12, 4),
        "bound_ms": None, "x_bound": None, "bound_by": None,
        "bandwidth_share": None, "flop_share": None}
    if peaks is not None:
        memory_s, compute_s = workload.weight_bytes / peaks[0], workload.flops / peaks[1]
        bound_s = max(memory_s, compute_s)
        out.update(bound_ms=round(bound_s * 1e3, 4),
                   x_bound=round(seconds / bound_s, 2) if bound_s > 0 else None,
                   bound_by="memory" if memory_s >= compute_s else "compute",
                   bandwidth_share=round(workload.weight_bytes / seconds / peaks[0], 4),
                   flop_share=round(workload.flops / seconds / peaks[1], 4))
    return out


def kernel_timeline(events: Any, cuda: bool, repeats: int) -> dict[str, Any]:
    """Per call: the kernels (CUDA kernels on a GPU, the leaf CPU operators on a CPU), their
    device time, the busy share from the first kernel to the last, the idle time between
    them, and the top kernels by time."""
    # on a GPU the profiler records the mark twice: the host's range (a call) and a device-side
    # range over the call's kernels (neither a call nor a kernel)
    runs = [e for e in events if e.name == RUN_MARK and _device(e) == "CPU"]
    kernels = [e for e in events if _is_kernel(e, cuda)]
    by_name: dict[str, float] = defaultdict(float)
    busy, spans, launches, largest_gap = [], [], [], 0.0
    for run in runs:
        start, end = run.time_range.start, run.time_range.end
        # a GPU kernel runs after its launch; the run ends with a synchronize, so its kernels
        # start within it
        inside = sorted((k for k in kernels if start <= k.time_range.start <= end),
                        key=lambda k: k.time_range.start)
        if not inside:
            continue
        merged, reach = 0.0, inside[0].time_range.start
        for k in inside:
            k_start, k_end = k.time_range.start, k.time_range.end
            if k_start > reach:
                largest_gap = max(largest_gap, k_start - reach)
            merged += max(0.0, k_end - max(k_start, reach))
            reach = max(reach, k_end)
            by_name[k.name] += k_end - k_start
        busy.append(merged)
        spans.append(reach - inside[0].time_range.start)
        launches.append(len(inside))
    total = sum(by_name.values())
    top = sorted(by_name.items(), key=lambda item: -item[1])[:TOP_KERNELS]
    counted = max(len(busy), 1)
    return {
        "kernels_are": "CUDA kernels" if cuda else "leaf CPU operators",
        "kernels_per_call": round(statistics.median(launches), 1) if launches else 0,
        "kernel_ms_per_call": round(sum(busy) / counted / 1e3, 4),
        "busy_share": round(sum(busy) / sum(spans), 4) if spans and sum(spans) else None,
        "idle_between_kernels_ms_per_call": round((sum(spans) - sum(busy)) / counted / 1e3, 4),
        "largest_gap_ms": round(largest_gap / 1e3, 4),
        "top_kernels": [{"name": name[:120], "ms_per_call": round(us / counted / 1e3, 4),
                         "share": round(us / total, 4) if total else None}
                        for name, us in top],
        "profiled_calls": len(busy), "asked_calls": repeats}


def _device(event: Any) -> str:
    return str(getattr(event, "device_type", "")).rsplit(".", 1)[-1]


def _is_kernel(event: Any, cuda: bool) -> bool:
    if event.name == RUN_MARK:
        return False
    if cuda:
        return _device(event) == "CUDA"
    return _device(event) == "CPU" and not event.cpu_children


def report_lines(trace_report: dict[str, Any] | None) -> list[str]:
    """The trace stage as gpu-report's section: one row per workload, then each one's top
    kernels."""
    if not trace_report or not trace_report.get("workloads"):
        return []
    peaks = trace_report.get("peaks")
    workloads = {name: without_run_mark(w) for name, w in trace_report["workloads"].items()}
    lines = [f"## Where each step's time goes ({trace_report.get('device')}, "
             f"{trace_report.get('dtype')})", "",
             "torch.profiler over each call after warm-ups (bench/kit_trace.py). Bytes: the "
             "weights read once; FLOPs: 2 x their parameters x tokens: both floors, so the "
             "bound is optimistic. " + ("Peaks: public specifications, "
                                         f"{peaks['bytes_per_s'] / 1e12:.2f} TB/s and "
                                         f"{peaks['flop_per_s'] / 1e12:.0f} TFLOP/s."
                                         if peaks else "No bound: the device's peaks are "
                                         "not in the table (a CPU rehearsal)."), "",
             "| call | tokens | wall ms | bound ms (by) | x bound | GB/s | TFLOP/s | "
             "kernels | busy between first and last | idle ms | top kernel (share) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, w in workloads.items():
        top = w["top_kernels"][0] if w["top_kernels"] else None
        bound = "n/a" if w["bound_ms"] is None else f"{w['bound_ms']:.3f} ({w['bound_by']})"
        share = "n/a" if w["busy_share"] is None else f"{100 * w['busy_share']:.0f}%"
        top_text = "n/a" if top is None else \
            f"`{top['name'][:48]}` ({100 * (top['share'] or 0):.0f}%)"
        lines.append(f"| {name} | {w['tokens']} | {w['wall_ms']:.3f} | {bound} | "
                     f"{w['x_bound'] if w['x_bound'] is not None else 'n/a'} | "
                     f"{w['achieved_gb_per_s']} | {w['achieved_tflop_per_s']} | "
                     f"{w['kernels_per_call']} | {share} | "
                     f"{w['idle_between_kernels_ms_per_call']:.3f} | {top_text} |")
    if any(w.get("mark_removed") for w in workloads.values()):
        lines += ["", "This trace was taken before 2026-11-29's fix: the profiler's device-side "
                  f"range of the call's own mark (`{RUN_MARK}`) was counted as a kernel. It is "
                  "left out here; the kernels' total is derived from the mark's share (the "
                  "mark spans the call's kernels), so busy share and idle ms are that total "
                  "against the mark's span."]
    lines += ["", "Top kernels per call (ms per call, share of the call's kernel time):", ""]
    for name, w in workloads.items():
        kernels = "; ".join(f"`{k['name'][:72]}` {k['ms_per_call']:.3f} "
                            f"({100 * (k['share'] or 0):.0f}%)" for k in w["top_kernels"][:5])
        lines.append(f"- {name}: {kernels or 'none recorded'}")
    return [*lines, ""]


def without_run_mark(workload: dict[str, Any]) -> dict[str, Any]:
    """A workload whose top kernels hold the run's mark (a trace from before the mark was
    left out of the kernels) with the mark removed: the kernels' total is then derived from
    the mark's share (share = ms / (mark + kernels)), and the busy share and the idle time are
    that total against the mark's span. Any other workload comes back as it is."""
    mark = next((k for k in workload["top_kernels"] if k["name"] == RUN_MARK), None)
    if mark is None or not mark.get("share"):
        return workload
    span = mark["ms_per_call"]
    total = span * (1 - mark["share"]) / mark["share"]
    kernels = [{**k, "share": round(k["ms_per_call"] / total, 4) if total else None}
               for k in workload["top_kernels"] if k["name"] != RUN_MARK]
    return {**workload, "top_kernels": kernels, "mark_removed": True,
            "kernel_ms_per_call": round(total, 4),
            "busy_share": round(total / span, 4) if span else None,
            "idle_between_kernels_ms_per_call": round(max(span - total, 0.0), 4)}
