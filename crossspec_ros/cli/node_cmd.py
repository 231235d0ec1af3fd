"""`crossspec node KIND [--ros-args ...]`: run one node of the graph (or all, composed).

What launch files and `ros2 run crossspec crossspec node draft` start. ROS arguments
(`--ros-args --params-file config/drive.yaml -r __node:=...`) go to rclpy unchanged.

The nodes are lifecycle nodes: by default they configure (load their models) and activate at
once; ``--no-autostart`` leaves them unconfigured for a lifecycle manager (`ros2 lifecycle set
/crossspec_verifier configure`, launch). A configure that fails (a missing model, CUDA asked for
on a machine without it), or an activate, ends the process with one line naming the node and
why, and exit code 2, either way. Ctrl-C and
SIGTERM stop the spin loop, then the nodes stop their workers and the process exits 0; while
models load or compile, the loading is cut short at once.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable

from crossspec_ros.nodes.graph import COMPOSED, GRAPH, KINDS


def register(subparsers: argparse._SubParsersAction) -> None:
    kinds = "; ".join(f"{s.kind}: {s.summary}" for s in (*GRAPH, COMPOSED))
    parser = subparsers.add_parser(
        "node", help="run a crossspec ROS node (draft, verifier, viz, or all composed)",
        description=f"{__doc__}\nKinds: {kinds}.")
    parser.add_argument("kind", choices=(*KINDS, COMPOSED.kind))
    parser.add_argument("ros_args", nargs=argparse.REMAINDER,
                        help="[--no-autostart] --ros-args ... (parameters, remappings) passed "
                        "to rclpy")
    parser.set_defaults(func=run, print_node_help=parser.print_help)


def run(args: argparse.Namespace) -> int:
    ours = args.ros_args[:args.ros_args.index("--ros-args")] if "--ros-args" in args.ros_args \
        else args.ros_args
    refused = _check_arguments(args, ours)
    if refused is not None:
        return refused
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.nodes.graph import create_nodes, tune_process_for_models
    from crossspec_ros.nodes.lifecycle import NodeStartError, where_raised
    from crossspec_ros.params import ParameterError
    from crossspec_ros.speculative.corpus import CorpusError

    stopping, spinning = threading.Event(), threading.Event()
    nodes: list = []
    _stop_on_signals(stopping, spinning, nodes)
    kinds = KINDS if args.kind == COMPOSED.kind else (args.kind,)
    try:
        try:
            rclpy.init(args=["crossspec", *args.ros_args],
                       signal_handler_options=SignalHandlerOptions.NO)
        except RuntimeError as err:  # rcl refused the ROS arguments (e.g. a -p it cannot parse)
            print(f"crossspec node {args.kind}: ROS arguments refused: "
                  f"{str(err).splitlines()[0]}", file=sys.stderr)
            return 2
        tune_process_for_models()
        try:
            nodes[:] = create_nodes(kinds, use_overrides=False,
                                    state="unconfigured" if "--no-autostart" in ours else
                                    "active")
        except (ParameterError, ModelLoadError, CorpusError, NodeStartError) as err:
            print(f"crossspec node {args.kind}: {err}", file=sys.stderr)
            return 2
        except Exception as err:  # any other reason a node could not come up: one line too
            print(f"crossspec node {args.kind}: could not start: {type(err).__name__}: {err} "
                  f"({where_raised(err)})", file=sys.stderr)
            return 2
        failed = _spin(args, nodes, stopping, spinning)
        if failed is not None:
            return failed
    except KeyboardInterrupt:  # while starting
        pass
    finally:
        _shut_down(nodes)
    return 0


def _check_arguments(args: argparse.Namespace, ours: list[str]) -> int | None:
    """The exit code where the command ends before ROS starts: 0 after --help, 2 (said in one
    line) for an unknown argument or a bad parameter file; else None."""
    if "-h" in ours or "--help" in ours:  # REMAINDER keeps them from argparse: answer here
        args.print_node_help()
        return 0
    unknown = [a for a in ours if a != "--no-autostart"]
    if unknown:
        print(f"crossspec node {args.kind}: unknown argument(s) {' '.join(unknown)}; ROS "
              "arguments go after --ros-args", file=sys.stderr)
        return 2
    from crossspec_ros.nodes.graph import node_parameters
    from crossspec_ros.params import (
        ParameterError,
        check_against_vocabulary,
        check_param_file,
        load_yaml_params,
    )

    files = [args.ros_args[i + 1] for i, a in enumerate(args.ros_args[:-1])
             if a == "--params-file"]
    try:  # rclpy would drop a misspelt name silently; say so before anything starts
        for path in files:
            check_param_file(path, node_parameters())
            if args.kind in ("verifier", COMPOSED.kind):  # before the drafter compiles
                check_against_vocabulary(load_yaml_params(path, "crossspec_verifier"),
                                         where=f"{path}: node 'crossspec_verifier'")
    except ParameterError as err:
        print(f"crossspec node {args.kind}: {err}", file=sys.stderr)
        return 2
    return None


def _stop_on_signals(stopping: threading.Event, spinning: threading.Event,
                     nodes: list) -> None:
    """Install the SIGINT and SIGTERM handler: it sets ``stopping``, and raises
    KeyboardInterrupt the first time while ``nodes`` load (before ``spinning``, or in a
    configure)."""
    # Ctrl-C and SIGTERM (what launch sends) only set a flag: the spin loop ends within 0.1 s,
    # then the nodes stop their model workers while the ROS context is still valid. (Raising
    # from the handler landed inside the executor's dispatch; rclpy's own handler would
    # invalidate the context under workers still publishing.) While models load or compile
    # (before spinning, or in a configure a lifecycle manager asked for, which runs in this
    # thread's spin) nothing is running yet: the loading is cut at once, or launch would kill
    # the process after its grace period. Only the first signal counts: under launch a
    # terminal's Ctrl-C comes twice (the terminal's and launch's).
    def on_signal(*_: object) -> None:
        first = not stopping.is_set()
        stopping.set()
        loading = not spinning.is_set() or any(node.configuring for node in nodes)
        if first and loading:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)


def _spin(args: argparse.Namespace, nodes: list, stopping: threading.Event,
          spinning: threading.Event) -> int | None:
    """Spin ``nodes`` in this thread until ``stopping``; 2 (said in one line) when a
    configure a lifecycle manager asked for failed, 0 once every node is finalized (shut
    down through its lifecycle: the process ends, as launch expects), else None."""
    from crossspec_ros.nodes.graph import make_executor

    executor = make_executor()
    for node in nodes:
        executor.add_node(node)
    check_graph = _graph_check(nodes) if args.kind == COMPOSED.kind else None
    spinning.set()
    while not stopping.is_set():
        executor.spin_once(timeout_sec=0.1)
        if check_graph is not None:
            check_graph()
        failed = _failed_start(nodes)
        if failed:  # asked by a lifecycle manager (launch): the process ends, saying why
            print(f"crossspec node {args.kind}: {failed}", file=sys.stderr)
            return 2
        if all(node.finalized for node in nodes):  # shut down through its lifecycle: done
            print(f"crossspec node {args.kind}: shut down (finalized): exiting",
                  file=sys.stderr)
            return 0
    return None


GRAPH_CHECK_S = 2.0  # how often a composed graph looks for another graph on its topics


def _graph_check(nodes: list) -> Callable[[], None]:
    """For a composed graph (the draft, verifier and viz nodes in this process): every
    GRAPH_CHECK_S, whether another graph publishes on the topics they pass among themselves
    (another composed graph in the same namespace on this domain), said once per topic as an
    error in the verifier's log."""
    import time

    from crossspec_ros.nodes.isolation import guard_for

    _guard, poll = guard_for(nodes, inputs_too=False)
    logger = next((n for n in nodes if n.get_name() == "crossspec_verifier"), nodes[0])
    checked = -float("inf")

    def check() -> None:
        nonlocal checked
        if time.monotonic() - checked < GRAPH_CHECK_S:
            return
        checked = time.monotonic()
        for line in poll():
            logger.get_logger().error(line)

    return check


def _shut_down(nodes: list) -> None:
    """Destroy ``nodes`` and end the ROS context, deaf to further signals."""
    # a later signal must not abort the cleanup, nor the exit after it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import rclpy

    for node in nodes:
        node.destroy_node()
    if rclpy.ok():
        rclpy.shutdown()


def _failed_start(nodes: list) -> str | None:
    """Why a node's configure or activate failed (not a signal's interruption), or None. A
    node that cannot configure (a missing model or bag, CUDA asked for on a CPU machine) or
    activate ends its process, as a bad parameter file does, instead of leaving launch up with
    a node that does nothing."""
    for node in nodes:
        if node.failure is not None and not isinstance(node.failure, KeyboardInterrupt):
            done = "configured" if node.failed_transition == "configure" else "activated"
            return f"{node.get_name()} could not be {done}: {node.failure}"
    return None
