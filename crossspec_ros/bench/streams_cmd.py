"""`crossspec bench streams`: how many camera streams one verifier on one device serves, batched
in lanes against N separate verifiers (bench/streams.py).

    crossspec bench streams --streams 1,2,4 --json build/bench/streams.json
    crossspec bench streams --emulate h200-bf16-static-2026-11-27 --streams 1,2,4,8

Every output says when the device is emulated, and on which profile.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path
from typing import Any

from crossspec_ros.bench.engine_cmd import add_model_options, load_pair, profile_loads
from crossspec_ros.cli.arg_types import whole_number
from crossspec_ros.paths import sample_bag

COMMAND = "crossspec bench streams"


def stream_counts(text: str) -> list[int]:
    """An argparse type: stream counts "1,2,4", each >= 1, increasing."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected stream counts like 1,2,4, got {text!r}"
                                         ) from None
    if not counts or min(counts) < 1 or counts != sorted(set(counts)):
        raise argparse.ArgumentTypeError(f"expected increasing stream counts >= 1, got {text!r}")
    return counts


def graph_names(text: str) -> list[str]:
    from crossspec_ros.composition import STREAM_GRAPHS

    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in STREAM_GRAPHS]
    if not names or unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected graphs among {', '.join(STREAM_GRAPHS)}, "
                                         f"each once, got {text!r}")
    return names


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "streams", help="several camera streams on one verifier: batched lanes against "
        "separate verifiers", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=stream_counts, default=[1, 2, 4, 8],
                        metavar="N,N", help="stream counts to run (default 1,2,4,8)")
    parser.add_argument("--graphs", type=graph_names, default=["batched", "separate"],
                        metavar="G,G", help="batched (one verifier, lanes) and/or separate "
                        "(N verifiers taking turns); default both")
    parser.add_argument("--bag", type=Path, default=sample_bag(),
                        help="bag whose windows every stream replays, rotated (default: the "
                        "sample bag)")
    parser.add_argument("--windows", type=whole_number(2), default=24,
                        help="windows per stream, warm-up included (default 24)")
    parser.add_argument("--warmup", type=whole_number(0), default=2,
                        help="first windows of each stream not counted (default 2)")
    parser.add_argument("--rounds", type=whole_number(1), default=1,
                        help="rounds per stream count, every other in reverse graph order")
    parser.add_argument("--shed-late-ms", type=float, default=0.0, metavar="MS",
                        help="verifier parameter shed_late_ms: a closed window still waiting "
                        "this long past its due time is given up (default 0: never)")
    parser.add_argument("--rig", choices=("triggered", "free-running"), default="triggered",
                        help="triggered: every camera's frames at the same stamps (a surround "
                        "rig's cameras fire together; default); free-running: camera k fires "
                        "k/N of a frame interval after the first (no two together)")
    parser.add_argument("--stream-prompts", choices=("auto", "batched", "separate"),
                        default="auto", help="verifier parameter stream_prompts: the batched "
                        "graph encodes and prefills the streams' frames together (auto, "
                        "batched) or each stream's alone (separate)")
    parser.add_argument("--max-new-tokens", type=whole_number(1), default=48)
    parser.add_argument("--max-proposal", type=whole_number(0), default=24)
    add_model_options(parser)
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the report as JSON")
    parser.add_argument("--plot", type=Path, metavar="PNG",
                        help="write latency against streams as PNG")
    parser.set_defaults(func=run)


def _params(args: argparse.Namespace) -> dict[str, Any]:
    """The verifier node's parameters of the text_only graph under the options."""
    from crossspec_ros.comparison import BY_NAME
    from crossspec_ros.params import VERIFIER_NODE_PARAMS, validate

    return validate({**BY_NAME["text_only"].verifier_params,
                     "max_new_tokens": args.max_new_tokens, "max_proposal": args.max_proposal,
                     "runtime": args.runtime, "compile": not args.no_compile,
                     "step_rows": args.step_rows, "emulate": args.emulate or "",
                     "shed_late_ms": args.shed_late_ms, "stream_prompts": args.stream_prompts},
                    VERIFIER_NODE_PARAMS, COMMAND)


