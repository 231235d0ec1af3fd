"""`crossspec drive`: the whole ROS graph in one process on a bag, with a live terminal view.

Replays the bag (the bundled sample bag by default) at its recorded rate with /clock, runs the
draft, verifier and viz nodes (composed: one process, models loaded once, each on its own
worker thread and CUDA stream) exactly as `ros2 launch crossspec drive.launch.py` does, and
prints per window the draft caption with its latency, then the confirmed caption, its latency
and acceptance. ``--check-lossless`` runs the verifier alone on every window afterwards and
compares token for token. ``--compare`` replays the bag through three graphs, in alternating
order over ``--rounds`` rounds: the verifier node alone (what a user without crossspec runs),
the verifier node alone with live prefill, and crossspec (draft and verifier nodes), and pairs
their confirmed latencies window by window.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossspec_ros import summaries
from crossspec_ros.cli.model_args import add_model_arguments, model_overrides
from crossspec_ros.cli.streaming import JsonLinesFile, exit_code_for, sigterm_as_interrupt
from crossspec_ros.paths import sample_bag
from crossspec_ros.summaries import paired_ratios
from crossspec_ros.sync.agreement import draft_agreement

STATUS = {0: "DRAFT", 1: "PARTIAL", 2: "FINAL", 3: "UNVERIFIED"}
# crossspec/Caption's REASON_* and DRAFT_* codes, as the terminal and the JSON name them
REASONS = {0: "", 1: "no RGB", 2: "verifier busy", 3: "verifier failed", 4: "verifier stopped"}
DRAFT_STATES = {0: "none", 1: "in progress", 2: "cut short", 3: "complete"}


@dataclass(frozen=True)
class GraphPass:
    """One replay of the bag through one graph (``--compare`` runs three)."""

    name: str                      # in the terminal, the JSON rows ("pass") and the summary
    kinds: tuple[str, ...]         # the graph's nodes (crossspec's also runs the viz node)
    verifier_params: dict[str, Any] = field(default_factory=dict)
    about: str = ""


# the baselines decode in one-row steps: on the static runtime the fastest plain decoder
# (crossspec's passes hold step_rows rows, for exactness; one row costs less)
ALONE = GraphPass("alone", ("verifier",), {"max_proposal": 0, "live_prefill": False,
                                           "step_rows": 1},
                  "the verifier node alone, prefill after the close, no speculation (what a "
                  "user without crossspec runs)")
LIVE_ALONE = GraphPass("live_alone", ("verifier",), {"max_proposal": 0, "step_rows": 1},
                       "the verifier node alone with live prefill and early start, no "
                       "speculation")
CROSSSPEC = GraphPass("crossspec", ("draft", "verifier"), {},
                      "draft and verifier nodes, live prefill, early start and speculation")
COMPARED = (ALONE, LIVE_ALONE, CROSSSPEC)


def pass_order(rounds: int) -> list[tuple[int, GraphPass]]:
    """(round, pass) in the order they run: every other round reversed, so a machine whose
    load drifts during the run favours no graph (alone, live_alone, crossspec, crossspec,
    live_alone, alone, ...)."""
    return [(r, p) for r in range(rounds)
            for p in (COMPARED if r % 2 == 0 else tuple(reversed(COMPARED)))]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "drive", help="run the ROS graph on a bag in one process, live (no ros2 launch needed)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bag", type=Path, default=sample_bag(),
                        help="bag to replay, ROS 2 or ROS 1 (default: the bundled sample bag); "
                        "EventArray topics replay as evt3 EventPackets")
    parser.add_argument("--config", type=Path, default=None,
                        help="ROS parameter YAML (default: config/drive.yaml)")
    parser.add_argument("--rate", type=float, default=1.0,
                        help="replay rate (1 = recorded speed)")
    parser.add_argument("--max-windows", type=int, default=0,
                        help="stop after N finished windows (0: the whole bag)")
    parser.add_argument("--duration", type=float, default=None, metavar="S",
                        help="replay at most S seconds of bag time per pass (default: all)")
    parser.add_argument("--loop", action="store_true",
                        help="replay the bag again and again until Ctrl-C or --max-windows "
                        "(a window of a later pass shows as ID@PASS, its JSON row carries "
                        "\"epoch\"); not with --compare")
    parser.add_argument("--foxglove", action="store_true",
                        help="serve live on a Foxglove WebSocket (the config's foxglove_host, "
                        "127.0.0.1 by default): one server for the whole run, so a client "
                        "stays connected across --compare's passes and --loop's replays (the "
                        "crossspec pass draws on it)")
    parser.add_argument("--foxglove-port", type=int, default=8765,
                        help="the Foxglove server's port (default 8765; 0: any free port)")
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
                        help="replay the bag through three graphs: the verifier node alone "
                        "(prefill after the window closes, no speculation: what a user without "
                        "crossspec runs), the verifier node alone with live prefill, and "
                        "crossspec (draft and verifier nodes); print the confirmed latency per "
                        "window and the paired ratios against the verifier node alone")
    parser.add_argument("--rounds", type=int, default=2,
                        help="with --compare: replay the three graphs this many times, in "
                        "alternating order, and report the spread of the rounds' ratios "
                        "(default 2)")
    add_model_arguments(parser)
    parser.set_defaults(func=run)


class DriveMonitor:
    """Collects the graph's outputs per window and prints the live view."""

    def __init__(self, out=sys.stdout, on_row: Callable[[dict], None] | None = None,
                 label: str = "") -> None:
        self.on_row = on_row
        self.prefix = f"[{label}] " if label else ""  # which graph (drive --compare)
        # keyed by (epoch, window id): ids repeat after a bag loop (--loop), epochs do not
        self.rows_done: set[tuple[int, int]] = set()
        self.rows: dict[tuple[int, int], dict[str, Any]] = {}
        self.windows: dict[tuple[int, int], Any] = {}  # sync.Window (the lossless check)
        self.results: dict[tuple[int, int], Any] = {}
        self.drafts_shown: set[tuple[int, int]] = set()
        # the verifier's text -> ids, for the drafts' token agreement (set once it is loaded)
        self.tokenize: Callable[[str], Any] | None = None
        self.lock = threading.Lock()
        self.last_activity = time.monotonic()
        self.out = out

    def finished(self) -> int:
        with self.lock:
            return sum(r["status"] in ("FINAL", "UNVERIFIED") for r in self.rows.values())

    def on_caption(self, msg: Any) -> None:
        status = STATUS.get(msg.status, str(msg.status))
        key = (int(msg.epoch), int(msg.window_id))
        wid = window_label(*key)
        lines = []
        with self.lock:
            self.last_activity = time.monotonic()
            row = self.rows.setdefault(key, {
                "window": key[1], "epoch": key[0], "t0": _sec(msg.window_start),
                "t1": _sec(msg.window_end),
                "draft_text": "", "draft_first_token_ms": None, "confirmed_text": "",
                # the status it had before this caption: a FINAL may be the first one seen
                # (a caption confirmed whole at once, no draft before it)
                "confirmed_done_ms": None, "accepted": 0, "proposed": 0, "status": "DRAFT"})
            if row["t0"] == 0.0:
                row["t0"], row["t1"] = _sec(msg.window_start), _sec(msg.window_end)
            row["draft_text"] = msg.draft_text or row["draft_text"]
            row["draft_first_token_ms"] = _num(msg.draft_first_token_ms)
            if "complete_draft" not in row and not math.isnan(msg.draft_done_ms):
                row["complete_draft"] = msg.draft_text  # as first complete: read first
            finished = status in ("FINAL", "UNVERIFIED")
            # the draft is shown once complete, or when the caption finishes before it did
            if row["draft_text"] and key not in self.drafts_shown and (
                    not math.isnan(msg.draft_done_ms) or finished):
                self.drafts_shown.add(key)
                lines.append(f"[{wid}] draft     {_ms(msg.draft_first_token_ms)}  "
                             f"{row['draft_text']}")
            if status == "FINAL" and row["status"] != "FINAL":
                row["confirmed_text"] = msg.confirmed_text
                row["confirmed_done_ms"] = _num(msg.confirmed_done_ms)
                row["acceptance"] = _num(msg.acceptance)
                row["acceptance_rule"] = msg.acceptance_rule  # "": the verifier's own
                agreement = self._agreement(row)
                # a caption made under a relaxed rule is never shown as the verifier's own
                what = f"LOSSY ({msg.acceptance_rule})" if msg.acceptance_rule else "confirmed"
                lines.append(f"[{wid}] {what} {_ms(msg.confirmed_done_ms)}  "
                             f"{msg.confirmed_text}   (acceptance {_pct(msg.acceptance)}"
                             f"{agreement})")
            elif status == "UNVERIFIED" and row["status"] != "UNVERIFIED":
                reason = REASONS.get(msg.unverified_reason, str(msg.unverified_reason))
                draft = DRAFT_STATES.get(msg.draft_state, str(msg.draft_state))
                row.update(unverified_reason=reason, draft_state=draft)
                shown = {"none": "(no draft: the drafter never drafted it)",
                         "cut short": f"{msg.draft_text} [draft cut short]"}.get(
                             draft, msg.draft_text)
                lines.append(f"[{wid}] UNVERIFIED ({reason})  {shown}")
            if row["status"] not in ("FINAL", "UNVERIFIED"):
                row["status"] = status
            done = self._row_done(key)
        for line in lines:
            self._print(line)
        if done is not None and self.on_row is not None:
            self.on_row(done)

    def _agreement(self, row: dict) -> str:
        """Score the window's complete draft against its FINAL caption (row fields
        ``draft_token_agreement``, ``draft_word_error_rate``); the terminal's words for it."""
        draft = row.get("complete_draft")
        if not draft:
            return ""
        score = draft_agreement(draft, row["confirmed_text"], self.tokenize)
        row["draft_token_agreement"] = _num(score.token_agreement)
        row["draft_word_error_rate"] = _num(score.word_error_rate)
        return (f"; draft: token agreement {_num(score.token_agreement)}, WER "
                f"{_num(score.word_error_rate)}")

    def _row_done(self, key: tuple[int, int]) -> dict | None:
        """The row, once and only once, when it is complete: UNVERIFIED, or FINAL with the
        engine's result too (they arrive on different threads, in either order)."""
        row = self.rows[key]
        complete = row["status"] == "UNVERIFIED" or (row["status"] == "FINAL"
                                                    and key in self.results)
        if not complete or key in self.rows_done:
            return None
        self.rows_done.add(key)
        return dict(row)

    def on_result(self, window: Any, result: Any) -> None:
        with self.lock:
            key = window.key
            self.windows[key], self.results[key] = window, result
            # status FINAL comes with the caption (printed then), which may come after this
            row = self.rows.setdefault(key, {"window": window.id, "epoch": window.epoch,
                                             "t0": window.t0 / 1e9,
                                             "t1": window.t1 / 1e9, "status": "PARTIAL",
                                             "draft_text": result.draft_text,
                                             "draft_first_token_ms": None})
            s = result.stats
            row.update(confirmed_text=result.text, confirmed_done_ms=_num(s.confirmed_done_ms),
                       accepted=s.total_accepted, proposed=s.total_proposed, rounds=s.rounds,
                       verifier_prefill_ms=_num(s.verifier_prefill_ms),
                       confirmed_first_ms=_num(s.confirmed_first_ms),
                       final_draft_text=result.draft_text,
                       live_prefill_frames=s.live_prefill_frames,
                       ready_before_close_ms=_num(s.ready_before_close_ms))
            self.last_activity = time.monotonic()
            done = self._row_done(key)
        if done is not None and self.on_row is not None:
            self.on_row(done)

    def _print(self, line: str) -> None:
        print(self.prefix + line, file=self.out, flush=True)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # loopback unless set
    from crossspec_ros.bags.inputs import check_bag
    from crossspec_ros.events.errors import EventSourceError
    from crossspec_ros.events.event_array import EVENT_ARRAY_TYPES
    from crossspec_ros.nodes.graph import default_config, input_topic_parameters, node_parameters
    from crossspec_ros.params import ParameterError, check_param_file
    from crossspec_ros.process_tuning import tune_process_for_models

    if args.no_viz and (args.record or args.foxglove):
        print("crossspec drive: --record and --foxglove come from the viz node: drop --no-viz",
              file=sys.stderr)
        return 2
    if args.rounds < 1:
        print("crossspec drive: --rounds must be >= 1", file=sys.stderr)
        return 2
    if args.duration is not None and args.duration <= 0:
        print("crossspec drive: --duration must be > 0 seconds", file=sys.stderr)
        return 2
    if args.loop and args.compare:
        print("crossspec drive: --loop replays until stopped, and --compare needs passes that "
              "end: drop one of them", file=sys.stderr)
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
        inputs = check_bag(args.bag)
        if args.config:
            check_param_file(args.config, node_parameters())
        args.model_params = model_overrides(args)
        # the nodes listen where the bag's inputs are (found by type, as `windows` finds them)
        args.topic_params = input_topic_parameters(args.config or default_config(),
                                                   inputs.events, inputs.images,
                                                   inputs.images_type)
    except (EventSourceError, ParameterError) as err:
        print(f"crossspec drive: {err}", file=sys.stderr)
        return 2
    if args.loop and args.duration is not None:
        from crossspec_ros.params import load_yaml_params

        # a loop must jump back further than this for the nodes to see a new pass
        threshold = load_yaml_params(args.config or default_config(),
                                     "crossspec_verifier").get("reset_threshold_s", 2.0)
        if args.duration <= threshold:
            print(f"crossspec drive: with --loop, --duration must be longer than the nodes' "
                  f"reset_threshold_s ({threshold} s): a shorter jump back in bag time reads "
                  f"as late data, not as a new pass", file=sys.stderr)
            return 2
    if args.topic_params or inputs.events_type in EVENT_ARRAY_TYPES:
        print(f"crossspec drive: inputs {_describe_inputs(inputs)}", file=sys.stderr)
    tune_process_for_models()
    try:
        args.foxglove_output = _start_foxglove(args) if args.foxglove else None
    except RuntimeError as err:
        print(f"crossspec drive: {err}", file=sys.stderr)
        return 2
    try:
        return _drive(args)
    finally:
        if args.foxglove_output is not None:
            args.foxglove_output.close()


