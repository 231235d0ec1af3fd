"""`crossspec bench lossy`: what each lossy mode buys, and what it costs.

Every window of a bag (the sample bag by default, whose ground-truth captions say what the
simulator put in each scene) goes through lossless crossspec (``exact``) and crossspec in
each lossy mode, in a fresh order per window:

- relaxed acceptance rules (``top_k:K``, ``typical:EPS``, ``speculative/verify.py``), each
  as the live graph runs it: frames prefilled as the synchronizer would announce them, the
  latency taken from the close (``live_runner`` below), against ``exact`` run
  the same way;
- event-guided pruning of the verifier's visual tokens (``visual_keep:F``,
  ``models/pruning.py``): a pruned prompt cannot be prefilled before the window's events are
  all in, so these run the whole prefill after the close, against ``exact_after_close``
  (lossless crossspec, prefilled after the close too).

Per mode:

- speed: confirmed latency after the close, paired window by window against its baseline;
- quality against the simulator: attribute accuracy of the caption, parsed back to the
  scene's attributes (``sim/captions.parse_caption``), against the ground-truth caption's, as
  ``crossspec eval-tiny`` scores the verifier;
- fidelity to the verifier: windows whose caption is the verifier's own, and the share of
  caption positions holding the verifier's token.

The modes are opt-in (parameter ``acceptance``; ``EngineConfig.visual_keep``); lossless
crossspec is always the first row.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossspec_ros import summaries
from crossspec_ros.paths import sample_bag
from crossspec_ros.speculative.acceptance import AcceptanceRule  # no torch: a light import
from crossspec_ros.stamps import ns_to_seconds

DEFAULT_RULES = ("top_k:2", "top_k:3", "top_k:5", "typical:0.3", "typical:0.1", "cosine:0.8",
                 "cosine:0.6")
DEFAULT_KEEPS = (0.75, 0.5, 0.25)
AFTER_CLOSE = "exact_after_close"  # the pruning modes' baseline


def baseline_of(mode: str) -> str:
    """The lossless run a mode's speed is paired against (see the module docstring)."""
    return AFTER_CLOSE if mode.startswith("visual_keep:") else "exact"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "lossy", help="relaxed (lossy) acceptance rules against lossless crossspec: speed, "
        "attribute accuracy, agreement with the verifier",
        description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("--rules", nargs="+", default=list(DEFAULT_RULES), metavar="RULE",
                        help="relaxed rules, top_k:K, typical:EPS or cosine:T (default: "
                        + " ".join(DEFAULT_RULES) + ")")
    parser.add_argument("--visual-keep", nargs="*", type=float, default=list(DEFAULT_KEEPS),
                        metavar="F", help="event-guided pruning: the share of each frame's "
                        "patches the verifier reads (default: "
                        + " ".join(map(str, DEFAULT_KEEPS)) + "; none: no pruning rows)")
    parser.add_argument("--bag", type=Path, default=sample_bag(),
                        help="bag with a /crossspec/ground_truth Caption topic (default: the "
                        "bundled sample bag)")
    parser.add_argument("--windows", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--no-compile", action="store_true",
                        help="step the static runtimes eager (the report says so); also what "
                        "CROSSSPEC_NO_COMPILE=1 does (the test suite)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the report as JSON")
    parser.add_argument("--plot", type=Path, metavar="PNG",
                        help="plot attribute accuracy against latency, one point per rule")
    parser.set_defaults(func=run)


@dataclass
class RuleRun:
    """One rule's windows: latency after the close, caption tokens, window ids."""

    latency_ms: list[float] = field(default_factory=list)
    captions: list[list[int]] = field(default_factory=list)
    window_ids: list[int] = field(default_factory=list)
    accepted_per_pass: list[float] = field(default_factory=list)


def position_agreement(a: list[int], b: list[int]) -> tuple[int, int]:
    """(positions holding the same token, positions): over the longer caption."""
    return sum(x == y for x, y in zip(a, b, strict=False)), max(len(a), len(b))


