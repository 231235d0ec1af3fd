"""`crossspec params`: every node parameter with its default and what it accepts."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "params", help="list the nodes' parameters (default, accepted values, meaning)",
        description="Lists every parameter of the draft, verifier and viz nodes, as declared in "
        "crossspec_ros/params.py. --markdown prints docs/parameters.md, --live the list of "
        "the parameters that change live in docs/ros.md (with its markers).")
    parser.add_argument("--markdown", action="store_true", help="the docs page, as Markdown")
    parser.add_argument("--live", action="store_true",
                        help="the parameters that change live, as docs/ros.md lists them")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from crossspec_ros.nodes.graph import node_parameters
    from crossspec_ros.params import (
        LIVE_PARAMETERS_MARK,
        live_parameters_markdown,
        parameters_markdown,
    )

    nodes = node_parameters()
    if args.live:
        begin, end = LIVE_PARAMETERS_MARK
        print(f"{begin}\n{live_parameters_markdown(nodes)}\n{end}")
        return 0
    if args.markdown:
        print(parameters_markdown(nodes))
        return 0
    for node, spec in nodes.items():
        print(f"{node}:")
        for p in spec:
            live = "  (live)" if p.live else ""
            print(f"  {p.name} = {p.default!r}{live}\n      {p.doc}")
    return 0
