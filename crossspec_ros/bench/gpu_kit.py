"""`crossspec bench gpu-kit OUT`: everything crossspec measures on a GPU, in one process and one
device call, the numbers that decide the next steps first (``scripts/gpu_check.sh run all``).

A lease of a GPU is rare and short (15 minutes in all, one call at most 10), so the kit loads
each model once, keeps what it compiled for every later stage, and runs the stages in priority
order against a time budget (``--budget``, default 480 s):

  env             the machine, torch, CUDA, the GPU and its free memory
  verifier        load the verifier; build its static runtime (one step shape of
                  ``--step-rows`` rows: the exact one) and the one-row runtime of the fastest
                  plain decoder; each shape's compile seconds
  exactness       k-token verification against one-token decoding on the exact runtime:
                  argmax flips per position, rows bit-identical (2 windows)
  passes          ms per pass of 1, 8 and step-rows tokens per runtime (compiled and eager),
                  frame preparation, vision encoding and prefill per frame chunk and whole,
                  the verifier's memory
  engine          ``bench engine``'s modes that decide the design (the verifier alone,
                  compiled and exact; history_only; crossspec without a drafter; free oracle
                  drafts of acceptance 0.5 and 0.8; the live graphs after_close_alone,
                  live_alone, text_only and crossspec_live through the product's loops)
  drafter         the drafter: load, compile, prefill and step
  streams         lane steps (issue 57, ``bench/kit_streams.py``): a compiled ``[S, step-rows]``
                  step for S = 1, 2, 4, 8 on the exact runtime, a lane's adoption copy, and
                  T1 (a lane's rows whatever the other lanes hold); after the stages above:
                  the profile it completes needs the drafter's costs
  trace           torch.profiler over a decoding step (1 and step-rows rows), a vision call,
                  a prompt chunk, the drafter's step and prefill (``bench/kit_trace.py``):
                  top kernels, the device's busy share, achieved bandwidth and FLOP rate,
                  the distance from the bound (issue 55)
  tuning, sharing, engine-drafter, prefill-compiled, exactness-float32, 4bit, tests
                  what the budget leaves: the exact decoding step compiled under other
                  settings (the other attention, inductor's GEMM autotuning), each timed
                  against the kit's and checked for exactness (``bench/kit_tuning.py``);
                  the verifier's pass beside the drafter (its steps on their own CUDA
                  stream in this process, and in a process of its own: the cost of sharing
                  the device; before the stages that free the drafter, after those that
                  matter more, as a CUDA fault there ends the process's GPU work); the
                  engine with the event drafter, offline and through the live graph, beside
                  the same verifier without it (random weights: its cost); the prompt's
                  chunks compiled as well (the first stages run prefill eager, so that
                  their compile is the decoding steps' alone; measured once, 2026-11-29,
                  so after what was not); fp32 exactness; the
                  verifier in 4-bit NF4 (exactness and passes); the CUDA tests
                  (test/test_models_gpu.py, a process of their own)

Each stage writes its JSON into OUT as soon as it is done, and ``stages.json`` lists every stage
with its status (done, skipped, failed; running while it runs) and seconds, so a call killed at
its limit still returns all that finished before. A device call returns at most 8 files (the
kit writes up to 16), so ``--pack FILE`` also packs OUT's files into one archive after every
stage (``gpu-report`` reads it as it reads a folder). A stage that would not fit the time left
(judged from the stages before it) is skipped and named; one that fails writes its error and
the next one runs; one that overruns its own limit is cut (SIGALRM: a kernel that never
returns is cut by the device call's limit instead, and the stage list still says which stage
was running). ``profile.json`` is the run's cost profile in the layout the emulation reads
(``bench/kit_profile.py``; ``crossspec drive --emulate OUT/profile.json`` takes it as it is), each
number with the stage and field it comes from, written once the verifier's passes and the
drafter's costs are in.

On a CPU (``scripts/gpu_check.sh smoke``) the same kit runs on the tiny random pair with eager
steps: the rehearsal that fails here, not there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossspec_ros.params import ATTENTION_CHOICES
from crossspec_ros.paths import sample_bag

DEFAULT_BUDGET_S = 480.0
# the modes of the engine stage: what decides the design (issue 42), the paired baseline first
ENGINE_MODES = ("verifier_alone_compiled", "verifier_alone_exact", "history_only", "crossspec",
                "oracle_free@a=0.5", "oracle_free@a=0.8", "after_close_alone", "live_alone",
                "text_only", "crossspec_live")
ORACLE_ACCEPTANCES = (0.5, 0.8)
# the modes of the engine-drafter stage: crossspec with the event drafter, offline and in the
# live graph, beside the same verifier without it (issue 55: never reached on a GPU before)
ENGINE_DRAFTER_MODES = ("verifier_alone_exact", "history_only", "crossspec", "text_only",
                        "crossspec_live")
# the modes the fidelity stage traces: plain decoding, the history proposers, free drafts
FIDELITY_MODES = ("verifier_alone_exact", "crossspec", "oracle_free@a=0.8")
EXACTNESS_WINDOWS = 2
SHARING_PASSES = 12  # verifier passes timed alone and beside the drafter, each way


class StageTimeoutError(Exception):
    """A stage ran past its own limit."""


class RehearsedFailureError(RuntimeError):
    """``--rehearse-failure STAGE``: the failure the rehearsal asks for."""


@dataclass
class Stage:
    """One measurement: ``run(kit)`` returns the JSON written to OUT/``file``.json;
    ``estimate(kit)`` the seconds it is expected to take, from what the stages before it
    measured; ``needs``: stages that must be done before it."""

    name: str
    run: Callable[[Kit], dict[str, Any]]
    estimate: Callable[[Kit], float]
    needs: tuple[str, ...] = ()
    file: str = ""


@dataclass
class StageRecord:
    name: str
    status: str  # running, done, skipped, failed
    seconds: float = 0.0
    why: str = ""
    estimate_s: float | None = None


@dataclass
class Kit:
    """A kit run's settings, the models it loaded and what its stages measured so far."""

    out: Path
    device: str
    models: str
    dtype: str
    budget_s: float
    windows: list[Any]
    max_new_tokens: int
    step_rows: int
    compile: bool
    repeats: int
    compile_prefill: bool = False
    # the verifier's attention in every runtime the kit builds of it (RuntimeOptions), as a
    # node resolves its parameter attention: split_kv compiled on a GPU, sdpa elsewhere
    attention: str = "sdpa"
    tuning_only: tuple[str, ...] = ()  # the tuning stage's variants asked for (empty: all)
    rehearse_failure: str = ""
    pack: Path | None = None  # OUT's files packed here after every stage (--pack)
    t0: float = field(default_factory=time.monotonic)
    records: list[StageRecord] = field(default_factory=list)
    verifier: Any = None      # on the transformers runtime (eager); its static twins below
    exact: Any = None         # the static runtime of one step shape (step_rows): exact
    plain: Any = None         # the static runtime of one-row steps, compiled (or None)
    drafter: Any = None
    log: Callable[[str], None] = field(default=lambda s: print(s, file=sys.stderr, flush=True))

    @property
    def full_size(self) -> bool:
        return self.models == "full-size"

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def seconds(self, stage: str, default: float) -> float:
        """How long ``stage`` took (``default`` if it did not run)."""
        for record in self.records:
            if record.name == stage and record.status == "done":
                return record.seconds
        return default

    def write_stages(self) -> None:
        report = {"budget_s": self.budget_s, "elapsed_s": round(self.elapsed(), 1),
                  "device": self.device, "models": self.models, "dtype": self.dtype,
                  "stages": [{k: v for k, v in record.__dict__.items()
                              if v not in ("", None)} for record in self.records],
                  # what the device's image must hold or the call carry (.gpu): the
                  # rehearsal checks it against gpu_check.sh's wheels
                  "imported": third_party_modules()}
        _write_json(self.out / "stages.json", report)
        if self.pack is not None:
            pack_results(self.out, self.pack)


