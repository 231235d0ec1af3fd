"""`crossspec drive`: the whole ROS graph in one process on a bag, with a live terminal view.

Replays the bag (the bundled sample bag by default) at its recorded rate with /clock, runs the
draft, verifier and viz nodes (composed: one process, models loaded once, each on its own
worker thread and CUDA stream) exactly as `ros2 launch crossspec drive.launch.py` does, and
prints per window the draft caption with its latency, then the confirmed caption, its latency
and acceptance. ``--check-lossless`` runs the verifier alone on every window afterwards and
compares token for token.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossspec_ros.cli.model_args import add_model_arguments, model_overrides
from crossspec_ros.cli.streaming import JsonLinesFile, exit_code_for, sigterm_as_interrupt
from crossspec_ros.paths import sample_bag

STATUS = {0: "DRAFT", 1: "PARTIAL", 2: "FINAL", 3: "UNVERIFIED"}
PASS_NAMES = {"off": "the verifier alone after the close", "live": "live prefill, no "
              "speculation", "on": "crossspec (live prefill and speculation)"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "drive", help="run the ROS graph on a bag in one process, live (no ros2 launch needed)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bag", type=Path, default=sample_bag(),
                        help="ROS 2 bag to replay (default: the bundled sample bag)")
    parser.add_argument("--config", type=Path, default=None,
                        help="ROS parameter YAML (default: config/drive.yaml)")
    parser.add_argument("--rate", type=float, default=1.0,
                        help="replay rate (1 = recorded speed)")
    parser.add_argument("--max-windows", type=int, default=0,
                        help="stop after N finished windows (0: the whole bag)")
    parser.add_argument("--foxglove", action="store_true",
                        help="serve live on a Foxglove WebSocket (127.0.0.1)")
    parser.add_argument("--foxglove-port", type=int, default=8765)
    parser.add_argument("--record", type=Path, metavar="OUT",
                        help="record captions, annotated frames, the marker and diagnostics "
                        "as a rosbag2 bag directory OUT (MCAP, on the bag's clock: ros2 bag "
                        "play, crossspec play and Foxglove read it)")
    parser.add_argument("--overwrite", action="store_true",
                        help="let --record replace an existing OUT (when the run ends)")
    parser.add_argument("--json", type=Path, metavar="OUT",
                        help="write one JSON object per window (JSON lines) and a summary")
    parser.add_argument("--check-lossless", action="store_true",
                        help="afterwards, run the verifier alone on each window and compare")
    parser.add_argument("--no-viz", action="store_true", help="do not run the viz node")
    parser.add_argument("--compare", action="store_true",
                        help="replay the bag three times through the same graph: the verifier "
                        "alone after the window closes (no speculation, no live prefill: what "
                        "a user would run; the draft node still drafts), live prefill without "
                        "speculation, and crossspec (live prefill and speculation); print the "
                        "confirmed latency per window and the paired ratios")
    add_model_arguments(parser)
    parser.set_defaults(func=run)


class DriveMonitor:
    """Collects the graph's outputs per window and prints the live view."""

    def __init__(self, out=sys.stdout, on_row: Callable[[dict], None] | None = None) -> None:
        self.on_row = on_row
        self.rows_done: set[int] = set()
        self.rows: dict[int, dict[str, Any]] = {}
        self.windows: dict[int, Any] = {}  # sync.Window per verified window (lossless check)
        self.results: dict[int, Any] = {}
        self.drafts_shown: set[int] = set()
        self.lock = threading.Lock()
        self.last_activity = time.monotonic()
        self.out = out

    def finished(self) -> int:
        with self.lock:
            return sum(r["status"] in ("FINAL", "UNVERIFIED") for r in self.rows.values())

    def on_caption(self, msg: Any) -> None:
        status = STATUS.get(msg.status, str(msg.status))
        wid = int(msg.window_id)
        lines = []
        with self.lock:
            self.last_activity = time.monotonic()
            row = self.rows.setdefault(wid, {
                "window": wid, "t0": _sec(msg.window_start), "t1": _sec(msg.window_end),
                "draft_text": "", "draft_first_token_ms": None, "confirmed_text": "",
                "confirmed_done_ms": None, "accepted": 0, "proposed": 0, "status": status})
            if row["t0"] == 0.0:
                row["t0"], row["t1"] = _sec(msg.window_start), _sec(msg.window_end)
            row["draft_text"] = msg.draft_text or row["draft_text"]
            row["draft_first_token_ms"] = _num(msg.draft_first_token_ms)
            finished = status in ("FINAL", "UNVERIFIED")
            # the draft is shown once complete, or when the caption finishes before it did
            if row["draft_text"] and wid not in self.drafts_shown and (
                    not math.isnan(msg.draft_done_ms) or finished):
                self.drafts_shown.add(wid)
                lines.append(f"[{wid}] draft     {_ms(msg.draft_first_token_ms)}  "
                             f"{row['draft_text']}")
            if status == "FINAL" and row["status"] != "FINAL":
                row["confirmed_text"] = msg.confirmed_text
                row["confirmed_done_ms"] = _num(msg.confirmed_done_ms)
                row["acceptance"] = _num(msg.acceptance)
                lines.append(f"[{wid}] confirmed {_ms(msg.confirmed_done_ms)}  "
                             f"{msg.confirmed_text}   (acceptance {_pct(msg.acceptance)})")
            elif status == "UNVERIFIED" and row["status"] != "UNVERIFIED":
                lines.append(f"[{wid}] UNVERIFIED (no RGB, or the verifier was busy)  "
                             f"{msg.draft_text or '(no draft either)'}")
            if row["status"] not in ("FINAL", "UNVERIFIED"):
                row["status"] = status
            done = self._row_done(wid)
        for line in lines:
            self._print(line)
        if done is not None and self.on_row is not None:
            self.on_row(done)

    def _row_done(self, wid: int) -> dict | None:
        """The row, once and only once, when it is complete: UNVERIFIED, or FINAL with the
        engine's result too (they arrive on different threads, in either order)."""
        row = self.rows[wid]
        complete = row["status"] == "UNVERIFIED" or (row["status"] == "FINAL"
                                                    and wid in self.results)
        if not complete or wid in self.rows_done:
            return None
        self.rows_done.add(wid)
        return dict(row)

    def on_result(self, window: Any, result: Any) -> None:
        with self.lock:
            wid = int(window.id)
            self.windows[wid], self.results[wid] = window, result
            # status FINAL comes with the caption (printed then), which may come after this
            row = self.rows.setdefault(wid, {"window": wid, "t0": window.t0 / 1e9,
                                             "t1": window.t1 / 1e9, "status": "PARTIAL",
                                             "draft_text": result.draft_text,
                                             "draft_first_token_ms": None})
            s = result.stats
            row.update(confirmed_text=result.text, confirmed_done_ms=_num(s.confirmed_done_ms),
                       accepted=s.total_accepted, proposed=s.total_proposed, rounds=s.rounds,
                       verifier_prefill_ms=_num(s.verifier_prefill_ms),
                       confirmed_first_ms=_num(s.confirmed_first_ms),
                       final_draft_text=result.draft_text,
                       live_prefill_frames=s.live_prefill_frames)
            self.last_activity = time.monotonic()
            done = self._row_done(wid)
        if done is not None and self.on_row is not None:
            self.on_row(done)

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # loopback unless set
    from crossspec_ros.bags.inputs import check_bag
    from crossspec_ros.events.errors import EventSourceError
    from crossspec_ros.nodes.graph import node_parameters
    from crossspec_ros.params import ParameterError, check_param_file
    from crossspec_ros.process_tuning import tune_process_for_models

    if args.no_viz and (args.record or args.foxglove):
        print("crossspec drive: --record and --foxglove come from the viz node: drop --no-viz",
              file=sys.stderr)
        return 2
    if args.record and (args.record.exists() or args.record.is_symlink()):
        if args.record.resolve() == args.bag.resolve() or \
                args.record.resolve() in args.bag.resolve().parents:
            print(f"crossspec drive: {args.record} holds the bag being replayed; refusing to "
                  "record over it: choose another OUT", file=sys.stderr)
            return 2
        if not args.overwrite:  # as convert-dsec: a recording is never replaced unasked
            print(f"crossspec drive: {args.record} exists; pass --overwrite to replace it, "
                  "or choose another OUT", file=sys.stderr)
            return 2
    try:  # before any model loads: a bad bag or parameter file fails at once, in one line
        check_bag(args.bag)
        if args.config:
            check_param_file(args.config, node_parameters())
        args.model_params = model_overrides(args)
    except (EventSourceError, ParameterError) as err:
        print(f"crossspec drive: {err}", file=sys.stderr)
        return 2
    tune_process_for_models()
    passes = [("off", {"max_proposal": 0, "live_prefill": False}),
              ("live", {"max_proposal": 0}), ("on", {})] if args.compare else [("on", {})]
    results: dict[str, tuple[list[dict], dict]] = {}
    models = None
    stream = JsonLinesFile(args.json) if args.json else None
    with sigterm_as_interrupt() as caught:
        for label, verifier_params in passes:
            if args.compare:
                print(f"crossspec drive: pass {len(results) + 1}/{len(passes)}: "
                      f"{PASS_NAMES[label]}", file=sys.stderr)
            on_row = None if stream is None else (
                lambda row, label=label: stream.add({**row, "pass": label} if args.compare
                                                    else row))
            outcome = _drive_once(args, verifier_params, models, on_row)
            if isinstance(outcome, int):
                return outcome
            rows, summary, models, interrupted = outcome
            results[label] = (rows, summary)
            if interrupted:  # what finished is kept: the rows so far and their summary
                if stream is not None:
                    stream.finish([*stream.rows, {"summary": {**summary, "interrupted": True,
                                                              "pass": label}}])
                return exit_code_for(caught)
    rows, summary = results["on"]
    if args.compare:
        summary["compare"] = compare_passes(results["off"][0], rows)
        live_only = compare_passes(results["off"][0], results["live"][0])
        live_ms = {r["window"]: r.get("confirmed_done_ms") for r in results["live"][0]}
        for row in rows:
            row["confirmed_done_ms_live"] = live_ms.get(row["window"])
        summary["live_prefill"] = {
            "after_close_ms_median": summary["compare"]["confirmed_ms_median_off"],
            "live_ms_median": summary["compare"]["confirmed_ms_median_on"],
            "paired_speedup_median": summary["compare"]["paired_speedup_median"],
            "live_without_speculation_ms_median": live_only["confirmed_ms_median_on"],
            "live_without_speculation_speedup_median": live_only["paired_speedup_median"]}
        print_comparison(rows, summary["compare"], summary["live_prefill"])
    print(summary["line"])
    if stream is not None:
        stream.finish([*rows, {"summary": summary, **(
            {"compare": summary["compare"], "live_prefill": summary["live_prefill"]}
            if args.compare else {})}])
    return 0 if all(r.get("lossless", True) for label in results
                    for r in results[label][0]) else 1


