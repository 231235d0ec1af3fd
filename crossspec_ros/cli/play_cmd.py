"""`crossspec play BAG`: replay a ROS 2 bag on its topics with its timing and /clock.

rosbag2 (`ros2 bag play`) is not on PyPI; this replays MCAP and sqlite3 bags with rclpy alone
(nodes/player.py), e.g. into `crossspec node ...` processes or any ROS 2 tool.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "play", help="replay a ROS 2 bag on its topics, with its timing and /clock",
        description="Replay a ROS 2 bag (rosbag2 directory, .mcap or .db3) on its recorded "
                    "topics at its recorded timing, publishing the stored CDR bytes as they "
                    "are and the bag time on /clock (for use_sim_time nodes). Prints one "
                    "summary line at the end; Ctrl-C stops cleanly (exit 130).")
    parser.add_argument("bag", type=Path,
                        help="bag directory (with metadata.yaml) or a .mcap/.db3 file")
    parser.add_argument("--rate", type=float, default=1.0,
                        help="replay rate: 1 = recorded speed, 2 = twice as fast, "
                             "0 = as fast as possible (default: 1)")
    parser.add_argument("--loop", action="store_true",
                        help="start again after the last message, until Ctrl-C (bag time "
                             "jumps back on /clock)")
    parser.add_argument("--topics", nargs="+", metavar="T",
                        help="replay only these topics (default: all)")
    parser.add_argument("--start", type=float, default=0.0, metavar="S",
                        help="skip the first S seconds of the bag (default: 0)")
    parser.add_argument("--duration", type=float, default=None, metavar="S",
                        help="replay at most S seconds of bag time per pass (default: all)")
    parser.add_argument("--delay", type=float, default=0.5, metavar="S",
                        help="wait S seconds before the first message so that subscribers "
                             "are discovered (default: 0.5)")
    parser.add_argument("--no-clock", action="store_true", help="do not publish /clock")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if math.isnan(args.rate) or args.rate < 0:
        print(f"crossspec play: error: --rate must be >= 0, got {args.rate}", file=sys.stderr)
        return 2
    # Loopback discovery unless the caller chose otherwise (e.g. SUBNET to feed another host).
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    # Check the bag before ROS starts: a wrong path answers at once and without a traceback.
    from crossspec_ros.bags.replay import BagError, BagReplay

    try:
        BagReplay(args.bag, topics=args.topics, start_s=args.start,
                  max_duration_s=args.duration, loop=args.loop)
    except BagError as exc:
        print(f"crossspec play: error: {exc}", file=sys.stderr)
        return 1

    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    from crossspec_ros.nodes.player import BagPlayer

    context = rclpy.Context()
    rclpy.init(context=context)
    player = None
    executor = SingleThreadedExecutor(context=context)
    interrupted = False
    try:
        player = BagPlayer(args.bag, rate=args.rate, loop=args.loop, topics=args.topics,
                           start_s=args.start, max_duration_s=args.duration,
                           clock=not args.no_clock, start_delay_s=args.delay, context=context)
        executor.add_node(player)
        unpaced = args.rate == 0 or math.isinf(args.rate)
        rate = "as fast as possible" if unpaced else f"rate {args.rate:g}"
        print(f"crossspec play: {args.bag}: {len(player.replay.topics)} topics, "
              f"{player.replay.duration_s:.2f} s per pass, {rate}"
              f"{', looping' if args.loop else ''}", file=sys.stderr)
        # Spin in this (the main) thread: Ctrl-C lands here. The player publishes from its own
        # thread; spinning only serves the node's parameter services.
        while not player.done.is_set():
            executor.spin_once(timeout_sec=0.1)
    except BagError as exc:  # the bag changed between the check and here
        print(f"crossspec play: error: {exc}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, ExternalShutdownException):
        interrupted = True
    finally:
        if player is not None:
            player.stop(timeout_s=2.0)
        executor.shutdown(timeout_sec=1.0)
        if player is not None:
            player.destroy_node()
        if context.ok():
            rclpy.shutdown(context=context)
    if interrupted:
        print("interrupted", file=sys.stderr)
    if player is None:  # interrupted while starting
        return 130
    print(f"crossspec play: {player.summary()}")
    if player.error:
        print(f"crossspec play: error: {player.error}", file=sys.stderr)
        return 1
    return 130 if interrupted else 0