def score(runs: dict[str, RuleRun], decode: Any, parse: Any, truth: dict[int, str]
          ) -> dict[str, Any]:
    """Per rule: latency, paired speedup against ``exact``, attribute accuracy against the
    ground truth, and agreement with the exact (the verifier's own) captions."""
    from crossspec_ros.train.evaluate import attribute_accuracy

    exact = runs["exact"]  # the verifier's own captions
    rows: dict[str, Any] = {}
    for name, run in runs.items():
        ok = total = same = pos_ok = pos_n = 0
        for wid, tokens, reference in zip(run.window_ids, run.captions, exact.captions,
                                          strict=True):
            if wid in truth:
                got, n = attribute_accuracy(parse(decode(tokens)), parse(truth[wid]))
                ok, total = ok + got, total + n
            same += tokens == reference
            agree, n = position_agreement(tokens, reference)
            pos_ok, pos_n = pos_ok + agree, pos_n + n
        baseline = baseline_of(name)
        ratios = summaries.paired_ratios(dict(enumerate(runs[baseline].latency_ms)),
                                         dict(enumerate(run.latency_ms)))
        spread = summaries.spread(ratios.values())
        rows[name] = {
            "lossless": name in ("exact", AFTER_CLOSE),
            "baseline": baseline,
            "latency_ms_median": summaries.rounded(summaries.median(run.latency_ms), 2),
            "latency_ms_p95": summaries.rounded(summaries.percentile(run.latency_ms, 95), 2),
            "paired_speedup_vs_baseline": spread["median"],
            "paired_speedup_vs_baseline_q25": spread["q25"],
            "paired_speedup_vs_baseline_q75": spread["q75"],
            "attribute_accuracy": round(ok / total, 4) if total else None,
            "attributes_scored": total,
            "same_as_verifier": f"{same}/{len(run.captions)}",
            "token_agreement": round(pos_ok / pos_n, 4) if pos_n else None,
            "accepted_per_pass_mean": summaries.rounded(
                sum(run.accepted_per_pass) / len(run.accepted_per_pass), 2)
            if run.accepted_per_pass else None,
        }
    base = rows["exact"]["attribute_accuracy"]
    for row in rows.values():
        acc = row["attribute_accuracy"]
        row["accuracy_points_lost"] = round(100 * (base - acc), 2) \
            if base is not None and acc is not None else None
    return rows


REORDER_SLACK_NS = 20_000_000  # the graph's default reorder_slack_s


def live_arrivals(window: Any, slack_ns: int = REORDER_SLACK_NS) -> list[tuple[float, Any]]:
    """(seconds after t0, frame) of each slot's frame, when the graph's synchronizer would
    announce it: a watermark (newest stamp - slack) past the slot's target by the frame's
    distance to it (``sync/window.py decided_frames``, with frames arriving continuously)."""
    n = len(window.frames)
    out = []
    for k, frame in enumerate(window.frames):
        target = window.t0 + (2 * k + 1) * (window.t1 - window.t0) / (2 * n)
        decided = target + abs(frame.stamp_ns - target) + slack_ns
        out.append((ns_to_seconds(max(decided, frame.stamp_ns + slack_ns) - window.t0), frame))
    return out