def _drive_once(args: argparse.Namespace, verifier_params: dict[str, Any],
                models: tuple[Any, Any] | None, on_row: Callable[[dict], None] | None = None
                ) -> int | tuple[list[dict], dict, tuple[Any, Any], bool]:
    """One replay of the bag through the graph; (rows, summary, (verifier, drafter),
    interrupted), or an exit code when the graph could not start. ``on_row``: called with
    each window's row once it is finished."""
    import rclpy
    from crossspec import msg as cs_msg
    from rclpy.signals import SignalHandlerOptions

    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.nodes.graph import (
        KINDS,
        create_nodes,
        default_config,
        make_executor,
        spin_in_thread,
    )
    from crossspec_ros.nodes.player import BagPlayer
    from crossspec_ros.params import ParameterError

    config = args.config or default_config()
    viz = {"foxglove": args.foxglove, "foxglove_port": args.foxglove_port,
           "record_bag": str(args.record or "")}
    kinds = tuple(k for k in KINDS if not (args.no_viz and k == "viz"))
    monitor = DriveMonitor(on_row=on_row)
    # Ctrl-C stays Python's KeyboardInterrupt: drive shuts the graph down itself, in order
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    nodes: list = []
    executor = make_executor()
    interrupted = False
    stop_spinning = None
    try:
        models_given = getattr(args, "model_params", {})
        sim_time = {"use_sim_time": True}  # the bag's /clock, as drive.launch.py sets it
        nodes = create_nodes(kinds, config=config,
                             extra={"viz": {**viz, **sim_time},
                                    "draft": {**models_given, **sim_time},
                                    "verifier": {**models_given, **verifier_params,
                                                 **sim_time}},
                             models=models, on_result=monitor.on_result)
        watcher = rclpy.create_node("crossspec_drive_monitor")
        watcher.create_subscription(cs_msg.Caption, nodes[1].params["caption_topic"],
                                    monitor.on_caption, 100)
        player = BagPlayer(args.bag, rate=args.rate)
        nodes += [watcher, player]
        for node in nodes:
            executor.add_node(node)
        stop_spinning = spin_in_thread(executor)
        print(f"crossspec drive: {args.bag} at rate {args.rate}, config {config}",
              file=sys.stderr)
        _wait(player, nodes[1], monitor, args.max_windows)
    except (ParameterError, ModelLoadError) as err:
        print(f"crossspec drive: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: shutting down", file=sys.stderr)
    finally:
        if stop_spinning is not None:
            stop_spinning()
        executor.shutdown(timeout_sec=2.0)
        # kept past the nodes: the lossless check and the next pass use the same models
        engine = nodes[1].engine if len(nodes) > 1 else None
        drafter = nodes[0].drafter if nodes else None
        for node in nodes:
            node.destroy_node()  # the viz node closes its recording here (Ctrl-C, SIGTERM)
        if rclpy.ok():
            rclpy.shutdown()
    rows = [monitor.rows[w] for w in sorted(monitor.rows)]
    if args.check_lossless and not interrupted:
        _check_lossless(engine, monitor, rows)
    models = (engine.verifier, drafter) if engine is not None else None
    return rows, summarize(rows, nodes), models, interrupted


