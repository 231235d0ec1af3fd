"""`crossspec bench NAME`: benchmarks that print and save numbers (never timed unit tests)."""

from __future__ import annotations

import argparse
import importlib

# Each module exposes register(subparsers) like the top-level commands.
BENCH_MODULES = [
    "crossspec_ros.bench.change_signal",
    "crossspec_ros.bench.decode",
    "crossspec_ros.bench.distill",
    "crossspec_ros.bench.engine_cmd",
    "crossspec_ros.bench.event_rate",
    "crossspec_ros.bench.exactness",
    "crossspec_ros.bench.fuzz",
    "crossspec_ros.bench.lossy",
    "crossspec_ros.bench.gpu_kit",
    "crossspec_ros.bench.gpu_report",
    "crossspec_ros.bench.passes",
    "crossspec_ros.bench.split",
    "crossspec_ros.bench.startup",
    "crossspec_ros.bench.streams_cmd",
]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "bench", help="run a benchmark (prints its numbers; --json, --out or --plot save them)",
        description="Benchmarks. Each prints its numbers and can save them as JSON.",
    )
    bench_sub = parser.add_subparsers(dest="bench", metavar="BENCHMARK")
    for name in BENCH_MODULES:
        importlib.import_module(name).register(bench_sub)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