def live_runner(verifier: Any, engine: Any) -> Any:
    """The window's frames replayed at the times the graph would announce them, through the
    verifier node's live-prefill scheduler (``speculative/live_scheduler.py``): each is
    encoded and prefilled as it comes, then the latency is taken from the close. Frames
    announced after the close are left to the engine. This bench's own model of arrival, and
    no early start: ``bench engine``'s live graphs run the product's loops instead
    (bench/live_replay.py), and moving the relaxed rules there is still to do (issue 43)."""
    from crossspec_ros.models.live_prefill import LivePrefill
    from crossspec_ros.speculative.live_scheduler import LivePrefillScheduler
    from crossspec_ros.sync.synchronizer import FrameSelection

    scheduler = LivePrefillScheduler(lambda: LivePrefill(verifier))

    def run(window: Any) -> tuple[list[int], float, Any]:
        key = (0, int(window.id))
        start, length = time.monotonic(), ns_to_seconds(window.t1 - window.t0)
        for slot, (offset, frame) in enumerate(live_arrivals(window)):
            if offset >= length:
                break
            time.sleep(max(0.0, start + offset - time.monotonic()))
            scheduler.add([FrameSelection(*key, slot, frame)])
            scheduler.prefill_queued()
        time.sleep(max(0.0, start + length - time.monotonic()))
        t_close = time.monotonic()
        result = engine.run_window(window, t_close=t_close, live=scheduler.take(key),
                                   between_rounds=scheduler.between_rounds)
        scheduler.clear()  # a mode's windows are not consecutive in the shuffled order
        return result.tokens, result.stats.confirmed_done_ms, result.stats
    return run


def run_rules(verifier: Any, drafter: Any, windows: list[Any], rules: list[AcceptanceRule],
              max_new_tokens: int, warmup: int, corpus: Any = (), log: Any = print,
              keeps: tuple[float, ...] = (), compile_steps: bool = True
              ) -> dict[str, RuleRun]:
    """Every window through ``exact``, each rule (named by its text: ``top_k:3``) and each
    pruning share (``keeps``, with
    ``exact_after_close``), shuffled per window; warm-up windows are not kept.
    ``compile_steps``: the static runtimes compiled (what a user runs) or eager."""
    from crossspec_ros.bench.engine import bench_runtimes
    from crossspec_ros.models.static_runtime import RuntimeOptions
    from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine

    runtimes = bench_runtimes(verifier, drafter, RuntimeOptions(compile=compile_steps),
                              max_new_tokens, log)

    def engine(**changes: Any) -> SpeculativeEngine:
        return SpeculativeEngine(runtimes.verifier, runtimes.drafter, EngineConfig(
            max_new_tokens=max_new_tokens, **changes), corpus=corpus)

    def after_close(engine: SpeculativeEngine) -> Any:
        def run(window: Any) -> tuple[list[int], float, Any]:
            result = engine.run_window(window)  # the close is now: every frame is in
            return result.tokens, result.stats.confirmed_done_ms, result.stats
        return run

    runners = {rule.text: live_runner(runtimes.verifier, engine(acceptance=rule))
               for rule in (AcceptanceRule(), *rules)}
    if keeps:
        runners[AFTER_CLOSE] = after_close(engine())
        for keep in keeps:
            runners[f"visual_keep:{keep:g}"] = after_close(engine(visual_keep=keep))
    runs = {name: RuleRun() for name in runners}
    shuffle = random.Random(0)
    for index, window in enumerate(windows):
        results = {name: runners[name](window)
                   for name in shuffle.sample(list(runners), len(runners))}
        if index < warmup:
            log(f"window {index + 1}/{len(windows)}: warm-up, not counted")
            continue
        for name, (tokens, latency, stats) in results.items():
            run = runs[name]
            run.latency_ms.append(latency)
            run.captions.append(list(tokens))
            run.window_ids.append(int(window.id))
            run.accepted_per_pass.append(stats.total_accepted / (stats.rounds + 1))
        log(f"window {index + 1}/{len(windows)}: " + ", ".join(
            f"{name} {results[name][1]:.1f}" for name in runners) + " ms")
    return runs