def compare_passes(off: list[dict], on: list[dict]) -> dict[str, Any]:
    """Paired ratios of confirmed latency (after window close), window by window, for the
    windows both passes finished; and whether both confirmed the same captions."""
    by_id = {r["window"]: r for r in off}
    pairs = [(by_id[r["window"]]["confirmed_done_ms"], r["confirmed_done_ms"])
             for r in on if r["window"] in by_id
             and by_id[r["window"]].get("confirmed_done_ms") and r.get("confirmed_done_ms")]
    for r in on:
        other = by_id.get(r["window"])
        if other is not None:
            r["confirmed_done_ms_off"] = other.get("confirmed_done_ms")
            r["same_caption_off"] = other.get("confirmed_text") == r.get("confirmed_text")
    if not pairs:
        return {"windows": 0, "confirmed_ms_median_off": None, "confirmed_ms_median_on": None,
                "paired_speedup_median": None}
    ratios = sorted(a / b for a, b in pairs)
    q25, _, q75 = (statistics.quantiles(ratios, n=4) if len(ratios) > 1
                     else [ratios[0]] * 3)
    return {"windows": len(pairs),
            "confirmed_ms_median_off": round(statistics.median(a for a, _ in pairs), 1),
            "confirmed_ms_median_on": round(statistics.median(b for _, b in pairs), 1),
            "paired_speedup_median": round(statistics.median(ratios), 3),
            "paired_speedup_q25": round(q25, 3), "paired_speedup_q75": round(q75, 3),
            "same_captions": sum(bool(r.get("same_caption_off")) for r in on
                                 if "same_caption_off" in r)}


