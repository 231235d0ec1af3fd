"""The verifier loop (speculative/verifier_loop.py) fed without ROS: windows, drafts and stops
in, captions and confirmed tokens out, in the order the caption protocol promises."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
from synthetic_windows import random_window

from crossspec_ros.models.tiny import tiny_verifier
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine
from crossspec_ros.speculative.loop_clock import ManualClock
from crossspec_ros.speculative.verifier_loop import VerifierLoop
from crossspec_ros.speculative.worker import UNTIL_WOKEN
from crossspec_ros.sync.captions import CaptionStatus, UnverifiedReason
from crossspec_ros.sync.synchronizer import WindowSynchronizer

FINAL, DRAFT, UNVERIFIED = CaptionStatus.FINAL, CaptionStatus.DRAFT, CaptionStatus.UNVERIFIED


class Recorder:
    """What the loop hands over, in order."""

    def __init__(self) -> None:
        self.captions, self.confirmed, self.warnings, self.results = [], [], [], []


@pytest.fixture(scope="module")
def verifier():
    return tiny_verifier(seed=1)


def final_draft(loop: VerifierLoop, window, text: str = "a red car") -> None:
    """A complete draft of ``window``: a window the verifier gives up on ends UNVERIFIED with
    it at once (without one the book waits for it, up to its patience)."""
    loop.on_draft(window.key, window.t0, window.t1, text=text, first_token_ms=9.0, done=True,
                  cut_short=False, tokens=[5, 6], revision=1)


def make_loop(verifier, max_queued: int = 2) -> tuple[VerifierLoop, Recorder]:
    out = Recorder()
    loop = VerifierLoop(patience_s=5.0, max_queued=max_queued,
                        on_captions=out.captions.extend,
                        on_confirmed=lambda w, e, s: out.confirmed.append((w.key, e)),
                        clock=ManualClock(), lock=nullcontext(), warn=out.warnings.append,
                        on_result=lambda w, r: out.results.append((w.key, r)))
    engine = SpeculativeEngine(verifier, None, EngineConfig(max_new_tokens=12))
    loop.configure(engine, WindowSynchronizer())
    loop.start(max_queued)
    return loop, out


def test_a_closed_window_ends_in_one_final_caption_that_is_the_verifiers_own(verifier):
    loop, out = make_loop(verifier)
    window = random_window(3)
    loop.enqueue([window])
    loop.step()
    alone = loop.engine.verifier_only(window)
    [(key, result)] = out.results
    assert key == window.key and result.tokens == alone
    assert [c.status for c in out.captions if c.finished] == [FINAL]
    assert [t for _, event in out.confirmed for t in event.tokens] == alone
    assert out.confirmed[-1][1].done
    assert loop.counters["windows_verified"] == 1 and loop.book.is_finished(window.key)


def test_a_draft_shows_first_then_the_final_caption_of_the_same_window(verifier):
    loop, out = make_loop(verifier)
    window = random_window(4)
    final_draft(loop, window)
    assert [(c.key, c.status) for c in out.captions] == [(window.key, DRAFT)]
    loop.enqueue([window])
    loop.step()
    assert out.captions[0].status is DRAFT and out.captions[-1].status is FINAL
    assert out.captions[-1].draft_text == "a red car"
    assert window.key not in loop.channels  # the draft's channel went with the window


def test_a_window_dropped_from_a_full_queue_ends_unverified_as_busy(verifier):
    loop, out = make_loop(verifier, max_queued=1)
    first, second = random_window(5), random_window(6)
    final_draft(loop, first)
    loop.enqueue([first, second])
    [draft, caption] = out.captions
    assert draft.status is DRAFT
    assert (caption.key, caption.status) == (first.key, UNVERIFIED)
    assert caption.unverified_reason is UnverifiedReason.VERIFIER_BUSY
    assert caption.draft_text == "a red car"
    assert "dropped window 5" in out.warnings[0] and loop.queue.dropped == 1
    loop.step()
    assert out.captions[-1].key == second.key and out.captions[-1].status is FINAL


def test_a_failing_engine_ends_its_window_unverified_as_failed_and_the_next_runs(verifier,
                                                                              monkeypatch):
    loop, out = make_loop(verifier)
    bad, good = random_window(7), random_window(8)
    run_window = loop.engine.run_window

    def fail_once(window, **kwargs):
        if window.key == bad.key:
            raise RuntimeError("out of memory")
        return run_window(window, **kwargs)

    monkeypatch.setattr(loop.engine, "run_window", fail_once)
    final_draft(loop, bad)
    loop.enqueue([bad, good])
    with pytest.raises(RuntimeError, match="out of memory"):
        loop.step()  # the node's worker logs and counts it
    loop.step()
    finished = [(c.key, c.status, c.unverified_reason) for c in out.captions if c.finished]
    assert finished == [(bad.key, UNVERIFIED, UnverifiedReason.VERIFIER_FAILED),
                        (good.key, FINAL, UnverifiedReason.NONE)]


def test_stopping_ends_the_queued_windows_unverified_and_relays_later_drafts(verifier):
    loop, out = make_loop(verifier)
    queued = random_window(9)
    loop.enqueue([queued])
    loop.stop_taking()
    loop.end_open_windows(publish=True)
    loop.on_draft(queued.key, queued.t0, queued.t1, text="a bus", first_token_ms=5.0,
                  done=True, cut_short=False, tokens=[7], revision=1)
    loop.tick()
    statuses = [(c.key, c.status, c.unverified_reason) for c in out.captions if c.finished]
    assert statuses == [(queued.key, UNVERIFIED, UnverifiedReason.VERIFIER_STOPPED)]
    assert [c.draft_text for c in out.captions if c.finished] == ["a bus"]
    assert out.results == [] and len(loop.queue) == 0


def test_a_live_parameter_change_reaches_the_engine_from_the_next_window(verifier):
    loop, out = make_loop(verifier)
    loop.reconfigure(EngineConfig(max_new_tokens=3))
    loop.enqueue([random_window(10)])
    loop.step()
    [(_, result)] = out.results
    assert loop.engine.config.max_new_tokens == 3 and len(result.tokens) <= 3


def test_a_drafted_window_no_frame_comes_for_ends_unverified_once_its_patience_is_over(
        verifier):
    # decided on the clock the loop is given: moved by hand, no test waits for it
    loop, out = make_loop(verifier)
    window = random_window(11)
    final_draft(loop, window)
    loop.tick()
    loop.clock.advance(4.9)
    loop.tick()
    assert not any(c.finished for c in out.captions)  # still within its patience (5 s)
    loop.clock.advance(0.2)
    loop.tick()
    [caption] = [c for c in out.captions if c.finished]
    assert (caption.key, caption.status, caption.draft_text) == (window.key, UNVERIFIED,
                                                                  "a red car")


def test_a_queued_window_wakes_the_worker_and_a_step_with_nothing_queued_says_so(verifier):
    loop, out = make_loop(verifier)
    woken = []
    loop.wake_worker = lambda: woken.append(len(loop.queue))
    assert loop.step() == UNTIL_WOKEN and woken == []
    loop.enqueue([random_window(12)])
    assert woken == [1]  # woken with the window queued
    assert loop.step() == 0.0 and len(out.results) == 1  # verified; look again at once


def test_with_shedding_a_window_already_past_its_due_time_is_given_up_and_a_timely_one_verified(
        verifier):
    from crossspec_ros.models.device_turns import StreamDue

    loop, out = make_loop(verifier)
    loop.due = StreamDue(budget_s=0.1, open_s=1.0, shed_s=0.2)
    late, timely = random_window(5), random_window(6)
    final_draft(loop, late)
    loop.enqueue([late])  # queued at 0.0: due at 0.1, shed after 0.3
    loop.clock.advance(0.31)
    loop.step()
    assert out.results == [] and loop.counters["windows_shed"] == 1
    [caption] = [c for c in out.captions if c.finished]
    assert (caption.key, caption.status, caption.unverified_reason) == \
        (late.key, UNVERIFIED, UnverifiedReason.VERIFIER_BUSY)
    assert caption.draft_text == "a red car" and out.warnings
    loop.enqueue([timely])
    loop.clock.advance(0.29)  # within its due time and the shedding margin
    loop.step()
    assert [key for key, _ in out.results] == [timely.key]
    assert loop.counters["windows_shed"] == 1


def test_without_shedding_a_late_window_is_still_verified(verifier):
    from crossspec_ros.models.device_turns import StreamDue

    loop, out = make_loop(verifier)
    loop.due = StreamDue(budget_s=0.1, open_s=1.0)  # shed_s 0: never
    window = random_window(7)
    loop.enqueue([window])
    loop.clock.advance(30.0)
    loop.step()
    assert [key for key, _ in out.results] == [window.key]
    assert loop.counters["windows_shed"] == 0
