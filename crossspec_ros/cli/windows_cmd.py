"""`crossspec windows BAG`: replay a bag through the window synchronizer and list the windows."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from crossspec_ros.bags.inputs import InputStats, iter_bag_windows
from crossspec_ros.events.errors import EventSourceError
from crossspec_ros.params import (
    SYNC_PARAMS,
    ParameterError,
    check_param_file,
    load_yaml_params,
    validate,
)
from crossspec_ros.stamps import ns_to_seconds
from crossspec_ros.sync.synchronizer import sync_from_params
from crossspec_ros.sync.window import Window


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "windows", help="replay a bag through the window synchronizer and list its windows",
        description="Reads events and RGB frames of a bag (ROS 2 or ROS 1) in recording order, "
        "feeds the window synchronizer and prints each window as it closes: id, time span, "
        "events by polarity, frames sampled (distinct), and flags (no_rgb, no_events, ...).")
    parser.add_argument("bag", help="ROS 2 bag directory, .mcap file or ROS 1 .bag file")
    parser.add_argument("--config", help="ROS parameter YAML, read as the verifier node reads "
                        "it (default: built-in defaults; see config/drive.yaml)")
    parser.add_argument("--event-topic", help="event topic (default: the only one: "
                        "EventPacket, dvs_msgs or prophesee_event_msgs EventArray)")
    parser.add_argument("--rgb-topic", help="image topic (default: the only image topic)")
    parser.add_argument("--window-length", type=float, help="window length [s]")
    parser.add_argument("--json", action="store_true", help="one JSON object per window")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="[%(levelname)s] %(name)s: %(message)s")
    from crossspec_ros.nodes.graph import node_parameters, spec

    try:  # the windows the verifier node would make: its sections of the file
        if args.config:
            check_param_file(args.config, node_parameters())
        values = load_yaml_params(args.config, spec("verifier").name) if args.config else {}
        if args.window_length is not None:
            values["window_length_s"] = args.window_length
        params = validate(values, SYNC_PARAMS, where=args.config or "command line",
                          allow_unknown=True)
    except ParameterError as err:
        print(f"crossspec windows: {err}", file=sys.stderr)
        return 2
    # the nodes' own synchronizer (seconds to nanoseconds rounded, as theirs: 1.001 s is
    # 1,001,000,000 ns, not int()'s 1,000,999,999)
    sync = sync_from_params(params, streams=("events", "rgb"))
    stats = InputStats()
    try:
        for window in iter_bag_windows(args.bag, sync, args.event_topic, args.rgb_topic, stats):
            print_window(window, args.json)
    except EventSourceError as err:
        print(f"crossspec windows: {err}", file=sys.stderr)
        return 1
    summary = {"summary": {**vars(sync.stats), "event_packets": stats.event_packets,
                           "frames": stats.frames, "bad_frames": stats.bad_frames,
                           "unreadable_messages": stats.unreadable_messages,
                           "out_of_bounds_events": stats.out_of_bounds_events}}
    if args.json:
        print(json.dumps(summary))
    else:
        s = summary["summary"]
        print(f"{s['windows_emitted']} windows ({s['windows_without_rgb']} without RGB, "
              f"{s['windows_without_events']} without events); {s['event_packets']} event "
              f"packets, {s['frames']} frames ({s['bad_frames']} bad); dropped windows "
              f"{s['dropped_windows']}, late events {s['late_events']}, late frames "
              f"{s['late_frames']}, resets {s['resets']}"
              + (f"; {s['unreadable_messages']} unreadable messages skipped"
                 if s["unreadable_messages"] else "")
              + (f"; {s['out_of_bounds_events']} events outside the sensor dropped"
                 if s["out_of_bounds_events"] else "")
              + (f"; {s['outlier_events']} events and {s['outlier_frames']} frames far from "
                 "the streams' time dropped" if s["outlier_events"] or s["outlier_frames"]
                 else "")
              + (f"; {s['rejected_events']} events of an odd sensor size dropped"
                 if s["rejected_events"] else ""))
    return 0


def window_summary(window: Window) -> dict:
    p1 = int(window.events.p.sum()) if len(window.events) else 0
    return {"window": window.id, "epoch": window.epoch, "t0": ns_to_seconds(window.t0),
            "t1": ns_to_seconds(window.t1), "events": len(window.events),
            "events_p0": len(window.events) - p1, "events_p1": p1,
            "frames": len(window.frames), "distinct_frames": window.n_distinct_frames,
            "flags": list(window.flags), "closed_by": window.closed_by}


def print_window(window: Window, as_json: bool) -> None:
    s = window_summary(window)
    if as_json:
        print(json.dumps(s), flush=True)
        return
    flags = f"  [{', '.join(s['flags'])}]" if s["flags"] else ""
    print(f"window {s['window']:>12} [{s['t0']:.3f}, {s['t1']:.3f}) s  events "
          f"{s['events']:>8} (p0 {s['events_p0']}, p1 {s['events_p1']})  frames "
          f"{s['frames']} ({s['distinct_frames']} distinct){flags}", flush=True)
