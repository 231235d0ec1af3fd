"""The event simulator: threshold crossings at interpolated times, quiet when nothing moves."""

from __future__ import annotations

import numpy as np
import pytest

from crossspec_ros.sim.events import EventConfig, EventSimulator, simulate
from crossspec_ros.sim.render import render_log
from crossspec_ros.sim.scene import Drive, Facts

EXACT = EventConfig(threshold_sigma=0.0, noise_rate_hz=0.0, reference_jitter=0.0)
MS = 1_000_000


def pixel_stream(values: list[float], config: EventConfig = EXACT):
    """Events of a 2x1 sensor whose left pixel takes ``values`` at 0, 1, 2 ... ms."""
    sim = EventSimulator(2, 1, config, np.random.default_rng(0))
    sim.start(np.array([[values[0], 0.0]]), 0)
    return [sim.step(np.array([[v, 0.0]]), (i + 1) * MS) for i, v in enumerate(values[1:])]


def test_each_crossed_level_is_one_event_at_the_interpolated_time():
    up, down = pixel_stream([0.0, 0.9, 0.0])
    # levels 0.25, 0.5, 0.75 on a line from 0 to 0.9 over 1 ms
    assert up.t.tolist() == [277_000, 555_000, 833_000]
    assert up.p.tolist() == [1, 1, 1] and up.x.tolist() == [0, 0, 0]
    # back down from the reference 0.75: levels 0.5, 0.25, 0.0 on the line 0.9 -> 0
    assert down.t.tolist() == [MS + 444_000, MS + 722_000, MS + 999_000]
    assert down.p.tolist() == [0, 0, 0]


def test_changes_below_the_threshold_accumulate_until_they_cross_it():
    batches = pixel_stream([0.0, 0.125, 0.1875, 0.3125])  # exact in binary floating point
    assert [len(b) for b in batches] == [0, 0, 1]
    assert batches[2].t.tolist() == [2 * MS + 500_000]


def test_refractory_period_drops_events_that_follow_too_soon():
    config = EventConfig(threshold_sigma=0.0, noise_rate_hz=0.0, reference_jitter=0.0,
                         refractory_ns=400_000)
    (burst,) = pixel_stream([0.0, 2.05], config)  # 8 crossings within 1 ms
    assert len(burst) == 2 and np.all(np.diff(burst.t) >= 400_000)
    assert len(pixel_stream([0.0, 2.05])[0]) == 8


def test_background_noise_has_the_configured_rate():
    config = EventConfig(noise_rate_hz=2.0)
    sim = EventSimulator(100, 100, config, np.random.default_rng(1))
    frame = np.zeros((100, 100), np.float32)
    sim.start(frame, 0)
    n = sum(len(sim.step(frame, (k + 1) * 10 * MS)) for k in range(50))  # 0.5 s
    assert n == pytest.approx(2.0 * 10_000 * 0.5, rel=0.05)


def drive_events(facts: Facts, size=(160, 120), seed=0):
    drive = Drive.scripted(4, [(facts, 3.0)])
    w, h = size
    return simulate(lambda t: render_log(drive.state(t / 1e9), w, h), w, h, 1_000 * MS,
                    2_000 * MS, rng=np.random.default_rng(seed))


def test_a_standing_car_in_a_static_scene_sees_only_noise_and_a_driving_one_many_events():
    static = drive_events(Facts("straight", "stopped", other="car", other_color="red",
                                other_action="parked"))
    driving = drive_events(Facts("straight", "driving", other="car", other_color="red",
                                 other_action="parked"))
    noise_per_s = EventConfig().noise_rate_hz * 160 * 120  # ~96
    assert len(static) < 3 * noise_per_s
    assert len(driving) > 10_000
    assert len(driving) > 100 * len(static)


def test_events_are_sorted_inside_the_sensor_in_the_window_and_whole_microseconds():
    ev = drive_events(Facts("curve_left", "driving", other="car", other_color="blue",
                            other_action="oncoming"))
    assert len(ev) > 0 and ev.is_sorted() and ev.in_bounds_mask().all()
    assert ev.t.min() >= 1_000 * MS and ev.t.max() < 2_000 * MS
    assert np.all(ev.t % 1000 == 0)
    assert 0.3 < ev.p.mean() < 0.7


def test_same_seed_gives_identical_events_and_another_seed_other_noise():
    facts = Facts("straight", "driving")
    a, b = drive_events(facts, seed=3), drive_events(facts, seed=3)
    assert a.equals(b)
    assert not a.equals(drive_events(facts, seed=4))


def test_frames_must_come_in_time_order_on_whole_microseconds():
    sim = EventSimulator(2, 1, EXACT)
    sim.start(np.zeros((1, 2)), 0)
    with pytest.raises(ValueError, match="increase"):
        sim.step(np.zeros((1, 2)), 0)
    with pytest.raises(ValueError, match="microsecond"):
        sim.step(np.zeros((1, 2)), 1500)