def _start_foxglove(args: argparse.Namespace) -> Any:
    """The run's one Foxglove server (on the config's foxglove_host, --foxglove-port), its
    caption channel named as the viz node names it."""
    from crossspec_ros.nodes.graph import default_config, node_parameters
    from crossspec_ros.params import load_yaml_params
    from crossspec_ros.viz.foxglove_out import FoxgloveOutput

    values = {p.name: p.default for p in node_parameters()["crossspec_viz"]}
    values.update(load_yaml_params(args.config or default_config(), "crossspec_viz"))
    topic = values["caption_topic"]
    output = FoxgloveOutput(serve=True, host=values["foxglove_host"], port=args.foxglove_port,
                            caption_topic=topic if topic.startswith("/") else "/" + topic)
    print(f"crossspec drive: Foxglove: ws://{values['foxglove_host']}:{output.port}",
          file=sys.stderr)
    return output


def _drive(args: argparse.Namespace) -> int:
    """The passes (one, or --compare's rounds of three), their summary and JSON."""
    order = pass_order(args.rounds) if args.compare else [(0, CROSSSPEC)]
    results: dict[tuple[str, int], list[dict]] = {}
    models: dict[str, Any] = {}
    stream = JsonLinesFile(args.json) if args.json else None
    with sigterm_as_interrupt(ends_process=True) as caught:  # a repeated Ctrl-C too
        for number, (round_index, graph) in enumerate(order, 1):
            if args.compare:
                print(f"crossspec drive: pass {number}/{len(order)} (round {round_index + 1}): "
                      f"{graph.name}: {graph.about}", file=sys.stderr)
            tag = {"pass": graph.name, "round": round_index} if args.compare else {}
            on_row = None if stream is None else (
                lambda row, tag=tag: stream.add({**row, **tag}))
            outcome = _drive_once(args, graph, models, on_row,
                                  label=graph.name if args.compare else "")
            if isinstance(outcome, int):
                return outcome
            done = outcome
            results[(graph.name, round_index)] = done.rows
            if done.interrupted:  # what finished is kept: the rows so far and their summary
                if stream is not None:
                    summary = summarize(done.rows, done.dropped)
                    stream.finish([*stream.rows, {"summary": {**summary, "interrupted": True,
                                                              **tag}}])
                return exit_code_for(caught)
            if graph is CROSSSPEC:
                last = done
    rounds = range(args.rounds if args.compare else 1)
    # the crossspec pass of the last round carries the lossless check and the summary
    rows = last.rows
    if args.check_lossless:
        _check_lossless(last.engine, last.monitor, rows)
    summary = summarize(rows, last.dropped)
    extra: dict[str, Any] = {}
    if args.compare:
        extra["compare"] = compare_graphs(results, rounds)
        print_comparison(results, extra["compare"])
    print(summary["line"])
    if args.compare:
        print(compare_line(extra["compare"]))
    if stream is not None:
        tagged = [{**r, "pass": name, "round": k} if args.compare else r
                  for (name, k), pass_rows in results.items() for r in pass_rows]
        stream.finish([*tagged, {"summary": summary, **extra}])
    return 0 if all(r.get("lossless", True) for r in rows) else 1


