"""`crossspec bench engine`: the same windows decoded three ways, side by side, in one run.

Modes, in alternation per window (so machine noise hits all alike):
  verifier_alone   plain greedy decoding of the verifier (the losslessness reference)
  prompt_lookup    transformers' prompt-lookup decoding (``prompt_lookup_num_tokens``), what a
                   user would pick instead. Video-LLaVA's generate re-sends the video pixels
                   on assisted steps and fails (transformers 5.23), so the merged prompt
                   embeddings are passed instead: lookup then searches the generated text.
  crossspec        the speculative engine with the drafter (and, with --oracle, oracle
                   drafters of controlled acceptance: crossspec@a=0.2, ...)
Latency is measured from the moment the window is handed over (window close) to the last
confirmed token; every crossspec output is compared with the verifier-alone output.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from crossspec_ros.models.base import CaptionModel
from crossspec_ros.models.oracle import OracleDrafter
from crossspec_ros.paths import sample_bag
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine


@dataclass
class BenchWindow:
    id: int
    frames: list
    events: Any


def pattern_windows(n: int) -> list[BenchWindow]:
    """n one-second windows of the moving test pattern (8 RGB frames + events each)."""
    from crossspec_ros.bags.test_pattern import TestPattern
    from crossspec_ros.sync.window import StampedFrame

    pattern = TestPattern()
    windows = []
    for k in range(n):
        t0 = pattern.start_ns + k * 1_000_000_000
        stamps = [t0 + (i * 2 + 1) * 62_500_000 for i in range(8)]
        frames = [StampedFrame(t, pattern.rgb(t)) for t in stamps]
        windows.append(BenchWindow(k, frames, pattern.events(t0, t0 + 1_000_000_000)))
    return windows


def bag_windows(path: str | Path, n: int) -> list[Any]:
    """The first n windows with RGB of a bag, as the synchronizer emits them."""
    from crossspec_ros.bags.inputs import iter_bag_windows
    from crossspec_ros.sync.synchronizer import WindowSynchronizer

    windows = [w for w in iter_bag_windows(path, WindowSynchronizer()) if w.has_rgb]
    return windows[:n]


def bundled_pair(device: str) -> tuple[CaptionModel, CaptionModel, str]:
    """The trained tiny pair shipped with crossspec (crossspec train-tiny)."""
    from crossspec_ros.train.tiny_pair import BUNDLED_DIR, load_pair

    verifier, drafter = load_pair(BUNDLED_DIR, device=device)
    return verifier, drafter, "bundled tiny pair (trained): EventGPT -> Video-LLaVA"


def tiny_random_pair(device: str) -> tuple[CaptionModel, CaptionModel, str]:
    """Untrained tiny pair with a real cost asymmetry (verifier prefill several times the
    drafter's). Random weights: the drafter's real acceptance is near zero."""
    from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier

    # 8 frames x 65 visual tokens for the verifier vs 5 + 17 pooled event tokens for the
    # drafter: the asymmetry of the 7B pair (2056 vs 582 tokens), scaled down
    verifier = tiny_verifier(seed=0, hidden=128, layers=4, image_size=112,
                             init_range=0.3).to(device)
    drafter = tiny_eventgpt_drafter(seed=1, hidden=64, layers=2, image_size=56,
                                    init_range=0.3).to(device)
    return verifier, drafter, "tiny random (untrained) EventGPT -> Video-LLaVA"


def full_size_pair(device: str) -> tuple[CaptionModel, CaptionModel, str]:
    """Video-LLaVA-7B and EventGPT-7B architectures, random weights, bf16 (GPU only)."""
    from crossspec_ros.models.full_size import full_size_eventgpt_drafter, full_size_verifier

    if not device.startswith("cuda"):
        raise SystemExit("crossspec bench engine: --models full-size needs --device cuda "
                         "(two 7B models in bf16 need ~28 GB of GPU memory)")
    verifier = full_size_verifier(device)
    drafter = full_size_eventgpt_drafter(device)
    return verifier, drafter, "full-size random-weight EventGPT-7B -> Video-LLaVA-7B (bf16)"


def prompt_lookup_generate(verifier: Any, inputs: Any, max_new_tokens: int, k: int) -> list[int]:
    """transformers' prompt-lookup decoding on the verifier, from merged prompt embeddings."""
    from transformers import GenerationConfig

    captured: dict[str, torch.Tensor] = {}

    def grab(_module: Any, _args: Any, kwargs: dict) -> None:
        captured.setdefault("embeds", kwargs.get("inputs_embeds"))

    model = verifier.model
    hook = model.model.language_model.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.inference_mode():
            ids = inputs.input_ids.to(verifier.device)
            pixels = inputs.pixel_values.to(verifier.device, verifier.vision_dtype)
            model.model(input_ids=ids, pixel_values_videos=pixels)
    finally:
        hook.remove()
    embeds = captured["embeds"]
    eos = verifier.info.eos_token_id
    config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
                              eos_token_id=eos, pad_token_id=eos, prompt_lookup_num_tokens=k)
    with torch.inference_mode():
        out = model.generate(inputs_embeds=embeds, generation_config=config,
                             attention_mask=torch.ones(embeds.shape[:2], dtype=torch.long,
                                                       device=embeds.device))
    return out[0].tolist()


