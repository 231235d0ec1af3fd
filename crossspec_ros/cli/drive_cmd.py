"""`crossspec drive`: the whole ROS graph in one process on a bag, with a live terminal view.

Replays the bag (the bundled sample bag by default) at its recorded rate with /clock, runs the
draft, verifier and viz nodes (composed: one process, models loaded once, each on its own
worker thread and CUDA stream) exactly as `ros2 launch crossspec drive.launch.py` does, and
prints per window the draft caption with its latency, then the confirmed caption, its latency
and acceptance. ``--check-lossless`` runs the verifier alone on every window afterwards and
compares token for token (under ``--loop``, which keeps no window, each one as it finishes).
``--compare`` replays the bag through the compared graphs (crossspec_ros/comparison.py: the
verifier node alone, with live prefill and early start, crossspec without its drafter, and
crossspec), in alternating order over ``--rounds`` rounds, and pairs their confirmed latencies
window by window, over all windows and at the scene changes.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossspec_ros import summaries
from crossspec_ros.cli.arg_types import (
    namespace_name,
    one_line_errors,
    port_number,
    positive_seconds,
    replay_rate,
    whole_number,
)
from crossspec_ros.cli.model_args import add_model_arguments, model_overrides
from crossspec_ros.comparison import (
    COMPARED,
    CROSSSPEC,
    ComparedGraph,
    compare_graphs,
    compare_line,
    graphs_named,
    pass_order,
    print_comparison,
)
from crossspec_ros.paths import sample_bag
from crossspec_ros.run_record import (
    DRAFT_STATE_WORDS,
    FINISHED,
    REASON_WORDS,
    SAMPLED_NOT_CHECKED,
    LosslessTally,
    checkable,
    lossless_verdict,
    status_name,
)
from crossspec_ros.stamps import join_ns, ns_to_seconds
from crossspec_ros.streaming import (
    JsonLinesFile,
    exit_code_for,
    signals_deferred,
    sigterm_as_interrupt,
)
from crossspec_ros.summaries import BoundedSample, shown
from crossspec_ros.summaries import against_close as _where
from crossspec_ros.sync.agreement import draft_agreement

# crossspec/Caption's REASON_* and DRAFT_* codes, as the terminal and the JSON name them
# --loop: what the monitor keeps of windows it has written out, so a run of any length holds
# bounded memory: unfinished rows at most (the oldest beyond goes out as it stands; a pass of
# the sample bag has 24 windows), and the keys of finished ones, so that a late caption of one
# opens no row again
OPEN_ROWS_KEPT = 256
# the draft node's decisions (DraftSchedule's reasons), as the summary line says them
DRAFT_DECISION_WORDS = {"early": "drafted before the close", "at_close": "at the close",
                        "drafted_early": "not drafted again at the close",
                        "verifier_finished": "not drafted (the verifier had finished them)",
                        "stepped_aside": "stepped aside (the verifier finished them meanwhile)",
                        "verifier_behind": "rested (the verifier fell behind while it drafted)"}
DONE_KEYS_KEPT = 4096


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = one_line_errors(subparsers.add_parser(
        "drive", help="run the ROS graph on a bag in one process, live (no ros2 launch needed)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("--bag", type=Path, default=sample_bag(),
                        help="bag to replay, ROS 2 or ROS 1 (default: the bundled sample bag); "
                        "EventArray topics replay as evt3 EventPackets")
    parser.add_argument("--config", type=Path, default=None,
                        help="ROS parameter YAML (default: config/drive.yaml)")
    parser.add_argument("--rate", type=replay_rate, default=1.0,
                        help="replay rate (1 = recorded speed; 0 or inf: as fast as possible)")
    parser.add_argument("--max-windows", type=whole_number(0, "0: the whole bag"), default=0,
                        help="stop after N finished windows (0: the whole bag)")
    parser.add_argument("--duration", type=positive_seconds, default=None, metavar="S",
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
    parser.add_argument("--foxglove-port", type=port_number, default=8765,
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
                        help="afterwards, run the verifier alone on each window and compare "
                        "(under --loop: each window as it finishes, keeping only the verdict)")
    parser.add_argument("--no-viz", action="store_true", help="do not run the viz node")
    parser.add_argument("--compare", action="store_true",
                        help="replay the bag through the compared graphs: alone (the verifier "
                        "node, prefill after the window closes, no speculation: what a user "
                        "without crossspec runs), live_alone (with live prefill and early "
                        "start), text_only (crossspec without its drafter) and crossspec; "
                        "print the confirmed latency per window and the graphs paired window "
                        "by window, at the scene changes too")
    parser.add_argument("--graphs", type=_graph_names, default=COMPARED, metavar="G,G,...",
                        help="with --compare: the graphs to compare, of "
                        f"{', '.join(g.name for g in COMPARED)} (default: all; "
                        "crossspec/comparison.py says what each is)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="with --compare: replay the three graphs this many times, in "
                        "alternating order, and report the spread of the rounds' ratios "
                        "(default 2)")
    parser.add_argument("--namespace", type=namespace_name, default=None, metavar="NS",
                        help="the ROS namespace of the run's whole graph: its nodes, topics, "
                        "/clock and /diagnostics (default: one of its own, "
                        "crossspec_drive_<pid>_<hex>, so that two runs on one ROS domain "
                        "never hear each other; `ros2 topic list` shows it)")
    add_model_arguments(parser)
    parser.set_defaults(func=run)


def _graph_names(text: str) -> tuple[ComparedGraph, ...]:
    try:
        graphs = graphs_named(name.strip() for name in text.split(",") if name.strip())
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None
    if not graphs:
        raise argparse.ArgumentTypeError("name at least one graph")
    return graphs


@dataclass(frozen=True)
class DroppedWindows:
    """Windows a busy node let go, per node (they mean different things, so they are never
    added): the verifier's were published UNVERIFIED ("verifier busy"), the drafter's were
    never drafted (their captions come without a draft)."""

    verifier: int = 0
    drafter: int = 0
    # drafts that reached the verifier after their window's caption was finished (its caption
    # book's late_drafts): drafting nobody would read
    late_drafts: int = 0


class DriveMonitor:
    """Collects the graph's outputs per window and prints the live view.

    A window's row is made from its captions (the watcher's subscription, on the executor's
    thread) and the engine's result (on the verifier's worker thread), which come in either
    order; the row goes to ``on_row`` once, when it is complete. What stays after that:

    - ``keep_rows`` (a pass that ends; the summary, --compare and the lossless check read the
      rows afterwards): every row stays in ``rows``; with ``hold_windows`` each verified
      window and its tokens wait in ``awaiting_check`` until ``_check_lossless`` takes them.
    - otherwise (--loop): a finished row is counted in ``tally`` and let go; at most
      OPEN_ROWS_KEPT unfinished rows stay (the oldest beyond goes out as it stands). ``check``
      compares each window with the verifier alone as its result comes (on the verifier's
      thread, before it takes its next window) and only the verdict stays, in the row.

    No window (frames, events) is kept otherwise: they were 2.2 MB a window of a --loop run.
    """

    def __init__(self, out: Any = sys.stdout, on_row: Callable[[dict], None] | None = None,
                 label: str = "", *, keep_rows: bool = True, hold_windows: bool = False,
                 check: Callable[[Any, list[int], str], dict[str, Any]] | None = None
                 ) -> None:
        self.on_row = on_row
        self.prefix = f"[{label}] " if label else ""  # which graph (drive --compare)
        self.keep_rows, self.hold_windows, self.check = keep_rows, hold_windows, check
        # keyed by (epoch, window id): ids repeat after a bag loop (--loop), epochs do not
        self.rows: dict[tuple[int, int], dict[str, Any]] = {}
        self.done_keys: OrderedDict[tuple[int, int], None] = OrderedDict()  # written out
        self.results_in: set[tuple[int, int]] = set()  # open rows whose engine result came
        self.awaiting_check: dict[tuple[int, int], tuple[Any, list[int]]] = {}
        self.drafts_shown: set[tuple[int, int]] = set()
        self.tally = DriveTally()  # the rows let go (not keep_rows)
        self.finished_windows = 0  # FINAL or UNVERIFIED captions seen (--max-windows)
        # the verifier's text -> ids, for the drafts' token agreement (set once it is loaded)
        self.tokenize: Callable[[str], Any] | None = None
        self.lock = threading.Lock()
        self.last_activity = time.monotonic()
        self.out = out

    def finished(self) -> int:
        with self.lock:
            return self.finished_windows

    def on_caption(self, msg: Any) -> None:
        status = status_name(msg.status)
        key = (int(msg.epoch), int(msg.window_id))
        wid = window_label(*key)
        lines: list[str] = []
        outgoing: list[dict] = []
        with self.lock:
            self.last_activity = time.monotonic()
            if key in self.done_keys and key not in self.rows:
                return  # written out and let go (--loop): a late caption opens no row
            row = self._row(key, lambda: {
                "window": key[1], "epoch": key[0], "t0": _sec(msg.window_start),
                "t1": _sec(msg.window_end),
                "draft_text": "", "draft_first_token_ms": None, "confirmed_text": "",
                # the status it had before this caption: a FINAL may be the first one seen
                # (a caption confirmed whole at once, no draft before it)
                "confirmed_done_ms": None, "accepted": 0, "proposed": 0, "status": "DRAFT"},
                outgoing)
            if row["t0"] == 0.0:
                row["t0"], row["t1"] = _sec(msg.window_start), _sec(msg.window_end)
            row["draft_text"] = msg.draft_text or row["draft_text"]
            row["draft_first_token_ms"] = _num(msg.draft_first_token_ms)
            if "complete_draft" not in row and not math.isnan(msg.draft_done_ms):
                row["complete_draft"] = msg.draft_text  # as first complete: read first
                # the verifier publishes in order: complete before its FINAL, or with it
                row["draft_before_confirmed"] = status != "FINAL"
                # as the caption says it (an estimate for a draft before the close: the
                # pass's end replaces it with draft_complete_ms, against the real close)
                row["draft_done_ms"] = _num(msg.draft_done_ms)
            finished = status in FINISHED
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
                reason = REASON_WORDS.get(msg.unverified_reason, str(msg.unverified_reason))
                draft = DRAFT_STATE_WORDS.get(msg.draft_state, str(msg.draft_state))
                row.update(unverified_reason=reason, draft_state=draft)
                shown_draft = {"none": "(no draft: the drafter never drafted it)",
                               "cut short": f"{msg.draft_text} [draft cut short]"}.get(
                                   draft, msg.draft_text)
                lines.append(f"[{wid}] UNVERIFIED ({reason})  {shown_draft}")
            if row["status"] not in FINISHED:
                self.finished_windows += finished
                row["status"] = status
            outgoing += self._row_done(key)
        for line in lines:
            self._print(line)
        self._hand_out(outgoing)

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

    def _row(self, key: tuple[int, int], fresh: Callable[[], dict], outgoing: list[dict]
             ) -> dict:
        """The row of ``key``, opened with ``fresh()`` when it has none; without keep_rows,
        the oldest open row beyond OPEN_ROWS_KEPT goes to ``outgoing`` as it stands. Under
        the lock."""
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = fresh()
            while not self.keep_rows and len(self.rows) > OPEN_ROWS_KEPT:
                outgoing.append(self._write_out(next(iter(self.rows))))
        return row

    def _row_done(self, key: tuple[int, int]) -> list[dict]:
        """[the row], once and only once, when it is complete: UNVERIFIED, or FINAL with the
        engine's result too (they arrive on different threads, in either order). Under the
        lock."""
        row = self.rows[key]
        complete = row["status"] == "UNVERIFIED" or (row["status"] == "FINAL"
                                                    and key in self.results_in)
        if not complete or key in self.done_keys:
            return []
        return [self._write_out(key)]

    def _write_out(self, key: tuple[int, int]) -> dict:
        """A copy of the row of ``key`` for ``on_row``; without keep_rows, the row is counted
        in ``tally`` and let go. Under the lock."""
        self.done_keys[key] = None
        self.results_in.discard(key)
        if self.keep_rows:
            return dict(self.rows[key])
        row = self.rows.pop(key)
        self.tally.add(row)
        self.drafts_shown.discard(key)
        while len(self.done_keys) > DONE_KEYS_KEPT:
            self.done_keys.popitem(last=False)
        return dict(row)

    def _hand_out(self, rows: list[dict]) -> None:
        if self.on_row is not None:
            for row in rows:
                self.on_row(row)

    def on_result(self, window: Any, result: Any) -> None:
        key = window.key
        s = result.stats
        # the verifier alone, on this (the verifier's) thread, outside the lock: it takes a
        # while, and the captions keep coming meanwhile
        verdict = None if self.check is None else \
            self.check(window, list(result.tokens), s.acceptance_rule or "")
        lines: list[str] = []
        outgoing: list[dict] = []
        with self.lock:
            if key in self.done_keys and key not in self.rows:
                return
            if self.hold_windows:
                self.awaiting_check[key] = (window, list(result.tokens))
            # status FINAL comes with the caption (printed then), which may come after this
            row = self._row(key, lambda: {"window": window.id, "epoch": window.epoch,
                                          "t0": ns_to_seconds(window.t0),
                                          "t1": ns_to_seconds(window.t1), "status": "PARTIAL",
                                          "draft_text": result.draft_text,
                                          "draft_first_token_ms": None}, outgoing)
            row.update(confirmed_text=result.text, confirmed_done_ms=_num(s.confirmed_done_ms),
                       accepted=s.total_accepted, proposed=s.total_proposed, rounds=s.rounds,
                       verifier_prefill_ms=_num(s.verifier_prefill_ms),
                       confirmed_first_ms=_num(s.confirmed_first_ms),
                       final_draft_text=result.draft_text,
                       live_prefill_frames=s.live_prefill_frames,
                       ready_before_close_ms=_num(s.ready_before_close_ms),
                       # whose tokens the verifier took: the drafter's against the text's
                       accepted_by={n: k for n, k in getattr(s, "accepted", {}).items() if k},
                       proposed_by={n: k for n, k in getattr(s, "proposed", {}).items() if k})
            if verdict is not None:
                row.update(verdict)
                if verdict.get("lossless") is False:
                    lines.append(f"[{window_label(*key)}] NOT LOSSLESS: verifier alone says "
                                 f"{verdict['verifier_only_text']}")
            self.results_in.add(key)
            self.last_activity = time.monotonic()
            outgoing += self._row_done(key)
        for line in lines:
            self._print(line)
        self._hand_out(outgoing)

    def write_out_open_rows(self) -> None:
        """At the end of a --loop run: the rows still open go to ``on_row`` as they stand."""
        with self.lock:
            outgoing = [self._write_out(key) for key in list(self.rows)
                        if key not in self.done_keys]
        self._hand_out(outgoing)

    def summary(self, dropped: DroppedWindows | None = None) -> dict[str, Any]:
        """The pass's summary: of every row (keep_rows), else of those let go and the open
        ones."""
        with self.lock:
            if self.keep_rows:
                return summarize([self.rows[k] for k in sorted(self.rows)], dropped)
            tally = copy.deepcopy(self.tally)
            for key, row in self.rows.items():
                if key not in self.done_keys:
                    tally.add(row)
        return tally.summary(dropped)

    def _print(self, line: str) -> None:
        print(self.prefix + line, file=self.out, flush=True)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # loopback unless set
    from crossspec_ros.process_tuning import tune_process_for_models

    if not _options_agree(args):
        return 2
    inputs = _check_inputs(args)
    if inputs is None or not _loop_outlasts_reset(args):
        return 2
    if args.namespace is None:
        from crossspec_ros.nodes.isolation import private_namespace

        args.namespace = private_namespace("drive")
    _describe_run(args, inputs)
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


def _options_agree(args: argparse.Namespace) -> bool:
    """Whether the options go together (and --record may write where it is told); where not,
    says why in one line."""
    if args.no_viz and (args.record or args.foxglove):
        print("crossspec drive: --record and --foxglove come from the viz node: drop --no-viz",
              file=sys.stderr)
        return False
    if args.rounds < 1:
        print("crossspec drive: --rounds must be >= 1", file=sys.stderr)
        return False
    if args.loop and args.compare:
        print("crossspec drive: --loop replays until stopped, and --compare needs passes that "
              "end: drop one of them", file=sys.stderr)
        return False
    return _may_record(args)


def _may_record(args: argparse.Namespace) -> bool:
    """Whether --record's OUT may be written: never the bag replayed, nor a recording not
    asked to be replaced; where not, says why in one line."""
    if args.record and (args.record.exists() or args.record.is_symlink()):
        if args.record.resolve() == args.bag.resolve() or \
                args.record.resolve() in args.bag.resolve().parents:
            print(f"crossspec drive: {args.record} holds the bag being replayed; refusing to "
                  "record over it: choose another OUT", file=sys.stderr)
            return False
        if not args.overwrite:  # as convert-dsec: a recording is never replaced unasked
            print(f"crossspec drive: {args.record} exists; pass --overwrite to replace it, "
                  "or choose another OUT", file=sys.stderr)
            return False
    return True


def _check_inputs(args: argparse.Namespace) -> Any | None:
    """The bag's inputs, once the bag and the parameter file are checked (``args`` gets the
    nodes' model and input topic parameters); None, said in one line, where one is bad."""
    from crossspec_ros.bags.inputs import check_bag
    from crossspec_ros.events.errors import EventSourceError
    from crossspec_ros.nodes.graph import default_config, input_topic_parameters, node_parameters
    from crossspec_ros.params import ParameterError, check_param_file

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
        return None
    return inputs


