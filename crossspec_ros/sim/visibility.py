"""Which caption attributes an event camera can see in a window of the synthetic world.

An event camera sees change only. Colours never reach it (the car's colour, the traffic
light's colour), and a static scene gives (almost) no events: when the ego car stands
still, the road, the lighting, a parked car or an empty street are invisible; only road
users that move themselves show up. The ego motion is always visible (no flow at all means
stopped). Evaluation scores a drafter's caption on ``visible_attributes`` only.
"""

from __future__ import annotations

from crossspec_ros.sim.scene import ATTRIBUTES, Facts

NEVER_VISIBLE = frozenset({"other_color", "light"})
# Attributes events can show in some windows (depending on motion, see visible_attributes).
EVENT_VISIBLE = frozenset(ATTRIBUTES) - NEVER_VISIBLE
# Actions with motion of their own, seen even from a standing car.
SELF_MOVING = frozenset({"oncoming", "crossing", "turning_left", "turning_right", "sidewalk"})


def visible_attributes(facts: Facts) -> frozenset[str]:
    """Names of the ``Facts`` attributes an event camera can observe in a window."""
    visible = {"ego"}
    if facts.ego != "stopped":
        visible |= {"road", "lighting", "other", "other_action"}
    elif facts.other_action in SELF_MOVING:
        visible |= {"other", "other_action"}
    return frozenset(visible)