def _describe_inputs(inputs: Any) -> str:
    """The bag's input topics as the nodes get them (EventArrays arrive as evt3 packets)."""
    from crossspec_ros.events.event_array import EVENT_ARRAY_TYPES

    parts = []
    if inputs.events:
        how = ", replayed as evt3 EventPackets" if inputs.events_type in EVENT_ARRAY_TYPES \
            else ""
        parts.append(f"events {inputs.events} ({inputs.events_type}{how})")
    if inputs.images:
        parts.append(f"images {inputs.images} ({inputs.images_type})")
    return ", ".join(parts) or "none"


@dataclass
class PassResult:
    """What one replay left: its rows (window order), its monitor (windows and engine results,
    for the lossless check), the verifier node's engine, windows dropped by busy nodes."""

    rows: list[dict]
    monitor: DriveMonitor
    engine: Any
    dropped: int
    interrupted: bool


def _drive_once(args: argparse.Namespace, graph: GraphPass, models: dict[str, Any],
                on_row: Callable[[dict], None] | None = None, label: str = ""
                ) -> int | PassResult:
    """One replay of the bag through ``graph``, or an exit code when the graph could not
    start. ``models``: "verifier" and "drafter" once loaded (updated here; later passes reuse
    them). ``on_row``: called with each window's row once it is finished; ``label`` prefixes
    the live view's lines."""
    import rclpy
    from crossspec import msg as cs_msg
    from rclpy.signals import SignalHandlerOptions

    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.nodes.draft_node import DraftNode
    from crossspec_ros.nodes.graph import (
        create_nodes,
        default_config,
        make_executor,
        spin_in_thread,
    )
    from crossspec_ros.nodes.player import BagPlayer
    from crossspec_ros.nodes.verifier_node import VerifierNode
    from crossspec_ros.params import ParameterError
    from crossspec_ros.sync.agreement import text_to_ids

    config = args.config or default_config()
    # the run's Foxglove server, if any, is given to the viz node: it outlives the pass
    viz = {"foxglove": False, "record_bag": str(args.record or "")}
    # the viz node is crossspec's: it runs beside crossspec's graph only, never slowing a
    # baseline (and --record / --foxglove show the crossspec pass)
    kinds = graph.kinds + (() if args.no_viz or graph is not CROSSSPEC else ("viz",))
    monitor = DriveMonitor(on_row=on_row, label=label)
    # Ctrl-C stays Python's KeyboardInterrupt: drive shuts the graph down itself, in order
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    nodes: list = []
    executor = make_executor()
    interrupted = False
    stop_spinning = None
    verifier_node = None
    try:
        models_given = getattr(args, "model_params", {})
        topics = getattr(args, "topic_params", {})
        sim_time = {"use_sim_time": True}  # the bag's /clock, as drive.launch.py sets it
        nodes = create_nodes(kinds, config=config,
                             extra={"viz": {**viz, **topics.get("viz", {}), **sim_time},
                                    "draft": {**models_given, **topics.get("draft", {}),
                                              **sim_time},
                                    "verifier": {**models_given, **graph.verifier_params,
                                                 **topics.get("verifier", {}), **sim_time}},
                             models=(models.get("verifier"), models.get("drafter")),
                             on_result=monitor.on_result,
                             foxglove=getattr(args, "foxglove_output", None))
        verifier_node = next(n for n in nodes if isinstance(n, VerifierNode))
        models["verifier"] = verifier_node.engine.verifier
        monitor.tokenize = text_to_ids(models["verifier"].tokenizer)
        for node in nodes:
            if isinstance(node, DraftNode):
                models["drafter"] = node.drafter
        watcher = rclpy.create_node("crossspec_drive_monitor")
        watcher.create_subscription(cs_msg.Caption, verifier_node.params["caption_topic"],
                                    monitor.on_caption, 100)
        player = BagPlayer(args.bag, rate=args.rate, loop=getattr(args, "loop", False),
                           max_duration_s=getattr(args, "duration", None))
        nodes += [watcher, player]
        for node in nodes:
            executor.add_node(node)
        stop_spinning = spin_in_thread(executor)
        print(f"crossspec drive: {args.bag} at rate {args.rate}, config {config}, graph "
              f"{' + '.join(n.get_name() for n in nodes[:len(kinds)])}", file=sys.stderr)
        _wait(player, verifier_node, monitor, args.max_windows)
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
        engine = verifier_node.engine if verifier_node is not None else None
        for node in nodes:
            node.destroy_node()  # the viz node closes its recording here (Ctrl-C, SIGTERM)
        if rclpy.ok():
            rclpy.shutdown()
    rows = [monitor.rows[w] for w in sorted(monitor.rows)]
    dropped = sum(getattr(getattr(n, "queue", None), "dropped", 0) for n in nodes)
    return PassResult(rows, monitor, engine, dropped, interrupted)