def _loop_outlasts_reset(args: argparse.Namespace) -> bool:
    """Whether each --loop pass (--duration) is long enough for the nodes to see the jump
    back as a new pass; where not, says why in one line."""
    if args.loop and args.duration is not None:
        from crossspec_ros.nodes.graph import default_config
        from crossspec_ros.params import load_yaml_params

        # a loop must jump back further than this for the nodes to see a new pass
        threshold = load_yaml_params(args.config or default_config(),
                                     "crossspec_verifier").get("reset_threshold_s", 2.0)
        if args.duration <= threshold:
            print(f"crossspec drive: with --loop, --duration must be longer than the nodes' "
                  f"reset_threshold_s ({threshold} s): a shorter jump back in bag time reads "
                  f"as late data, not as a new pass", file=sys.stderr)
            return False
    return True


def _describe_run(args: argparse.Namespace, inputs: Any) -> None:
    """Say (on stderr) what the nodes get that is not plain: the bag's input topics (where
    they are found by type, or converted) and an emulated target."""
    from crossspec_ros.events.event_array import EVENT_ARRAY_TYPES

    if args.topic_params or inputs.events_type in EVENT_ARRAY_TYPES:
        print(f"crossspec drive: inputs {_describe_inputs(inputs)}", file=sys.stderr)
    if args.model_params.get("emulate"):
        from crossspec_ros.models.emulated import CostProfile

        print(f"crossspec drive: EMULATED target, not this machine's costs: "
              f"{CostProfile.load(args.model_params['emulate']).describe()}", file=sys.stderr)


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
    """The passes (one, or --compare's rounds of three), their summary and JSON. However the
    run ends (its passes done, a stop signal at any moment, a node that died), the JSON holds
    the rows so far and a summary that says how it ended."""
    order = pass_order(args.rounds, args.graphs) if args.compare else [(0, CROSSSPEC)]
    results: dict[tuple[str, int], list[dict]] = {}
    models: dict[str, Any] = {}
    stream = JsonLinesFile(args.json) if args.json else None
    last: PassResult | None = None
    foreign: dict[str, list[str]] = {}  # every pass's (ForeignPublishers.seen)
    with sigterm_as_interrupt(ends_process=True) as caught:  # a repeated Ctrl-C too
        try:
            for number, (round_index, graph) in enumerate(order, 1):
                if args.compare:
                    print(f"crossspec drive: pass {number}/{len(order)} (round "
                          f"{round_index + 1}): {graph.name}: {graph.about}", file=sys.stderr)
                tag = {"pass": graph.name, "round": round_index} if args.compare else {}
                on_row = None if stream is None else (
                    lambda row, tag=tag: stream.add({**row, **tag}))
                outcome = _drive_once(args, graph, models, on_row,
                                      label=graph.name if args.compare else "", caught=caught)
                if isinstance(outcome, int):
                    return outcome
                results[(graph.name, round_index)] = outcome.rows
                foreign.update(outcome.foreign)
                if outcome.interrupted or outcome.died:  # what finished is kept
                    with signals_deferred(caught):
                        return _end_run(args, stream, results, outcome, tag, caught, foreign)
                if graph is CROSSSPEC:
                    last = outcome
            if args.check_lossless and not getattr(args, "loop", False):
                _check_lossless(last.engine, last.monitor, last.rows)
        except KeyboardInterrupt:  # between passes or in the lossless check after them
            print("interrupted: writing the windows so far", file=sys.stderr)
            if last is None:  # no crossspec pass finished: a summary of none
                last = PassResult([], None, None, DroppedWindows(), interrupted=True)
            last.interrupted = True
        # the crossspec pass of the last round carries the lossless check and the summary
        with signals_deferred(caught):
            return _end_run(args, stream, results, last, {}, caught, foreign)


