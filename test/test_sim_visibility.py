"""What an event camera can see: motion, never colour, nothing of a static scene."""

from __future__ import annotations

from crossspec_ros.sim.scene import ATTRIBUTES, Facts
from crossspec_ros.sim.visibility import EVENT_VISIBLE, NEVER_VISIBLE, visible_attributes


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
