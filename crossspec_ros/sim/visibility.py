"""What a window's caption may state, and which of it an event camera can see.

``seen_facts``: a segment's facts minus what is out of the models' view at that instant. A
traffic light the ego car has passed (or turned away from), or one still too far to show its
colour, is not stated; neither is a road user outside the view or too small to make out.
The view is the centre square of the 4:3 frame: both models' CLIP preprocessing resizes the
short side and crops the centre, so the frame's outer eighths never reach them. Captions
describe what the models see, so a model is never taught to name what it cannot see.

``visible_attributes``: an event camera sees change only. Colours never reach it (the car's
colour, the traffic light's colour), and a static scene gives (almost) no events: when the ego
car stands still, the road, the lighting, a parked car or an empty street are invisible; only
road users that move themselves show up. The ego motion is always visible (no flow at all
means stopped). Evaluation scores a drafter's caption on ``visible_attributes`` only.
"""

from __future__ import annotations

from dataclasses import replace

from crossspec_ros.sim.render import CAMERA_HEIGHT, FOCAL_PER_WIDTH, HORIZON_PER_HEIGHT
from crossspec_ros.sim.scene import ATTRIBUTES, Facts, SceneState

NEVER_VISIBLE = frozenset({"other_color", "light"})
# Attributes events can show in some windows (depending on motion, see visible_attributes).
EVENT_VISIBLE = frozenset(ATTRIBUTES) - NEVER_VISIBLE
# Actions with motion of their own, seen even from a standing car.
SELF_MOVING = frozenset({"oncoming", "crossing", "turning_left", "turning_right", "sidewalk"})

# Smallest thing worth naming: 1/28 of the frame height (2 pixels to a model reading 56x56
# frames; a car 50 m away, a traffic light's lamp housing 38 m away).
MIN_HEIGHT_FRACTION = 1 / 28
ASPECT = 4 / 3       # the camera's width / height
VIEW_HALF_WIDTH = 0.5  # half the models' centre-square crop, in frame heights
USER_HEIGHT = 1.5    # metres; cars, cyclists and pedestrians alike (a conservative size)
LIGHT_X, LIGHT_BOTTOM, LIGHT_TOP = 0.4, 2.45, 3.6   # the lamp housing (render._traffic_light)


def in_view(x: float, z: float, curvature: float, bottom: float, top: float) -> bool:
    """Whether an upright box centred at road-frame ``x``, ``z`` metres ahead, spanning
    ``bottom``..``top`` metres above the road, is in the models' view and large enough to
    name (the camera's pitch, at most a degree or two, is neglected)."""
    if z <= 1.0:
        return False
    f = FOCAL_PER_WIDTH * ASPECT  # focal length in frame heights
    centre = (x + curvature * z * z / 2) / z * f  # frame heights from the centre column
    y_top = HORIZON_PER_HEIGHT + f * (CAMERA_HEIGHT - top) / z
    y_bottom = HORIZON_PER_HEIGHT + f * (CAMERA_HEIGHT - bottom) / z
    return (abs(centre) <= VIEW_HALF_WIDTH and y_bottom > 0.0 and y_top < 1.0
            and f * (top - bottom) / z >= MIN_HEIGHT_FRACTION)


def seen_facts(state: SceneState) -> Facts:
    """``state.facts`` without a traffic light or a road user the camera cannot see now."""
    facts = state.facts
    if facts.light != "none" and not (
            state.light_z is not None
            and in_view(LIGHT_X, state.light_z, state.curvature, LIGHT_BOTTOM, LIGHT_TOP)):
        facts = replace(facts, light="none")
    if facts.other != "none" and not any(
            in_view(a.x, a.z, state.curvature, 0.0, USER_HEIGHT) for a in state.actors):
        facts = replace(facts, other="none", other_color="none", other_action="none")
    return facts


def visible_attributes(facts: Facts) -> frozenset[str]:
    """Names of the ``Facts`` attributes an event camera can observe in a window."""
    visible = {"ego"}
    if facts.ego != "stopped":
        visible |= {"road", "lighting", "other", "other_action"}
    elif facts.other_action in SELF_MOVING:
        visible |= {"other", "other_action"}
    return frozenset(visible)
