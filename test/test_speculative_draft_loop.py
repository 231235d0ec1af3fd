"""The draft loop (speculative/draft_loop.py) fed without ROS: event batches, confirmations and
the verifier's turns in, drafts out, a newer window always winning."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from dataclasses import replace

import pytest

from crossspec_ros.models.tiny import tiny_eventgpt_drafter
from crossspec_ros.params import DRAFT_NODE_PARAMS, validate
from crossspec_ros.sim.dataset import make_window
from crossspec_ros.speculative.draft_loop import DraftLoop
from crossspec_ros.speculative.loop_clock import ManualClock
from crossspec_ros.speculative.worker import UNTIL_WOKEN
from crossspec_ros.sync.synchronizer import WindowSynchronizer


@pytest.fixture(scope="module")
def drafter():
    return tiny_eventgpt_drafter(seed=1)


GENEROUS_S = 60  # the longest a test waits for a drafter thread (a slow, loaded machine)


class Drafts(list):
    """The drafts the loop hands over, in order: (window id, tokens, done, cut_short);
    ``first`` and ``done`` are set by the first draft and by the first complete one."""

    def __init__(self) -> None:
        super().__init__()
        self.first, self.done = threading.Event(), threading.Event()

    def __call__(self, window, event, _stats, _state, cut_short: bool) -> None:
        self.append((window.id, list(event.tokens), event.done, cut_short))
        self.first.set()
        if event.done:
            self.done.set()


def make_loop(drafter, clock: ManualClock | None = None, **params):
    """A loop on a manual clock; it drafts each window at its close at once unless a test
    gives ``step_aside_ms`` (the verifier ahead: a wait the test moves the clock through)."""
    drafts = Drafts()
    params = {"max_new_tokens": 6, "step_aside_ms": 0.0, **params}
    loop = DraftLoop(validate(params, DRAFT_NODE_PARAMS),
                     on_draft=drafts, clock=clock or ManualClock(), lock=threading.Lock())
    loop.configure(drafter, WindowSynchronizer(streams=("events",)))
    loop.start()
    return loop, drafts


def windows(n: int):
    first = make_window(23, 1, image_size=(64, 48), event_size=(64, 48)).as_window()
    return [replace(first, id=first.id + k, t0=first.t0 + k * 10**9, t1=first.t1 + k * 10**9)
            for k in range(n)]


def stepping(loop) -> threading.Thread:
    """The worker's step, begun on a thread of its own (a draft blocks until it is let go)."""
    step = threading.Thread(target=loop.step)
    step.start()
    return step


def drafted_until_done(loop, window, drafts) -> threading.Thread:
    """``window`` queued and the worker's step started, until its draft is done; the step,
    still running (a done draft waits for the verifier's confirmations)."""
    loop.enqueue([window])
    step = stepping(loop)
    assert drafts.done.wait(GENEROUS_S)
    return step


def test_a_window_is_drafted_token_by_token_and_let_go_when_the_verifier_is_done(drafter):
    loop, drafts = make_loop(drafter)
    [window] = windows(1)
    step = drafted_until_done(loop, window, drafts)
    # done, the draft waits to re-sync to the verifier's confirmations until it is done too
    assert step.is_alive()
    loop.on_confirmed(window.key, 0, [], "", done=True)
    step.join(GENEROUS_S)
    assert not step.is_alive()
    assert [len(tokens) for _, tokens, _, _ in drafts] == list(range(1, len(drafts) + 1))
    assert drafts[-1][2] and not any(cut for *_, cut in drafts)
    assert loop.windows_drafted == 1 and loop.windows_cut_short == 0
    assert loop.drafts_withheld == 0  # every token came before the verifier was done


def test_a_window_dropped_unstarted_is_announced_cut_short_with_no_tokens(drafter):
    loop, drafts = make_loop(drafter, max_queued_windows=1)
    first, second = windows(2)
    loop.enqueue([first, second])  # a queue of one: the first goes unstarted
    assert drafts == [(first.id, [], False, True)]
    assert loop.queue.dropped == 1 and loop.windows_cut_short == 1


