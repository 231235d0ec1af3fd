"""The synthetic drive: reproducible, coherent over time, one set of facts per window."""

from __future__ import annotations

import numpy as np
import pytest

from crossspec_ros.sim.scene import Drive, Facts


def test_a_state_depends_only_on_seed_and_time_not_on_query_order():
    forward, backward = Drive(11), Drive(11)
    times = [0.0, 3.7, 12.25, 29.9]
    a = [forward.state(t) for t in times]
    b = [backward.state(t) for t in reversed(times)][::-1]
    assert a == b


def test_different_seeds_give_different_drives():
    drives = {tuple(Drive(seed).facts_at(t) for t in range(0, 30, 3)) for seed in range(20)}
    assert len(drives) == 20


def test_segments_are_whole_seconds_so_each_window_has_one_set_of_facts():
    for seed in range(30):
        drive = Drive(seed)
        drive.segment_at(60.0)
        for seg in drive.segments:
            assert seg.start_s == int(seg.start_s) and seg.duration_s == int(seg.duration_s)
            assert 2 <= seg.duration_s <= 6


def test_speed_and_position_are_continuous_across_segments():
    for seed in range(30):
        drive = Drive(seed)
        drive.segment_at(60.0)
        for prev, seg in zip(drive.segments, drive.segments[1:], strict=False):
            end = prev.duration_s
            assert seg.v0 == pytest.approx(prev.speed(end))
            assert seg.s0 == pytest.approx(prev.distance(end))
            assert seg.heading0 == pytest.approx(prev.heading(end))


def test_ego_motions_match_their_speed_profiles():
    for seed in range(40):
        drive = Drive(seed)
        drive.segment_at(60.0)
        for seg in drive.segments:
            v = [seg.speed(t) for t in np.linspace(0, seg.duration_s, 9)]
            ego = seg.facts.ego
            if ego == "stopped":
                assert max(v) == 0.0
            elif ego == "slowing":
                assert v[-1] == 0.0 and v[0] > 0 and np.all(np.diff(v) < 0)
            elif ego == "accelerating":
                assert v[0] == 0.0 and np.all(np.diff(v) > 0)
            else:
                assert min(v) > 0


def test_braking_dips_the_camera_and_pulling_away_raises_it():
    found = set()
    for seed in range(40):
        drive = Drive(seed)
        drive.segment_at(60.0)
        for seg in drive.segments:
            settled = seg.pitch(seg.duration_s)
            ego = seg.facts.ego
            if ego == "slowing":
                # a stop from cruise speed in 3-4 s: about a degree nose down
                assert np.radians(0.5) < settled < np.radians(1.6)
            elif ego == "accelerating":
                assert -np.radians(1.6) < settled < -np.radians(0.5)
            else:  # steady, or the gentle change of speed into and out of a turn
                assert abs(settled) < np.radians(0.5)
            found.add(ego)
    assert {"slowing", "accelerating", "driving"} <= found


def test_pitch_is_continuous_across_segments_and_settles_within_the_first_second():
    for seed in range(30):
        drive = Drive(seed)
        drive.segment_at(60.0)
        first = drive.segments[0]
        assert first.pitch(0.0) == first.pitch(first.duration_s)  # a drive starts settled
        for prev, seg in zip(drive.segments, drive.segments[1:], strict=False):
            assert seg.pitch(0.0) == pytest.approx(prev.pitch(prev.duration_s))
            assert seg.pitch(0.5) == pytest.approx(seg.pitch1)


def test_road_vibration_shakes_a_moving_car_by_its_rms_and_a_standing_one_not_at_all():
    from crossspec_ros.sim.scene import VIBRATION_RAD

    driving = Drive.scripted(4, [(Facts("straight", "driving"), 30.0)])
    times = np.arange(1.0, 30.0, 0.01)
    shake = np.array([driving.state(float(t)).pitch for t in times])  # steady: pitch is all shake
    assert np.sqrt(np.mean(shake ** 2)) == pytest.approx(VIBRATION_RAD, rel=0.15)
    stopped = Drive.scripted(4, [(Facts("intersection", "stopped", "red"), 5.0)])
    assert {stopped.state(float(t)).pitch for t in np.arange(0.0, 5.0, 0.1)} == {0.0}


def test_a_stop_continues_at_the_place_the_ego_car_slowed_down_for():
    found = 0
    for seed in range(60):
        drive = Drive(seed)
        drive.segment_at(60.0)
        for prev, seg in zip(drive.segments, drive.segments[1:], strict=False):
            if prev.facts.ego == "slowing" and seg.facts.ego == "stopped":
                found += 1
                assert seg.facts.road == prev.facts.road and seg.anchor_s == prev.anchor_s
                if prev.facts.light in ("red", "yellow"):
                    assert seg.facts.light == "red"
            if prev.facts.ego == "stopped" and seg.facts.ego == "accelerating" \
                    and prev.facts.light == "red":
                assert seg.facts.light == "green"
    assert found > 10


def test_a_stopped_scene_without_movers_is_static():
    facts = Facts("straight", "stopped", other="car", other_color="red", other_action="parked")
    drive = Drive.scripted(3, [(facts, 5.0)])
    a, b = drive.state(1.0), drive.state(4.0)
    assert a.speed == b.speed == 0.0 and a.distance == b.distance
    assert a.actors == b.actors


def test_facts_reject_inconsistent_attributes():
    with pytest.raises(ValueError, match="road"):
        Facts("bridge", "driving")
    with pytest.raises(ValueError, match="other_color"):
        Facts("straight", "driving", other="cyclist", other_color="red",
              other_action="ahead")
    with pytest.raises(ValueError, match="other_action"):
        Facts("straight", "driving", other="car", other_color="red")
