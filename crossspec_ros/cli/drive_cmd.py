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

# (the docstring is the command's --help.) Here: the options, the passes and what the run
# prints and writes; a pass's ROS graph runs in nodes/drive_pass.py, and its rows and summary
# are the run record's (run_rows.py, run_summary.py).
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

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
from crossspec_ros.nodes.drive_pass import PassResult, run_pass, summarized_graph
from crossspec_ros.paths import sample_bag
from crossspec_ros.run_rows import check_held_windows
from crossspec_ros.run_summary import DroppedWindows, add_drafter_decisions, summarize
from crossspec_ros.streaming import (
    JsonLinesFile,
    exit_code_for,
    signals_deferred,
    sigterm_as_interrupt,
)


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
    from crossspec_ros.params import (
        ParameterError,
        check_against_vocabulary,
        check_param_file,
        load_yaml_params,
    )

    try:  # before any model loads: a bad bag or parameter file fails at once, in one line
        inputs = check_bag(args.bag)
        if args.config:
            check_param_file(args.config, node_parameters())
        args.model_params = model_overrides(args)
        config = args.config or default_config()
        check_against_vocabulary({**load_yaml_params(config, "crossspec_verifier"),
                                  **args.model_params},
                                 where=f"{config}: node 'crossspec_verifier'")
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
    summarized = summarized_graph(args)
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
                outcome = run_pass(args, graph, models, on_row,
                                   label=graph.name if args.compare else "", caught=caught)
                if isinstance(outcome, int):
                    return outcome
                results[(graph.name, round_index)] = outcome.rows
                foreign.update(outcome.foreign)
                if outcome.interrupted or outcome.died:  # what finished is kept
                    with signals_deferred(caught):
                        return _end_run(args, stream, results, outcome, tag, caught, foreign)
                if graph is summarized:
                    last = outcome
            if args.check_lossless and not getattr(args, "loop", False):
                check_held_windows(last.engine, last.window_rows, last.rows)
        except KeyboardInterrupt:  # between passes or in the lossless check after them
            print("interrupted: writing the windows so far", file=sys.stderr)
            if last is None:  # no summed-up pass finished: a summary of none
                last = PassResult([], None, None, DroppedWindows(), interrupted=True)
            last.interrupted = True
        # the last round's pass of the summed-up graph (crossspec's, or summary_graph's)
        # carries the lossless check and the summary
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
    summary = _run_summary(args, outcome, foreign)
    ended = {"interrupted": True} if outcome.interrupted else {}
    if outcome.died:
        ended["node_died"] = outcome.died
    extra: dict[str, Any] = {}
    if args.compare and not ended:
        extra["compare"] = compare_graphs(results, range(args.rounds), args.graphs)
        print_comparison(results, extra["compare"])
    print(summary["line"])
    if extra:
        print(compare_line(extra["compare"]))
    if outcome.died:
        print(f"crossspec drive: the graph stopped: {'; '.join(outcome.died)} (the windows "
              "before it are kept)", file=sys.stderr)
    if stream is not None:
        last = {"summary": {**summary, **ended, **tag}, **extra}
        if _looped(outcome):
            stream.finish_after_rows([last])  # --loop: the rows went out as they finished
        else:
            stream.finish([*({**r, "pass": name, "round": k} if args.compare else r
                             for (name, k), rows in results.items() for r in rows), last])
    if outcome.interrupted or caught["signal"]:  # a signal while this was written: said too
        return exit_code_for(caught)
    if outcome.died or foreign:
        return 1
    return 0 if summary.get("lossless") == summary.get("lossless_checked") else 1


def _looped(outcome: PassResult) -> bool:
    """Whether ``outcome`` is a --loop pass's, which wrote its rows out as they finished."""
    return outcome.window_rows is not None and not outcome.window_rows.keep_rows


def _run_summary(args: argparse.Namespace, outcome: PassResult,
                 foreign: dict[str, list[str]] | None) -> dict[str, Any]:
    """The summary of the pass the run ended on, with what the drafter decided, another
    graph's publishers (``foreign``) and an emulated target's verdict."""
    if _looped(outcome):
        outcome.window_rows.write_out_open_rows()
        summary = outcome.window_rows.summary(outcome.dropped)
    else:
        summary = summarize(outcome.rows, outcome.dropped)
    if outcome.drafter:  # when the drafter computed, and why not where it did not
        add_drafter_decisions(summary, outcome.drafter)
    if foreign:  # the rows may hold another graph's captions: said, and not a pass
        summary["foreign_publishers"] = foreign
        summary["line"] += (f"; ANOTHER GRAPH published on {len(foreign)} of this run's "
                            f"topics ({', '.join(sorted(foreign))}): captions may be mixed")
    from crossspec_ros.models.emulated import emulation_of

    device = emulation_of(outcome.engine.verifier) if outcome.engine is not None else None
    if device is not None:  # never a measurement of this machine: the summary and JSON say so
        summary["emulation"] = device.report()
        summary["line"] = (f"[EMULATED {device.profile.label}] {summary['line']}; "
                           f"{device.verdict()}")
    return summary


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
