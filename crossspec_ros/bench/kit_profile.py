"""The cost profile a GPU kit run measured, in the layout the emulation reads
(``models/emulated.py``, ``crossspec_ros/data/cost_profiles/``): the kit writes it into its OUT
(``profile.json``) after every stage once the verifier's passes on the exact runtime and the
drafter's costs are in (and the verifier's lane costs once the streams stage has run), and
``gpu-report`` files that one under the bundled profiles, named for its report. Every number
says which stage and field it comes from; nothing a stage did not measure is in it."""

from __future__ import annotations

import re
import statistics
from typing import Any

PROFILE_STAGE = "profile"  # OUT/profile.json


def device_tag(gpu: str) -> str:
    """A GPU's short name for file names: "h200" for "NVIDIA H200", else "gpu"."""
    found = re.search(r"\b[A-Z]\d{2,4}\b", gpu)
    return found.group(0).lower() if found else "gpu"


def profile_name(stages: dict[str, Any], date: str) -> str:
    """The name a run's profile goes by: "h200-bf16-static-2026-11-27"."""
    dtype = "bf16" if "passes-bfloat16" in stages else "fp32"
    return f"{device_tag(stages.get('env', {}).get('gpu', ''))}-{dtype}-static-{date}"


def measured_profile(stages: dict[str, Any], name: str, report: str) -> dict[str, Any] | None:
    """The run's costs as an emulation profile named ``name``, its numbers from ``report``
    (where the stages are: the kit's OUT, or gpu-report's dated report), or None when the run
    lacks the verifier's passes on an exact static runtime or the drafter's costs. Sharing
    stays "serial": in one process compiled CUDA steps take turns
    (``static_runtime.CUDA_GRAPH_REPLAY``)."""
    dtype, verifier = verifier_costs(stages)
    drafter = _drafter_costs(stages.get("drafter", {}))
    if verifier is None or drafter is None:
        return None
    verifier.update(lane_costs(stages.get("streams") or {}))
    compiled = stages.get("verifier", {}).get("runtimes", {}).get("exact", {}).get("compiled")
    prompt = ("the prompt's chunks and vision compiled" if _compiled_prompt(stages)
              else "the prompt's chunks eager")
    return {
        "name": name, "kind": "measured", "device": stages.get("env", {}).get("gpu", "?"),
        "dtype": dtype, "runtime": "crossspec's static runtime (" + (
            "steps compiled" if compiled else "steps eager") + f", {prompt})",
        "models": "Video-LLaVA-7B and EventGPT-7B architectures, random weights",
        "report": report,
        "sharing": {"rule": "serial", "about": "one call on the device at a time: in one "
                    "process the runtimes' compiled CUDA steps take turns "
                    "(static_runtime.CUDA_GRAPH_REPLAY)"},
        "verifier": verifier, "drafter": drafter}


def verifier_costs(stages: dict[str, Any], compiled_prefill: bool = True
                   ) -> tuple[str | None, dict[str, Any] | None]:
    """(dtype, the verifier's part of a profile) from the passes stage on the exact runtime,
    or (dtype, None) without it. The prompt's costs (vision and chunks per frame) come from
    the prefill-compiled stage when it ran and ``compiled_prefill`` (a node's runtime compiles
    them: ``RuntimeOptions.compile_prefill``), else from the passes stage's eager prefill (the
    runtime the kit's engine and fidelity stages ran)."""
    dtype = next((k.removeprefix("passes-") for k in stages if k.startswith("passes-")), None)
    passes = stages.get(f"passes-{dtype}", {})
    exact = next((r for key, r in passes.get("runtimes", {}).items()
                  if key.startswith("static_") and "_exact_" in key), None)
    stage, prefill = f"passes-{dtype}", passes.get("prefill", {})
    if compiled_prefill and _compiled_prompt(stages):
        stage, prefill = "prefill-compiled", _compiled_prompt(stages)
    chunks = prefill.get("per_frame_chunk", [])
    if not (exact and chunks):
        return dtype, None
    per_token = statistics.median(c["prefill_ms"] / c["tokens"] for c in chunks)
    passes_stage = f"passes-{dtype}"
    return dtype, {
        "vision_ms_per_frame": {"ms": round(statistics.median(
            c["vision_ms"] for c in chunks), 3), "from": f"{stage}.prefill.per_frame_chunk[]"
            ".vision_ms, median (each frame encoded alone)"},
        "prefill_ms_per_token": {"ms": round(per_token, 4), "from": f"{stage}.prefill"
                                 ".per_frame_chunk[], median prefill_ms / tokens"},
        "pass_ms_by_rows": {rows: {"ms": ms, "from": f"{passes_stage}.runtimes.*_exact_*"
                                   f".ms_per_pass[{rows}]"}
                            for rows, ms in exact["ms_per_pass"].items()},
        "prompt": {"tokens": prefill["prompt_tokens"],
                   "chunks": [c["tokens"] for c in chunks],
                   "from": f"{stage}.prefill.prompt_tokens and per_frame_chunk[].tokens"}}