def third_party_modules() -> list[str]:
    """The top-level packages imported so far from outside the standard library and
    crossspec (their import names)."""
    names = set()
    for name, module in list(sys.modules.items()):
        top = name.partition(".")[0]
        where = str(getattr(module, "__file__", None) or "")
        if top in sys.stdlib_module_names or top == "crossspec_ros" or top.startswith("_"):
            continue
        if "site-packages" in where or "dist-packages" in where:
            names.add(top)
    return sorted(names)


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".json.partial")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)  # a call killed mid-write leaves the last whole file


def pack_results(out: Path, pack: Path) -> None:
    """OUT's files (not its folders, not the pack itself) as one gzip'd tar at ``pack``,
    replaced whole: a call cut mid-write returns the archive of the stage before."""
    files = sorted(p for p in out.iterdir() if p.is_file() and p.resolve() != pack.resolve()
                   and not p.name.endswith(".partial"))
    pack.parent.mkdir(parents=True, exist_ok=True)
    tmp = pack.with_name(pack.name + ".partial")
    with tarfile.open(tmp, "w:gz") as archive:
        for path in files:
            archive.add(path, arcname=path.name)
    tmp.replace(pack)


# ------------------------------------------------------------------ helpers


def _sync(model: Any) -> None:
    from crossspec_ros.models.streams import synchronize

    synchronize(model.device, model.stream)


