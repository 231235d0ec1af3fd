"""Who computes first when the drafter and the verifier share one process (composed mode).

In one process the two models share the CPU's cores and one interpreter lock, and a closed
window is the verifier's latency-critical moment: with live prefill only the question and the
first proposal are left, a few milliseconds of work. A drafter decoding beside it takes half of
that: on the sample bag (bundled pair, 2 cores) the verifier node confirmed 9.5 ms after the
close alone and 22.6 ms with the draft node drafting in the same process (its prefill after
the close 5.0 -> 13.3 ms), with the drafts' tokens taken no more often.

So the verifier goes first: while it works on a closed window the drafter pauses (between two
tokens, or before its prefill), for at most ``max_pause_s`` at a time, and goes on the moment
the verifier is done. The draft of a window the verifier is slow on still comes (the pause is
bounded); one it confirms at once was not needed before its caption.

    verifier:  ...live frames...|close| finish + rounds |FINAL
    drafter:   prefill, tokens..|   paused (<= max)     | tokens...

Pure Python: the verifier node calls ``turn()`` around a window; the draft node registers how
to pause and resume its drafter (``DraftChannel.set_lookahead``) and leaves the event packets
that come meanwhile for after; the viz node reads ``paused`` and skips drawing meanwhile. The
verifier also says here when it finished a window (``finished``), before its FINAL caption
leaves: the draft node in this process hears it at once, not through the executor a few ms
later, so no draft token of that window follows the FINAL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class VerifierFirst:
    """See the module docstring. ``max_pause_s`` <= 0: the drafter never pauses."""

    def __init__(self, max_pause_s: float) -> None:
        self.max_pause_s = max_pause_s
        self._lock = threading.Lock()
        self._drafters: list[tuple[Callable[[], None], Callable[[], None]]] = []
        self._finished_listeners: list[Callable[[Any, float], None]] = []
        self._paused = False
        self._timer: threading.Timer | None = None
        self.pauses = 0          # the verifier's turns that held the others
        self.pauses_cut = 0      # of those, ended by max_pause_s rather than the verifier

    def add_drafter(self, pause: Callable[[], None], resume: Callable[[], None],
                    finished: Callable[[Any, float], None] | None = None) -> None:
        """A drafter in this process: ``pause()`` holds it, ``resume()`` lets it go on,
        ``finished(window key, ms after its close)`` tells it the verifier finished a
        window."""
        with self._lock:
            self._drafters.append((pause, resume))
            if finished is not None:
                self._finished_listeners.append(finished)

    def remove_drafters(self) -> None:
        with self._lock:
            self._end(cut=False)
            self._drafters.clear()
            self._finished_listeners.clear()

    def finished(self, key: Any, done_ms: float) -> None:
        """The verifier finished window ``key``, ``done_ms`` after its close (its FINAL
        caption about to leave)."""
        with self._lock:
            listeners = list(self._finished_listeners)
        for listener in listeners:  # outside the lock: a listener may take its own
            listener(key, done_ms)

    @property
    def paused(self) -> bool:
        """The drafters are held now (a drafter starting a window starts it held)."""
        return self._paused

    @contextmanager
    def turn(self) -> Iterator[None]:
        """The verifier works on a closed window for the duration of the block."""
        with self._lock:
            if self.max_pause_s > 0 and not self._paused:
                self._paused = True
                self.pauses += 1
                for pause, _ in self._drafters:
                    pause()
                self._timer = threading.Timer(self.max_pause_s, self._cut)
                self._timer.daemon = True
                self._timer.start()
        try:
            yield
        finally:
            with self._lock:
                self._end(cut=False)

    def _cut(self) -> None:
        with self._lock:
            self._end(cut=True)

    def _end(self, cut: bool) -> None:
        """Resume the drafters (under the lock)."""
        if not self._paused:
            return
        self._paused = False
        self.pauses_cut += cut
        if self._timer is not None and not cut:
            self._timer.cancel()
        self._timer = None
        for _, resume in self._drafters:
            resume()
