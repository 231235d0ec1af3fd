"""`crossspec convert-dsec SEQUENCE_DIR OUT`: a DSEC sequence as a ROS 2 bag."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, got {text!r}") from None
    if not (1 <= width <= 2048 and 1 <= height <= 2048):
        raise argparse.ArgumentTypeError(f"size {text} out of range 1..2048 (EVT3's limit)")
    return width, height


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "convert-dsec", help="convert a DSEC sequence directory into a ROS 2 bag",
        description="Convert a DSEC sequence (events/left/events.h5, images/left/rectified/"
        "*.png, images/timestamps.txt) into a ROS 2 bag: event_camera_msgs/EventPacket (evt3, "
        "one packet per --packet-ms, stamped with its first event) on /event_camera/events and "
        "the rectified images as sensor_msgs/Image rgb8 on /camera/image_raw (or "
        "CompressedImage on /camera/image_raw/compressed), all on the image clock. DSEC's "
        "events are not rectified (its images are): --rectify moves them through the "
        "sequence's events/left/rectify_map.h5 so they line up with the images. Events are "
        "read by time range (flat memory) and counted in and out; the bag is written "
        "atomically: no partial bag on failure, Ctrl-C or SIGTERM (after kill -9, remove the "
        "hidden .OUT.partial-* folder next to OUT).")
    parser.add_argument("sequence_dir", metavar="SEQUENCE_DIR",
                        help="DSEC sequence directory, e.g. zurich_city_00_a")
    parser.add_argument("out", metavar="OUT", help="output bag directory")
    parser.add_argument("--duration", type=float, metavar="S",
                        help="only the first S seconds (from the first image or event)")
    parser.add_argument("--image-scale", type=float, default=1.0, metavar="F",
                        help="resize images by F (e.g. 0.25: 1440x1080 -> 360x270; default 1)")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap",
                        help="bag storage (default mcap)")
    parser.add_argument("--compressed", action="store_true",
                        help="write sensor_msgs/CompressedImage instead of rgb8 Image")
    parser.add_argument("--compressed-format", choices=("png", "jpeg"), default="png",
                        help="with --compressed: png (lossless, default) or jpeg (quality 90)")
    parser.add_argument("--packet-ms", type=float, default=5.0, metavar="MS",
                        help="event packet period in ms (default 5)")
    parser.add_argument("--sensor-size", type=_size, default=(640, 480), metavar="WxH",
                        help="event sensor size (default 640x480, DSEC's)")
    parser.add_argument("--rectify", action="store_true",
                        help="move each event to its rectified pixel (nearest) through "
                        "SEQUENCE_DIR/events/left/rectify_map.h5 (in DSEC's events zip); "
                        "events that land off the sensor are dropped and counted; a missing "
                        "or malformed map exits 2 before anything is written")
    add_bag_output_arguments(parser)
    parser.set_defaults(func=run)


def add_bag_output_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a converter's output bag (convert-dsec, convert-bag)."""
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    parser.add_argument("--no-compress", action="store_true",
                        help="no zstd chunk compression (MCAP only compresses)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from crossspec_ros.bags.dsec_convert import (
        DsecConvertError,
        MalformedSequenceError,
        RectifyMapError,
        convert_dsec,
    )
    from crossspec_ros.streaming import exit_code_for, sigterm_as_interrupt

    try:
        with sigterm_as_interrupt() as caught:  # SIGTERM too removes the staging folder
            report = convert_dsec(
                args.sequence_dir, args.out, duration_s=args.duration,
                image_scale=args.image_scale, storage=args.storage,
                compressed=args.compressed_format if args.compressed else None,
                packet_ms=args.packet_ms, sensor_size=args.sensor_size,
                overwrite=args.overwrite, compress=not args.no_compress,
                rectify=args.rectify, progress=not args.quiet)
    except KeyboardInterrupt:
        print(f"crossspec convert-dsec: interrupted: {args.out} was left as it was and the "
              "staging folder removed (after a kill -9, remove the hidden "
              f"{Path(args.out).parent}/.{Path(args.out).name}.partial-* folder by hand)",
              file=sys.stderr)
        return exit_code_for(caught)
    except (RectifyMapError, MalformedSequenceError) as err:
        # what --rectify asked for is not there, or a file holds impossible values: as a bad
        # option, before anything is written
        print(f"crossspec convert-dsec: error: {err}", file=sys.stderr)
        return 2
    except DsecConvertError as err:
        print(f"crossspec convert-dsec: error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # disk full, permissions: the bag was not written
        print(f"crossspec convert-dsec: error: {err}; no bag was written", file=sys.stderr)
        return 1
    print(report.summary())
    return 0