def gpu_memory() -> dict[str, float] | None:
    """GiB allocated now and at most so far, and free on the device (None on a CPU)."""
    import torch

    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {"allocated_gib": round(torch.cuda.memory_allocated() / 2**30, 2),
            "max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "free_gib": round(free / 2**30, 2), "total_gib": round(total / 2**30, 2)}


def _allocated() -> float | None:
    memory = gpu_memory()
    return memory["allocated_gib"] if memory else None


def _load_pair_member(kit: Kit, role: str, dtype: str) -> Any:
    """The verifier or the drafter of the kit's pair, in ``dtype``."""
    import torch

    torch_dtype = getattr(torch, dtype)
    if kit.full_size:
        from crossspec_ros.models.full_size import full_size_eventgpt_drafter, full_size_verifier

        build = full_size_verifier if role == "verifier" else full_size_eventgpt_drafter
        return build(kit.device, torch_dtype)
    from crossspec_ros.bench import engine as bench

    pair = {"bundled": bench.bundled_pair, "tiny-random": bench.tiny_random_pair}[kit.models]
    model = pair(kit.device)[0 if role == "verifier" else 1]
    model.model.to(torch_dtype)
    return model


def _static_twin(model: Any, rows: tuple[int, ...], compile: bool, max_new: int,
                 compile_prefill: bool = True, attention: str = "sdpa"
                 ) -> tuple[Any, dict[str, float]]:
    """``model`` on a static runtime of ``rows`` (sharing its weights) and each shape's
    warm-up (compile and first run) seconds."""
    from crossspec_ros.models.static_runtime import RuntimeOptions, use_static_runtime

    twin = model.with_runtime(None)
    timings = use_static_runtime(twin, RuntimeOptions(compile=compile, step_rows=rows,
                                                     compile_prefill=compile_prefill,
                                                     attention=attention), max_new)
    return twin, timings


def _runtime_json(model: Any, timings: dict[str, float]) -> dict[str, Any]:
    runtime = model.runtime
    return {"describe": runtime.describe(), "compiled": runtime.compiled,
            "compile_failed": runtime.compile_failed,
            "warm_up_s_per_shape": timings, "warm_up_s": round(sum(timings.values()), 2)}


def _close(session: Any) -> None:
    """Give a static session's cache back (a transformers session has none to give)."""
    close = getattr(session, "close", None)
    if close is not None:
        close()


def _pass_ms(model: Any, window: Any, tokens: int, repeats: int) -> float:
    from crossspec_ros.bench.passes import pass_cost_ms

    return round(pass_cost_ms(model, window, tokens, repeats), 3)


def _pass_spread(model: Any, window: Any, tokens: int, repeats: int) -> dict[str, float]:
    """A pass's median, mean and worst ms over ``repeats``: beside another model the median
    alone can miss passes that met its work (the 2026-11-30 lease's sharing stage)."""
    from crossspec_ros.bench.passes import pass_times_ms

    times = pass_times_ms(model, window, tokens, repeats)
    return {"median": round(statistics.median(times), 3),
            "mean": round(statistics.fmean(times), 3), "worst": round(max(times), 3)}


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise StageTimeoutError in this (the main) thread after ``seconds`` (SIGALRM; between
    bytecodes: a call that never comes back is cut by the device call's own limit)."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expire(_signum: int, _frame: Any) -> None:
        raise StageTimeoutError(f"cut after its limit of {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    t0 = time.monotonic()
    outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_delay > 0:  # an alarm set before (a test runner's timeout) keeps its time
            signal.setitimer(signal.ITIMER_REAL,
                             max(outer_delay - (time.monotonic() - t0), 0.001), outer_interval)


# ------------------------------------------------------------------ the stages


def stage_env(kit: Kit) -> dict[str, Any]:
    import importlib

    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(), "machine": platform.machine(),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
        "device": kit.device}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu_memory"] = gpu_memory()
        info["multiprocessors"] = props.multi_processor_count
    for name in ("transformers", "bitsandbytes", "rosbags", "evt3", "tokenizers",
                 "safetensors", "triton"):
        try:
            info[name] = getattr(importlib.import_module(name), "__version__", "?")
        except Exception as err:  # reported, not fatal: the stage that needs it says more
            info[name] = f"missing ({type(err).__name__})"
    return info


def stage_verifier(kit: Kit) -> dict[str, Any]:
    from crossspec_ros.models.streams import assign_cuda_streams

    before = _allocated()
    t0 = time.perf_counter()
    kit.verifier = _load_pair_member(kit, "verifier", kit.dtype)
    assign_cuda_streams(kit.verifier)  # its own stream: the drafter's may overlap it later
    _sync(kit.verifier)
    load_s = round(time.perf_counter() - t0, 2)
    weights = _allocated()
    kit.log(f"verifier loaded in {load_s:.1f} s")
    kit.exact, exact_timings = _static_twin(kit.verifier, (kit.step_rows,), kit.compile,
                                            kit.max_new_tokens, kit.compile_prefill,
                                            kit.attention)
    kit.log(f"exact runtime ready: {exact_timings}")
    result: dict[str, Any] = {
        "model": kit.verifier.info.name, "dtype": kit.dtype, "load_s": load_s,
        "prompt_tokens": kit.verifier.prompt_layout()[0],
        "prompt_chunks": kit.verifier.prompt_layout()[1],
        "compile": (("each step shape compiled whole (torch.compile fullgraph, one graph per "
                     "shape; CUDA graphs on a GPU)") + ("" if kit.compile_prefill else
                                                        "; the prompt's chunks run eager (the "
                                                        "prefill-compiled stage compiles them)"))
        if kit.compile else "eager steps",
        "runtimes": {"exact": _runtime_json(kit.exact, exact_timings)}}
    # the fastest plain decoder (verifier_alone_compiled) only when its compile fits: judged
    # from the exact runtime's, as long as the rest of the kit's first stages need
    if kit.compile and sum(exact_timings.values()) * 1.5 + 120 < kit.left():
        kit.plain, plain_timings = _static_twin(kit.verifier, (1,), True, kit.max_new_tokens,
                                                kit.compile_prefill, kit.attention)
        result["runtimes"]["one_row"] = _runtime_json(kit.plain, plain_timings)
        kit.log(f"one-row runtime ready: {plain_timings}")
    else:
        result["runtimes"]["one_row"] = None
        result["one_row_left_out"] = "not compiled" if not kit.compile else \
            "its compile would not fit the budget"
    if weights is not None and before is not None:
        result["memory_gib"] = {"weights": round(weights - before, 2),
                                "with_runtimes": round(_allocated() - before, 2),
                                **gpu_memory()}
    return result


def stage_exactness(kit: Kit) -> dict[str, Any]:
    return _exactness(kit, kit.exact, kit.dtype, "none")


def _exactness(kit: Kit, model: Any, dtype: str, quantization: str) -> dict[str, Any]:
    from crossspec_ros.bench.exactness import runtime_exactness

    k = min(8, kit.step_rows - 1)
    result = runtime_exactness(model, kit.windows[:EXACTNESS_WINDOWS], kit.max_new_tokens, k)
    flips = Counter(i for w in result["windows"] for i in w["argmax_differs_at"])
    result["flips_per_position"] = {str(i): n for i, n in sorted(flips.items())}
    name = "static_compiled" if model.runtime is not None and model.runtime.compiled \
        else "static"
    exact = result["flips"] == 0 and result["rows_bit_identical"] == result["positions"]
    kit.log(f"exactness ({dtype}, {quantization}): {result['flips']}/{result['positions']} "
            f"flips, {result['rows_bit_identical']} rows bit-identical")
    return {"models": kit.models, "dtype": dtype, "device": kit.device,
            "quantization": quantization, "k": k, "step_rows": kit.step_rows,
            "runtimes": {name: result}, "exact_runtime": name, "exact": exact}


def stage_passes(kit: Kit) -> dict[str, Any]:
    return _passes(kit, kit.dtype)


def _passes(kit: Kit, label: str) -> dict[str, Any]:
    window = kit.windows[0]
    rows = sorted({1, min(8, kit.step_rows), kit.step_rows})
    runtimes: dict[str, tuple[Any, list[int]]] = {
        f"static_{'compiled' if kit.exact.runtime.compiled else 'eager'}_exact_"
        f"{kit.step_rows}": (kit.exact, rows),
        "transformers_eager": (kit.verifier, rows)}
    if kit.plain is not None:
        runtimes["static_compiled_one_row"] = (kit.plain, [1])
    report: dict[str, Any] = {"models": f"{kit.models} verifier ({label})",
                              "device": kit.device, "repeats": kit.repeats,
                              "step_rows": kit.step_rows, "runtimes": {}}
    for name, (model, counts) in runtimes.items():
        costs = {k: _pass_ms(model, window, k, kit.repeats) for k in counts}
        report["runtimes"][name] = {
            "ms_per_pass": {str(k): v for k, v in costs.items()},
            "x_one_token": {str(k): round(v / costs[1], 3) for k, v in costs.items()}}
        kit.log(f"passes {name}: " + ", ".join(f"{k} tokens {v:.2f} ms"
                                               for k, v in costs.items()))
    report["prefill"] = _prefill_costs(kit.exact, window)
    report["prefill_transformers"] = _prefill_costs(kit.verifier, window, live=False)
    memory = gpu_memory()
    if memory:
        report["memory_gib"] = memory
    return report


def _prefill_costs(model: Any, window: Any, live: bool = True) -> dict[str, Any]:
    """Frame preparation, vision encoding and prefill: per frame chunk (live prefill, as the
    graph runs it while the window is open) and whole (one shot after the close)."""
    from crossspec_ros.models.live_prefill import LivePrefill

    t0 = time.perf_counter()
    inputs = model.prepare(window)
    prepare_ms = (time.perf_counter() - t0) * 1e3
    frames = getattr(model, "num_frames", 1) or 1
    whole = []
    for _ in range(2):  # the first warms caches up
        session = model.prefill(inputs)
        _sync(model)
        whole.append((session.timing.vision_ms, session.timing.prefill_ms))
        _close(session)
    prompt_tokens, chunks = model.prompt_layout()
    out: dict[str, Any] = {
        "frames": frames, "prompt_tokens": prompt_tokens,
        "prepare_ms_per_frame": round(prepare_ms / frames, 3),
        "whole": {"vision_ms": round(whole[-1][0], 3), "prefill_ms": round(whole[-1][1], 3),
                  "tokens": prompt_tokens}}
    if live and hasattr(model, "tokens_per_frame") and len(window.frames) >= frames:
        live_prefill = LivePrefill(model)
        chunk_costs = []
        for index in range(frames):
            vision, prefill = live_prefill.timing.vision_ms, live_prefill.timing.prefill_ms
            live_prefill.add_frame(window.frames[index].image)
            chunk_costs.append({"tokens": chunks[index] if index < len(chunks) else None,
                                "vision_ms": round(live_prefill.timing.vision_ms - vision, 3),
                                "prefill_ms": round(live_prefill.timing.prefill_ms - prefill,
                                                    3)})
        session, _rows = live_prefill.finish()
        _close(session)
        out["per_frame_chunk"] = chunk_costs
        out["question_tail"] = {"tokens": prompt_tokens - sum(chunks[:frames]),
                                "ms": round(live_prefill.timing.prefill_ms - sum(
                                    c["prefill_ms"] for c in chunk_costs), 3)}
    return out


def stage_engine(kit: Kit) -> dict[str, Any]:
    from crossspec_ros.bench import engine as bench

    runtimes = bench.BenchRuntimes(kit.exact, None, kit.verifier, None, kit.plain,
                                   compiled=kit.compile)
    warmup = 1 if len(kit.windows) <= 4 else 2
    report = bench.run_engine_bench(
        kit.verifier, None, kit.windows, max_new_tokens=kit.max_new_tokens,
        oracle_acceptances=ORACLE_ACCEPTANCES, free_oracles=True, prompt_lookup=False,
        warmup=warmup, live=True, live_rounds=1, settle=True, runtimes=runtimes,
        modes=ENGINE_MODES, log=kit.log)
    report.update({"models": f"{kit.models} verifier ({kit.dtype}), no drafter loaded yet: "
                   "crossspec proposes from history, the oracles' drafts are free",
                   "device": kit.device, "modes_run": list(report["modes"])})
    return report


def stage_engine_drafter(kit: Kit) -> dict[str, Any]:
    """crossspec with the event drafter loaded (its static runtime, stepping on its own
    stream beside the verifier's) against the same verifier with the text proposers only, on
    the engine stage's windows, offline and through the live graph's loops. With the
    full-size pair's random weights the drafts are accepted next to never: what this
    measures is what running the drafter costs the verifier, not what it gains."""
    from crossspec_ros.bench import engine as bench

    runtimes = bench.BenchRuntimes(kit.exact, kit.drafter, kit.verifier, None, kit.plain,
                                   compiled=kit.compile)
    report = bench.run_engine_bench(
        kit.verifier, kit.drafter, kit.windows, max_new_tokens=kit.max_new_tokens,
        prompt_lookup=False, warmup=1 if len(kit.windows) <= 4 else 2, live=True,
        live_rounds=1, settle=True, runtimes=runtimes, modes=ENGINE_DRAFTER_MODES,
        log=kit.log)
    report.update({"models": f"{kit.models} verifier ({kit.dtype}) with the {kit.models} "
                   "event drafter" + (" (random weights: what it costs, not what it gains)"
                                      if kit.full_size else ""),
                   "device": kit.device, "modes_run": list(report["modes"])})
    return report


def stage_fidelity(kit: Kit) -> dict[str, Any]:
    """Each window's latency and the trace of its device calls (``models/call_trace.py``) on
    the exact runtime, FIDELITY_MODES alternating their order window by window: what the
    report checks the cost profile measured in this call against (``bench/fidelity.py``)."""
    from crossspec_ros.bench import engine as bench
    from crossspec_ros.models.call_trace import CallTrace
    from crossspec_ros.speculative.engine import EngineConfig

    runtimes = bench.BenchRuntimes(kit.exact, None, kit.verifier, None, kit.plain,
                                   compiled=kit.compile)
    config = EngineConfig(max_new_tokens=kit.max_new_tokens)
    runners, oracles = bench.make_runners(runtimes, config, (0.8,), 4, False,
                                          free_oracles=True)
    runners = {mode: runners[mode] for mode in FIDELITY_MODES if mode in runners}
    trace, windows = CallTrace(), []
    remove = trace.install(runtimes.verifier, "verifier")
    try:
        for index, window in enumerate(kit.windows):
            exact = runtimes.verifier.generate_greedy(runtimes.verifier.prepare(window),
                                                      kit.max_new_tokens)
            for oracle in oracles.values():
                oracle.set_reference(int(window.id), exact)
            for mode in (list(runners) if index % 2 == 0 else list(reversed(runners))):
                with trace.window(f"{mode}/{index}") as calls:
                    tokens, latency, _stats = runners[mode](window)
                windows.append({"mode": mode, "window": index, "warmup": index == 0,
                                "ms": round(latency, 3), "lossless": tokens == exact,
                                "calls": [call.as_list() for call in calls]})
            kit.log(f"[fidelity] window {index + 1}/{len(kit.windows)}: " + ", ".join(
                f"{w['mode']} {w['ms']:.0f} ms" for w in windows[-len(runners):]))
    finally:
        remove()
    return {"runtime": runtimes.verifier.runtime.describe(), "modes": list(runners),
            "call": "[role, kind, frames or rows, positions cached before, ms]",
            "windows": windows}


def stage_drafter(kit: Kit) -> dict[str, Any]:
    from crossspec_ros.models.static_runtime import DRAFTER_STEP_ROWS
    from crossspec_ros.models.streams import assign_cuda_streams

    before = _allocated()
    t0 = time.perf_counter()
    drafter = _load_pair_member(kit, "drafter", kit.dtype)
    assign_cuda_streams(drafter)
    _sync(drafter)
    load_s = round(time.perf_counter() - t0, 2)
    weights = _allocated()
    kit.drafter, timings = _static_twin(drafter, DRAFTER_STEP_ROWS, kit.compile,
                                        kit.max_new_tokens)
    window = kit.windows[0]
    t0 = time.perf_counter()
    inputs = kit.drafter.prepare(window)
    prepare_ms = (time.perf_counter() - t0) * 1e3
    session = kit.drafter.prefill(inputs)
    _sync(kit.drafter)
    _close(session)
    session = kit.drafter.prefill(inputs)
    _sync(kit.drafter)
    result: dict[str, Any] = {
        "model": kit.drafter.info.name, "dtype": kit.dtype, "load_s": load_s,
        "runtime": _runtime_json(kit.drafter, timings),
        "prepare_ms": round(prepare_ms, 3), "vision_ms": round(session.timing.vision_ms, 3),
        # the event images that vision_ms encoded (a cost profile's cost is per image)
        "vision_frames": int(inputs.pixel_values[..., 0, 0, 0].numel()),
        "prefill_ms": round(session.timing.prefill_ms, 3),
        "prompt_tokens": kit.drafter.prompt_layout()[0],
        "ms_per_pass": {str(k): _pass_ms(kit.drafter, window, k, kit.repeats)
                        for k in DRAFTER_STEP_ROWS}}
    _close(session)
    if weights is not None and before is not None:
        result["memory_gib"] = {"weights": round(weights - before, 2), **gpu_memory()}
    return result


def stage_sharing(kit: Kit) -> dict[str, Any]:
    """The verifier's pass (one token, on its exact runtime) alone, then while the drafter
    steps without a pause: in this process on its own stream, and in a process of its own.
    Last of the stages in this process: a CUDA fault poisons the process's context, and the
    first H200 run's came here (two threads replaying CUDA graphs at once, since ordered by
    ``static_runtime.CUDA_GRAPH_REPLAY``) and failed every stage after it."""
    result: dict[str, Any] = {}
    _sharing(kit, result)
    return result


def _sharing(kit: Kit, result: dict[str, Any]) -> None:
    from crossspec_ros.models.pair import FULL_SIZE_RANDOM
    from crossspec_ros.models.static_runtime import DRAFTER_STEP_ROWS, RuntimeOptions
    from crossspec_ros.speculative.drafter_process import DrafterProcess

    window = kit.windows[0]
    spread = _pass_spread(kit.exact, window, 1, SHARING_PASSES)
    alone = spread["median"]
    result["verifier_pass_ms_alone_spread"] = spread
    _sharing_beside_stream(kit, window, alone, result)
    # in a process of its own: as the graph's draft node runs it (on a CPU the bundled
    # drafter stands in for the tiny random one, which has no directory to load from)
    source = FULL_SIZE_RANDOM if kit.full_size else ""
    try:
        process = DrafterProcess(
            source, device=kit.device, dtype="bf16" if kit.dtype == "bfloat16" else "fp32",
            runtime=RuntimeOptions(compile=kit.compile, step_rows=DRAFTER_STEP_ROWS),
            max_new_tokens=kit.max_new_tokens)
    except Exception as err:
        result["process"] = f"failed to start: {type(err).__name__}: {err}"
        return
    busy = threading.Event()
    tokens_drafted: list[int] = []  # a window's draft tokens, window by window

    def keep_drafting_there() -> None:
        while not busy.is_set():
            # a lookahead of the whole caption: nothing to wait for, the drafter runs on
            channel = process.start(window, kit.max_new_tokens, kit.max_new_tokens)
            deadline = time.monotonic() + 60
            while not channel.snapshot()[1] and time.monotonic() < deadline \
                    and not busy.is_set():
                time.sleep(0.005)
            channel.stop()  # the child holds a window until it is stopped, as the engine does
            process.wait_idle(timeout=30)
            tokens_drafted.append(len(channel.snapshot()[0]))

    try:
        thread = threading.Thread(target=keep_drafting_there, name="kit-drafter-process",
                                  daemon=True)
        thread.start()
        spread = _pass_spread(kit.exact, window, 1, SHARING_PASSES)
        busy.set()
        thread.join(timeout=120)
    finally:
        process.close()
    beside_process = spread["median"]
    result.update({
        "verifier_pass_ms_beside_drafter_process": beside_process,
        "verifier_pass_ms_beside_drafter_process_spread": spread,
        "slowdown_beside_drafter_process": round(beside_process / alone, 3) if alone else None,
        "drafter_process_windows_meanwhile": len(tokens_drafted),
        # a drafter that stops at once (random weights can draft EOS first) barely used the
        # device: the slowdown then says little (docs/gpu-h200-2026-11-30.md)
        "drafter_process_tokens_per_window": (statistics.median(tokens_drafted)
                                              if tokens_drafted else None),
        "drafter_process_error": process.error,
        "drafter_process_model": source or "the bundled drafter (stands in on a CPU)"})


def _sharing_beside_stream(kit: Kit, window: Any, alone: float, result: dict[str, Any]
                           ) -> None:
    """The verifier's pass while the drafter steps without a pause on its own CUDA stream in
    this process (a thread), beside ``alone``, the pass on its own."""
    stop = threading.Event()
    steps = [0]

    def keep_drafting() -> None:
        from crossspec_ros.models.streams import inference

        session = kit.drafter.prefill(kit.drafter.prepare(window))
        token = int(session.last_logits.argmax())
        while not stop.is_set():
            with inference(kit.drafter.device, kit.drafter.stream):
                session.feed([token])
                session.rollback(0)
            _sync(kit.drafter)
            steps[0] += 1
        _close(session)

    failed: list[str] = []

    def drafting() -> None:
        try:
            keep_drafting()
        except Exception as err:  # said in the result: a pass beside no drafter is no number
            failed.append(f"{type(err).__name__}: {err}")

    if kit.drafter is None:
        failed.append("the drafter was not loaded (or freed by a stage before)")
    else:
        thread = threading.Thread(target=drafting, name="kit-drafter", daemon=True)
        thread.start()
        spread = _pass_spread(kit.exact, window, 1, SHARING_PASSES)
        beside_thread = spread["median"]
        result["verifier_pass_ms_beside_drafter_stream_spread"] = spread
        stop.set()
        thread.join(timeout=60)
    result.update({"verifier_pass_ms_alone": alone, "drafter_steps_meanwhile": steps[0]})
    if failed or steps[0] == 0:
        result.update(verifier_pass_ms_beside_drafter_stream=None,
                      slowdown_beside_drafter_stream=None,
                      beside_drafter_stream_not_measured=failed[0] if failed
                      else "the drafter took no step meanwhile")
        return
    result.update({
        "verifier_pass_ms_beside_drafter_stream": beside_thread,
        "slowdown_beside_drafter_stream": round(beside_thread / alone, 3) if alone else None})


def stage_prefill_compiled(kit: Kit) -> dict[str, Any]:
    """The prompt's chunks compiled too (what a node compiles at configure): each shape's
    compile seconds and the prefill costs then (the first stages ran prefill eager)."""
    twin, timings = _static_twin(kit.verifier, (kit.step_rows,), kit.compile,
                                 kit.max_new_tokens, attention=kit.attention)
    report = {"runtime": _runtime_json(twin, timings),
              "prefill": _prefill_costs(twin, kit.windows[0])}
    del twin
    return report


def _free_models(kit: Kit) -> None:
    import gc

    import torch

    kit.drafter = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def stage_exactness_float32(kit: Kit) -> dict[str, Any]:
    _free_models(kit)
    model = _load_pair_member(kit, "verifier", "float32")
    twin, timings = _static_twin(model, (kit.step_rows,), kit.compile, kit.max_new_tokens,
                                 attention=kit.attention)
    report = _exactness(kit, twin, "float32", "none")
    report["warm_up_s_per_shape"] = timings
    del model, twin
    _free_models(kit)
    return report


def stage_4bit(kit: Kit) -> dict[str, Any]:
    """The verifier quantized to NF4 in place (the kit's last use of it): exactness and
    passes on its own exact runtime (compiled if bitsandbytes lets it: else eager, said)."""
    from crossspec_ros.models.quantize import quantize_caption_model_4bit

    _free_models(kit)
    kit.exact = kit.plain = None
    quantize_caption_model_4bit(kit.verifier)
    kit.exact, timings = _static_twin(kit.verifier, (kit.step_rows,), kit.compile,
                                      kit.max_new_tokens, attention=kit.attention)
    exactness = _exactness(kit, kit.exact, kit.dtype, "4bit")
    passes = _passes(kit, "4-bit NF4")
    _write_json(kit.out / "exactness-4bit.json", exactness)
    _write_json(kit.out / "passes-4bit.json", passes)
    return {"runtime": _runtime_json(kit.exact, timings), "exact": exactness["exact"],
            "files": ["exactness-4bit.json", "passes-4bit.json"]}


def stage_tests(kit: Kit) -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]
    limit = max(30.0, kit.left() - 5)
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               str(root / "test" / "test_models_gpu.py")],
                              capture_output=True, text=True, timeout=limit, cwd=root)
    except subprocess.TimeoutExpired:
        return {"exit": None, "summary": f"cut after {limit:.0f} s"}
    (kit.out / "tests.log").write_text(done.stdout + done.stderr)
    lines = done.stdout.strip().splitlines()
    return {"exit": done.returncode, "summary": lines[-1] if lines else ""}


