"""When the drafter computes (speculative/draft_schedule.py): fed what happened and the time,
no clock of its own, no threads."""

from __future__ import annotations

import math

import pytest

from crossspec_ros.speculative.draft_schedule import (
    FIRST_LEAD_SHARE,
    LEAD_MARGIN,
    LEAD_SLACK_MS,
    MAX_LEAD_SHARE,
    Action,
    DataClock,
    DraftSchedule,
)

SECOND = 10**9


def test_before_any_draft_the_lead_is_a_share_of_the_window_then_the_drafters_own_pace():
    schedule = DraftSchedule(SECOND)
    assert schedule.lead_wall_ms() == FIRST_LEAD_SHARE * 1000
    for ms in (100.0, 120.0, 110.0):
        schedule.drafted(ms)
    assert schedule.lead_wall_ms() == pytest.approx(LEAD_MARGIN * 110.0 + LEAD_SLACK_MS)


def test_a_drafter_slower_than_the_window_leads_by_at_most_a_share_of_it():
    schedule = DraftSchedule(SECOND)
    schedule.drafted(5_000.0)
    assert schedule.lead_wall_ms() == MAX_LEAD_SHARE * 1000


def test_a_fixed_lead_is_kept_and_zero_drafts_at_the_close():
    fixed = DraftSchedule(SECOND, lead_ms=150.0)
    fixed.drafted(900.0)
    assert fixed.lead_wall_ms() == 150.0
    at_close = DraftSchedule(SECOND, lead_ms=0.0)
    assert not at_close.early
    assert at_close.before_close(0, SECOND, SECOND - 1, 1.0).action is Action.WAIT


def test_an_open_window_starts_once_the_data_clock_is_within_the_lead_of_its_end():
    schedule = DraftSchedule(SECOND, lead_ms=200.0)
    t1 = 5 * SECOND
    assert schedule.before_close(4, t1, t1 - 300_000_000, 1.0).action is Action.WAIT
    decision = schedule.before_close(4, t1, t1 - 199_000_000, 1.0)
    assert (decision.action, decision.reason) == (Action.START, "early")
    assert schedule.counts["early"] == 1
    # a bag replayed at rate 2: the end comes twice as soon in wall time
    assert schedule.before_close(4, t1, t1 - 399_000_000, 2.0).action is Action.START
    assert schedule.before_close(4, t1, None, 1.0).action is Action.WAIT  # no data yet


def test_at_the_close_a_window_drafted_early_or_finished_by_the_verifier_is_skipped():
    schedule = DraftSchedule(SECOND, step_aside_ms=0.0)
    assert schedule.at_close(True, False).reason == "drafted_early"
    assert schedule.at_close(False, True).reason == "verifier_finished"
    decision = schedule.at_close(False, False)
    assert (decision.action, decision.reason) == (Action.START, "at_close")
    assert schedule.diagnostics["windows_drafted_early"] == 1
    assert schedule.diagnostics["windows_verifier_finished"] == 1
    assert schedule.diagnostics["windows_at_close"] == 1


def test_while_the_verifier_is_ahead_a_window_at_its_close_waits_then_is_skipped_or_drafted():
    schedule = DraftSchedule(SECOND, step_aside_ms=30.0)
    for ms in (2.0, 3.0, 2.0, 4.0):
        schedule.verifier_done(ms)
    decision = schedule.at_close(False, False)
    assert (decision.action, decision.reason) == (Action.WAIT, "stepped_aside")
    assert decision.wait_s == pytest.approx(3 * 0.030)
    assert schedule.after_wait(True).reason == "stepped_aside"
    assert schedule.after_wait(False).reason == "at_close"  # and the verifier counts as slow
    assert schedule.verifier_done_ms[-1] == math.inf


def test_two_slow_captions_of_the_last_four_mean_the_verifier_is_not_ahead():
    schedule = DraftSchedule(SECOND, step_aside_ms=20.0)
    assert schedule.verifier_ahead()  # nothing heard: ahead until shown otherwise
    for ms in (2.0, 2.0, 180.0, 25.0):
        schedule.verifier_done(ms)
    assert not schedule.verifier_ahead()


def test_the_data_clock_measures_the_replay_rate_and_says_when_a_stamp_comes():
    clock = DataClock(span_s=0.5)
    assert clock.now_ns(0.0) is None
    clock.observe(10 * SECOND, 100.0)
    clock.observe(11 * SECOND, 100.5)  # one data second in half a wall second
    assert clock.rate == pytest.approx(2.0)
    assert clock.now_ns(100.75) == 11 * SECOND + 500_000_000
    assert clock.at(12 * SECOND) == pytest.approx(101.0)
    clock.observe(3 * SECOND, 101.0)  # a bag loop: measured afresh, no rate from the jump
    clock.observe(3 * SECOND + 100_000_000, 101.2)
    assert clock.rate == pytest.approx(2.0)  # too soon after the loop to say otherwise
    clock.observe(3 * SECOND + 300_000_000, 101.6)
    assert clock.rate == pytest.approx(0.5)


def test_the_engines_own_drafter_skips_a_steady_scene_under_the_cascade_and_what_its_gate_says():
    schedule = DraftSchedule(lead_ms=0.0)
    assert schedule.local_draft("steady", cascade=True, gated=True).reason == "steady_scene"
    assert schedule.local_draft("steady", cascade=False, gated=False).reason == "local"
    gate = schedule.gate("changed")
    assert schedule.local_draft("changed", cascade=True, gated=True).reason == "local"
    gate.observe(True, 100.0, 10)  # drafting: 10 ms a token
    assert schedule.local_draft("changed", cascade=True, gated=True).reason == "gated_off"
    gate.observe(False, 50.0, 10)  # without: 5 ms a token, so the gate keeps to that
    assert schedule.local_draft("changed", cascade=True, gated=True).reason == "gated_off"
    assert schedule.counts == {"steady_scene": 1, "local": 2, "gated_off": 2}
    assert set(schedule.gates) == {"changed"}  # steady windows never reached a gate


def test_the_drafter_rests_when_the_verifier_falls_behind_while_it_drafts_and_longer_each_time():
    schedule = DraftSchedule(SECOND, lead_ms=100.0)

    def decide(wid: int) -> str:
        return schedule.before_close(wid, (wid + 1) * SECOND, (wid + 1) * SECOND, 1.0).reason

    assert decide(10) == "early"
    schedule.verifier_done(40.0)  # in time: drafting goes on
    assert decide(11) == "early"
    schedule.verifier_done(900.0)  # behind while drafting: rest 4 windows
    assert [decide(w) for w in range(12, 17)] == ["verifier_behind"] * 4 + ["early"]
    schedule.verifier_done(1200.0)  # behind again once it drafts: rest 8 windows
    schedule.verifier_done(300.0)  # behind while it rests: no longer the drafter's doing
    assert [decide(w) for w in range(17, 26)] == ["verifier_behind"] * 8 + ["early"]
    assert schedule.counts["verifier_behind"] == 12
    fast = DraftSchedule(SECOND, lead_ms=100.0)
    fast.verifier_done(240.0)  # under a quarter of the window: not behind
    assert fast.before_close(3, 4 * SECOND, 4 * SECOND, 1.0).reason == "early"