def _percentile(values: list[float], q: float) -> float | None:
    clean = [v for v in values if v == v]
    return float(np.percentile(clean, q)) if clean else None


def run_engine_bench(verifier: CaptionModel, drafter: CaptionModel | None,
                     windows: list[BenchWindow], *, max_new_tokens: int, max_proposal: int,
                     oracle_acceptances: tuple[float, ...] = (), lookup_k: int = 4,
                     prompt_lookup: bool = True,
                     warmup: int = 1, log: Any = print) -> dict[str, Any]:
    """Run every mode on every window, alternating; returns the report dict."""
    config = EngineConfig(max_new_tokens=max_new_tokens, max_proposal=max_proposal)
    engines = {"crossspec": SpeculativeEngine(verifier, drafter, config)}
    oracles = {}
    for a in oracle_acceptances:
        # the oracle runs the real drafter's compute too, so it competes for the device
        oracles[a] = OracleDrafter(verifier, a, seed=7, backing=drafter)
        engines[f"crossspec@a={a:g}"] = SpeculativeEngine(verifier, oracles[a], config)
    modes = ["verifier_alone", *(["prompt_lookup"] if prompt_lookup else []), *engines]
    latency = {m: [] for m in modes}
    draft_first = {m: [] for m in engines}
    prefill = {m: [] for m in engines}
    stats_by_mode: dict[str, list] = {m: [] for m in engines}
    lossless = {m: True for m in modes[1:]}
    alone_prefill: list[float] = []
    for index, window in enumerate(windows):
        measured = index >= warmup
        inputs = verifier.prepare(window)
        t_prepared = time.perf_counter()
        verifier.prefill(inputs)  # the verifier's prefill alone, for the slowdown ratio
        alone_prefill.append((time.perf_counter() - t_prepared) * 1e3)
        t0 = time.perf_counter()
        reference = engines["crossspec"].verifier_only(window, max_new_tokens)
        alone_ms = (time.perf_counter() - t0) * 1e3
        if measured:
            latency["verifier_alone"].append(alone_ms)
        if prompt_lookup:
            t0 = time.perf_counter()
            looked_up = prompt_lookup_generate(verifier, verifier.prepare(window),
                                               max_new_tokens, lookup_k)
            lookup_ms = (time.perf_counter() - t0) * 1e3
            lossless["prompt_lookup"] &= looked_up == reference
            if measured:
                latency["prompt_lookup"].append(lookup_ms)
        for oracle in oracles.values():
            oracle.set_reference(window.id, reference)
        for name, engine in engines.items():
            result = engine.run_window(window)
            lossless[name] &= result.tokens == reference
            if measured:
                latency[name].append(result.stats.confirmed_done_ms)
                draft_first[name].append(result.stats.draft_first_token_ms)
                prefill[name].append(result.stats.verifier_prefill_ms)
                stats_by_mode[name].append(result.stats)
        log(f"window {index + 1}/{len(windows)}: alone {alone_ms:.0f} ms, crossspec "
            f"{latency['crossspec'][-1] if measured else float('nan'):.0f} ms"
            + ("" if measured else " (warm-up, not counted)"))
    alone_median = statistics.median(latency["verifier_alone"])
    report: dict[str, Any] = {"windows": len(windows) - warmup, "max_new_tokens": max_new_tokens,
                              "modes": {}}
    for mode in modes:
        median = statistics.median(latency[mode])
        entry: dict[str, Any] = {
            "latency_ms_median": round(median, 2),
            "latency_ms_p95": round(_percentile(latency[mode], 95), 2),
            "speedup_median": round(alone_median / median, 3),
        }
        if mode in engines:
            entry.update(_engine_summary(stats_by_mode[mode], draft_first[mode], prefill[mode],
                                         alone_prefill[warmup:]))
        if mode in lossless:
            entry["lossless"] = lossless[mode]
        report["modes"][mode] = entry
    main = report["modes"]["crossspec"]
    report.update({
        "lossless": all(lossless[m] for m in engines),
        "speedup_median": main["speedup_median"],
        "draft_first_token_ms_p95": main.get("draft_first_token_ms_p95"),
        "acceptance": main.get("acceptance"),
    })
    return report