def run(args: argparse.Namespace) -> int:
    from crossspec_ros.bench import engine as bench
    from crossspec_ros.bench.streams import run_streams_bench, window_frames
    from crossspec_ros.models.emulated import emulation_of
    from crossspec_ros.models.loading import resolve_device
    from crossspec_ros.process_tuning import tune_process_for_models

    if args.warmup >= args.windows:
        print(f"{COMMAND}: need --windows > --warmup", file=sys.stderr)
        return 2
    if args.emulate and not profile_loads(args.emulate, COMMAND):
        return 2
    if "batched" in args.graphs and args.runtime != "static":
        print(f"{COMMAND}: the batched graph needs --runtime static", file=sys.stderr)
        return 2
    p = _params(args)
    windows = bench.bag_windows(args.bag, args.windows)
    if len(windows) <= args.warmup:
        print(f"{COMMAND}: {args.bag} has {len(windows)} windows with RGB; need more than "
              f"--warmup {args.warmup}", file=sys.stderr)
        return 2
    device = str(resolve_device(args.device))
    tuning = tune_process_for_models(device)
    verifier, _drafter, label = load_pair(args, device)
    emulated = emulation_of(verifier)
    report = run_streams_bench(verifier, windows, p, counts=args.streams, graphs=args.graphs,
                               rounds=args.rounds, warmup=args.warmup,
                               frames=window_frames(args.bag, windows), rig=args.rig,
                               emulated=emulated,
                               log=lambda s: print(s, file=sys.stderr, flush=True))
    report.update({"models": label, "device": device, "bag": str(args.bag),
                   "windows_per_stream": len(windows), "warmup": args.warmup,
                   "graph": "text_only", "step_rows": args.step_rows,
                   "stream_prompts": p["stream_prompts"], "rig": args.rig, **tuning,
                   "date": datetime.date.today().isoformat(),
                   "machine": f"{platform.machine()}"})
    if emulated is not None:  # never a measurement of this machine: says so everywhere
        report["emulation"] = emulated.report()
    print(table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}")
    if args.plot:
        plot(report, args.plot)
        print(f"wrote {args.plot}")
    return 0 if all(r["lossless"] for r in report["runs"]) else 1


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table(report: dict[str, Any]) -> str:
    """The runs as a markdown table, and the headline: the most streams holding the target."""
    from crossspec_ros.bench.streams import TARGET_MEDIAN_MS, TARGET_P95_MS

    emulation = report.get("emulation")
    where = f"an EMULATED device ({emulation['profile']}, a {emulation['kind']} profile)" \
        if emulation else \
        f"{report['device']} ({report['machine']}), measured"
    lines = [f"bench streams: {report['models']} on {where}; graph text_only, "
             f"{report['windows_per_stream']} windows per stream ({report['warmup']} warm-up), "
             f"stream_prompts {report.get('stream_prompts', 'auto')}, "
             f"{report.get('rig', 'free-running')} cameras",
             "", "| streams | graph | confirmed after close, median ms | p95 ms | not FINAL "
             "| lossless | device busy | lanes per step | frames per prompt step |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        lanes = ", ".join(f"{k}: {v}" for k, v in r.get("lanes_per_step", {}).items()) or "-"
        frames = ", ".join(f"{k}: {v}" for k, v in
                           r.get("frames_per_prompt_step", {}).items()) or "-"
        busy = r["device_busy_share"]
        lines.append(f"| {r['streams']} | {r['graph']} | {_ms(r['confirmed_ms_median'])} | "
                     f"{_ms(r['confirmed_ms_p95'])} | {r['dropped']} | "
                     f"{r['lossless_equal']}/{r['lossless_checked']} | "
                     f"{'-' if busy is None else f'{busy:.0%}'} | {lanes} | {frames} |")
    most = ", ".join(f"{g} {n}" for g, n in report["most_streams_holding_target"].items())
    lines += ["", f"most streams holding median <= {TARGET_MEDIAN_MS:.0f} ms, p95 <= "
              f"{TARGET_P95_MS:.0f} ms, 0 not FINAL, lossless: {most}"]
    if emulation:
        lines.append("EMULATED: " + ("the emulation held" if emulation["held"] else
                                     "the emulation did NOT hold (calls overran their cost)"))
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Median and p95 latency after the close against streams, one line pair per graph."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for graph in dict.fromkeys(r["graph"] for r in report["runs"]):
        runs = [r for r in report["runs"] if r["graph"] == graph]
        xs = [r["streams"] for r in runs]
        line, = ax.plot(xs, [r["confirmed_ms_median"] for r in runs], marker="o",
                        label=f"{graph} median")
        ax.plot(xs, [r["confirmed_ms_p95"] for r in runs], marker="x", linestyle="--",
                color=line.get_color(), label=f"{graph} p95")
    ax.set_xlabel("streams")
    ax.set_ylabel("confirmed caption after the close [ms]")
    emulation = report.get("emulation")
    ax.set_title(f"EMULATED {emulation['profile']}" if emulation else
                 f"{report['device']}, measured", fontsize=9)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