def print_comparison(on: list[dict], compare: dict[str, Any], live: dict[str, Any],
                     out: Any = sys.stdout) -> None:
    print("\nconfirmed caption latency after window close (ms):", file=out)
    print(f"{'window':>12} {'alone':>8} {'live':>8} {'crossspec':>9} {'ratio':>7}", file=out)
    for r in on:
        a, m, b = (r.get("confirmed_done_ms_off"), r.get("confirmed_done_ms_live"),
                   r.get("confirmed_done_ms"))
        if a and b:
            middle = f"{m:>8.1f}" if m else f"{'--':>8}"
            print(f"{r['window']:>12} {a:>8.1f} {middle} {b:>9.1f} {a / b:>6.2f}x", file=out)
    print("alone: the verifier after the close, no speculation; live: live prefill, no "
          "speculation; crossspec: live prefill and speculation; ratio: alone / crossspec",
          file=out)
    if compare["windows"]:
        print(f"paired speedup median {compare['paired_speedup_median']:.2f}x (IQR "
              f"{compare['paired_speedup_q25']:.2f}-{compare['paired_speedup_q75']:.2f}) over "
              f"{compare['windows']} windows; confirmed median alone "
              f"{compare['confirmed_ms_median_off']} ms, live "
              f"{live['live_without_speculation_ms_median']} ms, crossspec "
              f"{compare['confirmed_ms_median_on']} ms; same captions "
              f"{compare['same_captions']}/{compare['windows']}", file=out)


