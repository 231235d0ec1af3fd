"""The GPU kit's ``tuning`` stage (issue 55, §3): the exact decoding step compiled under other
runtime settings (its attention, inductor's settings), side by side with the kit's own, each
with its exactness.

The H200 runs measured 9.2-9.4 ms a step against a bound of ~2.8 ms (the weights read once),
3.25 ms of it in SDPA's memory-efficient attention kernel (docs/gpu-h200-2026-11-29.md).
Which setting closes some of that gap is a question for the GPU: here the verifier's exact
runtime (one step shape of ``step_rows`` rows, prefill eager, sharing the kit's weights) is
built again under each variant of ``tuning_variants`` (``RuntimeOptions`` fields), and for
each the stage reports

  compile_s          the variant's warm-up (compile and first run) of its step shape
  ms_per_pass        1, 8 and step_rows tokens, in rounds that alternate the kit's exact
                     runtime and the variant pass size by pass size (the same machine state
                     for both), the median of each side's rounds
  x_kit              the variant's ms over the kit runtime's, per pass size
  exactness          k-token verification against one-token decoding on the variant (flips,
                     rows bit-identical): a variant is a runtime of its own, exact by
                     construction when its rows agree (the contract is per runtime: its
                     greedy caption may differ from the default's at a near-tie)

A variant that does not fit the time left (judged from the kit's own compile of the shape) is
skipped and named. On a CPU rehearsal (``--no-compile``) nothing compiles and inductor's
settings change nothing: the stage runs its code path eager and says so (``compiled``: false).
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

from crossspec_ros.bench.gpu_kit import _exactness, _pass_ms, _prior

# the variants tried, as RuntimeOptions fields over the kit's exact runtime, the likeliest gain
# first: the attention the kit does not run (attention split along the cache,
# models/split_kv.py, against SDPA's kernel that gives each head one thread block: x0.75 on
# the H200 on 2026-11-30, so a GPU kit runs split_kv and measures SDPA beside it); then
# max-autotune's GEMM search (Triton templates against cuBLAS for the step's skinny matrices,
# with coordinate descent tuning the generated kernels) over the kit's attention.
# coordinate_descent_tuning alone was measured on the H200 (2026-11-29): x0.96-1.05, no gain
AUTOTUNE_GEMM = (("coordinate_descent_tuning", True), ("max_autotune_gemm", True))
# a variant's compile against the kit's own compile of the same shape (autotuning benchmarks
# each GEMM's candidates: several times longer)
COMPILE_FACTOR = {"split_kv": 1.3, "sdpa": 1.0, "autotune_gemm": 5.0}
VARIANT_NAMES = tuple(COMPILE_FACTOR)  # what tuning_variants may name (--tuning-variants)
ROUNDS = 2


def tuning_variants(kit_attention: str) -> dict[str, dict[str, Any]]:
    """The variants over a kit whose runtimes attend with ``kit_attention``, by name."""
    other = "sdpa" if kit_attention == "split_kv" else "split_kv"
    return {other: {"attention": other},
            "autotune_gemm": {"inductor": AUTOTUNE_GEMM, "attention": kit_attention}}


def stage_tuning(kit: Any) -> dict[str, Any]:
    """The stage (gpu_kit.STAGES): each variant's compile, passes and exactness."""
    import torch

    kit_compile_s = kit.exact.runtime.compile_s.get(f"rows {kit.step_rows}")
    sizes = sorted({1, min(8, kit.step_rows), kit.step_rows})
    report: dict[str, Any] = {
        "compiled": bool(kit.exact.runtime.compiled), "step_rows": kit.step_rows,
        "kit_runtime": kit.exact.runtime.describe(), "kit_compile_s": kit_compile_s,
        "rounds": ROUNDS, "repeats": kit.repeats, "variants": {}, "skipped": {}}
    if not report["compiled"]:
        report["note"] = ("The kit runs eager (--no-compile): inductor's settings change "
                          "nothing, the split attention runs as eager operators; the numbers "
                          "rehearse the stage's code path")
    for name, overrides in tuning_variants(kit.attention).items():
        if kit.tuning_only and name not in kit.tuning_only:
            report["skipped"][name] = "not asked for (--tuning-variants)"
            continue
        needed = variant_s(kit, name)
        if needed > kit.left():
            report["skipped"][name] = (f"needs about {needed:.0f} s, {kit.left():.0f} s "
                                       "left")
            kit.log(f"[tuning] {name} skipped: {report['skipped'][name]}")
            continue
        report["variants"][name] = _variant(kit, name, overrides, sizes)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return report


