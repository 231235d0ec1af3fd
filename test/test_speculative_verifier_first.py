"""VerifierFirst without ROS: a drafter in the verifier's process pauses while the verifier
works on a closed window, for at most the bound, and goes on when the verifier is done; a
paused drafter does not start its prefill."""

from __future__ import annotations

import threading
import time

from crossspec_ros.speculative.drafting import DraftChannel, run_drafter
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.speculative.verifier_first import VerifierFirst


def recorder():
    calls: list[str] = []
    return calls, (lambda: calls.append("pause")), (lambda: calls.append("resume"))


def test_the_drafter_is_paused_for_the_verifiers_turn_and_resumed_after():
    first = VerifierFirst(max_pause_s=5.0)
    calls, pause, resume = recorder()
    first.add_drafter(pause, resume)
    with first.turn():
        assert calls == ["pause"] and first.paused
    assert calls == ["pause", "resume"] and not first.paused
    assert (first.pauses, first.pauses_cut) == (1, 0)


def wait_for(predicate, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def test_a_long_turn_pauses_the_drafter_no_longer_than_the_bound():
    first = VerifierFirst(max_pause_s=0.05)
    calls, pause, resume = recorder()
    first.add_drafter(pause, resume)
    with first.turn():  # a slow verifier (still in its turn): the draft still comes
        assert wait_for(lambda: calls == ["pause", "resume"]), calls
        assert not first.paused
    assert calls == ["pause", "resume"]  # resumed once, not twice
    assert first.pauses_cut == 1


def test_a_bound_of_zero_never_pauses():
    first = VerifierFirst(max_pause_s=0.0)
    calls, pause, resume = recorder()
    first.add_drafter(pause, resume)
    with first.turn():
        pass
    assert calls == []


def test_a_paused_channel_holds_the_drafter_before_its_prefill():
    class Drafter:
        info = None
        prefilled = threading.Event()

        def prepare(self, window):
            return window

        def prefill(self, inputs):
            self.prefilled.set()
            raise RuntimeError("stop here")  # run_drafter reports it and ends

    drafter = Drafter()
    channel = DraftChannel(lookahead=0)
    errors = []
    thread = threading.Thread(target=run_drafter, args=(
        drafter, None, channel, lambda kind, **f: errors.append(f), WindowStats(), 8))
    thread.start()
    assert not drafter.prefilled.wait(0.2) and not errors  # held, not failed
    channel.set_lookahead(8)
    assert drafter.prefilled.wait(5.0)
    thread.join(5.0)
    assert errors and "stop here" in errors[0]["text"]