# Priors for a stage nothing has measured yet, in seconds: the full-size pair on an H100
# (loading ~15 GB, compiling each shape of a 32-layer model whole), the tiny pair on a CPU
def _prior(kit: Kit, full_size_s: float, tiny_s: float) -> float:
    return full_size_s if kit.full_size else tiny_s


# a full-size verifier's load and compile with inductor's cache on disk from an earlier call on
# the same machine (the second H200 lease: 19.7 s, against 75.6 s cold; 300 s planned cold)
WARM_VERIFIER_S = 90.0


def _verifier_s(kit: Kit) -> float:
    """The verifier stage's seconds: a prior, smaller where inductor's cache already holds an
    earlier call's kernels (a second call on a warm machine, docs/gpu.md), so that a second
    call's smaller budget is not refused on the cold compile's estimate."""
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    warm = kit.full_size and bool(cache) and Path(cache).is_dir() and any(Path(cache).iterdir())
    return WARM_VERIFIER_S if warm else _prior(kit, 300, 10)


def _decode_window_s(kit: Kit) -> float:
    """Seconds of one window's plain decoding, as the exactness stage saw it (two decodes of
    EXACTNESS_WINDOWS windows), or a prior."""
    return kit.seconds("exactness", _prior(kit, 60, 4)) / (2 * EXACTNESS_WINDOWS)


