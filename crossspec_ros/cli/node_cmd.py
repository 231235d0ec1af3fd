"""`crossspec node KIND [--ros-args ...]`: run one node of the graph (or all, composed).

What launch files and `ros2 run crossspec crossspec node draft` start. ROS arguments
(`--ros-args --params-file config/drive.yaml -r __node:=...`) go to rclpy unchanged.

The nodes are lifecycle nodes: by default they configure (load their models) and activate at
once; ``--no-autostart`` leaves them unconfigured for a lifecycle manager (`ros2 lifecycle set
/crossspec_verifier configure`, launch). Ctrl-C and SIGTERM stop the spin loop, then the nodes
stop their workers and the process exits 0.
"""

from __future__ import annotations

import argparse
import signal
import sys

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
    if "-h" in ours or "--help" in ours:  # REMAINDER keeps them from argparse: answer here
        args.print_node_help()
        return 0
    unknown = [a for a in ours if a != "--no-autostart"]
    if unknown:
        print(f"crossspec node {args.kind}: unknown argument(s) {' '.join(unknown)}; ROS "
              "arguments go after --ros-args", file=sys.stderr)
        return 2
    from crossspec_ros.nodes.graph import node_parameters
    from crossspec_ros.params import ParameterError, check_param_file

    files = [args.ros_args[i + 1] for i, a in enumerate(args.ros_args[:-1])
             if a == "--params-file"]
    try:  # rclpy would drop a misspelt name silently; say so before anything starts
        for path in files:
            check_param_file(path, node_parameters())
    except ParameterError as err:
        print(f"crossspec node {args.kind}: {err}", file=sys.stderr)
        return 2
    import threading

    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.nodes.graph import create_nodes, make_executor, tune_process_for_models

    # Ctrl-C and SIGTERM (what launch sends) only set a flag: the spin loop ends within 0.1 s,
    # then the nodes stop their model workers while the ROS context is still valid. (Raising
    # from the handler landed inside the executor's dispatch; rclpy's own handler would
    # invalidate the context under workers still publishing.) Only the first signal counts:
    # under launch a terminal's Ctrl-C comes twice (the terminal's and launch's).
    stopping, spinning = threading.Event(), threading.Event()

    def on_signal(*_: object) -> None:
        first = not stopping.is_set()
        stopping.set()
        if first and not spinning.is_set():  # still loading models: stop that at once
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    kinds = KINDS if args.kind == COMPOSED.kind else (args.kind,)
    nodes: list = []
    try:
        try:
            rclpy.init(args=["crossspec", *args.ros_args],
                       signal_handler_options=SignalHandlerOptions.NO)
        except RuntimeError as err:  # rcl refused the ROS arguments (e.g. a -p it cannot parse)
            print(f"crossspec node {args.kind}: ROS arguments refused: "
                  f"{str(err).splitlines()[0]}", file=sys.stderr)
            return 2
        tune_process_for_models()
        nodes = create_nodes(kinds, use_overrides=False,
                             state="unconfigured" if "--no-autostart" in ours else "active")
        executor = make_executor()
        for node in nodes:
            executor.add_node(node)
        spinning.set()
        while not stopping.is_set():
            executor.spin_once(timeout_sec=0.1)
    except (ParameterError, ModelLoadError) as err:
        print(f"crossspec node {args.kind}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # while starting
        pass
    finally:
        # a later signal must not abort the cleanup, nor the exit after it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for node in nodes:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0
