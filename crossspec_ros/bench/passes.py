"""`crossspec bench passes`: what one verifier pass costs for 1, 4, 8 and 16 tokens, per
runtime, and how much memory each model and the pair hold.

Speculation pays when a pass over k tokens costs little more than a pass over one: on a
bandwidth-bound GPU a 7B step reads all its weights whatever k is. Per runtime (the
transformers runtime, eager; the static runtime compiled in one shape of ``--step-rows`` rows,
crossspec's exact default; the static runtime compiled in one shape per k), after a prefill
of a real window the verifier feeds k tokens and rolls back, ``--repeats`` times; the report
gives the median ms per pass and its ratio to the one-token pass of the same runtime. Memory:
after loading the verifier, the drafter and both (CUDA: allocated bytes; CPU: not measured).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from crossspec_ros.bench.arguments import bench_float_type
from crossspec_ros.paths import sample_bag

PASS_TOKENS = (1, 4, 8, 16)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "passes", help="ms per verifier pass of 1/4/8/16 tokens per runtime, and memory",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", choices=("bundled", "tiny-random", "full-size"),
                        default="bundled")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", type=bench_float_type, choices=("bfloat16", "float32"),
                        default="bfloat16",
                        help="float type of the full-size pair (default bfloat16)")
    parser.add_argument("--quantization", choices=("none", "4bit"), default="none")
    parser.add_argument("--step-rows", type=int, default=32,
                        help="rows of the exact static runtime's passes (default 32)")
    parser.add_argument("--no-compile", action="store_true", help="static runtimes eager")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--bag", type=Path, default=sample_bag())
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the report as JSON")
    parser.set_defaults(func=run)


def pass_cost_ms(verifier: Any, window: Any, tokens: int, repeats: int) -> float:
    """Median ms of a pass feeding ``tokens`` tokens after the prefill (then rolled back)."""
    return statistics.median(pass_times_ms(verifier, window, tokens, repeats))


def pass_times_ms(verifier: Any, window: Any, tokens: int, repeats: int) -> list[float]:
    """The ms of ``repeats`` passes feeding ``tokens`` tokens after the prefill, each rolled
    back, after two warm-up passes (caches and allocators)."""
    from crossspec_ros.models.streams import synchronize

    session = verifier.prefill(verifier.prepare(window))
    ids = [int(session.last_logits.argmax())] * tokens
    times = []
    for _ in range(repeats + 2):  # the first two warm caches and allocators up
        synchronize(verifier.device, verifier.stream)
        t0 = time.perf_counter()
        session.feed(ids)
        synchronize(verifier.device, verifier.stream)
        times.append((time.perf_counter() - t0) * 1e3)
        session.rollback(0)
    return times[2:]


def runtimes_for_passes(verifier: Any, step_rows: int, compile: bool, max_new: int
                        ) -> dict[str, Any]:
    """The verifier on each runtime compared (twins sharing its weights)."""
    from crossspec_ros.models.static_runtime import RuntimeOptions, use_static_runtime

    def twin(rows: tuple[int, ...]) -> Any:
        model = verifier.with_runtime(None)
        use_static_runtime(model, RuntimeOptions(compile=compile, step_rows=rows), max_new)
        return model

    kind = "compiled" if compile else "eager"
    return {"transformers": verifier.with_runtime(None),
            f"static_{kind}_exact_{step_rows}": twin((step_rows,)),
            f"static_{kind}_per_k": twin(PASS_TOKENS)}


def gpu_bytes() -> int | None:
    import torch

    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    return int(torch.cuda.memory_allocated())


def run(args: argparse.Namespace) -> int:
    from crossspec_ros.bench import engine as bench
    from crossspec_ros.models.loading import resolve_device
    from crossspec_ros.models.static_runtime import compile_allowed
    from crossspec_ros.process_tuning import tune_process_for_models

    if args.repeats < 1 or args.step_rows < max(PASS_TOKENS):
        print(f"crossspec bench passes: need --repeats >= 1 and --step-rows >= "
              f"{max(PASS_TOKENS)}", file=sys.stderr)
        return 2
    device = str(resolve_device(args.device))
    tune_process_for_models(device)
    windows = bench.bag_windows(args.bag, 1)
    if not windows:
        print(f"crossspec bench passes: {args.bag} has no window with RGB frames",
              file=sys.stderr)
        return 2
    before = gpu_bytes()
    loaded = _load_pair(args, device)
    if loaded is None:
        return 2
    # the drafter is only held: the pair's memory is measured with it loaded
    verifier, _drafter, label, after_verifier = loaded
    if args.quantization == "4bit":
        label += ", 4-bit NF4"
    after_pair = gpu_bytes()
    report: dict[str, Any] = {"models": label, "device": device, "repeats": args.repeats,
                              "step_rows": args.step_rows, "runtimes": {}}
    if before is not None and after_verifier is not None:
        report["memory_gib"] = {
            "verifier": round((after_verifier - before) / 2**30, 2),
            "drafter": round((after_pair - after_verifier) / 2**30, 2),
            "pair": round((after_pair - before) / 2**30, 2)}
        print(f"memory: {report['memory_gib']} GiB")
    runtimes = runtimes_for_passes(verifier, args.step_rows,
                                   not args.no_compile and compile_allowed(), 48)
    if "memory_gib" in report:  # the static caches and compiled graphs come on top
        report["memory_gib"]["pair_with_runtimes"] = round((gpu_bytes() - before) / 2**30, 2)
    for name, model in runtimes.items():
        report["runtimes"][name] = _runtime_pass_costs(name, model, windows[0], args.repeats)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def _load_pair(args: argparse.Namespace, device: str) -> tuple[Any, Any, str, int | None] | None:
    """(verifier, drafter, label, GPU bytes allocated after the verifier: full-size only) of
    --models, quantized as asked; None (said on stderr) when full-size has no CUDA device."""
    import torch

    from crossspec_ros.bench import engine as bench

    if args.models == "full-size":
        from crossspec_ros.models.full_size import full_size_eventgpt_drafter, full_size_verifier

        if not device.startswith("cuda"):
            print("crossspec bench passes: --models full-size needs --device cuda",
                  file=sys.stderr)
            return None
        dtype = getattr(torch, args.dtype)
        verifier = _quantized(full_size_verifier(device, dtype), args.quantization)
        after_verifier = gpu_bytes()
        drafter = _quantized(full_size_eventgpt_drafter(device, dtype), args.quantization)
        label = f"full-size random-weight pair ({args.dtype})"
    else:
        build = {"bundled": bench.bundled_pair, "tiny-random": bench.tiny_random_pair}
        verifier, drafter, label = build[args.models](device)
        verifier = _quantized(verifier, args.quantization)
        drafter = _quantized(drafter, args.quantization)
        after_verifier = None
    return verifier, drafter, label, after_verifier


def _quantized(model: Any, quantization: str) -> Any:
    """``model``, its layers in NF4 with --quantization 4bit (in place)."""
    if quantization == "4bit":
        from crossspec_ros.models.quantize import quantize_caption_model_4bit

        quantize_caption_model_4bit(model)
    return model


def _runtime_pass_costs(name: str, model: Any, window: Any, repeats: int) -> dict[str, Any]:
    """One runtime's ms per pass of each token count and their ratio to the one-token pass,
    printed on one line as well."""
    costs = {k: pass_cost_ms(model, window, k, repeats) for k in PASS_TOKENS}
    result = {"ms_per_pass": {str(k): round(v, 3) for k, v in costs.items()},
              "x_one_token": {str(k): round(v / costs[1], 3) for k, v in costs.items()}}
    print(f"{name:28s} " + "  ".join(f"{k} tokens {v:.2f} ms ({v / costs[1]:.2f}x)"
                                     for k, v in costs.items()), flush=True)
    return result