def stage_streams(kit: Kit) -> dict[str, Any]:
    from crossspec_ros.bench.kit_streams import stage_streams as run_streams

    return run_streams(kit)


def stage_trace(kit: Kit) -> dict[str, Any]:
    from crossspec_ros.bench.kit_trace import stage_trace as run_trace

    return run_trace(kit)


def stage_tuning(kit: Kit) -> dict[str, Any]:
    from crossspec_ros.bench.kit_tuning import stage_tuning as run_tuning

    return run_tuning(kit)


def _tuning_s(kit: Kit) -> float:
    """The first variant (a later one that does not fit is skipped inside the stage)."""
    from crossspec_ros.bench.kit_tuning import tuning_variants, variant_s

    if kit.exact is None:
        return _prior(kit, 120, 4)
    asked = [name for name in tuning_variants(kit.attention)
             if not kit.tuning_only or name in kit.tuning_only]
    return variant_s(kit, asked[0]) if asked else 0.0


def _streams_s(kit: Kit) -> float:
    """A compile of the lane step per lane count, each about the exact runtime's step
    compile (its seconds from the verifier stage), and their steps: a prior without it."""
    from crossspec_ros.bench.kit_streams import LANE_COUNTS

    compile_s = (kit.exact.runtime.compile_s.get(f"rows {kit.step_rows}")
                 if kit.exact is not None else None)
    if compile_s is None:
        return _prior(kit, 90, 6)
    return len(LANE_COUNTS) * 1.3 * compile_s + _prior(kit, 15, 3)


