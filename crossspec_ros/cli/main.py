"""The `crossspec` command: one subcommand per module in crossspec_ros/cli/.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func=run`` where ``run(args) -> int`` returns the exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Iterator

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
    "crossspec_ros.cli.corpus_cmd",
    "crossspec_ros.cli.caption_cmd",
    "crossspec_ros.cli.drive_cmd",
    "crossspec_ros.cli.node_cmd",
    "crossspec_ros.cli.play_cmd",
    "crossspec_ros.cli.convert_cmd",
    "crossspec_ros.cli.convert_bag_cmd",
    "crossspec_ros.cli.bench_cmd",
    "crossspec_ros.cli.params_cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crossspec",
        description="Live, lossless, cross-modal speculative captioning of driving scenes.",
    )
    parser.add_argument("--version", action="version", version=f"crossspec {__version__}")
    parser.add_argument("--verbose", action="store_true",
                        help="show model loading progress and library warnings (may come "
                        "anywhere on the command line)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


# Model loading is quiet unless asked (--verbose, anywhere before --ros-args): transformers
# otherwise prints a progress bar per model and advisories meant for its own developers.
QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def _take_verbose(argv: list[str]) -> tuple[list[str], bool]:
    ours = argv[:argv.index("--ros-args")] if "--ros-args" in argv else argv
    if "--verbose" not in ours:
        return argv, False
    at = argv.index("--verbose")
    return argv[:at] + argv[at + 1:], True


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stop_while_starting(_signum: int, _frame: object) -> None:
    """A Ctrl-C or SIGTERM that reaches `crossspec node` before the command takes the signals
    over: exit 0 at once and quietly, as later (launch reports any other exit as "process has
    died", and a KeyboardInterrupt here was a traceback and exit -2). Further signals are
    ignored: under launch a terminal's Ctrl-C comes twice, and the second would cut the exit
    short."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    raise SystemExit(0)


@contextlib.contextmanager
def _quiet_stop_while_starting(command: str | None) -> Iterator[None]:
    """For `crossspec node` (what launch starts): from the first line of ``main``, not only
    from node_cmd's handlers on, a signal stops the process with exit 0. Python imports every
    command and rclpy first, seconds on a loaded machine, and launch's Ctrl-C often comes then
    (issue 45, fault 5). The handlers are put back unless a signal came or the command took
    them over."""
    if command != "node":
        yield
        return
    previous = {signum: signal.signal(signum, _stop_while_starting) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if signal.getsignal(signum) is _stop_while_starting:
                signal.signal(signum, handler)


def main(argv: list[str] | None = None) -> int:
    argv, verbose = _take_verbose(list(sys.argv[1:] if argv is None else argv))
    with _quiet_stop_while_starting(argv[0] if argv else None):
        return _main(argv, verbose)


def _main(argv: list[str], verbose: bool) -> int:
    if not verbose:  # before any command imports transformers; an explicit setting wins
        for key, value in QUIET_ENV.items():
            os.environ.setdefault(key, value)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from crossspec_ros.models.errors import ModelLoadError  # no torch: a light module

    try:
        return int(args.func(args) or 0)
    except ModelLoadError as err:  # a model that cannot be used, whichever command loaded it
        name = " ".join(filter(None, (args.command, getattr(args, "bench", None))))
        print(f"crossspec {name}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`crossspec windows BAG --json | head`): stop quietly, and keep
        # the interpreter from complaining again while it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
