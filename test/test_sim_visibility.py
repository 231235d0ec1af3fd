"""What a caption may state (what is in view) and what an event camera can see of it."""

from __future__ import annotations

import numpy as np
import pytest

from crossspec_ros.models.preprocess import ClipPreprocess
from crossspec_ros.sim.scene import ATTRIBUTES, Drive, Facts
from crossspec_ros.sim.visibility import (
    EVENT_VISIBLE,
    FOCAL,
    LIGHT_BOTTOM,
    LIGHT_MIN_HEIGHT_FRACTION,
    LIGHT_TOP,
    LIGHT_X,
    NEVER_VISIBLE,
    ground_in_view,
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


def test_a_traffic_light_needs_a_larger_size_than_a_road_user_to_show_its_colour():
    def light_in_view(z: float, min_height: float) -> bool:
        return in_view(LIGHT_X, z, 0.0, LIGHT_BOTTOM, LIGHT_TOP, min_height)

    assert light_in_view(20.0, LIGHT_MIN_HEIGHT_FRACTION)
    assert light_in_view(35.0, 1 / 28)                       # big enough to be a thing...
    assert not light_in_view(35.0, LIGHT_MIN_HEIGHT_FRACTION)  # ...too small for its colour


def test_road_surface_shows_only_ahead_of_the_camera_and_near_enough():
    assert ground_in_view(10.0, 22.0)
    assert not ground_in_view(40.0, 52.0)   # a crossing 40 m ahead: a pixel row
    assert ground_in_view(-5.0, 7.0)        # standing in it: its far part is in view
    assert not ground_in_view(-12.0, 0.5)   # under and behind the camera


def test_an_intersection_is_stated_only_while_it_shows():
    through = Facts("intersection", "driving", "none")
    drive = Drive.scripted(3, [(through, 6.0)])
    road = {}
    for t in np.arange(0.0, 6.0, 0.1):
        state = drive.state(float(t))
        assert state.facts == through
        road[round(float(state.cross_street_z), 1)] = seen_facts(state).road
    assert max(road) > 30 and min(road) < -5.5  # the drive covers approach and exit
    for cross_street_z, seen in road.items():
        if cross_street_z > 22 or cross_street_z < -5.5:  # far ahead; passed (under the car)
            assert seen == "straight", cross_street_z
        elif -5 < cross_street_z < 20:                    # near, or standing in it
            assert seen == "intersection", cross_street_z


def test_a_turning_ego_car_is_always_at_an_intersection():
    turn = Facts("intersection", "turning_right", "none")
    drive = Drive.scripted(4, [(turn, 5.0)])
    assert all(seen_facts(drive.state(float(t))).road == "intersection"
               for t in np.arange(0.0, 5.0, 0.25))


def test_in_view_needs_the_frame_and_a_nameable_size():
    assert in_view(0.0, 20.0, 0.0, 0.0, 1.5)
    assert not in_view(0.0, 200.0, 0.0, 0.0, 1.5)    # a speck at the horizon
    assert not in_view(8.0, 5.0, 0.0, 0.0, 1.5)      # beside the camera
    assert not in_view(0.0, -3.0, 0.0, 0.0, 1.5)     # behind it
    assert not in_view(0.0, 20.0, 0.2, 0.0, 1.5)     # swept aside by a sharp curve


def test_in_view_is_the_models_centre_square_not_the_whole_frame():
    # 0.58 frame heights right of centre: inside the 4:3 frame (0.67), outside the centre
    # square both models' CLIP preprocessing keeps (0.5)
    z = 10.0
    x = 0.58 * z / FOCAL
    assert not in_view(x, z, 0.0, 0.0, 1.5)
    assert in_view(x / 2, z, 0.0, 0.0, 1.5)
    verifier_crop = ClipPreprocess(56, 56).one(np.zeros((240, 320, 3), np.uint8))
    assert verifier_crop.shape[-2:] == (56, 56)  # the square the view models


@pytest.mark.parametrize(("other", "action"), [
    ("car", "parked"), ("car", "oncoming"), ("cyclist", "oncoming"), ("pedestrian", "sidewalk")])
def test_road_users_along_the_road_are_always_near_enough_to_name(other, action):
    facts = Facts("straight", "driving", other=other,
                  other_color="red" if other == "car" else "none", other_action=action)
    for seed in range(6):
        drive = Drive.scripted(seed, [(facts, 6.0)])
        for t in np.arange(0.0, 6.0, 0.25):
            assert seen_facts(drive.state(float(t))) == facts, (seed, t)


@pytest.mark.parametrize("other", ["car", "cyclist", "pedestrian"])
def test_a_road_user_crossing_in_front_of_a_waiting_car_stays_in_view(other):
    stop = Facts("intersection", "stopped", "red", other=other,
                 other_color="red" if other == "car" else "none", other_action="crossing")
    for seed in range(6):
        drive = Drive.scripted(seed, [(Facts("intersection", "slowing", "red"), 3.0),
                                      (stop, 4.0)])
        for t in np.arange(3.0, 7.0, 0.25):
            assert seen_facts(drive.state(float(t))) == stop, (seed, t)