def _engine_summary(stats: list, draft_first: list[float], prefill: list[float],
                    alone_prefill: list[float]) -> dict[str, Any]:
    proposed = sum(s.total_proposed for s in stats)
    accepted = sum(s.total_accepted for s in stats)
    rounds = sum(s.rounds for s in stats)
    per: dict[str, dict[str, Any]] = {}
    for s in stats:
        for name in s.proposer_names:
            entry = per.setdefault(name, {"proposed": 0, "accepted": 0})
            entry["proposed"] += s.proposed.get(name, 0)
            entry["accepted"] += s.accepted.get(name, 0)
    for entry in per.values():
        entry["acceptance"] = (round(entry["accepted"] / entry["proposed"], 3)
                               if entry["proposed"] else None)
    slowdown = None
    if prefill and alone_prefill:
        slowdown = round(statistics.median(prefill) / statistics.median(alone_prefill), 3)
    return {
        "draft_first_token_ms_median": _round(_percentile(draft_first, 50)),
        "draft_first_token_ms_p95": _round(_percentile(draft_first, 95)),
        "acceptance": round(accepted / proposed, 3) if proposed else None,
        "accepted_per_round": round(accepted / rounds, 3) if rounds else None,
        "rounds_per_window": round(rounds / max(len(stats), 1), 2),
        "per_proposer": per,
        "verifier_prefill_ms_median": _round(_percentile(prefill, 50)),
        "verifier_prefill_alone_ms_median": _round(_percentile(alone_prefill, 50)),
        "prefill_slowdown": slowdown,
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def plot(report: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(report["modes"])
    medians = [report["modes"][m]["latency_ms_median"] for m in modes]
    p95 = [report["modes"][m]["latency_ms_p95"] for m in modes]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(modes)), 4))
    xs = np.arange(len(modes))
    ax.bar(xs - 0.2, medians, 0.4, label="median")
    ax.bar(xs + 0.2, p95, 0.4, label="p95")
    for x, m in zip(xs, modes, strict=True):
        ax.annotate(f"{report['modes'][m]['speedup_median']:.2f}x", (x, max(medians[x], p95[x])),
                    ha="center", va="bottom")
    ax.set_xticks(xs, modes, rotation=15)
    ax.set_ylabel("confirmed caption latency [ms]")
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "engine", help="verifier alone vs prompt lookup vs crossspec on the same windows",
        description=__doc__)
    parser.add_argument("--windows", type=int, default=12, help="windows (default 12)")
    parser.add_argument("--max-new-tokens", type=int, default=30)
    parser.add_argument("--max-proposal", type=int, default=8)
    parser.add_argument("--oracle", type=float, nargs="*", default=[0.2, 0.5, 0.8],
                        metavar="A", help="also run oracle drafters of these acceptances")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--models", choices=("bundled", "tiny-random", "full-size"),
                        default="bundled",
                        help="bundled: the trained tiny pair (default); tiny-random: an "
                        "untrained tiny pair; full-size: the 7B architectures with random "
                        "weights (GPU)")
    parser.add_argument("--bag", type=Path, default=sample_bag(),
                        help="bag whose windows are decoded (default: the sample bag; "
                        "'pattern' for moving test patterns)")
    parser.add_argument("--no-prompt-lookup", action="store_true",
                        help="skip the transformers prompt-lookup baseline")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the report as JSON")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write a latency bar chart")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.windows < 2 or args.max_new_tokens < 1:
        print("crossspec bench engine: --windows must be >= 2 (one is warm-up) and "
              "--max-new-tokens >= 1", file=sys.stderr)
        return 2
    from crossspec_ros.models.loading import resolve_device

    device = str(resolve_device(args.device))
    torch.manual_seed(0)
    build = {"bundled": bundled_pair, "tiny-random": tiny_random_pair,
             "full-size": full_size_pair}[args.models]
    verifier, drafter, label = build(device)
    print(f"models: {label} on {device}", file=sys.stderr)
    if str(args.bag) == "pattern":
        windows = pattern_windows(args.windows)
    else:
        windows = bag_windows(args.bag, args.windows)
    report = run_engine_bench(verifier, drafter, windows, max_new_tokens=args.max_new_tokens,
                              max_proposal=args.max_proposal,
                              oracle_acceptances=tuple(args.oracle),
                              prompt_lookup=not args.no_prompt_lookup,
                              log=lambda s: print(s, file=sys.stderr))
    report.update({"models": label, "device": device, "bag": str(args.bag),
                   "torch_threads": torch.get_num_threads()})
    print(f"{'mode':<20} {'median ms':>10} {'p95 ms':>9} {'speedup':>8} {'accept':>7} "
          f"{'draft 1st p95':>13} {'lossless':>8}")
    for mode, r in report["modes"].items():
        acc = r.get("acceptance")
        first = r.get("draft_first_token_ms_p95")
        print(f"{mode:<20} {r['latency_ms_median']:>10.1f} {r['latency_ms_p95']:>9.1f} "
              f"{r['speedup_median']:>7.2f}x {'' if acc is None else f'{acc:.2f}':>7} "
              f"{'' if first is None else f'{first:.1f}':>13} {r.get('lossless', '')!s:>8}")
    print(f"lossless: {report['lossless']}  speedup_median (crossspec vs verifier alone): "
          f"{report['speedup_median']:.2f}x")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}")
    if args.plot:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        plot(report, args.plot, f"{label}, {device}, {report['windows']} windows")
        print(f"wrote {args.plot}")
    return 0 if report["lossless"] else 1
