"""What long-running commands need to end well however they are stopped: JSON lines written
as results come (never an unreadable file under the final name), and SIGTERM treated like
Ctrl-C (systemd, docker and launch escalation send SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class JsonLinesFile:
    """JSON lines for ``path``: rows are appended (and flushed) to a hidden sibling as they
    come, and not kept in memory (a run may not end); ``finish(lines)`` replaces them by the
    final content, ``finish_after_rows(lines)`` keeps them and adds ``lines``; either renames
    the sibling to ``path``. After a kill, only the sibling (``.NAME.partial``, every row so
    far) is left."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.partial = self.path.with_name(f".{self.path.name}.partial")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._out = self.partial.open("w")

    def add(self, row: dict[str, Any]) -> None:
        if not self._out.closed:
            self._out.write(json.dumps(row) + "\n")
            self._out.flush()

    def finish(self, lines: list[dict[str, Any]]) -> Path:
        """Replace the streamed rows by ``lines`` (the final, enriched rows and a summary)."""
        self._out.close()
        with self.partial.open("w") as out:
            for line in lines:
                out.write(json.dumps(line) + "\n")
        os.replace(self.partial, self.path)
        return self.path

    def finish_after_rows(self, lines: list[dict[str, Any]]) -> Path:
        """Keep the streamed rows as they are and add ``lines`` (a summary) after them."""
        for line in lines:
            self.add(line)
        self._out.close()
        os.replace(self.partial, self.path)
        return self.path


# what stops a command that cleans up after itself: Ctrl-C, kill/systemd/docker/launch, a
# closed terminal
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def sigterm_as_interrupt(ends_process: bool = False,
                         signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)
                         ) -> Iterator[dict[str, int]]:
    """Within the block SIGINT and SIGTERM (or ``signals``) raise KeyboardInterrupt once, so
    one clean shutdown path serves all; after that all are ignored until the block ends, so the
    cleanup is not cut short (launch forwards a terminal's Ctrl-C a second time), and a
    repeated signal does nothing. Then the handlers before the block come back, unless
    ``ends_process`` and a signal stopped the block: the command is ending, and a repeated
    signal after the block must not kill it on its way out (under ros2 launch a terminal's
    Ctrl-C comes twice, the terminal's and launch's: a second one 10-150 ms after the first
    killed `crossspec play` after its summary, exit -2). Yields {"signal": number of the
    stop signal (0: none)} for the exit code (and ``signals_deferred``)."""
    caught = {"signal": 0, "deferred": 0}

    def stop(signum: int, _frame: Any) -> None:
        if caught["signal"]:  # the same stop asked again: already on its way
            return
        caught["signal"] = signum
        for each in signals:
            signal.signal(each, signal.SIG_IGN)
        if not caught["deferred"]:
            raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in signals}
    try:
        yield caught
    finally:
        if not (ends_process and caught["signal"]):
            for signum, handler in previous.items():
                signal.signal(signum, handler)


@contextmanager
def signals_deferred(caught: dict[str, int]) -> Iterator[None]:
    """Within ``sigterm_as_interrupt``'s block (``caught``: what it yielded): a stop signal
    during this block raises nothing, it is only noted in ``caught["signal"]``, so a shutdown
    (nodes destroyed, a recording or a JSON file finished) runs to its end; the caller reads
    ``caught`` after. Unlike blocking the signals (``signal.pthread_sigmask``), this holds in a
    process with other threads too: Python runs a signal's handler in the main thread
    whichever thread the kernel delivered it to."""
    caught["deferred"] += 1
    try:
        yield
    finally:
        caught["deferred"] -= 1


def exit_code_for(caught: dict[str, int]) -> int:
    """128 + the signal that stopped the command (130 for Ctrl-C, 143 for SIGTERM)."""
    return 128 + (caught["signal"] or signal.SIGINT)
