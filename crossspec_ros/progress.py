"""Progress of long work, one way for every command: a tqdm bar on a terminal, a plain line
every tenth of the way in a log."""

from __future__ import annotations

import sys
import time
from typing import Any


def progress_bar(total: int, desc: str) -> Any:
    """A tqdm bar on a terminal; in a log (stderr redirected), a line every tenth of the way."""
    from tqdm import tqdm

    if sys.stderr.isatty():
        return tqdm(total=total, desc=desc, file=sys.stderr, mininterval=1.0)
    return LogLines(total, desc)


class LogLines:
    """The part of tqdm's interface used here, printing plain lines for log files."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.n = max(total, 1), desc, 0
        self.postfix = ""
        self.started = time.perf_counter()
        self._shown: tuple[int, int] | None = None  # (n, total) of the last line printed

    def update(self, n: int = 1) -> None:
        before, self.n = self.n, self.n + n
        if before * 10 // self.total != self.n * 10 // self.total or self.n == self.total:
            self.refresh()

    def refresh(self) -> None:
        """Print the line now, unless it would repeat the last one."""
        if self._shown == (self.n, self.total):
            return
        self._shown = (self.n, self.total)
        elapsed = time.perf_counter() - self.started
        print(f"{self.desc}: {self.n}/{self.total} ({elapsed:.0f} s){self.postfix}",
              file=sys.stderr, flush=True)

    def set_postfix(self, refresh: bool = False, **values: object) -> None:
        self.postfix = "".join(f" {k} {v}" for k, v in values.items())

    def close(self) -> None:
        pass

    def __enter__(self) -> LogLines:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