def _end_run(args: argparse.Namespace, stream: JsonLinesFile | None,
             results: dict[tuple[str, int], list[dict]], outcome: PassResult,
             tag: dict[str, Any], caught: dict[str, int],
             foreign: dict[str, list[str]] | None = None) -> int:
    """The run's summary (of ``outcome``, the pass it ended on), printed and written after
    the rows; the exit code: 128 + the stop signal, 1 when a node died, another graph
    published on the run's topics (``foreign``: topic -> its publishers) or a window was not
    lossless, else 0."""
    if outcome.monitor is not None and not outcome.monitor.keep_rows:  # --loop
        outcome.monitor.write_out_open_rows()
        summary = outcome.monitor.summary(outcome.dropped)
    else:
        summary = summarize(outcome.rows, outcome.dropped)
    ended = {"interrupted": True} if outcome.interrupted else {}
    if outcome.died:
        ended["node_died"] = outcome.died
    if outcome.drafter:  # when the drafter computed, and why not where it did not
        summary["drafter"] = outcome.drafter
        summary["line"] += "; drafter: " + ", ".join(
            f"{n} {DRAFT_DECISION_WORDS.get(reason, reason)}"
            for reason, n in outcome.drafter.items() if reason != "lead_ms") + \
            f" (lead {outcome.drafter['lead_ms']} ms)"
    if foreign:  # the rows may hold another graph's captions: said, and not a pass
        summary["foreign_publishers"] = foreign
        summary["line"] += (f"; ANOTHER GRAPH published on {len(foreign)} of this run's "
                            f"topics ({', '.join(sorted(foreign))}): captions may be mixed")
    extra: dict[str, Any] = {}
    if args.compare and not ended:
        extra["compare"] = compare_graphs(results, range(args.rounds), args.graphs)
        print_comparison(results, extra["compare"])
    from crossspec_ros.models.emulated import emulation_of

    device = emulation_of(outcome.engine.verifier) if outcome.engine is not None else None
    if device is not None:  # never a measurement of this machine: the summary and JSON say so
        summary["emulation"] = device.report()
        summary["line"] = (f"[EMULATED {device.profile.label}] {summary['line']}; "
                           f"{device.verdict()}")
    print(summary["line"])
    if extra:
        print(compare_line(extra["compare"]))
    if outcome.died:
        print(f"crossspec drive: the graph stopped: {'; '.join(outcome.died)} (the windows "
              "before it are kept)", file=sys.stderr)
    if stream is not None:
        last = {"summary": {**summary, **ended, **tag}, **extra}
        if outcome.monitor is not None and not outcome.monitor.keep_rows:
            stream.finish_after_rows([last])  # --loop: the rows went out as they finished
        else:
            stream.finish([*({**r, "pass": name, "round": k} if args.compare else r
                             for (name, k), rows in results.items() for r in rows), last])
    if outcome.interrupted or caught["signal"]:  # a signal while this was written: said too
        return exit_code_for(caught)
    if outcome.died or foreign:
        return 1
    return 0 if summary.get("lossless") == summary.get("lossless_checked") else 1


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
    """What one replay left: its rows (window order; none under --loop, which wrote them out
    as they finished), its monitor (the windows awaiting the lossless check, --loop's
    tally), the verifier node's engine, windows dropped by busy nodes, whether a stop signal
    ended it, and what of the graph died (one line each)."""

    rows: list[dict]
    monitor: DriveMonitor | None
    engine: Any
    dropped: DroppedWindows
    interrupted: bool
    died: list[str] = field(default_factory=list)
    # topics another graph published on too (topic -> every publishing node): the rows may
    # hold its captions, so the run does not pass
    foreign: dict[str, list[str]] = field(default_factory=dict)
    # the draft node's decisions: windows per reason (DraftSchedule) and its lead, {} without
    drafter: dict[str, Any] = field(default_factory=dict)


