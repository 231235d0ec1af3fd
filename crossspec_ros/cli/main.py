"""The `crossspec` command: one subcommand per module in crossspec_ros/cli/.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func=run`` where ``run(args) -> int`` returns the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from crossspec_ros import __version__

# Imported lazily so `crossspec --help` stays fast and a missing optional dependency of one
# command does not break the others.
COMMAND_MODULES = [
    "crossspec_ros.cli.events_cmd",
    "crossspec_ros.cli.windows_cmd",
    "crossspec_ros.cli.test_bag_cmd",
    "crossspec_ros.cli.sample_cmd",
    "crossspec_ros.cli.train_cmd",
    "crossspec_ros.cli.distill_cmd",
    "crossspec_ros.cli.caption_cmd",
    "crossspec_ros.cli.drive_cmd",
    "crossspec_ros.cli.node_cmd",
    "crossspec_ros.cli.play_cmd",
    "crossspec_ros.cli.convert_cmd",
    "crossspec_ros.cli.bench_cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crossspec",
        description="Live, lossless, cross-modal speculative captioning of driving scenes.",
    )
    parser.add_argument("--version", action="version", version=f"crossspec {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