def _compiled_prompt(stages: dict[str, Any]) -> dict[str, Any]:
    """The prefill-compiled stage's prompt costs, or {} when it did not measure them."""
    prefill = stages.get("prefill-compiled", {}).get("prefill", {})
    return prefill if prefill.get("per_frame_chunk") else {}


def lane_costs(streams: dict[str, Any]) -> dict[str, Any]:
    """The verifier's lane costs the streams stage measured (``bench/kit_streams.py``):
    ``lane_pass_ms_by_lanes``, ``lane_copy_ms``, ``chunk_ms_by_frames`` and
    ``vision_ms_by_batch``, measured, each citing its field; {} when the stage did not run (a
    lane step on the profile then says what is missing)."""
    lanes = streams.get("lanes") or {}
    costs: dict[str, Any] = {}
    if lanes:
        costs["lane_pass_ms_by_lanes"] = {
            s: {"ms": r["ms_per_step"],
                "from": f"streams.lanes[{s}].ms_per_step: median of {streams.get('repeats')} "
                        f"{'compiled' if r.get('compiled') else 'eager'} [{s}, "
                        f"{streams.get('step_rows')}] steps, every lane at position "
                        f"{r.get('position')}"}
            for s, r in sorted(lanes.items(), key=lambda item: int(item[0]))}
    prompt = streams.get("prompt") or {}
    for key, field, what in (("chunk_ms_by_frames", "chunk_ms", "chunk steps of K lanes, "
                              "each chunk's positions copied out into its slot"),
                             ("vision_ms_by_batch", "vision_ms", "vision calls of K frames")):
        if prompt.get("frames"):
            costs[key] = {
                k: {"ms": r[field], "from": f"streams.prompt.frames[{k}].{field}: median of "
                    f"{streams.get('repeats')} {'compiled' if r.get('compiled') else 'eager'} "
                    f"{what} (models/prompt_lanes.py)"}
                for k, r in sorted(prompt["frames"].items(), key=lambda item: int(item[0]))}
    adoption = streams.get("adoption")
    if adoption:
        costs["lane_copy_ms"] = {
            "ms": adoption["ms"], "from": f"streams.adoption.ms: median of "
            f"{len(adoption.get('ms_all', [])) or '?'} copies of {adoption.get('positions')} "
            "positions from a pool slot into a lane (LanedLM.adopt)"}
    return costs


def _drafter_costs(drafter: dict[str, Any]) -> dict[str, Any] | None:
    if not (drafter.get("ms_per_pass") and drafter.get("prompt_tokens")):
        return None
    images = drafter.get("vision_frames")
    images_from = "drafter.vision_frames"
    if images is None:  # runs before the kit recorded it: EventGPT encodes a fixed number
        from crossspec_ros.models.eventgpt_drafter import NUM_EVENT_IMAGES

        images, images_from = NUM_EVENT_IMAGES, "EventGPT's NUM_EVENT_IMAGES: every window"
    return {
        "vision_ms_per_frame": {
            "ms": round(drafter["vision_ms"] / images, 3),
            "from": f"drafter.vision_ms / {images} event images ({images_from})"},
        "prefill_ms_per_token": {
            "ms": round(drafter["prefill_ms"] / drafter["prompt_tokens"], 4),
            "from": "drafter.prefill_ms / drafter.prompt_tokens"},
        "pass_ms_by_rows": {rows: {"ms": ms, "from": f"drafter.ms_per_pass[{rows}]"}
                            for rows, ms in drafter["ms_per_pass"].items()},
        "prompt": {"tokens": drafter["prompt_tokens"], "chunks": [drafter["prompt_tokens"]],
                   "from": "drafter.prompt_tokens, one chunk"}}
