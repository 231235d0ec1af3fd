"""SensorClock: running minimum of stamp - sensor time, restarted on jumps."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from crossspec_ros.events.clock import SensorClock

OFFSET = 1_700_000_000_000_000_000


def test_offset_is_the_minimum_of_latency_bounds() -> None:
    rng = np.random.default_rng(0)
    clock = SensorClock()
    sensor = np.cumsum(rng.integers(100_000, 2_000_000, 200))
    latency = rng.integers(1, 5_000_000, 200)
    latency[57] = 0  # one packet stamped exactly at its first event
    estimates = [clock.update(OFFSET + s + lat, s) for s, lat in zip(sensor, latency, strict=True)]
    assert estimates[-1] == OFFSET
    assert all(e >= OFFSET for e in estimates)  # an upper bound at every step
    assert estimates == sorted(estimates, reverse=True)
    assert clock.resets == 0


def test_jump_beyond_the_bound_restarts_the_estimate(caplog: pytest.LogCaptureFixture) -> None:
    clock = SensorClock(max_jump_ns=1_000_000_000)
    clock.update(OFFSET + 10, 0)
    with caplog.at_level(logging.DEBUG):
        # Sensor clock restarts from 0 five seconds later, twice.
        assert clock.update(OFFSET + 5_000_000_000, 0) == OFFSET + 5_000_000_000
        assert clock.update(OFFSET + 9_000_000_000, 0) == OFFSET + 9_000_000_000
        # Within the bound: a plain (larger) observation, the minimum stays.
        assert clock.update(OFFSET + 9_500_000_000, 400_000_000) == OFFSET + 9_000_000_000
    assert clock.resets == 2
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "re-estimating" in warnings[0].getMessage()


def test_a_backwards_ros_jump_restarts_the_estimate_too() -> None:
    clock = SensorClock()
    clock.update(OFFSET + 50_000_000_000, 50_000_000_000)
    # The bag loops: ROS time goes back 60 s, the sensor time does not.
    assert clock.update(OFFSET - 10_000_000_000, 50_000_000_000) == OFFSET - 60_000_000_000
    assert clock.resets == 1


def test_reset_forgets_the_offset_but_keeps_counters() -> None:
    clock = SensorClock()
    clock.update(OFFSET, 0)
    clock.update(OFFSET + 10**10, 0)
    clock.reset()
    assert clock.offset_ns is None and clock.resets == 1
    assert clock.update(5, 2) == 3


def test_invalid_bound_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_jump_ns"):
        SensorClock(0)
