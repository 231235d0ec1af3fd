"""`crossspec make-test-bag OUT`: write a small bag of moving test patterns (events + RGB)."""

from __future__ import annotations

import argparse
import sys
import time

from crossspec_ros.bags.test_pattern import write_test_pattern_bag


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "make-test-bag", help="write a bag of moving test patterns (events + RGB)",
        description="Writes a ROS 2 bag with event_camera_msgs/EventPacket (evt3) on "
        "/event_camera/events and sensor_msgs/Image (rgb8, 20 Hz) on /camera/image_raw: a "
        "bright square and a dark bar moving over grey. For trying the tools without data; "
        "not a driving scene.")
    parser.add_argument("out", help="output bag directory (must not exist)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds (default 10)")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    parser.add_argument("--rgb-gap", type=float, nargs=2, metavar=("START", "END"),
                        help="leave out RGB frames in [START, END) seconds (test no-RGB windows)")
    parser.add_argument("--seed", type=int, default=0, help="event time jitter seed")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.duration <= 0:
        print("crossspec make-test-bag: --duration must be > 0", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        counts = write_test_pattern_bag(args.out, args.duration, storage=args.storage,
                                        rgb_gap_s=tuple(args.rgb_gap) if args.rgb_gap else None,
                                        seed=args.seed)
    except FileExistsError as err:
        print(f"crossspec make-test-bag: {err}", file=sys.stderr)
        return 1
    print(f"wrote {args.out}: {counts['events']} events in {counts['event_packets']} packets, "
          f"{counts['frames']} frames ({time.perf_counter() - start:.1f} s)")
    return 0
