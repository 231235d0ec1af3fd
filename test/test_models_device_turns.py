"""One device's turns for several streams' calls (crossspec_ros/models/device_turns.py):
earliest deadline first, ties in the order asked, reentrant, and installed on a model's
forward and vision calls."""

from __future__ import annotations

import threading
import time

import pytest

from crossspec_ros.models.device_turns import DeviceTurns, due_by

WAIT_S = 60.0  # generous: only a hang fails on it


def _wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


def _waiters_in_turn(turns: DeviceTurns, dues: list[float | None]) -> list[int]:
    """Start one thread per due while this thread holds the turn; once all wait, let go;
    returns the order (indices into ``dues``) in which they got the turn."""
    got: list[int] = []

    def ask(i: int, due: float | None) -> None:
        if due is None:
            with turns.turn():
                got.append(i)
        else:
            with due_by(due), turns.turn():
                got.append(i)

    turns.acquire()
    threads = []
    for i, due in enumerate(dues):  # one at a time: the order asked is the order started
        threads.append(threading.Thread(target=ask, args=(i, due)))
        threads[-1].start()
        _wait_until(lambda n=i + 1: len(turns._waiting) == n, f"{i + 1} waiters")
    turns.release()
    for t in threads:
        t.join(WAIT_S)
    return got


def test_the_call_due_first_gets_the_device_next_whatever_order_they_asked_in():
    turns = DeviceTurns(clock=lambda: 1000.0)
    assert _waiters_in_turn(turns, [3.0, 1.0, 2.0, 1.0]) == [1, 3, 2, 0]
    assert turns.turns == 5 and turns.waited_turns == 4


def test_calls_that_say_no_deadline_are_due_when_they_ask_so_closed_windows_go_first():
    now = [10.0]
    turns = DeviceTurns(clock=lambda: now[0])
    # no deadline: due at the clock when asked (10.0), so one due at 5.0 overtakes it
    assert _waiters_in_turn(turns, [None, 5.0, None]) == [1, 0, 2]


def test_a_call_within_a_call_does_not_wait_and_a_stray_release_changes_nothing():
    turns = DeviceTurns()
    with turns.turn():
        with turns.turn():  # the same thread: no deadlock
            pass
        other = threading.Thread(target=turns.release)  # not the holder: ignored
        other.start()
        other.join(WAIT_S)
        assert turns._holder == threading.get_ident()
    assert turns._holder is None and turns.turns == 1 and turns.busy_s >= 0.0


def test_installed_on_a_model_every_forward_and_vision_call_takes_a_turn_and_undo_removes_it():
    from crossspec_ros.models.tiny import tiny_verifier

    verifier = tiny_verifier(seed=1)
    turns = DeviceTurns()
    held_during: list[bool] = []
    lm = verifier.language_model_parts()[0]
    probe = lm.register_forward_pre_hook(
        lambda *_: held_during.append(turns._holder == threading.get_ident()))
    undo = turns.install(verifier)
    twin = verifier.with_runtime(None)  # twins taken after install share the hooks
    from crossspec_ros.bench.engine import pattern_windows

    window = pattern_windows(1)[0]
    tokens = twin.generate_greedy(twin.prepare(window), 3)
    assert tokens and held_during and all(held_during)
    assert turns.turns >= len(held_during) + 1  # every forward, and the vision call
    undo()
    before = turns.turns
    verifier.with_runtime(None).generate_greedy(verifier.prepare(window), 3)
    assert turns.turns == before
    probe.remove()