SAMPLING_NOT_CHECKED = f"crossspec drive: --check-lossless: {SAMPLED_NOT_CHECKED}"


@dataclass
class _RunningGraph:
    """A pass's graph as far as it came up: what its shutdown (in ``finally``) takes down, so
    that a graph which failed halfway is taken down too."""

    executor: Any
    nodes: list = field(default_factory=list)
    verifier_node: Any = None
    stop_spinning: Callable[[], None] | None = None
    foreign: dict[str, list[str]] = field(default_factory=dict)  # ForeignPublishers.seen


def _drive_once(args: argparse.Namespace, graph: ComparedGraph, models: dict[str, Any],
                on_row: Callable[[dict], None] | None = None, label: str = "",
                caught: dict[str, int] | None = None) -> int | PassResult:
    """One replay of the bag through ``graph``, or an exit code when the graph could not
    start. ``models``: "verifier" and "drafter" once loaded (updated here; later passes reuse
    them). ``on_row``: called with each window's row once it is finished; ``label`` prefixes
    the live view's lines; ``caught``: the run's stop signal (``sigterm_as_interrupt``), held
    off while the graph shuts down."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.nodes.graph import default_config, make_executor
    from crossspec_ros.nodes.isolation import run_ros_args
    from crossspec_ros.params import ParameterError

    config = args.config or default_config()
    loop = getattr(args, "loop", False)
    # the viz node is crossspec's: it runs beside crossspec's graph only, never slowing a
    # baseline (and --record / --foxglove show the crossspec pass)
    kinds = graph.kinds + (() if args.no_viz or graph is not CROSSSPEC else ("viz",))
    # a pass that ends keeps its rows (and, to check them after it, its verified windows);
    # --loop writes each row out as it finishes and keeps none
    monitor = DriveMonitor(on_row=on_row, label=label, keep_rows=not loop,
                           hold_windows=args.check_lossless and not loop and
                           graph is CROSSSPEC)
    # Ctrl-C stays Python's KeyboardInterrupt: drive shuts the graph down itself, in order
    # the run's graph in its own namespace: another graph on this domain cannot mix in
    rclpy.init(args=run_ros_args(args.namespace), signal_handler_options=SignalHandlerOptions.NO)
    running = _RunningGraph(executor=make_executor())
    interrupted = False
    deaths = NodeDeaths()
    with deaths:
        try:
            _run_graph(args, graph, models, running, kinds, config, monitor, deaths)
        except (ParameterError, ModelLoadError) as err:
            print(f"crossspec drive: {err}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            interrupted = True
            print("interrupted: shutting down", file=sys.stderr)
        finally:
            # a stop signal now waits for the shutdown's end: nodes destroyed, the recording
            # finished (one that came 0.2 s after "recorded N messages" lost the JSON)
            with signals_deferred(caught) if caught is not None else nullcontext():
                died = deaths.found()  # before the shutdown ends threads and processes
                engine = _shut_down(running)
    interrupted = interrupted or bool(caught is not None and caught["signal"])
    rows = [monitor.rows[w] for w in sorted(monitor.rows)] if monitor.keep_rows else []
    _add_draft_timings(rows, running.nodes)
    return PassResult(rows, monitor, engine, _dropped_windows(running.nodes), interrupted,
                      died, dict(running.foreign), _draft_decisions(running.nodes))


def _node_extra(args: argparse.Namespace, graph: ComparedGraph) -> dict[str, dict[str, Any]]:
    """Each node's parameters over the config's: the models and input topics asked for, the
    graph's own verifier parameters, and sim time."""
    # the run's Foxglove server, if any, is given to the viz node: it outlives the pass
    # the recording and Foxglove name the graph's topics as in the root namespace: the
    # run's own namespace only keeps it apart from other graphs
    viz = {"foxglove": False, "record_bag": str(args.record or ""), "outputs_in_root": True}
    models_given = getattr(args, "model_params", {})
    topics = getattr(args, "topic_params", {})
    sim_time = {"use_sim_time": True}  # the bag's /clock, as drive.launch.py sets it
    return {"viz": {**viz, **topics.get("viz", {}), **sim_time},
            "draft": {**models_given, **topics.get("draft", {}), **sim_time},
            "verifier": {**models_given, **graph.verifier_params,
                         **topics.get("verifier", {}), **sim_time}}


