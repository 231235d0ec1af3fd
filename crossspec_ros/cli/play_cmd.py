"""`crossspec play BAG`: replay a bag on its topics with its timing and /clock.

rosbag2 (`ros2 bag play`) is not on PyPI; this replays MCAP and sqlite3 bags, and ROS 1 bags
(converted to ROS 2 messages), with rclpy alone (nodes/player.py), e.g. into
`crossspec node ...` processes or any ROS 2 tool.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "play", help="replay a bag (ROS 2 or ROS 1) on its topics, with its timing and /clock",
        description="Replay a ROS 2 bag (rosbag2 directory, .mcap or .db3) or a ROS 1 .bag "
                    "on its recorded topics at its recorded timing, publishing the stored CDR "
                    "bytes as they are (ROS 1 messages converted to CDR; dvs_msgs and "
                    "prophesee_event_msgs EventArrays as evt3 event_camera_msgs/EventPackets "
                    "on the same topic) and the bag time on /clock (for use_sim_time nodes). "
                    "Prints one summary line at the end; Ctrl-C or SIGTERM stops cleanly "
                    "(exit 0, as ros2 bag play: under ros2 launch a stopped player is not a "
                    "failure).")
    parser.add_argument("bag", type=Path,
                        help="bag directory (with metadata.yaml), a .mcap/.db3 file or a ROS 1 "
                             ".bag file")
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
    parser.add_argument("--namespace", default="", metavar="NS",
                        help="publish the bag's topics and its clock under this namespace "
                             "(NS/clock: nodes in NS follow it with the remapping "
                             "/clock:=clock, as drive.launch.py's namespace:= gives them; two "
                             "robots replaying on one domain then keep their own bag time)")
    parser.add_argument("--global-clock", action="store_true",
                        help="with --namespace: publish the bag time on /clock all the same")
    parser.add_argument("--wait-active", nargs="+", default=[], metavar="NODE",
                        help="start only once these lifecycle nodes are active (e.g. "
                             "crossspec_draft crossspec_verifier; relative names are in "
                             "--namespace, /name is absolute): nothing is replayed before "
                             "anyone listens, however long the models take to load")
    parser.add_argument("--wait-timeout", type=float, default=900.0, metavar="S",
                        help="give up waiting for --wait-active after S seconds (default 900)")
    parser.set_defaults(func=run)


def _make_player(args: argparse.Namespace, context: Any) -> Any:
    from crossspec_ros.nodes.player import BagPlayer

    return BagPlayer(args.bag, rate=args.rate, loop=args.loop, topics=args.topics,
                     start_s=args.start, max_duration_s=args.duration,
                     clock=not args.no_clock, start_delay_s=args.delay, context=context,
                     namespace=args.namespace or None, autostart=not args.wait_active,
                     clock_topic="clock" if args.namespace and not args.global_clock
                     else "/clock")


def _start(args: argparse.Namespace, player: Any, executor: Any) -> None:
    """Start replaying, after --wait-active if given."""
    from crossspec_ros.nodes.lifecycle import wait_until_active

    if args.wait_active:
        wait_until_active(player, args.wait_active, lambda t: executor.spin_once(timeout_sec=t),
                          args.wait_timeout,
                          report=lambda m: print(f"crossspec play: {m}", file=sys.stderr))
        player.start()
    unpaced = args.rate == 0 or math.isinf(args.rate)
    rate = "as fast as possible" if unpaced else f"rate {args.rate:g}"
    print(f"crossspec play: {args.bag}: {len(player.replay.topics)} topics, "
          f"{player.replay.duration_s:.2f} s per pass, {rate}"
          f"{', looping' if args.loop else ''}", file=sys.stderr)


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
    from rclpy.signals import SignalHandlerOptions

    from crossspec_ros.nodes.lifecycle import NodeStartError
    from crossspec_ros.streaming import sigterm_as_interrupt

    context = rclpy.Context()
    # signals are ours (sigterm_as_interrupt): rclpy's handler re-raised a forwarded second
    # Ctrl-C inside a finalizer (exit 130, "process has died" under launch)
    rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
    player = None
    executor = SingleThreadedExecutor(context=context)
    interrupted = False
    # around the cleanup too, and to the exit: a second signal can cut neither
    with sigterm_as_interrupt(ends_process=True):
        try:
            player = _make_player(args, context)
            executor.add_node(player)
            _start(args, player, executor)
            # Spin in this (the main) thread: Ctrl-C lands here. The player publishes from
            # its own thread; spinning only serves the node's parameter services.
            while not player.done.is_set():
                executor.spin_once(timeout_sec=0.1)
        except (BagError, NodeStartError) as exc:  # the bag changed since the check; late
            print(f"crossspec play: error: {exc}", file=sys.stderr)  # nodes
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
    return _report_end(player, interrupted)


def _report_end(player: Any, interrupted: bool) -> int:
    """Say how the replay ended (its summary line, an error); the exit code: 1 after an
    error, else 0 (a stopped player is no failure)."""
    if interrupted:
        print("interrupted", file=sys.stderr)
    if player is None:  # interrupted while starting
        return 0
    print(f"crossspec play: {player.summary()}")
    if player.error:
        print(f"crossspec play: error: {player.error}", file=sys.stderr)
        return 1
    return 0
