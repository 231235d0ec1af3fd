"""The worker (speculative/worker.py): the thread and the waiting the loops leave to it."""

from __future__ import annotations

import threading

from crossspec_ros.speculative.worker import UNTIL_WOKEN, Worker

GENEROUS_S = 30  # the longest a test waits for the worker thread (a slow, loaded machine)


class Steps:
    """A loop's stand-in: each step is counted and answers what the test has set."""

    def __init__(self, answers: list) -> None:
        self.answers, self.taken = answers, threading.Semaphore(0)
        self.wake_worker = None

    def step(self) -> float:
        answer = self.answers.pop(0) if self.answers else UNTIL_WOKEN
        self.taken.release()
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_a_worker_steps_again_when_woken_and_wires_itself_to_its_loop():
    loop = Steps([UNTIL_WOKEN])
    worker = Worker.serving("test-worker", loop, on_error=lambda _e: None)
    assert loop.wake_worker == worker.wake
    worker.start()
    try:
        assert loop.taken.acquire(timeout=GENEROUS_S)  # the first step: nothing to do
        worker.wake()
        assert loop.taken.acquire(timeout=GENEROUS_S)  # woken: stepped again
    finally:
        worker.stop()
    assert not worker.thread.is_alive()


def test_a_failing_step_is_reported_and_the_worker_goes_on():
    errors = []
    loop = Steps([RuntimeError("bad window"), 0.0])
    worker = Worker.serving("test-worker", loop, on_error=errors.append)
    worker.start()
    try:
        for _ in range(3):  # the failure, then the steps after it
            assert loop.taken.acquire(timeout=GENEROUS_S)
    finally:
        worker.stop()
    assert errors == ["RuntimeError: bad window"]
