"""argparse types for options whose bad values must be refused before anything loads.

A value argparse refuses ends the command at once with exit code 2 and, with
``one_line_errors``, one line that names the option, the value and what is accepted (a NaN
``--rate`` once loaded both models and then died in a traceback).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def replay_rate(text: str) -> float:
    """A bag replay rate: 1 is recorded speed, 2 twice as fast, 0 or inf as fast as possible
    (what ``BagPlayer`` accepts); negative and NaN are refused."""
    rate = _number(text)
    if math.isnan(rate) or rate < 0:
        raise argparse.ArgumentTypeError(
            f"must be >= 0 (1: recorded speed, 0 or inf: as fast as possible), got {text}")
    return rate


def positive_seconds(text: str) -> float:
    """A length of time in seconds: finite and > 0."""
    seconds = _number(text)
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return seconds


def port_number(text: str) -> int:
    """A TCP port to listen on: 1..65535, or 0 for any free port."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"must be a port 1..65535 (0: any free port), got {text}")
    return port


def whole_number(minimum: int, meaning: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum`` (``meaning``: what its lowest value
    means, said when refused), or one line saying what was expected."""
    expected = f"a whole number >= {minimum}" + (f" ({meaning})" if meaning else "")

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
        return value

    return parse


def namespace_name(text: str) -> str:
    """A ROS namespace (``/robot1`` or ``robot1``), without its slashes."""
    from crossspec_ros.nodes.isolation import check_namespace

    try:
        return check_namespace(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` reporting a bad command line in one line on stderr (exit code 2), not
    its usage followed by the error: "crossspec drive: argument --rate: must be >= 0 ...,
    got -1 (crossspec drive --help: the options)"."""
    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: {message} ({parser.prog} --help: the options)\n")

    parser.error = error  # type: ignore[method-assign]
    return parser
