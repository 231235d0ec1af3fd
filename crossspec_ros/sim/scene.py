"""A seeded synthetic drive: segments of caption facts and the scene state at any time.

A drive is a chain of *segments* of whole seconds (2-6 s by default; ``Drive.segment_seconds``
shortens ordinary segments for drives with frequent scene changes). Each segment holds one set of
``Facts`` (what a caption says: road, ego motion, traffic light, lighting, one other road
user), so every 1 s window lies in one segment and consecutive windows mostly share their
facts, as real drives do (crossspec proposes tokens from previous captions). The chain keeps
the drive coherent: speed is continuous (slowing ends at 0, a stop is followed by pulling
away at the same place), and a stop at a red light turns green when the ego car leaves.
Braking and pulling away pitch the car (and its camera) as a real suspension does: the nose
dips about a degree under a firm stop and rises as the car pulls away (``Segment.pitch``).

Geometry (metres, ego camera frame): ``z`` ahead, ``x`` to the right of the ego lane
centre (before the road's curve offset ``curvature * z**2 / 2``, which the renderer adds).
Lanes are 3.5 m: the oncoming lane is centred at x = -3.5, sidewalks lie beyond the road.
World positions along the road are distances ``s``; a segment's *anchor* is the ``s`` of
its place (stop line, crosswalk, parked car), so objects stay put while the ego car moves.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

ROADS = ("straight", "curve_left", "curve_right", "intersection")
EGO_MOTIONS = ("driving", "slowing", "stopped", "accelerating", "turning_left",
               "turning_right")
LIGHT_STATES = ("none", "red", "yellow", "green")
LIGHTINGS = ("day", "night")
USER_KINDS = ("none", "car", "cyclist", "pedestrian")
CAR_COLORS = ("red", "blue", "white", "black", "yellow", "grey")
USER_ACTIONS = ("none", "ahead", "oncoming", "crossing", "parked", "turning_left",
                "turning_right", "sidewalk")
ATTRIBUTES = ("road", "ego", "light", "lighting", "other", "other_color", "other_action")

LANE_WIDTH = 3.5
# The ego car stops this far before the place it stops for (the crosswalk / stop line).
STOP_GAP = 6.0
CROSSWALK_LEN = 3.0
CROSS_STREET_LEN = 9.0
# A new segment's curvature blends in over this long, so the road bends without a jump.
CURVE_BLEND_S = 0.6
# Body pitch per longitudinal deceleration [rad per m/s^2], nose down when braking: 0.35
# degrees per m/s^2 (3.4 degrees per g), a soft passenger car's suspension. A stop from
# 10 m/s in 3 s dips the camera 1.2 degrees: about a pixel of a 56-pixel model frame.
PITCH_PER_DECEL = math.radians(0.35)
# The suspension settles into a new pitch over this long (a linear blend, like the curve).
PITCH_BLEND_S = 0.4
# Road roughness shakes a moving car: a pitch jitter of this RMS at cruise speed (scaled by
# speed, none at a stop), a sum of slow body and wheel modes. It is a few tenths of a pixel
# of the 320x240 event camera (a fifth of one of a model's 56-pixel frames), enough to make
# strong edges fire events as on a real car: a car ahead at constant distance shows in the
# event stream by its outline, not only by its relative motion.
VIBRATION_RAD = math.radians(0.12)
VIBRATION_HZ = (1.3, 2.9, 4.7)  # below 12.5 Hz: training renders events at 25 Hz
# Slowing to a stop and pulling away take this many whole seconds (2-4.3 m/s^2 at the
# drive's cruise speeds: firm, ordinary town driving); other segments 3-6 s, a stop 2-6 s.
SPEED_CHANGE_DURATIONS = (3, 4)
# Length range [s] of ordinary segments (neither a stop nor a speed change) by default, and
# of a stop: a stop follows the ordinary range's upper end, within these bounds.
SEGMENT_SECONDS = (3, 6)
STOP_SECONDS = (2, 6)


def check_segment_seconds(seconds: Sequence[int]) -> tuple[int, int]:
    """``(low, high)`` whole seconds with 1 <= low <= high, or a ValueError saying why."""
    try:
        low, high = seconds
    except (TypeError, ValueError):
        raise ValueError(f"segment_seconds must be a (low, high) pair, got {seconds!r}") from None
    whole = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (low, high))
    if not whole or not 1 <= low <= high:
        raise ValueError("segment_seconds must be whole seconds with 1 <= low <= high, got "
                         f"{seconds!r}")
    return int(low), int(high)


def segment_seconds_by_ego(segment_seconds: tuple[int, int]) -> dict[str, tuple[int, int]]:
    """The (low, high) whole-second range of each ego motion's segments; ego motions not
    named are ordinary and take ``segment_seconds``. Speed changes keep their own range
    (braking and pulling away take time); a stop is 2 s up to the ordinary upper end, never
    outside STOP_SECONDS, so the default range gives the default stop exactly."""
    stop_high = min(STOP_SECONDS[1], max(STOP_SECONDS[0], segment_seconds[1]))
    return {"stopped": (STOP_SECONDS[0], stop_high), "slowing": SPEED_CHANGE_DURATIONS,
            "accelerating": SPEED_CHANGE_DURATIONS}


@dataclass(frozen=True)
class Facts:
    """What one window's caption states. ``"none"`` marks an absent attribute."""

    road: str
    ego: str
    light: str = "none"
    lighting: str = "day"
    other: str = "none"
    other_color: str = "none"
    other_action: str = "none"

    def __post_init__(self) -> None:
        for name, allowed in (("road", ROADS), ("ego", EGO_MOTIONS), ("light", LIGHT_STATES),
                              ("lighting", LIGHTINGS), ("other", USER_KINDS),
                              ("other_action", USER_ACTIONS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r}: not one of {allowed}")
        if (self.other == "car") != (self.other_color in CAR_COLORS):
            raise ValueError("other_color is a car colour exactly when other is 'car', got "
                             f"{self.other!r}/{self.other_color!r}")
        if (self.other == "none") != (self.other_action == "none"):
            raise ValueError("other_action is 'none' exactly when other is 'none'")

    def as_dict(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in ATTRIBUTES}


def settled_pitch(v0: float, v1: float, duration_s: float) -> float:
    """Body pitch [rad, nose down] under the constant deceleration from v0 to v1."""
    return PITCH_PER_DECEL * (v0 - v1) / duration_s


@dataclass(frozen=True)
class Segment:
    """One stretch of the drive with constant facts; kinematics in closed form."""

    index: int
    start_s: float
    duration_s: float
    facts: Facts
    v0: float            # speed at the start [m/s], linear to v1 at the end
    v1: float
    s0: float            # ego distance travelled at the start [m]
    heading0: float      # ego heading at the start [rad]
    kappa0: float        # road curvature at the start (the previous segment's) [1/m]
    kappa1: float        # this segment's curvature (right positive) [1/m]
    anchor_s: float      # world distance of this segment's place [m]
    user_s: float = 0.0  # world distance of a parked car / a walking pedestrian [m]
    side: int = 1        # +1/-1: direction of crossing / walking
    phase: float = 0.0   # animation and distance phase of the other user
    look: int = 0        # clothing colour index of a cyclist / pedestrian
    pitch0: float = 0.0  # body pitch at the start (the previous segment's) [rad, nose down]

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    @property
    def pitch1(self) -> float:
        """The body pitch this segment's constant deceleration settles into."""
        return settled_pitch(self.v0, self.v1, self.duration_s)

    def pitch(self, tau: float) -> float:
        b = min(PITCH_BLEND_S, self.duration_s)
        return self.pitch1 if tau >= b else self.pitch0 + (self.pitch1 - self.pitch0) * tau / b

    def speed(self, tau: float) -> float:
        u = tau / self.duration_s  # this form is exact at both ends (a stop is 0.0)
        return self.v0 * (1 - u) + self.v1 * u

    def distance(self, tau: float) -> float:
        return self.s0 + self.v0 * tau + (self.v1 - self.v0) * tau * tau / (2 * self.duration_s)

    def curvature(self, tau: float) -> float:
        b = min(CURVE_BLEND_S, self.duration_s)
        return self.kappa1 if tau >= b else self.kappa0 + (self.kappa1 - self.kappa0) * tau / b

    def heading(self, tau: float) -> float:
        """heading0 + integral of speed * curvature (both piecewise linear: exact)."""
        a, b = self.v0, (self.v1 - self.v0) / self.duration_s
        blend = min(CURVE_BLEND_S, self.duration_s)
        c, d = self.kappa0, (self.kappa1 - self.kappa0) / blend

        def ramp(x: float) -> float:  # integral of (a + b t)(c + d t) from 0 to x
            return a * c * x + (a * d + b * c) * x * x / 2 + b * d * x ** 3 / 3

        if tau <= blend:
            return self.heading0 + ramp(tau)
        flat = self.kappa1 * ((a * tau + b * tau * tau / 2) - (a * blend + b * blend ** 2 / 2))
        return self.heading0 + ramp(blend) + flat


@dataclass(frozen=True)
class Actor:
    """A road user to draw: ``kind`` car/cyclist/pedestrian, ``yaw`` 0 = seen from behind,
    pi = from the front, +-pi/2 = from the side; ``phase`` animates legs and pedals."""

    kind: str
    x: float
    z: float
    yaw: float = 0.0
    color: str = "grey"
    phase: float = 0.0


@dataclass(frozen=True)
class SceneState:
    """Everything the renderer needs at one instant."""

    t_s: float
    facts: Facts
    speed: float
    distance: float
    heading: float
    curvature: float
    actors: tuple[Actor, ...]
    light_z: float | None       # distance of the traffic light (None: no light)
    cross_street_z: float | None  # near edge of the cross street
    crosswalk_z: float | None     # near edge of a zebra crossing
    world: int                    # seed of the scenery (skyline, textures)
    cruise_speed: float = 10.0
    pitch: float = 0.0            # camera pitch [rad], nose down positive: braking + road

    @property
    def night(self) -> bool:
        return self.facts.lighting == "night"


# The chain ---------------------------------------------------------------------------------

NEXT_EGO = {
    None: {"driving": 0.75, "stopped": 0.25},
    "driving": {"driving": 0.4, "slowing": 0.3, "turning_left": 0.15, "turning_right": 0.15},
    "slowing": {"stopped": 0.75, "accelerating": 0.25},
    "stopped": {"stopped": 0.25, "accelerating": 0.75},
    "accelerating": {"driving": 0.7, "turning_left": 0.15, "turning_right": 0.15},
    "turning_left": {"driving": 1.0},
    "turning_right": {"driving": 1.0},
}
ROAD_BY_EGO = {
    "driving": {"straight": 0.35, "curve_left": 0.2, "curve_right": 0.2, "intersection": 0.25},
    "slowing": {"straight": 0.3, "curve_left": 0.1, "curve_right": 0.1, "intersection": 0.5},
    "stopped": {"intersection": 0.7, "straight": 0.3},
    "accelerating": {"straight": 0.5, "intersection": 0.5},
}
NEW_LIGHT = {
    "slowing": {"red": 0.5, "yellow": 0.3, "none": 0.2},
    "stopped": {"red": 0.8, "none": 0.2},
    "accelerating": {"green": 0.8, "none": 0.2},
}
# A light seen again at the same place: it turns red while stopped, green when leaving.
NEXT_LIGHT = {("stopped", "yellow"): "red", ("accelerating", "red"): "green",
              ("accelerating", "yellow"): "green"}
PERSIST_OTHER = 0.4
NIGHT_PROBABILITY = 0.3


def _pick(rng: np.random.Generator, options: dict) -> object:
    names = list(options)
    p = np.array([options[n] for n in names], dtype=float)
    return names[int(rng.choice(len(names), p=p / p.sum()))]


def other_options(ego: str, road: str) -> dict[tuple[str, str], float]:
    """(user kind, action) -> weight of the road users that fit an ego motion and road."""
    moving = ego != "stopped"
    inter = road == "intersection"
    waiting = ego in ("stopped", "slowing")
    if ego.startswith("turning"):
        # a sharp turn sweeps far things out of view: only someone close ahead stays in it
        return {("none", "none"): 0.4, ("car", "ahead"): 0.4, ("cyclist", "ahead"): 0.2}
    opts: dict[tuple[str, str], float] = {("none", "none"): 0.2, ("car", "oncoming"): 0.15,
                                          ("cyclist", "oncoming"): 0.06,
                                          ("pedestrian", "sidewalk"): 0.1,
                                          ("car", "ahead"): 0.2}
    if not inter:
        opts[("car", "parked")] = 0.12
    if inter and waiting:
        opts[("car", "crossing")] = 0.2
    if inter and ego in ("stopped", "slowing", "driving"):
        opts[("car", "turning_left")] = 0.08
        opts[("car", "turning_right")] = 0.08
    if moving and not inter:
        opts[("cyclist", "ahead")] = 0.08
    if waiting:
        opts[("cyclist", "crossing")] = 0.08
        opts[("pedestrian", "crossing")] = 0.15
    return opts


def _same_place(prev: Segment | None, ego: str) -> bool:
    """A stop (or a rolling stop) continues at the place the ego car slowed down for."""
    return prev is not None and prev.facts.ego in ("slowing", "stopped") and ego in (
        "stopped", "accelerating")


def random_facts(rng: np.random.Generator, prev: Segment | None, lighting: str) -> Facts:
    """The next segment's facts given the previous segment (the drive's Markov chain)."""
    ego = str(_pick(rng, NEXT_EGO[prev.facts.ego if prev else None]))
    if _same_place(prev, ego):
        road = prev.facts.road
    elif ego.startswith("turning"):
        road = "intersection"
    else:
        road = str(_pick(rng, ROAD_BY_EGO[ego]))
    if road != "intersection":
        light = "none"
    elif _same_place(prev, ego) and prev.facts.road == "intersection":
        light = NEXT_LIGHT.get((ego, prev.facts.light), prev.facts.light)
    else:
        light = str(_pick(rng, NEW_LIGHT.get(ego, {"green": 0.75, "none": 0.25})))
    opts = other_options(ego, road)
    kept = prev is not None and (prev.facts.other, prev.facts.other_action) in opts
    if kept and rng.random() < PERSIST_OTHER:
        return Facts(road, ego, light, lighting, prev.facts.other, prev.facts.other_color,
                     prev.facts.other_action)
    other, action = _pick(rng, opts)
    color = CAR_COLORS[int(rng.integers(len(CAR_COLORS)))] if other == "car" else "none"
    return Facts(road, ego, light, lighting, other, color, action)


def build_segment(rng: np.random.Generator, prev: Segment | None, facts: Facts,
                  duration_s: float, cruise: float) -> Segment:
    """Kinematics and place of a segment with given facts, continuing ``prev``."""
    targets = {"driving": cruise, "slowing": 0.0, "stopped": 0.0, "accelerating": cruise,
               "turning_left": 0.7 * cruise, "turning_right": 0.7 * cruise}
    if prev is None:
        v0 = 0.0 if facts.ego in ("stopped", "accelerating") else targets[facts.ego]
        start, s0, heading0, kappa0 = 0.0, 0.0, 0.0, 0.0
    else:
        v0 = prev.v1
        start, s0 = prev.end_s, prev.distance(prev.duration_s)
        heading0, kappa0 = prev.heading(prev.duration_s), prev.kappa1
    v1 = targets[facts.ego]
    if facts.ego == "stopped":
        v0 = 0.0  # only reachable from a stop or a slowdown, which end at 0
    travel = (v0 + v1) / 2 * duration_s
    if _same_place(prev, facts.ego):
        kappa1, anchor = prev.kappa1, prev.anchor_s
    else:
        radius = float(rng.uniform(50.0, 110.0))
        turn = (math.pi / 2) / max(travel, 5.0)
        kappa1 = {"curve_left": -1 / radius, "curve_right": 1 / radius}.get(facts.road, 0.0)
        kappa1 = {"turning_left": -turn, "turning_right": turn}.get(facts.ego, kappa1)
        if facts.ego in ("slowing", "stopped"):
            anchor = s0 + travel + STOP_GAP
        elif facts.ego.startswith("turning"):
            anchor = s0 - CROSSWALK_LEN  # already at the cross street
        elif facts.road == "intersection":
            anchor = s0 + 0.7 * travel + STOP_GAP
        else:
            anchor = s0 + travel + 7.0
    # a parked car or a walker stays where it was while the ego car waits next to it
    kept = prev is not None and (prev.facts.other, prev.facts.other_color,
                                 prev.facts.other_action) == (
        facts.other, facts.other_color, facts.other_action)
    user_s = prev.user_s if kept and _same_place(prev, facts.ego) else s0 + travel + 8.0
    # a drive starts settled into its first segment's pitch
    pitch0 = prev.pitch(prev.duration_s) if prev else settled_pitch(v0, v1, duration_s)
    return Segment(
        index=0 if prev is None else prev.index + 1, start_s=start, duration_s=duration_s,
        facts=facts, v0=v0, v1=v1, s0=s0, heading0=heading0, kappa0=kappa0, kappa1=kappa1,
        anchor_s=anchor, user_s=user_s, side=1 if rng.random() < 0.5 else -1,
        phase=float(rng.uniform(0, 1)), look=int(rng.integers(0, 8)), pitch0=pitch0)


# Actors ------------------------------------------------------------------------------------

# Oncoming traffic, parked cars and walkers come in rows along the road, so the nearest one in
# the models' view (visibility.py) is always within one spacing of where the view begins: a
# caption never names a road user that is only a speck at the horizon (one lone parked car
# 60 m ahead is a pixel to a model reading 56-pixel frames). People are small: they come
# closer together, so the nearest one in view is always within ~22 m (oncoming cars ~38 m).
ROW_NEAR = 4.0
ROW_FAR = 90.0
PARKED_SPACING = 20.0
WALKER_SPACING = 14.0
ONCOMING_SPACING = {"car": 30.0, "cyclist": 15.0}


def _row(kind: str, x: float, z: float, spacing: float, yaw: float, color: str,
         phase: float) -> tuple[Actor, ...]:
    """Actors every ``spacing`` metres at lateral ``x`` through ``z`` (any real number),
    from the first beyond ROW_NEAR out to ROW_FAR."""
    first = ROW_NEAR + (z - ROW_NEAR) % spacing
    count = max(math.ceil((ROW_FAR - first) / spacing), 1)
    return tuple(Actor(kind, x, first + k * spacing, yaw, color, phase + 1.7 * k)
                 for k in range(count))


def _actors(seg: Segment, tau: float, cruise: float) -> tuple[Actor, ...]:
    f = seg.facts
    if f.other == "none":
        return ()
    u = min(max(tau / seg.duration_s, 0.0), 1.0)
    v = seg.speed(tau)
    z_a = seg.anchor_s - seg.distance(tau)
    color = f.other_color if f.other == "car" else f"look{seg.look}"
    step = 2 * math.pi * (1.8 * tau + seg.phase)  # walking / pedalling cycle
    kind, action, side = f.other, f.other_action, seg.side
    if action == "ahead":
        rel = v / cruise
        z = 9.0 + 5.0 * rel + 1.2 * rel * math.sin(2 * math.pi * (tau / 5.0 + seg.phase))
        x = 0.0 if kind == "car" else 1.0
        return (Actor(kind, x, z, 0.0, color, step * rel),)
    travelled = seg.distance(tau) - seg.s0
    if action == "oncoming":
        own_speed, spacing = 9.0 if kind == "car" else 4.0, ONCOMING_SPACING[kind]
        x = -LANE_WIDTH if kind == "car" else -4.6
        z0 = (seg.phase - 1.0) * spacing - travelled - own_speed * tau
        return _row(kind, x, z0, spacing, math.pi, color, step)
    if action == "crossing":
        # spans keep the user in the models' view the whole segment (the ego car waits
        # STOP_GAP back; the view's half-width is 0.42 z)
        if kind == "car":
            z, centre, span = z_a + CROSSWALK_LEN + CROSS_STREET_LEN / 2, -1.0, 4.5
        else:
            z, centre, span = z_a + CROSSWALK_LEN / 2, -0.5, 2.5
        x = centre + side * span * (2 * u - 1)
        return (Actor(kind, x, z, side * math.pi / 2, color, step),)
    z_u = seg.user_s - seg.distance(tau)
    if action == "parked":
        return _row(kind, 2.9, z_u, PARKED_SPACING, 0.0, color, 0.0)
    if action in ("turning_left", "turning_right"):
        turn = -1.0 if action == "turning_left" else 1.0
        x = turn * 6.0 * u * u
        z = z_a + CROSSWALK_LEN + 2.0 + 4.0 * math.sin(u * math.pi / 2)
        return (Actor(kind, x, z, turn * u * math.pi / 2, color, step),)
    if action == "sidewalk":
        return _row(kind, 3.2, z_u + side * 1.3 * tau, WALKER_SPACING,
                    0.0 if side > 0 else math.pi, color, step)
    raise ValueError(f"unknown action {action!r}")


# The drive ---------------------------------------------------------------------------------


@dataclass
class Drive:
    """A reproducible drive: segments are drawn lazily, in order, from ``seed``'s generator,
    so a state depends only on (seed, t) whatever order times are asked in.

    ``segment_seconds`` is the (low, high) length range in whole seconds of ordinary segments
    (neither a stop nor a speed change); a short one such as (1, 2) makes a drive whose scene
    changes nearly every window. The default (3, 6) draws what drives have always drawn."""

    seed: int
    script: Sequence[tuple[Facts, float]] | None = None
    segments: list[Segment] = field(default_factory=list, repr=False)
    segment_seconds: tuple[int, int] = SEGMENT_SECONDS

    def __post_init__(self) -> None:
        self.segment_seconds = check_segment_seconds(self.segment_seconds)
        self._durations = segment_seconds_by_ego(self.segment_seconds)
        self._rng = np.random.default_rng([int(self.seed), 0x5C3E])
        self.world = int(self._rng.integers(0, 2**31))
        night = self._rng.random() < NIGHT_PROBABILITY
        self.lighting = "night" if night else "day"
        self.cruise_speed = float(self._rng.uniform(8.0, 13.0))
        # its own generator: the drive's chain of segments stays what it was without it
        self._shake_phases = np.random.default_rng([int(self.seed), 0x5A1B]).uniform(
            0.0, 2 * math.pi, len(VIBRATION_HZ))
        self._starts: list[float] = []

    @classmethod
    def scripted(cls, seed: int, script: Sequence[tuple[Facts, float]]) -> Drive:
        """A drive through given (facts, duration) segments (then it stays in the last)."""
        if not script:
            raise ValueError("a scripted drive needs at least one segment")
        return cls(seed, script=list(script))

    def _extend(self) -> None:
        prev = self.segments[-1] if self.segments else None
        if self.script is not None:
            # Past the end of the script its last segment repeats.
            facts, duration = self.script[min(len(self.segments), len(self.script) - 1)]
        else:
            facts = random_facts(self._rng, prev, self.lighting)
            low, high = self._durations.get(facts.ego, self.segment_seconds)
            duration = float(self._rng.integers(low, high + 1))
        seg = build_segment(self._rng, prev, facts, duration, self.cruise_speed)
        self.segments.append(seg)
        self._starts.append(seg.start_s)

    def segment_at(self, t_s: float) -> Segment:
        """The segment holding drive time ``t_s`` (>= 0)."""
        if t_s < 0:
            raise ValueError(f"drive time must be >= 0, got {t_s}")
        while not self.segments or self.segments[-1].end_s <= t_s:
            self._extend()
        return self.segments[bisect_right(self._starts, t_s) - 1]

    def vibration(self, t_s: float, speed: float) -> float:
        """Pitch jitter [rad] from the road at drive time ``t_s`` and ``speed``."""
        shake = sum(math.sin(2 * math.pi * hz * t_s + phase)
                    for hz, phase in zip(VIBRATION_HZ, self._shake_phases, strict=True))
        # a sum of n unit sines has RMS sqrt(n / 2)
        return VIBRATION_RAD * speed / self.cruise_speed * shake / math.sqrt(len(VIBRATION_HZ) / 2)

    def facts_at(self, t_s: float) -> Facts:
        return self.segment_at(t_s).facts

    def state(self, t_s: float) -> SceneState:
        """The scene at drive time ``t_s`` seconds."""
        seg = self.segment_at(t_s)
        tau = t_s - seg.start_s
        f = seg.facts
        z_a = seg.anchor_s - seg.distance(tau)
        ped_crossing = f.other_action == "crossing" and f.other != "car"
        inter = f.road == "intersection"
        speed = seg.speed(tau)
        return SceneState(
            t_s=t_s, facts=f, speed=speed, distance=seg.distance(tau),
            heading=seg.heading(tau), curvature=seg.curvature(tau),
            actors=_actors(seg, tau, self.cruise_speed),
            light_z=z_a + CROSSWALK_LEN + CROSS_STREET_LEN + 1.0 if f.light != "none" else None,
            cross_street_z=z_a + CROSSWALK_LEN if inter else None,
            crosswalk_z=z_a if (inter or ped_crossing) else None,
            world=self.world, cruise_speed=self.cruise_speed,
            pitch=seg.pitch(tau) + self.vibration(t_s, speed))