STAGES: tuple[Stage, ...] = (
    Stage("env", stage_env, lambda kit: 5),
    Stage("verifier", stage_verifier, _verifier_s),
    Stage("exactness", stage_exactness, lambda kit: _prior(kit, 60, 4), ("verifier",),
          file="exactness-{dtype}"),
    Stage("passes", stage_passes,
          lambda kit: 3 * _decode_window_s(kit) + _prior(kit, 20, 2), ("verifier",),
          file="passes-{dtype}"),
    Stage("engine", stage_engine,
          lambda kit: len(kit.windows) * len(ENGINE_MODES) * _decode_window_s(kit) * 0.8
          + 3 * _decode_window_s(kit), ("verifier",), file="engine-{dtype}"),
    # a reference and three modes a window against the engine stage's nine: about half
    Stage("fidelity", stage_fidelity,
          lambda kit: 0.5 * kit.seconds("engine", len(kit.windows) * len(ENGINE_MODES)
                                        * _decode_window_s(kit)),
          ("verifier",), file="fidelity-{dtype}"),
    Stage("drafter", stage_drafter,
          lambda kit: 0.9 * kit.seconds("verifier", _prior(kit, 300, 10)) + _prior(kit, 60, 8)),
    # after the verifier's and the drafter's stages (the lease is short, and the profile its
    # lane costs go into needs the drafter's): a compile per lane count, a few steps each
    Stage("streams", stage_streams, _streams_s, ("verifier",)),
    # where each step's time goes (issue 55 §2): no compile, a few calls of each kind
    Stage("trace", stage_trace,
          lambda kit: (2 * kit.repeats + 2) * 6 * _decode_window_s(kit) / kit.max_new_tokens
          + _prior(kit, 20, 3), ("verifier",)),
    # the decoding step under other settings (issue 55 §3: split attention first, the largest
    # share of a step on the H200); before the stages that free models
    Stage("tuning", stage_tuning, _tuning_s, ("verifier",)),
    # both models stepping on one device (issue 55 puts it before fp32 and 4-bit, which free
    # the drafter for their memory): a CUDA fault here ends only the stages after it; never
    # reached on a GPU yet (2026-11-29: skipped for time), so before prefill-compiled
    Stage("sharing", stage_sharing,
          lambda kit: 0.5 * kit.seconds("drafter", _prior(kit, 120, 10)) + _prior(kit, 30, 10),
          ("verifier", "drafter")),
    # the engine with the event drafter (five modes against the engine stage's ten), after
    # sharing as issue 55 orders them: the drafter's prefill, vision and steps beside the
    # verifier's through the live loops, which no lease has run (a CUDA fault would end the
    # stages after it, as in sharing)
    Stage("engine-drafter", stage_engine_drafter,
          lambda kit: 0.6 * kit.seconds("engine", len(kit.windows) * len(ENGINE_MODES)
                                        * _decode_window_s(kit)),
          ("verifier", "drafter"), file="engine-drafter-{dtype}"),
    # measured on the second H200 lease (2026-11-29): after what was not
    Stage("prefill-compiled", stage_prefill_compiled,
          lambda kit: kit.seconds("verifier", _prior(kit, 300, 10)) + _prior(kit, 10, 2),
          ("verifier",)),
    Stage("exactness-float32", stage_exactness_float32,
          lambda kit: 1.5 * kit.seconds("verifier", _prior(kit, 300, 10))
          + 1.5 * kit.seconds("exactness", _prior(kit, 60, 4))),
    Stage("4bit", stage_4bit,
          lambda kit: kit.seconds("verifier", _prior(kit, 300, 10))
          + kit.seconds("exactness", _prior(kit, 60, 4))
          + kit.seconds("passes", _prior(kit, 60, 4)), ("verifier",)),
    Stage("tests", stage_tests, lambda kit: _prior(kit, 120, 20)),
)
STAGE_NAMES = tuple(s.name for s in STAGES)


