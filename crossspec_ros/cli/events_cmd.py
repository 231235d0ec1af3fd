"""`crossspec events BAG`: what the event-camera topics of a ROS 2 bag contain."""

from __future__ import annotations

import argparse
import json
import sys

from crossspec_ros.bags.events_report import events_report, format_report
from crossspec_ros.events.errors import EventSourceError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "events", help="summarize the event-camera topics of a ROS 2 bag",
        description="Decode every event_camera_msgs/EventPacket topic of a ROS 2 bag (sqlite3 "
                    "or MCAP) and report packets, encoding, sensor size, CD events and "
                    "triggers by polarity, first/last event time, mean rate and bad packets.",
    )
    parser.add_argument("bag", help="bag directory (with metadata.yaml) or a .db3/.mcap file")
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
