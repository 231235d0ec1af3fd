"""A worker thread for a loop's steps (``VerifierLoop.step``, ``DraftLoop.step``): the thread,
and the waiting between steps, live here; the loops only decide."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

IDLE_WAIT_S = 0.2  # the longest a worker sleeps between steps, woken or not
UNTIL_WOKEN = math.inf  # a step's answer when it has nothing to do until new work comes


class Worker:
    """A daemon thread running ``step`` until stopped: inference never runs in an executor
    callback, so subscriptions keep flowing while a model works. ``step()`` returns how long
    the worker may wait before the next step (0: at once); ``wake()`` (new work: a window
    queued, frames to prefill, the verifier finished a window) ends that wait early."""

    def __init__(self, name: str, step: Callable[[], float],
                 on_error: Callable[[str], None]) -> None:
        self._stop = threading.Event()
        self._bell = threading.Event()
        self._step, self._on_error = step, on_error
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    @classmethod
    def serving(cls, name: str, loop: Any, on_error: Callable[[str], None]) -> Worker:
        """A worker for ``loop`` (a VerifierLoop or DraftLoop): runs its ``step``, and the
        loop wakes it through ``wake_worker``."""
        worker = cls(name, loop.step, on_error)
        loop.wake_worker = worker.wake
        return worker

    def start(self) -> None:
        self.thread.start()

    def wake(self) -> None:
        self._bell.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._bell.clear()  # before the step: a wake during it ends the wait after it
            try:
                wait_s = self._step()
            except Exception as err:  # a bad window must not end the node
                self._on_error(f"{type(err).__name__}: {err}")
                wait_s = IDLE_WAIT_S
            if wait_s > 0:
                self._bell.wait(min(wait_s, IDLE_WAIT_S))

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._bell.set()
        if self.thread.is_alive():
            self.thread.join(timeout)
