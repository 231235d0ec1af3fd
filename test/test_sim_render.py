"""The renderer: reproducible frames of the requested size that show what captions state."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from crossspec_ros.sim.render import (
    FOCAL_PER_WIDTH,
    LOG_EPS,
    LUMA,
    render_linear,
    render_log,
    render_rgb,
)
from crossspec_ros.sim.scene import Drive, Facts


def scene(facts: Facts, t: float = 1.5, seed: int = 5):
    return Drive.scripted(seed, [(facts, 4.0)]).state(t)


DRIVING = Facts("straight", "driving")


def test_same_state_renders_identical_frames_of_the_requested_size():
    state = Drive(9).state(4.2)
    a, b = render_rgb(state, 160, 120), render_rgb(state, 160, 120)
    assert a.shape == (120, 160, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b)
    assert render_rgb(state, 64, 48).shape == (48, 64, 3)


def test_log_render_is_the_log_luminance_of_the_colour_render():
    state = Drive(2).state(7.0)
    rgb = render_linear(state, 96, 72)
    expected = np.log(np.clip(rgb @ LUMA, 0, 1) + LOG_EPS)
    assert render_log(state, 96, 72) == pytest.approx(expected, abs=0.02)


def test_driving_changes_the_frame_and_standing_still_does_not():
    moving = Drive.scripted(1, [(DRIVING, 4.0)])
    assert not np.array_equal(render_rgb(moving.state(1.0)), render_rgb(moving.state(1.01)))
    stopped = Drive.scripted(1, [(Facts("intersection", "stopped", "red"), 4.0)])
    assert np.array_equal(render_rgb(stopped.state(1.0)), render_rgb(stopped.state(3.0)))


def test_a_nose_down_pitch_shifts_the_view_up_by_its_angle():
    level = scene(Facts("straight", "stopped", other="car", other_color="red",
                        other_action="parked"))
    rows = 6  # at 320 x 240, f = 288 px: atan(6 / 288) = 1.2 degrees
    pitched = replace(level, pitch=float(np.arctan(rows / (FOCAL_PER_WIDTH * 320))))
    a = render_linear(level).mean(axis=2)
    b = render_linear(pitched).mean(axis=2)
    # the best vertical alignment of the two frames: row y of the level frame is row y - rows
    # of the pitched one (the sky's gradient stretches a little, so compare the ground half)
    errors = {k: np.abs(a[120 + k:230 + k] - b[120:230]).mean() for k in range(-2, 11)}
    assert min(errors, key=errors.get) == rows, errors


def test_night_is_darker_than_day():
    day = render_rgb(scene(DRIVING)).mean()
    night = render_rgb(scene(Facts("straight", "driving", lighting="night"))).mean()
    assert night < 0.4 * day


@pytest.mark.parametrize(("colour", "channel"), [("red", 0), ("blue", 2)])
def test_a_car_ahead_shows_its_colour(colour, channel):
    with_car = render_rgb(scene(Facts("straight", "driving", other="car", other_color=colour,
                                      other_action="ahead")))
    without = render_rgb(scene(DRIVING))
    changed = np.any(with_car != without, axis=2)
    assert changed.sum() > 300  # the car covers a visible patch
    dominant = np.argmax(with_car[changed].astype(int).sum(axis=0))
    assert dominant == channel


def test_the_traffic_light_shows_its_state():
    red = render_rgb(scene(Facts("intersection", "stopped", "red")))
    green = render_rgb(scene(Facts("intersection", "stopped", "green")))
    diff = np.any(red != green, axis=2)
    assert diff.any()
    assert red[diff][:, 0].mean() > red[diff][:, 1].mean()
    assert green[diff][:, 1].mean() > green[diff][:, 0].mean()