def test_events_that_come_during_the_verifiers_turn_wait_for_its_end(drafter):
    loop, _ = make_loop(drafter)
    decoded = []
    loop.configure(drafter, loop.sync, decode=lambda packet: decoded.append(packet) or packet)
    [window] = windows(1)
    loop.hold()
    loop.add_events(window.events)
    assert decoded == [] and len(loop.held_packets) == 1
    loop.release_hold()
    loop.tick()
    assert decoded == [window.events] and not loop.held_packets


def test_the_loops_and_the_benchs_replay_of_them_never_import_rclpy():
    code = ("import sys, crossspec_ros.speculative.draft_loop, crossspec_ros.speculative."
            "verifier_loop, crossspec_ros.bench.live_replay; print('rclpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_a_window_the_verifier_already_finished_is_not_drafted_at_all(drafter):
    loop, drafts = make_loop(drafter)
    [first] = windows(1)
    loop.on_confirmed(first.key, 0, [], "", done=True)  # its caption is FINAL already
    loop.enqueue([first])
    assert loop.step() == 0.0  # at once: no compute, no draft after the FINAL caption
    assert loop.step() == UNTIL_WOKEN  # nothing left to do
    assert drafts == [] and loop.windows_skipped_final == 1 and loop.windows_drafted == 0
    assert loop.diagnostics["windows_skipped_final"] == 1


def verifier_done_at_the_close(loop, first_key: int, ms: float = 2.0) -> None:
    """Four windows before the drafter's: the verifier finished each ``ms`` after its close."""
    for k in range(4):
        loop.on_confirmed((0, first_key - 10 - k), 0, [], "", done=True, done_ms=ms)


def test_while_the_verifier_is_ahead_a_window_it_finishes_soon_after_the_close_is_not_drafted(
        drafter):
    clock = ManualClock()
    loop, drafts = make_loop(drafter, clock, step_aside_ms=50.0)
    woken = []
    loop.wake_worker = lambda: woken.append(clock.now())
    [window] = windows(1)
    verifier_done_at_the_close(loop, window.id)
    assert loop.schedule.verifier_ahead()
    loop.enqueue([window])
    assert loop.step() == 0.0 and loop.parked is not None  # taken, and parked at its close
    wait_s = loop.step()
    assert wait_s > 0.0 and drafts == []  # waiting, nothing computed
    clock.advance(wait_s / 2)
    assert loop.step() == pytest.approx(wait_s / 2)  # still waiting, for what is left
    woken.clear()
    loop.on_confirmed(window.key, 0, [], "", done=True, done_ms=3.0)
    assert woken  # the worker is woken: the parked window is decided now
    assert loop.step() == 0.0 and loop.parked is None
    assert drafts == [] and loop.windows_drafted == 0
    assert loop.windows_stepped_aside == 1 == loop.diagnostics["windows_stepped_aside"]


def test_a_window_the_verifier_has_not_finished_when_the_wait_ends_is_drafted(drafter):
    clock = ManualClock()
    loop, drafts = make_loop(drafter, clock, step_aside_ms=50.0)
    [window] = windows(1)
    verifier_done_at_the_close(loop, window.id)
    loop.enqueue([window])
    assert loop.step() == 0.0 and drafts == []  # parked
    wait_s = loop.step()
    assert wait_s > 0.0 and drafts == []  # waiting
    clock.advance(wait_s)  # the wait is over, and the verifier did not finish it
    step = stepping(loop)
    assert drafts.done.wait(GENEROUS_S)
    loop.on_confirmed(window.key, 0, [], "", done=True, done_ms=400.0)
    step.join(GENEROUS_S)
    assert drafts and drafts[-1][2] and loop.windows_drafted == 1
    assert loop.windows_stepped_aside == 0 and loop.parked is None


def test_a_window_parked_at_its_close_is_let_go_undrafted_when_the_loop_stops(drafter):
    loop, drafts = make_loop(drafter, step_aside_ms=50.0)
    [window] = windows(1)
    verifier_done_at_the_close(loop, window.id)
    loop.enqueue([window])
    assert loop.step() == 0.0 and loop.parked is not None
    loop.stop_taking()
    assert loop.step() == 0.0 and loop.parked is None  # no wait left: it is let go
    assert drafts == [] and loop.windows_drafted == 0


def test_two_slow_captions_of_the_last_four_end_the_stepping_aside(drafter):
    loop, _ = make_loop(drafter, step_aside_ms=20.0)
    [window] = windows(1)
    assert loop.schedule.verifier_ahead()  # nothing heard yet: ahead until shown otherwise
    verifier_done_at_the_close(loop, window.id, ms=2.0)
    loop.on_confirmed((0, window.id - 20), 0, [], "", done=True, done_ms=180.0)
    assert loop.schedule.verifier_ahead()  # one slow caption of four: still ahead
    loop.on_confirmed((0, window.id - 19), 0, [], "", done=True, done_ms=25.0)
    assert not loop.schedule.verifier_ahead()  # a 7B on a GPU: the drafter drafts at once
    off, _ = make_loop(drafter, step_aside_ms=0.0)
    verifier_done_at_the_close(off, window.id)
    assert not off.schedule.verifier_ahead()


def test_a_verifier_done_before_the_drafters_own_first_token_is_ahead(drafter):
    # 7B models on a GPU: the drafter's first token ~125 ms after the close, the verifier
    # done ~120 ms after it: a draft of the next window would come after its caption
    loop, _ = make_loop(drafter, step_aside_ms=30.0)
    [window] = windows(1)
    loop.schedule.draft_first_ms.extend([130.0, 124.0, 127.0, 140.0])
    verifier_done_at_the_close(loop, window.id, ms=120.0)
    assert loop.schedule.ahead_ms() == 128.5 and loop.schedule.verifier_ahead()
    loop.on_confirmed((0, window.id - 20), 0, [], "", done=True, done_ms=400.0)
    loop.on_confirmed((0, window.id - 19), 0, [], "", done=True, done_ms=300.0)
    assert not loop.schedule.verifier_ahead()  # decoding past the first draft token: draft now


def test_a_verifier_that_finishes_nothing_in_the_wait_stops_it_after_two_windows(drafter):
    # a draft node whose verifier is slow, or gone (a split deployment's link down), waits
    # for the first two windows only, then drafts each at once
    loop, drafts = make_loop(drafter, step_aside_ms=5.0)
    clock = loop.clock
    for window in windows(2):
        assert loop.schedule.verifier_ahead()
        loop.enqueue([window])
        assert loop.step() == 0.0  # parked at the close
        clock.advance(loop.step())  # the wait is over: nothing finished
        drafts.done.clear()
        step = stepping(loop)
        assert drafts.done.wait(GENEROUS_S)
        loop.on_confirmed(window.key, 0, [], "", done=True)  # long after: let it go
        step.join(GENEROUS_S)
        assert drafts[-1][0] == window.id and drafts[-1][2]  # drafted after the wait
        drafts.clear()
    assert list(loop.schedule.verifier_done_ms) == [math.inf, math.inf]
    assert not loop.schedule.verifier_ahead() and loop.windows_stepped_aside == 0


def test_a_newer_window_stops_the_draft_in_progress_not_the_one_the_worker_just_began(drafter):
    # the worker may take the newer window off the queue and begin it between its put and the
    # stop (a suite run under load stopped the newer window's draft, leaving the old one going)
    from crossspec_ros.speculative.drafting import DraftChannel

    loop, _ = make_loop(drafter)
    old, new = windows(2)
    in_progress, just_begun = DraftChannel(lookahead=4), DraftChannel(lookahead=4)
    loop.cursor.begin(old.key, in_progress)
    put = loop.queue.put

    def put_then_the_worker_begins_it(window, now):
        dropped = put(window, now)
        loop.cursor.begin(window.key, just_begun)
        return dropped

    loop.queue.put = put_then_the_worker_begins_it
    loop.enqueue([new])
    assert in_progress.stopped and not just_begun.stopped


def test_a_verifier_in_this_process_stops_the_windows_draft_the_moment_it_finishes(drafter):
    # composed: the verifier loop says so through VerifierFirst before its FINAL leaves, so
    # the draft node need not wait for the ConfirmedTokens to come round through the executor
    from crossspec_ros.speculative.verifier_first import VerifierFirst

    loop, drafts = make_loop(drafter, step_aside_ms=0.0, max_new_tokens=48)
    shared = VerifierFirst(0.0)
    shared.add_drafter(lambda: None, lambda: None, loop.on_finished)
    [window] = windows(1)
    loop.enqueue([window])
    step = stepping(loop)
    assert drafts.first.wait(GENEROUS_S)
    shared.finished(window.key, 12.0)
    step.join(GENEROUS_S)
    assert not step.is_alive()  # stopped, not lingering for confirmations
    assert drafts and not any(cut for *_, cut in drafts)  # finished, not "cut short"
    loop.on_confirmed(window.key, 0, [], "", done=True, done_ms=12.0)  # the topic's, later
    assert list(loop.schedule.verifier_done_ms) == [12.0]  # heard twice, counted once
    shared.remove_drafters()
    shared.finished(windows(2)[1].key, 5.0)
    assert list(loop.schedule.verifier_done_ms) == [12.0]  # a drafter removed hears nothing


def _packets(batch, t_from: int, t_to: int, step_ns: int = 20_000_000):
    """``batch``'s events in [t_from, t_to) as 20 ms packets, in order."""
    return [p for start in range(t_from, t_to, step_ns)
            if len(p := batch.between(start, min(start + step_ns, t_to)))]


def test_a_window_is_drafted_before_its_close_from_its_events_so_far_and_not_again_at_it(
        drafter):
    loop, drafts = make_loop(drafter, draft_lead_ms=200.0, max_new_tokens=48)
    read = []  # the last event stamp each published draft read
    on_draft = loop.on_draft
    loop.on_draft = lambda w, *a: (read.append(int(w.events.t_last)), on_draft(w, *a))
    [window] = windows(1)
    t_lead = window.t1 - 200_000_000
    for packet in _packets(window.events, window.t0, t_lead - 50_000_000):
        loop.add_events(packet)
    assert len(loop.queue) == 0  # the window's end is not within the lead yet
    for packet in _packets(window.events, t_lead - 50_000_000, t_lead + 20_000_000):
        loop.add_events(packet)
    assert len(loop.queue) == 1 and loop.schedule.counts["early"] == 1
    step = stepping(loop)
    assert drafts.done.wait(GENEROUS_S)
    assert drafts and drafts[-1][2]  # complete, and the window is still open
    assert max(read) < t_lead + 20_000_000  # the draft read the events so far only
    # the rest of the window and the next one's first events, 0.2 s later: it closes, and
    # is not queued
    loop.clock.advance(0.2)
    for packet in _packets(window.events, t_lead + 20_000_000, window.t1):
        loop.add_events(packet)
    loop.add_events(replace(window.events.between(window.t0, window.t0 + 10_000_000),
                            t=window.events.between(window.t0, window.t0 + 10_000_000).t
                            + 10**9 + 50_000_000))
    assert len(loop.queue) == 0 and loop.schedule.counts["drafted_early"] == 1
    loop.on_confirmed(window.key, 0, [], "", done=True, done_ms=1.0)
    step.join(GENEROUS_S)
    (timing,) = list(loop.timings)
    assert timing.early and timing.closed and timing.complete_ms < 0  # before the close
    assert timing.events_unread > 0 and timing.events_total == len(window.events)
    summary = loop.draft_summary()
    assert (summary["drafts"], summary["early"], summary["complete_before_close"]) == (1, 1, 1)
    assert loop.diagnostics["events_not_drafted"] == timing.events_unread


def test_without_a_lead_a_window_is_drafted_at_its_close_from_all_its_events(drafter):
    loop, drafts = make_loop(drafter, draft_lead_ms=0.0, step_aside_ms=0.0)
    [window] = windows(1)
    for packet in _packets(window.events, window.t0, window.t1):
        loop.add_events(packet)
    assert len(loop.queue) == 0  # open: nothing drafted yet
    loop.enqueue([window])  # it closes
    assert len(loop.queue) == 1
    step = stepping(loop)
    assert drafts.done.wait(GENEROUS_S)
    loop.on_confirmed(window.key, 0, [], "", done=True)
    step.join(GENEROUS_S)
    (timing,) = list(loop.timings)
    assert not timing.early and timing.events_unread == 0
    assert loop.schedule.counts["at_close"] == 1 and timing.complete_ms >= 0
