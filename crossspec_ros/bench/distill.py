"""`crossspec bench distill`: what a distillation step costs, LoRA against a whole fine-tune.

Runs the training loop of ``crossspec distill`` (``train/distill.py``: the same loss, AdamW,
clipping and schedule) for a few steps on a batch of synthetic windows (random event images
and random captions of a fixed length: a step's cost does not depend on what the windows
show) and reports time per step after warm-up, trainable parameters and peak memory (the GPU's
allocator peak on CUDA; the process's peak resident set on CPU, model loading included).
``--models full-size`` builds the 7B EventGPT architecture with random weights in bf16 (a GPU
job: random weights show cost, never acceptance).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

METHODS = ("lora", "finetune")


def synthetic_labels(drafter: Any, windows: int, caption_tokens: int, seed: int) -> Any:
    """``windows`` labelled windows of random event images and captions (EOS-terminated)."""
    import torch

    from crossspec_ros.models.eventgpt import NUM_EVENT_IMAGES
    from crossspec_ros.train.distill import Labels

    generator = torch.Generator().manual_seed(seed)
    side = drafter.model.config.vision.image_size
    pixels = torch.randn((windows, NUM_EVENT_IMAGES, 3, side, side), generator=generator)
    words = torch.randint(0, drafter.info.proposable_ids, (windows, caption_tokens - 1),
                          generator=generator)
    captions = [[*row.tolist(), drafter.info.eos_token_id] for row in words]
    return Labels(pixels.half(), captions)


def time_steps(drafter: Any, method: str, *, steps: int, warmup: int, batch_size: int,
               caption_tokens: int, lora_rank: int, seed: int = 0) -> dict[str, Any]:
    """Train ``drafter`` (in place) for ``warmup + steps`` steps; the counted steps' times."""
    import torch

    from crossspec_ros.train.distill import MIN_WINDOWS, DistillConfig, finetune, finetune_lora

    labels = synthetic_labels(drafter, max(MIN_WINDOWS, batch_size), caption_tokens, seed)
    config = DistillConfig(seed=seed, steps=warmup + steps, batch_size=batch_size,
                           warmup_steps=1, lora_rank=lora_rank if method == "lora" else 0,
                           lora_alpha=2.0 * lora_rank)
    cuda = drafter.model.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    stamps: list[float] = []

    def progress(_step: int, _loss: float) -> None:  # after the step's optimizer update
        stamps.append(time.perf_counter())

    start = time.perf_counter()
    if method == "lora":
        peft_model, losses = finetune_lora(drafter, labels, config, progress=progress)
        trainable, total = peft_model.get_nb_trainable_parameters()
    else:
        losses = finetune(drafter, labels, config, progress=progress)
        params = list(drafter.model.parameters())
        trainable = sum(p.numel() for p in params if p.requires_grad)
        total = sum(p.numel() for p in params)
    times = [(b - a) * 1e3 for a, b in zip([start, *stamps[:-1]], stamps, strict=True)]
    counted = sorted(times[warmup:])
    return {
        "method": method, "steps": steps, "warmup": warmup, "batch_size": batch_size,
        "caption_tokens": caption_tokens, "lora_rank": lora_rank if method == "lora" else None,
        "step_ms_median": round(counted[len(counted) // 2], 1),
        "step_ms_min": round(counted[0], 1), "step_ms_max": round(counted[-1], 1),
        "windows_per_s": round(batch_size / (counted[len(counted) // 2] / 1e3), 2),
        "trainable_parameters": int(trainable), "all_parameters": int(total),
        "peak_memory_mb": round(_peak_memory_mb(cuda), 1),
        "peak_memory_kind": "cuda max_memory_allocated" if cuda
        else "process peak RSS, all runs so far",
        "final_loss": round(losses[-1], 4),
    }


def _peak_memory_mb(cuda: bool) -> float:
    if cuda:
        import torch

        return torch.cuda.max_memory_allocated() / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "distill", help="time per distillation step and peak memory, LoRA vs whole fine-tune",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", choices=("bundled", "full-size"), default="bundled",
                        help="bundled: the tiny drafter (default); full-size: the 7B EventGPT "
                        "architecture, random weights, bf16 (GPU)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--method", choices=METHODS, nargs="+", default=list(METHODS),
                        help="what to time, each on a fresh drafter (default: both)")
    parser.add_argument("--steps", type=int, default=10, help="counted steps (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="uncounted first steps")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--caption-tokens", type=int, default=48)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.steps < 1 or args.warmup < 0 or args.batch_size < 1 or args.caption_tokens < 2 \
            or args.lora_rank < 1:
        print("crossspec bench distill: need --steps >= 1, --warmup >= 0, --batch-size >= 1, "
              "--caption-tokens >= 2 and --lora-rank >= 1", file=sys.stderr)
        return 2
    import platform

    import torch

    from crossspec_ros.models.loading import resolve_device

    device = str(resolve_device(args.device))
    results = []
    for method in args.method:
        torch.manual_seed(0)
        if args.models == "full-size":
            from crossspec_ros.models.full_size import full_size_eventgpt_drafter

            drafter = full_size_eventgpt_drafter(device, torch.bfloat16)
        else:
            from crossspec_ros.models.pair import load_drafter

            drafter = load_drafter("", device=device)
        print(f"{method}: {args.warmup} + {args.steps} steps of {args.batch_size} windows "
              f"on {device}", file=sys.stderr)
        try:
            results.append(time_steps(drafter, method, steps=args.steps, warmup=args.warmup,
                                      batch_size=args.batch_size,
                                      caption_tokens=args.caption_tokens,
                                      lora_rank=args.lora_rank))
        except torch.OutOfMemoryError as err:  # a whole 7B fine-tune may not fit: a finding
            results.append({"method": method, "error": f"out of memory: {err}"[:300]})
        del drafter
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    report = {"models": args.models, "device": device, "results": results,
              "machine": f"{platform.machine()}"
              + (f", {torch.cuda.get_device_name()}" if device.startswith("cuda") else ""),
              "torch_threads": torch.get_num_threads()}
    print("| method | step ms (median, min-max) | windows/s | trainable / all parameters "
          "| peak memory MB |\n|---|---:|---:|---:|---:|")
    for r in results:
        if "error" in r:
            print(f"| {r['method']} | {r['error']} | | | |")
            continue
        print(f"| {r['method']} | {r['step_ms_median']} ({r['step_ms_min']}-"
              f"{r['step_ms_max']}) | {r['windows_per_s']} | {r['trainable_parameters']:,} / "
              f"{r['all_parameters']:,} | {r['peak_memory_mb']} ({r['peak_memory_kind']}) |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0