def run_kit(kit: Kit, only: tuple[str, ...] = (), stages: Sequence[Stage] = STAGES
            ) -> list[StageRecord]:
    """Run ``stages`` (``only``: these, in the kit's order) against the budget; every
    outcome in ``kit.records`` and OUT/stages.json as it happens."""
    kit.out.mkdir(parents=True, exist_ok=True)
    wanted = set(only)
    for stage in reversed(stages):  # with what the stages asked for need
        if stage.name in wanted:
            wanted.update(stage.needs)
    for stage in stages:
        if only and stage.name not in wanted:
            continue
        file = (stage.file or stage.name).format(dtype=kit.dtype)
        missing = [n for n in stage.needs if not any(
            r.name == n and r.status == "done" for r in kit.records)]
        estimate = round(float(stage.estimate(kit)), 1)
        record = StageRecord(stage.name, "running", estimate_s=estimate)
        kit.records.append(record)
        if missing:
            record.status, record.why = "skipped", f"needs {', '.join(missing)}, not done"
        elif estimate > kit.left():
            record.status = "skipped"
            record.why = (f"would need ~{estimate:.0f} s (judged from the stages before it); "
                          f"{max(kit.left(), 0):.0f} s of the {kit.budget_s:.0f} s budget left")
        if record.status == "skipped":
            kit.log(f"[{stage.name}] skipped: {record.why}")
            kit.write_stages()
            continue
        kit.write_stages()
        kit.log(f"[{stage.name}] running (expected ~{estimate:.0f} s, "
                f"{kit.left():.0f} s left)")
        t0 = time.perf_counter()
        try:
            # its own limit: three times what it should take, never past the budget; at
            # least a minute on a GPU (a lease to keep), three on the CPU rehearsal, whose
            # machine may be loaded (a test suite beside it took 60 s to start pytest)
            floor_s = 60.0 if kit.device.startswith("cuda") else 180.0
            with _time_limit(min(kit.left(), max(3 * estimate, floor_s))):
                if kit.rehearse_failure == stage.name:
                    raise RehearsedFailureError(f"--rehearse-failure {stage.name}")
                result = stage.run(kit)
            record.status = "done"
            _write_json(kit.out / f"{file}.json", result)
        except Exception as err:  # StageTimeoutError and RehearsedFailureError included
            record.status = "failed"
            record.why = f"{type(err).__name__}: {err}"
            (kit.out / f"{stage.name}.error.txt").write_text(traceback.format_exc())
        record.seconds = round(time.perf_counter() - t0, 1)
        kit.log(f"[{stage.name}] {record.status} in {record.seconds:.1f} s"
                + (f": {record.why}" if record.why else ""))
        write_profile(kit)
        kit.write_stages()
    return kit.records