def final_latencies(rows: list[dict]) -> dict[int, float | None]:
    """Window -> confirmed latency after the close, for the pass's FINAL windows."""
    return {r["window"]: r.get("confirmed_done_ms") for r in rows if r["status"] == "FINAL"}


def compare_graphs(results: dict[tuple[str, int], list[dict]], rounds: range
                   ) -> dict[str, Any]:
    """The passes paired window by window within each round: crossspec and live_alone against
    the verifier node alone, crossspec against live_alone; pooled over the rounds, with each
    round's median (the spread load drift leaves)."""
    def latencies(name: str, k: int) -> dict[int, float | None]:
        return final_latencies(results[(name, k)])

    def paired(base: str, mode: str) -> dict[str, Any]:
        per_round = [paired_ratios(latencies(base, k), latencies(mode, k)) for k in rounds]
        pooled = [x for ratios in per_round for x in ratios.values()]
        medians = [summaries.spread(ratios.values())["median"] for ratios in per_round]
        return {**{f"paired_speedup_{k}": v for k, v in summaries.spread(pooled).items()},
                "pairs": len(pooled), "rounds": medians}

    passes = {}
    for graph in COMPARED:
        values = [latencies(graph.name, k) for k in rounds]
        passes[graph.name] = {
            "graph": list(graph.kinds), "about": graph.about,
            "confirmed_ms_median": _median(v for d in values for v in d.values()),
            "confirmed_ms_median_rounds": [_median(d.values()) for d in values],
            # early start: how long before the close each caption was complete
            "ready_before_close_ms_median": _median(
                r["ready_before_close_ms"] for k in rounds for r in results[(graph.name, k)]
                if r["status"] == "FINAL" and r.get("ready_before_close_ms") is not None)}
    same = [r["confirmed_text"] == other.get(r["window"]) for k in rounds
            for name in (ALONE.name, LIVE_ALONE.name)
            for other in [{o["window"]: o["confirmed_text"] for o in results[(name, k)]
                           if o["status"] == "FINAL"}]
            for r in results[(CROSSSPEC.name, k)]
            if r["status"] == "FINAL" and r["window"] in other]
    return {"baseline": ALONE.name, "passes": passes, "rounds": len(rounds),
            "crossspec_vs_alone": paired(ALONE.name, CROSSSPEC.name),
            "live_alone_vs_alone": paired(ALONE.name, LIVE_ALONE.name),
            "crossspec_vs_live_alone": paired(LIVE_ALONE.name, CROSSSPEC.name),
            "same_captions": sum(same), "compared_captions": len(same)}


