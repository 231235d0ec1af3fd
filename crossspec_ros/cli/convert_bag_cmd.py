"""`crossspec convert-bag IN OUT`: an event-camera bag (ROS 1 or ROS 2) as the ROS 2 bag
crossspec replays (evt3 EventPackets and the images)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from crossspec_ros.cli.convert_cmd import add_bag_output_arguments


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "convert-bag", help="convert an event-camera bag (ROS 1 or ROS 2, dvs_msgs or "
        "prophesee_event_msgs EventArrays) into a ROS 2 bag of evt3 EventPackets and images",
        description="Convert a bag (ROS 1 .bag, or ROS 2) with an event topic "
        "(dvs_msgs/EventArray, prophesee_event_msgs/EventArray or event_camera_msgs/"
        "EventPacket) and an image topic (sensor_msgs/Image, e.g. mono8 APS frames, or "
        "CompressedImage) into a ROS 2 bag that `crossspec drive --bag OUT` replays: "
        "event_camera_msgs/EventPacket evt3 on /event_camera/events (one packet per "
        "EventArray, stamped with its first event) and the images as recorded on "
        "/camera/image_raw (or /camera/image_raw/compressed), each message at its log time. "
        "Topics are found by type (the only one of each) unless named. Events are counted in "
        "and out (events outside the sensor, and events earlier than events already written, "
        "are dropped and counted) and must add up; the bag is written atomically: no partial "
        "bag on failure, Ctrl-C or SIGTERM (after kill -9, remove the hidden "
        ".OUT.partial-* folder next to OUT).")
    parser.add_argument("source", metavar="IN", help="ROS 1 .bag file, or ROS 2 bag directory "
                        "or .mcap/.db3 file")
    parser.add_argument("out", metavar="OUT", help="output bag directory")
    parser.add_argument("--event-topic", help="event topic (default: the only one)")
    parser.add_argument("--rgb-topic", help="image topic (default: the only one)")
    parser.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap",
                        help="bag storage (default mcap)")
    add_bag_output_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from crossspec_ros.bags.bag_convert import BagConvertError, convert_bag
    from crossspec_ros.streaming import exit_code_for, sigterm_as_interrupt

    try:
        with sigterm_as_interrupt() as caught:  # SIGTERM too removes the staging folder
            report = convert_bag(args.source, args.out, event_topic=args.event_topic,
                                 rgb_topic=args.rgb_topic, storage=args.storage,
                                 compress=not args.no_compress, overwrite=args.overwrite,
                                 progress=not args.quiet)
    except KeyboardInterrupt:
        print(f"crossspec convert-bag: interrupted: {args.out} was left as it was and the "
              "staging folder removed (after a kill -9, remove the hidden "
              f"{Path(args.out).parent}/.{Path(args.out).name}.partial-* folder by hand)",
              file=sys.stderr)
        return exit_code_for(caught)
    except BagConvertError as err:
        print(f"crossspec convert-bag: error: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # disk full, permissions: the bag was not written
        print(f"crossspec convert-bag: error: {err}; no bag was written", file=sys.stderr)
        return 1
    print(report.summary())
    return 0
