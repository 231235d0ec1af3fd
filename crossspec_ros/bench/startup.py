"""`crossspec bench startup`: seconds from starting a node process to the node being active.

A node loads its models and, on the static runtime, compiles and warms up every step shape in
its lifecycle's configure; inductor keeps the compiled kernels on disk
(``TORCHINDUCTOR_CACHE_DIR``), so a second start reuses them. This starts ``crossspec node
KIND`` twice on one fresh cache directory (cold, then warm) and, if asked, once more without
compiling, and times each from the process start until its lifecycle state is active (asked
over ROS, as ``crossspec play --wait-active`` asks). Each process is then stopped with SIGINT.
Traffic stays on loopback, on a ROS domain of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NODE_NAMES = {"verifier": "crossspec_verifier", "draft": "crossspec_draft",
              "composed": "crossspec_verifier"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "startup", help="seconds from starting a node to it being active: compiled cold, "
        "compiled with the compile cache, and eager", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", choices=sorted(NODE_NAMES), default="verifier",
                        help="the node (or composed graph) to start (default verifier)")
    parser.add_argument("--eager", action="store_true",
                        help="also start it once with compile: false")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="give up on a start after this many seconds (default 300)")
    parser.add_argument("--ros-args", nargs=argparse.REMAINDER, default=[],
                        help="passed to the node (e.g. -p device:=cuda)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the report as JSON")
    parser.set_defaults(func=run)


def time_to_active(kind: str, env: dict[str, str], ros_args: list[str], timeout: float
                   ) -> float:
    """Seconds from starting ``crossspec node kind`` until its lifecycle state is active."""
    import rclpy

    from crossspec_ros.nodes.lifecycle import wait_until_active

    command = [sys.executable, "-m", "crossspec_ros.cli.main", "node", kind,
               *(["--ros-args", *ros_args] if ros_args else [])]
    t0 = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    context = rclpy.Context()
    rclpy.init(context=context)
    client = rclpy.create_node("crossspec_startup_probe", context=context)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(client)
    try:
        def spin_once(seconds: float) -> None:
            if process.poll() is not None:
                raise RuntimeError(f"crossspec node {kind} ended (exit {process.returncode}): "
                                   f"{(process.stderr.read() or '').strip()[-500:]}")
            executor.spin_once(timeout_sec=seconds)

        wait_until_active(client, [NODE_NAMES[kind]], spin_once, timeout)
        return time.monotonic() - t0
    finally:
        client.destroy_node()
        rclpy.shutdown(context=context)
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def run(args: argparse.Namespace) -> int:
    from crossspec_ros.models.static_runtime import NO_COMPILE_ENV

    env = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
           "ROS_DOMAIN_ID": os.environ.get("ROS_DOMAIN_ID",
                                           str(random.SystemRandom().randint(1, 101)))}
    os.environ.update({k: env[k] for k in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_DOMAIN_ID")})
    env.pop(NO_COMPILE_ENV, None)
    report: dict[str, Any] = {"node": args.node, "ros_args": args.ros_args}
    with tempfile.TemporaryDirectory(prefix="crossspec-compile-cache-") as cache:
        compiled = {**env, "TORCHINDUCTOR_CACHE_DIR": cache}
        runs = [("compiled_cold_s", compiled, []), ("compiled_warm_s", compiled, [])]
        if args.eager:
            runs.append(("eager_s", env, ["-p", "compile:=false"]))
        for key, run_env, extra in runs:
            try:
                seconds = time_to_active(args.node, run_env, [*args.ros_args, *extra],
                                         args.timeout)
            except Exception as err:  # a node that never came up: say why, no traceback
                print(f"crossspec bench startup: {key}: {err}", file=sys.stderr)
                return 1
            report[key] = round(seconds, 1)
            print(f"{args.node}: {key.removesuffix('_s').replace('_', ' ')}: active after "
                  f"{seconds:.1f} s", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return 0