def compare_line(compare: dict[str, Any]) -> str:
    """The comparison in one line: what the README quotes."""
    main, live = compare["crossspec_vs_alone"], compare["crossspec_vs_live_alone"]
    passes = compare["passes"]
    return (f"crossspec vs the verifier node alone: paired speedup "
            f"{_x(main['paired_speedup_median'])} (IQR {_x(main['paired_speedup_q25'])}-"
            f"{_x(main['paired_speedup_q75'])}, rounds {', '.join(_x(m) for m in main['rounds'])}"
            f"; {main['pairs']} window pairs); vs the verifier node alone with live prefill "
            f"{_x(live['paired_speedup_median'])}; confirmed median after the close: alone "
            f"{passes['alone']['confirmed_ms_median']} ms, live_alone "
            f"{passes['live_alone']['confirmed_ms_median']} ms, crossspec "
            f"{passes['crossspec']['confirmed_ms_median']} ms{_ahead(passes)}; same captions "
            f"{compare['same_captions']}/{compare['compared_captions']}")


def _ahead(passes: dict[str, Any]) -> str:
    """How long before the close the early-started passes had their captions complete."""
    ahead = {name: p["ready_before_close_ms_median"] for name, p in passes.items()
             if p.get("ready_before_close_ms_median") is not None}
    if not ahead:
        return ""
    return "; complete before the close (early start, median): " + ", ".join(
        f"{name} {ms} ms" for name, ms in ahead.items())


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def print_comparison(results: dict[tuple[str, int], list[dict]], compare: dict[str, Any],
                     out: Any = sys.stdout) -> None:
    """Per window, each graph's confirmed latency after the close (median over the rounds)
    and the paired ratio alone / crossspec (median of the rounds' ratios)."""
    names = [graph.name for graph in COMPARED]
    per_window: dict[int, dict[str, list[float]]] = {}
    for (name, _), rows in results.items():
        for r in rows:
            if r["status"] == "FINAL" and r.get("confirmed_done_ms"):
                per_window.setdefault(r["window"], {}).setdefault(name, []).append(
                    r["confirmed_done_ms"])
    ratios: dict[int, list[float]] = {}
    for k in range(compare["rounds"]):
        for wid, ratio in paired_ratios(final_latencies(results[(ALONE.name, k)]),
                                        final_latencies(results[(CROSSSPEC.name, k)])).items():
            ratios.setdefault(wid, []).append(ratio)
    print(f"\nconfirmed caption latency after the window closed (ms; median of "
          f"{compare['rounds']} round(s)):", file=out)
    print(f"{'window':>12} " + " ".join(f"{n:>10}" for n in names) + f" {'ratio':>7}", file=out)
    for wid in sorted(per_window):
        cells = [_median(per_window[wid].get(n, [])) for n in names]
        ratio = summaries.rounded(summaries.median(ratios.get(wid, [])), 2)
        shown = [f"{'--':>10}" if c is None else f"{c:>10.1f}" for c in cells]
        shown.append(f"{'--':>7}" if ratio is None else f"{ratio:>6.2f}x")
        print(f"{wid:>12} " + " ".join(shown), file=out)
    for graph in COMPARED:
        print(f"{graph.name}: {graph.about}", file=out)
    print("ratio: alone / crossspec, window by window within a round", file=out)


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
        key = (row.get("epoch", 0), row["window"])
        window = monitor.windows.get(key)
        if window is None or engine is None:
            continue
        t0 = time.perf_counter()
        alone = engine.verifier_only(window)
        row["verifier_only_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
        row["verifier_only_text"] = engine.verifier.tokenizer.decode(alone,
                                                                     skip_special_tokens=True)
        if row.get("acceptance_rule"):  # lossy by choice: how far it went, counted apart
            row["lossy_same_as_verifier"] = alone == monitor.results[key].tokens
            continue
        row["lossless"] = alone == monitor.results[key].tokens
        if not row["lossless"]:
            print(f"[{row['window']}] NOT LOSSLESS: verifier alone says "
                  f"{row['verifier_only_text']}")


def summarize(rows: list[dict], dropped: int) -> dict[str, Any]:
    """One pass's summary: the JSON's numbers and the terminal's line, named alike.
    ``confirmed_done_ms``: the window closing (its synchronizer) to its last confirmed token;
    ``draft_first_token_ms``: the window closing (the draft node's synchronizer) to the first
    draft token."""
    final = [r for r in rows if r["status"] == "FINAL"]
    first = [r["draft_first_token_ms"] for r in rows if r.get("draft_first_token_ms") is not None]
    done = [r["confirmed_done_ms"] for r in final if r.get("confirmed_done_ms") is not None]
    accepted, proposed = sum(r.get("accepted", 0) for r in final), \
        sum(r.get("proposed", 0) for r in final)
    summary: dict[str, Any] = {
        "windows": len(rows), "final": len(final),
        "unverified": sum(r["status"] == "UNVERIFIED" for r in rows),
        "dropped_windows": dropped,
        "draft_first_token_ms_p50": _median(first), "draft_first_token_ms_p95":
            summaries.rounded(summaries.percentile(first, 95), 1),
        "confirmed_done_ms_median": _median(done),
        "acceptance": round(accepted / proposed, 3) if proposed else None,
        "accepted": accepted, "proposed": proposed}
    # early start: captions decoded before their window closed, and how long before
    ahead = [r["ready_before_close_ms"] for r in final
             if r.get("ready_before_close_ms") is not None]
    summary["early_started"] = len(ahead)
    summary["ready_before_close_ms_median"] = _median(ahead)
    scored = [r for r in final if r.get("draft_word_error_rate") is not None]
    summary["draft_agreement_windows"] = len(scored)
    summary["draft_token_agreement_median"] = summaries.rounded(summaries.median(
        r["draft_token_agreement"] for r in scored
        if r.get("draft_token_agreement") is not None), 3)
    summary["draft_word_error_rate_median"] = summaries.rounded(summaries.median(
        r["draft_word_error_rate"] for r in scored), 3)
    checked = [r for r in final if "lossless" in r]
    lossy = [r for r in final if "lossy_same_as_verifier" in r]
    if lossy:  # relaxed acceptance: never counted as lossless, reported apart
        summary["lossy_windows"] = len(lossy)
        summary["lossy_same_as_verifier"] = sum(r["lossy_same_as_verifier"] for r in lossy)
        summary["acceptance_rules"] = sorted({r["acceptance_rule"] for r in lossy})
    if checked:
        summary["lossless"] = sum(bool(r["lossless"]) for r in checked)
        summary["lossless_checked"] = len(checked)
        # the reference run's own time, alone on the machine after the drive: not a latency
        # after the close, so it never stands beside confirmed_done_ms in the line
        summary["lossless_check_verifier_ms_median"] = _median(
            r["verifier_only_ms"] for r in checked)
    line = (f"{summary['windows']} windows ({summary['final']} FINAL, {summary['unverified']} "
            f"UNVERIFIED, {dropped} dropped): draft first token after the close p50 "
            f"{summary['draft_first_token_ms_p50']} ms, p95 "
            f"{summary['draft_first_token_ms_p95']} ms; confirmed after the close median "
            f"{summary['confirmed_done_ms_median']} ms; accepted draft tokens {accepted} of "
            f"{proposed} proposed ({_pct(summary['acceptance'] or math.nan)})")
    if ahead:
        line += (f"; {len(ahead)} of {len(final)} captions decoded before the close (early "
                 f"start), complete a median {summary['ready_before_close_ms_median']} ms "
                 f"before it")
    if scored:
        line += (f"; complete drafts against their final captions ({len(scored)} windows): "
                 f"token agreement median {summary['draft_token_agreement_median']}, word "
                 f"error rate median {summary['draft_word_error_rate_median']}")
    if checked:
        line += f"; lossless {summary['lossless']}/{len(checked)}"
    if lossy:
        line += (f"; LOSSY ({', '.join(summary['acceptance_rules'])}): {len(lossy)} captions "
                 f"under a relaxed acceptance rule, {summary['lossy_same_as_verifier']} of "
                 f"them the verifier's own")
    summary["line"] = line
    return summary


def _median(values: Any) -> float | None:
    """A latency median as the JSON and the terminal show it (0.1 ms; None when none)."""
    return summaries.rounded(summaries.median(values), 1)


def window_label(epoch: int, window_id: int) -> str:
    """How the terminal names a window: its id, and after a bag loop the pass it came in."""
    return str(window_id) if epoch == 0 else f"{window_id}@{epoch}"


def _sec(t: Any) -> float:
    return t.sec + t.nanosec / 1e9


def _num(x: float) -> float | None:
    return None if x != x else round(float(x), 2)


def _ms(x: float) -> str:
    return "   --   " if x != x else f"{x:6.1f} ms"


def _pct(x: float) -> str:
    return "--" if x != x else f"{100 * x:.0f}%"
