"""What a caption may state (what is in view) and what an event camera can see of it."""

from __future__ import annotations

import numpy as np
import pytest

from crossspec_ros.sim.scene import ATTRIBUTES, Drive, Facts
from crossspec_ros.sim.visibility import (
    EVENT_VISIBLE,
    NEVER_VISIBLE,
    in_view,
    seen_facts,
    visible_attributes,
)


def test_colours_are_never_visible_and_the_rest_sometimes():
    assert {"other_color", "light"} == NEVER_VISIBLE
    assert set(ATTRIBUTES) == EVENT_VISIBLE | NEVER_VISIBLE


def test_a_driving_ego_car_sees_everything_but_colours():
    facts = Facts("curve_left", "driving", "none", "night", "car", "red", "parked")
    assert visible_attributes(facts) == EVENT_VISIBLE


def test_a_standing_ego_car_sees_only_road_users_that_move_themselves():
    parked = Facts("straight", "stopped", other="car", other_color="red", other_action="parked")
    assert visible_attributes(parked) == {"ego"}
    crossing = Facts("intersection", "stopped", "red", other="pedestrian",
                     other_action="crossing")
    assert visible_attributes(crossing) == {"ego", "other", "other_action"}


def test_a_traffic_light_the_ego_car_turns_away_from_is_not_stated():
    turn = Facts("intersection", "turning_left", "green")
    drive = Drive.scripted(5, [(turn, 4.0)])
    assert drive.facts_at(2.5).light == "green"            # the segment's fact
    assert seen_facts(drive.state(2.5)).light == "none"    # behind / beside the camera now


def test_a_traffic_light_ahead_at_a_stop_is_stated():
    stop = Facts("intersection", "stopped", "red")
    drive = Drive.scripted(5, [(Facts("intersection", "slowing", "red"), 4.0), (stop, 4.0)])
    state = drive.state(5.5)
    assert state.facts == stop and seen_facts(state) == stop


def test_in_view_needs_the_frame_and_a_nameable_size():
    assert in_view(0.0, 20.0, 0.0, 0.0, 1.5)
    assert not in_view(0.0, 200.0, 0.0, 0.0, 1.5)    # a speck at the horizon
    assert not in_view(8.0, 5.0, 0.0, 0.0, 1.5)      # beside the camera
    assert not in_view(0.0, -3.0, 0.0, 0.0, 1.5)     # behind it
    assert not in_view(0.0, 20.0, 0.2, 0.0, 1.5)     # swept aside by a sharp curve


@pytest.mark.parametrize("action", ["parked", "oncoming", "sidewalk"])
def test_road_users_along_the_road_are_always_near_enough_to_name(action):
    other = "pedestrian" if action == "sidewalk" else "car"
    facts = Facts("straight", "driving", other=other,
                  other_color="red" if other == "car" else "none", other_action=action)
    drive = Drive.scripted(6, [(facts, 6.0)])
    for t in np.arange(0.0, 6.0, 0.25):
        assert seen_facts(drive.state(float(t))) == facts, t