def _wait(player: Any, verifier: Any, monitor: DriveMonitor, max_windows: int) -> None:
    """Until the bag is replayed and every window is finished (or ``max_windows``)."""
    settle = verifier.params["max_lateness_s"] + verifier.params["window_length_s"] + 2.5
    while True:
        time.sleep(0.1)
        if max_windows and monitor.finished() >= max_windows:
            player.stop()
            return
        if player.done.is_set():
            busy = len(verifier.queue) or any(
                w.verifying for w in list(verifier.book.windows.values()))
            if not busy and time.monotonic() - monitor.last_activity > settle:
                return


def _check_lossless(engine: Any, monitor: DriveMonitor, rows: list[dict]) -> None:
    """The verifier alone on each verified window, after the fact, in the same process."""
    if engine is not None and engine.config.mode != "greedy":
        print("crossspec drive: --check-lossless compares tokens, which only greedy decoding "
              "keeps; with sampling the confirmed caption follows the verifier's distribution "
              "(tested in test_speculative_*), not its tokens for one seed: not compared",
              file=sys.stderr)
        return
    for row in rows:
        window = monitor.windows.get(row["window"])
        if window is None or engine is None:
            continue
        t0 = time.perf_counter()
        alone = engine.verifier_only(window)
        row["verifier_only_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
        row["verifier_only_text"] = engine.verifier.tokenizer.decode(alone,
                                                                     skip_special_tokens=True)
        row["lossless"] = alone == monitor.results[row["window"]].tokens
        if not row["lossless"]:
            print(f"[{row['window']}] NOT LOSSLESS: verifier alone says "
                  f"{row['verifier_only_text']}")


def summarize(rows: list[dict], nodes: list) -> dict[str, Any]:
    final = [r for r in rows if r["status"] == "FINAL"]
    first = [r["draft_first_token_ms"] for r in rows if r.get("draft_first_token_ms") is not None]
    done = [r["confirmed_done_ms"] for r in final if r.get("confirmed_done_ms") is not None]
    accepted, proposed = sum(r.get("accepted", 0) for r in final), \
        sum(r.get("proposed", 0) for r in final)
    dropped = sum(getattr(getattr(n, "queue", None), "dropped", 0) for n in nodes)
    summary: dict[str, Any] = {
        "windows": len(rows), "final": len(final),
        "unverified": sum(r["status"] == "UNVERIFIED" for r in rows),
        "dropped_windows": dropped,
        "draft_first_token_ms_p50": _pct_of(first, 50), "draft_first_token_ms_p95":
            _pct_of(first, 95),
        "confirmed_done_ms_median": _pct_of(done, 50),
        "acceptance": round(accepted / proposed, 3) if proposed else None,
        "accepted": accepted, "proposed": proposed}
    alone = [r["verifier_only_ms"] for r in final if "verifier_only_ms" in r]
    if alone:
        summary["verifier_only_ms_median"] = _pct_of(alone, 50)
        summary["lossless"] = sum(bool(r.get("lossless")) for r in final)
    line = (f"{summary['windows']} windows ({summary['final']} FINAL, {summary['unverified']} "
            f"UNVERIFIED, {dropped} dropped): draft first token p50 "
            f"{summary['draft_first_token_ms_p50']} ms, p95 "
            f"{summary['draft_first_token_ms_p95']} ms; confirmed median "
            f"{summary['confirmed_done_ms_median']} ms; acceptance {accepted}/{proposed}")
    if alone:
        line += (f"; verifier alone median {summary['verifier_only_ms_median']} ms; lossless "
                 f"{summary['lossless']}/{len(final)}")
    summary["line"] = line
    return summary


def _pct_of(values: list[float], q: int) -> float | None:
    if not values:
        return None
    if q == 50:
        return round(statistics.median(values), 1)
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1)], 1)


def _sec(t: Any) -> float:
    return t.sec + t.nanosec / 1e9


def _num(x: float) -> float | None:
    return None if x != x else round(float(x), 2)


def _ms(x: float) -> str:
    return "   --   " if x != x else f"{x:6.1f} ms"


def _pct(x: float) -> str:
    return "--" if x != x else f"{100 * x:.0f}%"
