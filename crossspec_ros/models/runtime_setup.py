"""How a node's model is made ready to run from its parameters: the runtime they ask for
(``runtime``, ``compile``, ``step_rows``: the static runtime of static_runtime.py, or the
transformers one) and the emulated target (``emulate``: models/emulated.py), and what its
diagnostics say about both. The nodes, ``crossspec caption`` and the benches prepare their
models here; static_runtime.py keeps the runtime itself."""

from __future__ import annotations

import os
import time
from typing import Any

from crossspec_ros.models.emulated import emulate, emulation_of
from crossspec_ros.models.static_runtime import (
    DRAFTER_STEP_ROWS,
    RuntimeOptions,
    compile_allowed,
    use_static_runtime,
)


def runtime_options(params: dict[str, Any], role: str) -> RuntimeOptions | None:
    """The runtime a node's ``role`` ("verifier" or "drafter") model runs, from validated
    RUNTIME_PARAMS values (None: the transformers runtime). A drafter's tokens are proposals,
    checked anyway: it steps in two shapes, one token at a time and re-syncs."""
    if params["runtime"] != "static":
        return None
    rows = (int(params["step_rows"]),) if role == "verifier" else DRAFTER_STEP_ROWS
    # an emulated target times each forward from outside it: compiled graphs cannot carry that
    compiled = bool(params["compile"]) and compile_allowed() and not params.get("emulate")
    attention = resolve_attention(params.get("attention", "auto"), role,
                                  str(params.get("device", "cpu")), compiled)
    return RuntimeOptions(compile=compiled, step_rows=rows, attention=attention)


def resolve_attention(choice: str, role: str, device: str, compiled: bool) -> str:
    """The attention (``RuntimeOptions.attention``) the parameter ``attention`` asks for.
    "auto": split_kv for a compiled verifier on a GPU, where it was measured (an H200, bf16:
    x0.75 a decoding step, exact; docs/gpu-h200-2026-11-30.md), SDPA elsewhere: the drafter
    and the CPU were not measured with it, and their captions stay what they were."""
    if choice != "auto":
        return choice
    on_gpu = device.startswith("cuda")
    return "split_kv" if role == "verifier" and compiled and on_gpu else "sdpa"


def prepare_runtime(model: Any, params: dict[str, Any], role: str,
                    max_new_tokens: int) -> str:
    """Give ``model`` the runtime the node parameters ask for (compiling and warming up its
    shapes, or taking one built before) and the emulated target ``emulate`` names, if any;
    returns the line a node logs about it."""
    options = runtime_options(params, role)
    t0 = time.perf_counter()
    timings = use_static_runtime(model, options, max_new_tokens)
    runtime = model.runtime
    if runtime is None:
        return f"{model.info.name}: transformers runtime (eager, a DynamicCache per " \
               f"window){_emulation(model, params, role)}"
    line = runtime.describe()
    if timings:
        shapes = ", ".join(f"{shape} {s:.1f} s" for shape, s in timings.items())
        line += f"; ready in {time.perf_counter() - t0:.1f} s ({shapes})"
    else:
        line += " (built before: reused)"
    if runtime.compiled:
        line += f"; compiled kernels cached in {os.environ.get('TORCHINDUCTOR_CACHE_DIR')}"
    if runtime.compile_failed:
        line += f"; compiling failed ({runtime.compile_failed}): eager steps"
    return line + _emulation(model, params, role)


def _emulation(model: Any, params: dict[str, Any], role: str) -> str:
    """The emulated target the parameter ``emulate`` asks for, on ``model``; the words a node
    logs about it ("" when nothing is emulated)."""
    if not params.get("emulate"):
        return ""
    device = emulate(model, role, params["emulate"])
    return f"; EMULATED {device.profile.describe()}"


def runtime_counters(model: Any) -> dict[str, Any]:
    """``model``'s static runtime counters for a node's diagnostics (``StaticLM.counters``;
    none on the transformers runtime), and on an emulated target what it is and whether the
    emulation held (printed for people: a reader of the diagnostics takes the calls over
    budget, ``emulation_held`` is the one verdict of them)."""
    runtime = getattr(model, "runtime", None)
    counters: dict[str, Any] = runtime.counters() if runtime is not None else {}
    device = emulation_of(model)
    if device is not None:
        counters.update(emulated=device.profile.label, emulation_held=device.held,
                        emulation_over_budget=device.calls_over_budget)
    return counters
