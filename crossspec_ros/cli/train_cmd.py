"""`crossspec train-tiny` and `crossspec eval-tiny`: the bundled tiny pair, from scratch."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from crossspec_ros.paths import BUNDLED_PAIR as BUNDLED_DIR
from crossspec_ros.progress import progress_bar
from crossspec_ros.train.config import PairConfig
from crossspec_ros.train.pipeline import heldout_windows


def register(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train-tiny", help="train the tiny drafter/verifier pair on the synthetic world",
        description="Generates synthetic driving windows (training seeds only), trains the tiny "
        "Video-LLaVA verifier (8 RGB frames) and the tiny EventGPT drafter (event images) on "
        "different paraphrase mixes, saves both (safetensors) with their shared tokenizer, "
        "plots the loss curves and evaluates on held-out seeds. Deterministic from --seed.")
    defaults = PairConfig()
    train.add_argument("--out", type=Path, required=True,
                       help="output directory (to replace the shipped pair, pass its "
                       f"directory {BUNDLED_DIR} explicitly)")
    train.add_argument("--seed", type=int, default=defaults.seed)
    train.add_argument("--windows", type=int, default=defaults.train_windows,
                       help="verifier training windows (one per drive, RGB frames)")
    train.add_argument("--drafter-windows", type=int, default=defaults.drafter_windows,
                       help="how many of them also get events and train the drafter "
                       "(events cost ~10x the frames to simulate)")
    train.add_argument("--steps", type=int, default=None,
                       help="optimizer steps for each model (default: "
                       f"{defaults.verifier_steps} verifier, {defaults.drafter_steps} drafter)")
    train.add_argument("--workers", type=int, default=2, help="simulation processes")
    train.add_argument("--eval-windows", type=int, default=100,
                       help="held-out windows evaluated after training (0: skip)")
    train.set_defaults(func=run_train)

    evaluate = subparsers.add_parser(
        "eval-tiny", help="accuracy and agreement of the tiny pair on held-out scenes",
        description="Evaluates a trained tiny pair on windows from held-out seeds (never used "
        "in training): verifier attribute accuracy, drafter accuracy on event-visible "
        "attributes, and drafter/verifier token agreement.")
    evaluate.add_argument("--dir", type=Path, default=BUNDLED_DIR, help="trained pair directory")
    evaluate.add_argument("--windows", type=int, default=200, help="held-out windows")
    evaluate.add_argument("--workers", type=int, default=2, help="simulation processes")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.set_defaults(func=run_eval)


def run_train(args: argparse.Namespace) -> int:
    from crossspec_ros.sim.captions import parse_caption
    from crossspec_ros.train.data import SIM_IMAGE_SIZE, tokenizer_words
    from crossspec_ros.train.evaluate import evaluate_pair
    from crossspec_ros.train.plots import plot_losses
    from crossspec_ros.train.tiny_pair import build_pair, save_pair

    bad_steps = args.steps is not None and args.steps < 1
    if not 16 <= args.drafter_windows <= args.windows or bad_steps:
        print("crossspec train-tiny: need 16 <= --drafter-windows <= --windows and --steps >= 1 "
              f"(got {args.drafter_windows}, {args.windows}, {args.steps})", file=sys.stderr)
        return 2
    started = time.perf_counter()
    import torch

    torch.manual_seed(args.seed)
    steps = {} if args.steps is None else {"verifier_steps": args.steps,
                                           "drafter_steps": args.steps}
    config = PairConfig(seed=args.seed, train_windows=args.windows,
                        drafter_windows=args.drafter_windows, **steps)
    verifier, drafter = build_pair(config, tokenizer_words())
    data, sim_s = _simulate_training_data(args, config, verifier, drafter)
    print(f"simulated and encoded {len(data)} windows in {sim_s:.0f} s", file=sys.stderr)
    t0 = time.perf_counter()
    losses = _train_with_progress(verifier, drafter, data, config)
    train_s = time.perf_counter() - t0
    report: dict = {"simulation_s": round(sim_s, 1), "training_s": round(train_s, 1),
                    "final_loss": {k: round(sum(v[-20:]) / len(v[-20:]), 4)
                                   for k, v in losses.items()},
                    "parameters": {"verifier": sum(p.numel() for p in verifier.model.parameters()),
                                   "drafter": sum(p.numel() for p in drafter.model.parameters())}}
    save_pair(verifier, drafter, args.out, config, extra={"report": report})
    plot_losses(losses, args.out / "loss_curves.png")
    if args.eval_windows:  # after saving: a failing evaluation must not lose the training
        held = heldout_windows(args.eval_windows, args.workers, SIM_IMAGE_SIZE)
        report["heldout"] = {k: v for k, v in evaluate_pair(verifier, drafter, held,
                                                            parse_caption).items()
                             if k != "examples"}
    report["total_s"] = round(time.perf_counter() - started, 1)
    save_pair(verifier, drafter, args.out, config, extra={"report": report})
    print(json.dumps(report, indent=2))
    print(f"wrote {args.out} (loss curves: {args.out / 'loss_curves.png'})")
    return 0


def _simulate_training_data(args: argparse.Namespace, config: PairConfig, verifier: Any,
                            drafter: Any) -> tuple[Any, float]:
    """The training windows, simulated and encoded for both models (events for the first
    ``config.drafter_windows`` only: they cost ~10x the frames), and the seconds it took."""
    from crossspec_ros.train.data import (
        SIM_IMAGE_SIZE,
        encode_windows,
        generate_windows,
        training_keys,
    )

    keys = training_keys(args.windows, seed=args.seed)
    split = config.drafter_windows
    t0 = time.perf_counter()
    with progress_bar(len(keys), "simulating training windows") as bar:
        data = encode_windows(
            generate_windows(keys[:split], SIM_IMAGE_SIZE, args.workers, progress=bar.update,
                             event_render_hz=config.event_render_hz),
            verifier, drafter,
            rgb_only=generate_windows(keys[split:], SIM_IMAGE_SIZE, args.workers,
                                      progress=bar.update, events=False))
    return data, time.perf_counter() - t0


def _train_with_progress(verifier: Any, drafter: Any, data: Any,
                         config: PairConfig) -> dict[str, list[float]]:
    """Train both models (one progress bar each, showing the loss); their loss curves."""
    from crossspec_ros.train.tiny_pair import train_pair

    bars = {}

    def progress(name: str, step: int, loss: float) -> None:
        if name not in bars:
            for bar in bars.values():
                bar.close()
            bars[name] = progress_bar(getattr(config, f"{name}_steps"), f"training {name}")
        bars[name].set_postfix(loss=f"{loss:.3f}", refresh=False)
        bars[name].update(1)

    losses = train_pair(verifier, drafter, data, config, progress=progress)
    for bar in bars.values():
        bar.close()
    return losses


def run_eval(args: argparse.Namespace) -> int:
    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.sim.captions import parse_caption
    from crossspec_ros.train.data import SIM_IMAGE_SIZE
    from crossspec_ros.train.evaluate import evaluate_pair
    from crossspec_ros.train.tiny_pair import load_pair

    try:
        verifier, drafter = load_pair(args.dir)
    except ModelLoadError as err:
        print(f"crossspec eval-tiny: {err}", file=sys.stderr)
        return 2
    windows = heldout_windows(args.windows, args.workers, SIM_IMAGE_SIZE)
    with progress_bar(len(windows), "evaluating") as bar:
        report = evaluate_pair(verifier, drafter, windows, parse_caption, progress=bar.update)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"held-out windows: {report['windows']}")
    for key in ("verifier_attribute_accuracy", "drafter_visible_attribute_accuracy",
                "token_agreement", "positional_agreement", "verifier_exact_caption_rate"):
        print(f"  {key:<36} {report[key]:.3f}")
    for key in ("verifier_per_attribute", "drafter_per_visible_attribute"):
        print(f"  {key}: " + ", ".join(f"{k} {v:.2f}" for k, v in report[key].items()))
    for example in report["examples"]:
        print(f"  truth:    {example['truth']}\n  verifier: {example['verifier']}\n"
              f"  drafter:  {example['drafter']}")
    return 0