def _run_graph(args: argparse.Namespace, graph: ComparedGraph, models: dict[str, Any],
               running: _RunningGraph, kinds: tuple[str, ...], config: Any,
               monitor: DriveMonitor, deaths: NodeDeaths) -> None:
    """Bring ``graph`` up into ``running`` (which holds each part as it comes up), replay the
    bag through it and wait until its windows are finished."""
    import rclpy

    from crossspec_ros.nodes.draft_node import DraftNode
    from crossspec_ros.nodes.graph import create_nodes, spin_in_thread
    from crossspec_ros.nodes.isolation import guard_for
    from crossspec_ros.nodes.player import BagPlayer
    from crossspec_ros.nodes.verifier_node import VerifierNode
    from crossspec_ros.sync.agreement import text_to_ids

    loop = getattr(args, "loop", False)
    running.nodes = create_nodes(kinds, config=config, extra=_node_extra(args, graph),
                                 models=(models.get("verifier"), models.get("drafter")),
                                 on_result=monitor.on_result,
                                 foxglove=getattr(args, "foxglove_output", None))
    verifier_node = next(n for n in running.nodes if isinstance(n, VerifierNode))
    running.verifier_node = verifier_node
    models["verifier"] = verifier_node.engine.verifier
    monitor.tokenize = text_to_ids(models["verifier"].tokenizer)
    if loop and args.check_lossless and graph is CROSSSPEC:
        monitor.check = _check_as_they_finish(verifier_node.engine)
    for node in running.nodes:
        if isinstance(node, DraftNode):
            models["drafter"] = node.drafter
            if node.process is not None:
                deaths.watch_process("the draft node's drafter process",
                                     lambda process=node.process: process.alive)
    watcher = rclpy.create_node("crossspec_drive_monitor")
    watch_captions(watcher, verifier_node.params["caption_topic"], monitor.on_caption)
    player = BagPlayer(args.bag, rate=args.rate, loop=loop,
                       max_duration_s=getattr(args, "duration", None))
    running.nodes += [watcher, player]
    for node in running.nodes:
        running.executor.add_node(node)
    running.stop_spinning = spin_in_thread(running.executor)
    print(f"crossspec drive: {args.bag} at rate {args.rate}, config {config}, graph "
          f"{' + '.join(n.get_name() for n in running.nodes[:len(kinds)])} in namespace "
          f"/{args.namespace} (ROS_DOMAIN_ID {os.environ.get('ROS_DOMAIN_ID', '0')})",
          file=sys.stderr)
    guard, poll = guard_for(running.nodes, inputs_too=True)
    running.foreign = guard.seen
    _wait(player, verifier_node, monitor, args.max_windows, deaths, _said(poll))


