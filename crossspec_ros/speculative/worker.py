"""A worker thread for a loop's steps (``VerifierLoop.step``, ``DraftLoop.step``)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Worker:
    """A daemon thread running ``step`` until stopped: inference never runs in an executor
    callback, so subscriptions keep flowing while a model works."""

    def __init__(self, name: str, step: Callable[[], None], on_error: Callable[[str], None]
                 ) -> None:
        self._stop = threading.Event()
        self._step, self._on_error = step, on_error
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as err:  # a bad window must not end the node
                self._on_error(f"{type(err).__name__}: {err}")

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout)
