"""`crossspec events BAG`: what the event-camera topics of a bag (ROS 2 or ROS 1) contain."""

from __future__ import annotations

import argparse
import json
import sys

from crossspec_ros.bags.events_report import events_report, format_report
from crossspec_ros.events.errors import EventSourceError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "events", help="summarize the event-camera topics of a bag (ROS 2 or ROS 1)",
        description="Decode every event topic of a bag (ROS 2: sqlite3 or MCAP; ROS 1: .bag): "
                    "event_camera_msgs/EventPacket, dvs_msgs/EventArray and "
                    "prophesee_event_msgs/EventArray, and report per topic its message type, "
                    "packets (messages), encoding, sensor size, CD events and triggers by "
                    "polarity, first/last event time, mean rate and bad packets (events outside "
                    "the sensor are dropped and counted).",
    )
    parser.add_argument("bag", help="bag directory (with metadata.yaml), a .db3/.mcap file or a "
                        "ROS 1 .bag file")
    parser.add_argument("--topic", help="only this event topic (default: all of them)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object {\"topics\": {...}} instead of a table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        report = events_report(args.bag, args.topic)
    except EventSourceError as exc:
        print(f"crossspec events: error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(report) if args.json else format_report(report))
    return 0