def _shut_down(running: _RunningGraph) -> Any:
    """Take down what of the graph came up, in order; return the verifier node's engine (or
    None where there was none)."""
    import rclpy

    if running.stop_spinning is not None:
        running.stop_spinning()
    running.executor.shutdown(timeout_sec=2.0)
    # kept past the nodes: the lossless check and the next pass use the models
    engine = running.verifier_node.engine if running.verifier_node is not None else None
    for node in running.nodes:
        node.destroy_node()  # the viz node closes its recording here
    if rclpy.ok():
        rclpy.shutdown()
    return engine


def _add_draft_timings(rows: list[dict], nodes: list) -> None:
    """Each row's draft as the draft node timed it against the window's real close (its
    messages before the close carry an estimate from the event stream's clock): when it
    began and was complete (ms after the close; < 0: before it), whether it began before the
    close, and the window's events it did not read."""
    from crossspec_ros.nodes.draft_node import DraftNode

    timings = {t.key: t for node in nodes if isinstance(node, DraftNode)
               for t in node.loop.timings}
    for row in rows:
        timing = timings.get((row.get("epoch", 0), row["window"]))
        if timing is None or not row.get("draft_text"):
            continue
        row.update(draft_started_ms=_num(timing.ms(timing.started_at)),
                   draft_complete_ms=_num(timing.complete_ms), draft_early=timing.early,
                   events_not_drafted=timing.events_unread)


def _draft_decisions(nodes: list) -> dict[str, Any]:
    """What the draft node decided for the pass's windows (speculative/draft_schedule.py):
    windows per reason, and the lead it ended with."""
    from crossspec_ros.nodes.draft_node import DraftNode
    from crossspec_ros.speculative.draft_schedule import REASONS

    for node in nodes:
        if isinstance(node, DraftNode):
            schedule = node.loop.schedule
            return {"lead_ms": round(schedule.lead_wall_ms(), 1),
                    **{reason: schedule.counts[reason] for reason in REASONS
                       if schedule.counts[reason]}}
    return {}


def _dropped_windows(nodes: list) -> DroppedWindows:
    """The windows the pass's busy nodes let go."""
    from crossspec_ros.nodes.draft_node import DraftNode
    from crossspec_ros.nodes.verifier_node import VerifierNode

    return DroppedWindows(
        verifier=sum(_dropped(n) for n in nodes if isinstance(n, VerifierNode)),
        drafter=sum(_dropped(n) for n in nodes if isinstance(n, DraftNode)),
        late_drafts=sum(n.loop.book.counters["late_drafts"] for n in nodes
                        if isinstance(n, VerifierNode)))


def _dropped(node: Any) -> int:
    """Windows ``node``'s queue let go because it was full."""
    return getattr(getattr(node, "queue", None), "dropped", 0)


class NodeDeaths:
    """What of the graph died while it ran, one line each: a thread that ended on an
    exception (the executor's spin thread, when a callback raised; a node's worker) and a
    child process that is gone (a drafter process, ``watch_process``). Within the ``with``
    block ``threading.excepthook`` notes such threads, and still prints their traceback
    unless ``quiet``."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self._lock = threading.Lock()
        self._threads: list[str] = []
        self._processes: list[tuple[str, Callable[[], bool]]] = []
        self._previous_hook: Callable[[Any], Any] | None = None

    def __enter__(self) -> NodeDeaths:
        self._previous_hook = threading.excepthook
        threading.excepthook = self._note
        return self

    def __exit__(self, *_exc: object) -> None:
        threading.excepthook = self._previous_hook

    def _note(self, args: Any) -> None:
        name = args.thread.name if args.thread is not None else "?"
        with self._lock:
            self._threads.append(f"thread {name} ended on {args.exc_type.__name__}: "
                                 f"{args.exc_value}")
        if not self.quiet and self._previous_hook is not None:
            self._previous_hook(args)

    def watch_process(self, name: str, alive: Callable[[], bool]) -> None:
        """Report ``name`` as gone once ``alive()`` says False."""
        self._processes.append((name, alive))

    def found(self) -> list[str]:
        with self._lock:
            lines = list(self._threads)
        return lines + [f"{name} is gone" for name, alive in self._processes if not alive()]


def watch_captions(node: Any, topic: str, on_caption: Callable[[Any], None]) -> Any:
    """The drive's own subscription to the captions, with the QoS the graph's readers have
    (reliable, OUTAGE_DEPTH deep): a burst that comes while the executor is busy elsewhere is
    taken whole. (100 deep, the oldest captions of a burst were overwritten before the
    executor took them: at --rate 8 the live view and the JSON missed windows the recording
    had.)"""
    from crossspec import msg as cs_msg

    from crossspec_ros.nodes.common import reliable_qos

    return node.create_subscription(cs_msg.Caption, topic, on_caption, reliable_qos())


GRAPH_CHECK_S = 1.0  # how often the wait looks at the ROS graph for another graph's publishers


def _said(poll: Callable[[], list[str]]) -> Callable[[], bool]:
    """``poll`` with its lines said on stderr; True once it has said any."""
    said = False

    def check() -> bool:
        nonlocal said
        for line in poll():
            said = True
            print(f"crossspec drive: {line}", file=sys.stderr)
        return said
    return check


def _wait(player: Any, verifier: Any, monitor: DriveMonitor, max_windows: int,
          deaths: NodeDeaths | None = None, check_graph: Callable[[], bool] | None = None
          ) -> None:
    """Until the bag is replayed and every window is finished (or ``max_windows``, or a part
    of the graph died: nothing more would come). ``check_graph``, every GRAPH_CHECK_S: whether
    another graph publishes on the run's topics; its captions then never let the run settle,
    so only the verifier's own work counts."""
    settle = verifier.params["max_lateness_s"] + verifier.params["window_length_s"] + 2.5
    checked, mixed, idle_since = -math.inf, False, math.inf
    while True:
        time.sleep(0.1)
        now = time.monotonic()
        if check_graph is not None and now - checked >= GRAPH_CHECK_S:
            checked, mixed = now, check_graph()
        if deaths is not None and deaths.found():
            return
        if max_windows and monitor.finished() >= max_windows:
            player.stop()
            return
        if player.done.is_set():
            busy = len(verifier.queue) or any(
                w.verifying for w in list(verifier.book.windows.values()))
            idle_since = math.inf if busy else min(idle_since, now)
            last = idle_since if mixed else max(idle_since, monitor.last_activity)
            if not busy and now - last > settle:
                return


