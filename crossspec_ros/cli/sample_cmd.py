"""`crossspec make-sample OUT`: write a synthetic driving bag (events, RGB, ground truth)."""

from __future__ import annotations

import argparse
import sys
import time

from crossspec_ros.cli.arg_types import one_line_errors
from crossspec_ros.sim.scene import SEGMENT_SECONDS  # light: numpy only


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, got {text!r}") from None
    if not (8 <= width <= 2048 and 8 <= height <= 2048):
        raise argparse.ArgumentTypeError(f"size {text} out of range 8..2048")
    return width, height


def _scene_seconds(text: str) -> tuple[int, int]:
    """``LOW-HIGH`` whole seconds, 1 <= LOW <= HIGH (``N`` alone is N-N)."""
    try:
        low, high = (int(v) for v in text.split("-")) if "-" in text else (int(text),) * 2
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected LOW-HIGH whole seconds (e.g. 1-2), got {text!r}") from None
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"must be whole seconds 1 <= LOW <= HIGH, got {text}")
    return low, high


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = one_line_errors(subparsers.add_parser(
        "make-sample", help="write a bag of the synthetic driving world",
        description="Simulates a drive of crossspec's synthetic world (crossspec_ros/sim) and "
        "writes a ROS 2 bag: event_camera_msgs/EventPacket (evt3, 2 ms packets) on "
        "/event_camera/events, sensor_msgs/Image (rgb8, 20 Hz) on /camera/image_raw and the "
        "ground-truth caption of every 1 s window (crossspec/msg/Caption) on "
        "/crossspec/ground_truth. Written atomically: no partial bag on failure. "
        "--scene-seconds LOW-HIGH sets how long ordinary scenes last (a stop lasts 2 s up to "
        "HIGH, within 2-6 s; slowing and pulling away keep 3-4 s): e.g. 1-2 for a drive whose "
        "caption changes nearly every window."))
    parser.add_argument("out", help="output bag directory (must not exist)")
    parser.add_argument("--seed", type=int, default=23,
                        help="drive seed (default 23, the committed rosbags/sample)")
    parser.add_argument("--duration", type=float, default=24.0,
                        help="seconds (default 24)")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap")
    parser.add_argument("--no-compress", action="store_true",
                        help="no zstd chunk compression (MCAP only compresses)")
    parser.add_argument("--event-size", type=_size, default=(320, 240), metavar="WxH",
                        help="event sensor size (default 320x240)")
    parser.add_argument("--rgb-size", type=_size, default=(320, 240), metavar="WxH",
                        help="RGB image size (default 320x240)")
    parser.add_argument("--scene-seconds", type=_scene_seconds, default=SEGMENT_SECONDS,
                        metavar="LOW-HIGH",
                        help="length range of ordinary scene segments in whole seconds "
                        f"(default {SEGMENT_SECONDS[0]}-{SEGMENT_SECONDS[1]}; 1-2: frequent "
                        "scene changes)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from crossspec_ros.bags.sample import write_sample_bag

    if args.duration <= 0:
        print("crossspec make-sample: --duration must be > 0", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        counts = write_sample_bag(args.out, args.seed, args.duration, storage=args.storage,
                                  compress=not args.no_compress, event_size=args.event_size,
                                  rgb_size=args.rgb_size, progress=not args.quiet,
                                  segment_seconds=args.scene_seconds)
    except FileExistsError as err:
        print(f"crossspec make-sample: {err}", file=sys.stderr)
        return 1
    low, high = args.scene_seconds
    scenes = f", scenes {low}-{high} s" if args.scene_seconds != SEGMENT_SECONDS else ""
    print(f"wrote {args.out}: seed {args.seed}, {args.duration:g} s{scenes}, "
          f"{counts['events']} events "
          f"in {counts['event_packets']} packets, {counts['frames']} frames, "
          f"{counts['captions']} captions ({time.perf_counter() - start:.1f} s)")
    return 0