def _variant(kit: Any, name: str, overrides: dict[str, Any], sizes: list[int]
             ) -> dict[str, Any]:
    """One variant: built, timed against the kit's exact runtime, checked for exactness."""
    from crossspec_ros.models.static_runtime import RuntimeOptions, use_static_runtime

    twin = kit.verifier.with_runtime(None)
    t0 = time.perf_counter()
    timings = use_static_runtime(twin, RuntimeOptions(
        compile=kit.compile, step_rows=(kit.step_rows,), compile_prefill=False, **overrides),
        kit.max_new_tokens)
    out: dict[str, Any] = {
        "settings": settings_of(overrides), "runtime": twin.runtime.describe(),
        "compile_s": timings.get(f"rows {kit.step_rows}"),
        "build_s": round(time.perf_counter() - t0, 2),
        "compile_failed": twin.runtime.compile_failed}
    mine, kits = paired_passes(twin, kit.exact, kit.windows[0], sizes, kit.repeats)
    out["ms_per_pass"] = {str(k): v for k, v in mine.items()}
    out["kit_ms_per_pass"] = {str(k): v for k, v in kits.items()}
    out["x_kit"] = {str(k): round(mine[k] / kits[k], 3) for k in sizes if kits[k] > 0}
    exactness = _exactness(kit, twin, kit.dtype, f"none, tuning {name}")
    out["exactness"] = {key: exactness["runtimes"][exactness["exact_runtime"]][key]
                        for key in ("flips", "positions", "rows_bit_identical")}
    out["exact"] = exactness["exact"]
    out["eager_steps"] = twin.runtime.eager_steps
    kit.log(f"[tuning] {name}: " + ", ".join(
        f"{k} tokens {mine[k]:.2f} ms (x{out['x_kit'].get(str(k), 'n/a')})" for k in sizes)
        + f"; {'exact' if out['exact'] else 'NOT exact'}")
    return out


def settings_of(overrides: dict[str, Any]) -> dict[str, Any]:
    """A variant's RuntimeOptions fields as JSON (inductor's pairs as a mapping)."""
    return {key: dict(value) if key == "inductor" else value
            for key, value in overrides.items()}


def paired_passes(model: Any, reference: Any, window: Any, sizes: list[int], repeats: int
                  ) -> tuple[dict[int, float], dict[int, float]]:
    """ms per pass of each size on ``model`` and on ``reference``, in ``ROUNDS`` rounds that
    alternate which goes first (the median of each side's rounds)."""
    ours: dict[int, list[float]] = {k: [] for k in sizes}
    theirs: dict[int, list[float]] = {k: [] for k in sizes}
    sides = [(model, ours), (reference, theirs)]
    for round_index in range(ROUNDS):
        for k in sizes:
            for side, into in (sides if round_index % 2 == 0 else sides[::-1]):
                into[k].append(_pass_ms(side, window, k, repeats))
    return ({k: round(statistics.median(v), 3) for k, v in ours.items()},
            {k: round(statistics.median(v), 3) for k, v in theirs.items()})


def variant_s(kit: Any, name: str) -> float:
    """Seconds a variant needs: its compile (``COMPILE_FACTOR`` x the kit's own of the
    shape), its exactness check and its passes (about the kit's stages of the same), or
    priors before they ran."""
    compile_s = kit.exact.runtime.compile_s.get(f"rows {kit.step_rows}") or 0.0
    return (COMPILE_FACTOR[name] * compile_s + kit.seconds("exactness", _prior(kit, 60, 4))
            + kit.seconds("passes", _prior(kit, 20, 2)))


def report_lines(tuning: dict[str, Any] | None) -> list[str]:
    """gpu-report's section: a row per variant (each against the kit's runtime), then the
    variants skipped."""
    if not tuning or not (tuning.get("variants") or tuning.get("skipped")):
        return []
    sizes = sorted({int(k) for v in tuning["variants"].values() for k in v["ms_per_pass"]})
    lines = [f"## The decoding step under other settings: attention, inductor "
             f"({tuning['step_rows']}-row exact runtime)", "",
             f"Kit runtime: {tuning.get('kit_runtime')}. Rounds alternate the kit's runtime "
             f"and each variant pass size by pass size ({tuning.get('rounds')} rounds of "
             f"{tuning.get('repeats')} passes; medians)."
             + (f" {tuning['note']}." if tuning.get("note") else ""), "",
             "| variant | compile s | " + " | ".join(f"{k} tokens ms (x kit)" for k in sizes)
             + " | exact (flips, rows bit-identical) |",
             "|---|---:|" + "---:|" * len(sizes) + "---|"]
    for name, v in tuning["variants"].items():
        cells = [f"{v['ms_per_pass'].get(str(k), 'n/a')} (x{v['x_kit'].get(str(k), 'n/a')})"
                 for k in sizes]
        ex = v["exactness"]
        lines.append(f"| {name} | {v.get('compile_s')} | " + " | ".join(cells) + " | "
                     f"{'yes' if v['exact'] else 'NO'} ({ex['flips']}/{ex['positions']}, "
                     f"{ex['rows_bit_identical']}/{ex['positions']}) |")
    for name, why in tuning.get("skipped", {}).items():
        lines.append(f"| {name} | skipped: {why} |" + " |" * (len(sizes) + 1))
    return [*lines, ""]