def markdown_table(report: dict[str, Any]) -> str:
    def _x(value: float | None) -> str:
        return summaries.shown(value, ".2f", "x")

    lines = ["| mode | lossless | median ms after the close | p95 ms | paired speedup vs "
             "baseline (IQR) | attribute accuracy | points lost | same as the verifier | token "
             "agreement | accepted per pass |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for name, row in report["rules"].items():
        lines.append(
            f"| {name} | {'yes' if row['lossless'] else '**no**'} | "
            f"{row['latency_ms_median']} | {row['latency_ms_p95']} | "
            f"{_x(row['paired_speedup_vs_baseline'])} vs {row['baseline']} "
            f"({_x(row['paired_speedup_vs_baseline_q25'])}-"
            f"{_x(row['paired_speedup_vs_baseline_q75'])}) | {row['attribute_accuracy']} | "
            f"{row['accuracy_points_lost']} | {row['same_as_verifier']} | "
            f"{row['token_agreement']} | {row['accepted_per_pass_mean']} |")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Attribute accuracy against median latency after the close, one point per rule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for name, row in report["rules"].items():
        if row["attribute_accuracy"] is None:
            continue
        # prefilled after the close: squares; lossless: filled green, lossy: red
        after = AFTER_CLOSE in (name, baseline_of(name))
        ax.scatter(row["latency_ms_median"], 100 * row["attribute_accuracy"],
                   marker="s" if after else ("o" if row["lossless"] else "x"), s=50,
                   color="tab:green" if row["lossless"] else "tab:red")
        ax.annotate(name + (" (lossless)" if row["lossless"] else ""),
                    (row["latency_ms_median"], 100 * row["attribute_accuracy"]),
                    textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xlabel("confirmed caption, median ms after the window's close")
    ax.set_ylabel("attribute accuracy against the simulator (%)")
    ax.set_title(f"lossy modes: quality against latency ({report['windows']} windows; "
                 "squares: prefilled after the close)", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    from crossspec_ros.bags.inputs import read_ground_truth
    from crossspec_ros.bench import engine as bench
    from crossspec_ros.bench.outputs import save_outputs
    from crossspec_ros.models.static_runtime import compile_allowed
    from crossspec_ros.process_tuning import tune_process_for_models
    from crossspec_ros.sim.captions import parse_caption
    from crossspec_ros.speculative.corpus import load_corpus

    try:
        rules = [AcceptanceRule.parse(r) for r in args.rules]
    except ValueError as err:
        print(f"crossspec bench lossy: {err}", file=sys.stderr)
        return 2
    if any(rule.lossless for rule in rules):
        print("crossspec bench lossy: exact is always measured; list relaxed rules only",
              file=sys.stderr)
        return 2
    if any(not 0.0 < keep < 1.0 for keep in args.visual_keep):
        print("crossspec bench lossy: --visual-keep shares must lie in (0, 1)",
              file=sys.stderr)
        return 2
    if args.windows <= args.warmup or args.warmup < 0:
        print("crossspec bench lossy: need --windows > --warmup >= 0", file=sys.stderr)
        return 2
    truth = read_ground_truth(args.bag)
    if not truth:
        print(f"crossspec bench lossy: {args.bag} has no /crossspec/ground_truth captions to "
              "score against (the sample bag and `crossspec make-sample` bags have them)",
              file=sys.stderr)
        return 2
    tune_process_for_models("cpu")
    verifier, drafter, label = bench.bundled_pair("cpu")
    windows = bench.bag_windows(args.bag, args.windows)
    if len(windows) <= args.warmup:
        print(f"crossspec bench lossy: {args.bag} has {len(windows)} windows with RGB; need "
              f"more than --warmup {args.warmup}", file=sys.stderr)
        return 2
    corpus = load_corpus("", verifier)
    compiled = not args.no_compile and compile_allowed()
    runs = run_rules(verifier, drafter, windows, rules, args.max_new_tokens, args.warmup,
                     corpus.captions if corpus else (),
                     log=lambda s: print(s, file=sys.stderr, flush=True),
                     keeps=tuple(args.visual_keep), compile_steps=compiled)
    decode = lambda ids: verifier.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    report = {"models": label, "bag": str(args.bag), "windows": len(runs["exact"].latency_ms),
              "runtime": "static, compiled" if compiled else "static, eager (not compiled)",
              "rules": score(runs, decode, parse_caption, truth)}
    print(markdown_table(report))
    save_outputs(report, args.json, args.plot, lambda path: plot(report, path))
    return 0