def write_profile(kit: Kit) -> None:
    """OUT/profile.json: the emulation profile of what the stage files in OUT measured (this
    call's and an earlier one's), once they hold the verifier's passes and the drafter's costs
    (``kit_profile.measured_profile``): the one file of costs the kit writes."""
    import datetime

    from crossspec_ros.bench.gpu_report import collect  # the stage files, loose or packed
    from crossspec_ros.bench.kit_profile import PROFILE_STAGE, measured_profile, profile_name

    stages = collect([kit.out])
    profile = measured_profile(stages, profile_name(stages, datetime.date.today().isoformat()),
                               f"the gpu-kit stages in {kit.out}")
    if profile is not None:
        _write_json(kit.out / f"{PROFILE_STAGE}.json", profile)


# ------------------------------------------------------------------ the command


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "gpu-kit", help="every GPU measurement in one process, priority order, a time budget",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="directory of the stages' JSON")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, metavar="SECONDS",
                        help=f"time for all stages (default {DEFAULT_BUDGET_S:.0f})")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--models", choices=("full-size", "tiny-random", "bundled"),
                        default="full-size",
                        help="full-size: the 7B architectures, random weights (default)")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--windows", type=int, default=8,
                        help="windows of the engine stage, warm-up included (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--step-rows", type=int, default=32,
                        help="rows of every verifier pass on the exact runtime (default 32)")
    parser.add_argument("--repeats", type=int, default=10, help="timed passes per cost")
    parser.add_argument("--no-compile", action="store_true", help="eager static steps")
    parser.add_argument("--attention", choices=ATTENTION_CHOICES, default="auto",
                        help="the verifier's attention in the kit's runtimes (the node "
                        "parameter attention; auto: split_kv compiled on a GPU, else sdpa); "
                        "the tuning stage measures the other one beside it")
    parser.add_argument("--tuning-variants", default="", metavar="A,B",
                        help="the tuning stage's variants to run (default: all, the likeliest "
                        "gain first): split_kv or sdpa (the attention the kit does not run), "
                        "autotune_gemm")
    parser.add_argument("--compile-prefill", action="store_true",
                        help="compile the prompt's chunks in the verifier stage too (default: "
                        "they run eager until the prefill-compiled stage, so that the first "
                        "stages' compile is the decoding steps' alone)")
    parser.add_argument("--stages", default="", metavar="A,B",
                        help=f"only these stages ({', '.join(STAGE_NAMES)})")
    parser.add_argument("--bag", type=Path, default=sample_bag())
    parser.add_argument("--rehearse-failure", default="", metavar="STAGE",
                        help="make STAGE fail (the rehearsal checks the next stage runs)")
    parser.add_argument("--pack", type=Path, default=None, metavar="FILE",
                        help="also pack OUT's files into FILE (a .tar.gz) after every stage: "
                        "a device call returns at most 8 files")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    only = tuple(s for s in args.stages.split(",") if s)
    unknown = [s for s in (*only, *([args.rehearse_failure] if args.rehearse_failure else []))
               if s not in STAGE_NAMES]
    variants = tuple(v for v in args.tuning_variants.split(",") if v)
    from crossspec_ros.bench.kit_tuning import VARIANT_NAMES

    if any(v not in VARIANT_NAMES for v in variants):
        print(f"crossspec bench gpu-kit: --tuning-variants {args.tuning_variants}: the "
              "variants are split_kv, sdpa and autotune_gemm", file=sys.stderr)
        return 2
    if unknown or args.budget <= 0 or args.windows < 2 or args.max_new_tokens < 1 \
            or args.step_rows < 2 or args.repeats < 1:
        print("crossspec bench gpu-kit: " + (f"unknown stage {', '.join(unknown)} (stages: "
              f"{', '.join(STAGE_NAMES)})" if unknown else "need --budget > 0, --windows >= "
              "2, --max-new-tokens >= 1, --step-rows >= 2 and --repeats >= 1"),
              file=sys.stderr)
        return 2
    from crossspec_ros.bench import engine as bench
    from crossspec_ros.events.errors import EventSourceError
    from crossspec_ros.models.loading import resolve_device
    from crossspec_ros.models.runtime_setup import resolve_attention
    from crossspec_ros.models.static_runtime import compile_allowed
    from crossspec_ros.process_tuning import tune_process_for_models

    if args.models == "full-size" and not str(args.device).startswith("cuda"):
        print("crossspec bench gpu-kit: --models full-size needs --device cuda (two 7B models "
              "in bf16 need ~29 GB of GPU memory); on a CPU use --models tiny-random",
              file=sys.stderr)
        return 2
    try:
        windows = bench.bag_windows(args.bag, max(args.windows, EXACTNESS_WINDOWS))
    except EventSourceError as err:
        print(f"crossspec bench gpu-kit: {err}", file=sys.stderr)
        return 2
    if len(windows) < 2:
        print(f"crossspec bench gpu-kit: {args.bag} has {len(windows)} windows with RGB "
              "frames; the kit needs 2 or more", file=sys.stderr)
        return 2
    device = str(resolve_device(args.device))
    tune_process_for_models(device)
    compiled = not args.no_compile and compile_allowed()
    kit = Kit(out=args.out, device=device, models=args.models, dtype=args.dtype,
              budget_s=args.budget, windows=windows, max_new_tokens=args.max_new_tokens,
              step_rows=args.step_rows, compile=compiled,
              repeats=args.repeats, compile_prefill=args.compile_prefill,
              attention=resolve_attention(args.attention, "verifier", device, compiled),
              tuning_only=variants,
              rehearse_failure=args.rehearse_failure, pack=args.pack)
    records = run_kit(kit, only)
    counts = Counter(r.status for r in records)
    print(f"gpu-kit: {counts['done']} done, {counts['skipped']} skipped, {counts['failed']} "
          f"failed in {kit.elapsed():.0f} s of {kit.budget_s:.0f}; {args.out}/stages.json")
    return 0 if counts["done"] else 1