def _check_as_they_finish(engine: Any) -> Callable[[Any, list[int], str], dict[str, Any]] | None:
    """--loop's lossless check, window by window as each finishes (nothing is kept for
    later); None, said once, where the decoding is not greedy."""
    if not checkable(engine):
        print(SAMPLING_NOT_CHECKED, file=sys.stderr)
        return None

    def check(window: Any, tokens: list[int], rule: str) -> dict[str, Any]:
        try:
            return lossless_verdict(engine, window, tokens, rule)
        except Exception as err:  # the row still finishes, unchecked, saying why
            return {"lossless_check_failed": f"{type(err).__name__}: {err}"}
    return check


def _check_lossless(engine: Any, monitor: DriveMonitor, rows: list[dict]) -> None:
    """The verifier alone on each verified window, after the pass, in the same process (its
    runs never load the machine while the pass is measured); each window is let go once
    checked."""
    if engine is not None and not checkable(engine):
        print(SAMPLING_NOT_CHECKED, file=sys.stderr)
        monitor.awaiting_check.clear()
        return
    for row in rows:
        key = (row.get("epoch", 0), row["window"])
        held = monitor.awaiting_check.pop(key, None)
        if held is None or engine is None:
            continue
        window, tokens = held
        row.update(lossless_verdict(engine, window, tokens, row.get("acceptance_rule") or ""))
        if row.get("lossless") is False:
            print(f"[{window_label(*key)}] NOT LOSSLESS: verifier alone says "
                  f"{row['verifier_only_text']}")


class DriveTally:
    """A pass's summary numbers, taken row by row (``add``): counts and sums exact, medians
    and percentiles over ``BoundedSample``s, so a --loop run of any length summarizes in
    bounded memory. ``summary`` gives the JSON's numbers and the terminal's line.

    ``confirmed_done_ms``: the window closing (its synchronizer) to its last confirmed token;
    ``draft_first_token_ms``: the window closing (the draft node's synchronizer) to the first
    draft token; ``ready_before_close_ms`` (early start): how long before the close a caption
    was complete (negative: it started before the close and completed after it)."""

    def __init__(self) -> None:
        self.windows = self.final = self.unverified = self.unfinished = 0
        self.draft_came_first = 0  # FINAL windows whose draft's first token came before it
        self.drafted = 0  # windows with a draft caption
        self.draft_before_confirmed = 0  # FINAL windows whose draft was complete before it
        self.draft_complete = BoundedSample()  # ms after the drafter's close (< 0: before)
        self.accepted = self.proposed = 0
        self.draft_first = BoundedSample()
        self.confirmed_done = BoundedSample()
        self.early_started = 0
        self.ready_before = BoundedSample()   # ms before the close, complete before it
        self.done_after = BoundedSample()     # ms after the close, early-started ones
        self.scored = 0
        self.token_agreement = BoundedSample()
        self.word_error_rate = BoundedSample()
        self.lossless = LosslessTally()
        self.verifier_only_ms = BoundedSample()

    def add(self, row: dict[str, Any]) -> None:
        self.windows += 1
        status = row["status"]
        self.unverified += status == "UNVERIFIED"
        self.unfinished += status not in FINISHED
        self.draft_first.add(row.get("draft_first_token_ms"))
        if row.get("draft_text"):
            self.drafted += 1
            self.draft_complete.add(row.get("draft_complete_ms", row.get("draft_done_ms")))
        if status != "FINAL":
            return
        self.final += 1
        self.draft_before_confirmed += bool(row.get("draft_before_confirmed"))
        first, done = row.get("draft_first_token_ms"), row.get("confirmed_done_ms")
        self.draft_came_first += first is not None and done is not None and first < done
        self.accepted += row.get("accepted", 0)
        self.proposed += row.get("proposed", 0)
        self.confirmed_done.add(row.get("confirmed_done_ms"))
        ahead = row.get("ready_before_close_ms")
        if ahead is not None:
            self.early_started += 1
            if ahead > 0:
                self.ready_before.add(ahead)
            else:
                self.done_after.add(-ahead)
        if row.get("draft_word_error_rate") is not None:
            self.scored += 1
            self.word_error_rate.add(row["draft_word_error_rate"])
            self.token_agreement.add(row.get("draft_token_agreement"))
        self.lossless.add(row, (row.get("epoch", 0), row["window"]))
        if "lossless" in row:
            self.verifier_only_ms.add(row.get("verifier_only_ms"))

    def summary(self, dropped: DroppedWindows | None = None) -> dict[str, Any]:
        dropped = dropped or DroppedWindows()
        first = self.draft_first.values
        summary: dict[str, Any] = {
            "windows": self.windows, "final": self.final, "unverified": self.unverified,
            "unfinished": self.unfinished,
            "verifier_dropped_windows": dropped.verifier,
            "drafter_dropped_windows": dropped.drafter,
            "drafts_after_final": dropped.late_drafts,
            "draft_came_first": self.draft_came_first,
            "draft_windows": self.drafted,
            "draft_complete_ms_median": _median(self.draft_complete.values),
            "draft_complete_before_close": sum(ms <= 0 for ms in self.draft_complete.values),
            "draft_before_confirmed": self.draft_before_confirmed,
            "draft_first_token_ms_p50": _median(first), "draft_first_token_ms_p95":
                summaries.rounded(summaries.percentile(first, 95), 1),
            "confirmed_done_ms_median": _median(self.confirmed_done.values),
            "acceptance": round(self.accepted / self.proposed, 3) if self.proposed else None,
            "accepted": self.accepted, "proposed": self.proposed,
            # early start: captions started before their window closed; of them, those
            # complete before it, and how long before; the others, how long after
            "early_started": self.early_started,
            "ready_before_close": self.ready_before.count,
            "ready_before_close_ms_median": _median(self.ready_before.values),
            "early_started_done_after_close_ms_median": _median(self.done_after.values),
            "draft_agreement_windows": self.scored,
            "draft_token_agreement_median": summaries.rounded(
                summaries.median(self.token_agreement.values), 3),
            "draft_word_error_rate_median": summaries.rounded(
                summaries.median(self.word_error_rate.values), 3)}
        lossless = self.lossless.summary()
        if "lossy_windows" in lossless:  # relaxed acceptance: never counted as lossless
            summary.update((k, lossless[k]) for k in
                           ("lossy_windows", "lossy_same_as_verifier", "acceptance_rules"))
        if self.lossless.checked:
            summary["lossless"] = lossless["lossless"]
            summary["lossless_checked"] = lossless["lossless_checked"]
            # the reference run's own time, alone on the machine after the drive: not a
            # latency after the close, so it never stands beside confirmed_done_ms in the line
            summary["lossless_check_verifier_ms_median"] = _median(
                self.verifier_only_ms.values)
        samples = (self.draft_first, self.draft_complete, self.confirmed_done,
                   self.ready_before, self.done_after, self.token_agreement,
                   self.word_error_rate, self.verifier_only_ms)
        if any(sample.sampled for sample in samples):  # a very long --loop
            summary["medians_over_a_sample_of"] = self.draft_first.capacity
        summary["line"] = self._line(summary)
        return summary

    def _line(self, summary: dict[str, Any]) -> str:
        counts = f"{self.final} FINAL, {self.unverified} UNVERIFIED"
        if self.unfinished:
            counts += f", {self.unfinished} unfinished"
        verifier, drafter = (summary["verifier_dropped_windows"],
                             summary["drafter_dropped_windows"])
        if verifier or drafter:
            counts += f"; dropped by the busy verifier {verifier}, by the busy drafter {drafter}"
        if summary["drafts_after_final"]:
            counts += f"; {summary['drafts_after_final']} drafts came after their caption " \
                "was finished"
        line = (f"{self.windows} windows ({counts}): a draft caption in {self.drafted}, "
                f"complete {_where(summary['draft_complete_ms_median'])} the close (median; "
                f"before it in {summary['draft_complete_before_close']}), complete before the "
                f"confirmed caption in {self.draft_before_confirmed} of {self.final} FINAL "
                f"windows; draft first token after the close p50 "
                f"{_shown_ms(summary['draft_first_token_ms_p50'])}, p95 "
                f"{_shown_ms(summary['draft_first_token_ms_p95'])}, before the confirmed "
                f"caption in {self.draft_came_first}; confirmed "
                "after the close "
                f"median {_shown_ms(summary['confirmed_done_ms_median'])}; accepted draft "
                f"tokens {self.accepted} of {self.proposed} proposed "
                f"({_pct(summary['acceptance'] or math.nan)})")
        if self.ready_before.count:
            line += (f"; {self.ready_before.count} of {self.final} captions decoded before the "
                     f"close (early start), complete a median "
                     f"{_shown_ms(summary['ready_before_close_ms_median'])} before it")
        if self.done_after.count:
            line += (f"; {self.done_after.count} started early completed only after the close "
                     f"(a median "
                     f"{_shown_ms(summary['early_started_done_after_close_ms_median'])} "
                     f"after it)")
        if self.scored:
            line += (f"; complete drafts against their final captions ({self.scored} "
                     f"windows): token agreement median "
                     f"{shown(summary['draft_token_agreement_median'], '.3g')}, word error "
                     f"rate median {shown(summary['draft_word_error_rate_median'], '.3g')}")
        tally = self.lossless
        if tally.checked:
            line += f"; lossless {tally.lossless}/{tally.checked}"
        if tally.lossy:
            line += (f"; LOSSY ({', '.join(summary['acceptance_rules'])}): {tally.lossy} "
                     f"captions under a relaxed acceptance rule, {tally.lossy_same} of them "
                     f"the verifier's own")
        if "medians_over_a_sample_of" in summary:
            line += (f" (medians over a uniform sample of "
                     f"{summary['medians_over_a_sample_of']} windows)")
        return line


def summarize(rows: list[dict], dropped: DroppedWindows | None = None) -> dict[str, Any]:
    """One pass's summary from its rows (``DriveTally``)."""
    tally = DriveTally()
    for row in rows:
        tally.add(row)
    return tally.summary(dropped)


def _shown_ms(value: float | None) -> str:
    return shown(value, ".1f", " ms")


def _median(values: Any) -> float | None:
    """A latency median as the JSON and the terminal show it (0.1 ms; None when none)."""
    return summaries.rounded(summaries.median(values), 1)


def window_label(epoch: int, window_id: int) -> str:
    """How the terminal names a window: its id, and after a bag loop the pass it came in."""
    return str(window_id) if epoch == 0 else f"{window_id}@{epoch}"


def _sec(t: Any) -> float:
    return ns_to_seconds(join_ns(t.sec, t.nanosec))


_num = summaries.rounded  # NaN (a latency not measured) -> None in the JSON


def _ms(x: float) -> str:
    return "   --   " if x != x else f"{x:6.1f} ms"


def _pct(x: float) -> str:
    return "--" if x != x else f"{100 * x:.0f}%"
