"""Render a ``SceneState`` from the ego camera: RGB frames and log intensity for events.

A pinhole camera 1.4 m above a flat road. The ground is computed per pixel from its row's
distance (sky, road, sidewalks, lane markings, zebra crossing, cross street, fog), and objects
are stacks of boxes drawn far to near (cars with outline, cabin, windows and lights; cyclists
and pedestrians with moving legs; street lamps, trees, traffic light). Every edge is
box-filtered over the pixel's footprint (coverage, not a hard mask), so things moving by
a fraction of a pixel change intensity smoothly: the event simulator then sees motion as a
continuous change, not as one-pixel jumps. Everything is numpy and resolution independent;
``grey=True`` renders luminance only (one channel, used for events).

Night: ambient light is low, the ego car's headlights light a cone of road, and lamps,
car lights and the traffic light glow (they are drawn unlit by the ambient factor).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from crossspec_ros.sim.scene import CROSS_STREET_LEN, CROSSWALK_LEN, LANE_WIDTH, SceneState

CAMERA_HEIGHT = 1.4
FOCAL_PER_WIDTH = 0.9   # f = 0.9 * width: about 58 degrees horizontal field of view
HORIZON_PER_HEIGHT = 0.42
FAR = 150.0             # ground beyond this is fogged out
NEAR = 1.0              # objects closer than this are not drawn
LOG_EPS = 0.02          # dark offset of log intensity: very dark areas see little contrast
LUMA = np.array([0.299, 0.587, 0.114], dtype=np.float32)

ROAD_RIGHT = LANE_WIDTH / 2
ROAD_LEFT = -1.5 * LANE_WIDTH
SIDEWALK = 2.5

SKY_TOP = {"day": (0.42, 0.62, 0.92), "night": (0.01, 0.012, 0.03)}
SKY_LOW = {"day": (0.78, 0.85, 0.94), "night": (0.03, 0.03, 0.06)}
GRASS = (0.26, 0.44, 0.17)
PAVEMENT = (0.6, 0.58, 0.55)
ASPHALT = (0.3, 0.3, 0.32)
PAINT = (0.93, 0.93, 0.9)
TYRE = (0.04, 0.04, 0.04)
GLASS = (0.1, 0.12, 0.16)
SKIN = (0.85, 0.66, 0.52)
CAR_RGB = {"red": (0.78, 0.08, 0.07), "blue": (0.1, 0.22, 0.72), "white": (0.93, 0.93, 0.93),
           "black": (0.07, 0.07, 0.08), "yellow": (0.93, 0.78, 0.1), "grey": (0.5, 0.5, 0.53)}
LOOKS = [(0.2, 0.3, 0.6), (0.7, 0.15, 0.15), (0.15, 0.5, 0.25), (0.9, 0.6, 0.1),
         (0.35, 0.35, 0.35), (0.55, 0.2, 0.55), (0.9, 0.9, 0.9), (0.1, 0.1, 0.1)]
LAMP_OFF = (0.14, 0.14, 0.12)
LAMP_ON = {"red": (1.0, 0.12, 0.05), "yellow": (1.0, 0.75, 0.05), "green": (0.1, 1.0, 0.4)}
TAIL_LIGHT = (0.95, 0.1, 0.08)
HEAD_LIGHT = (1.0, 1.0, 0.88)
STREET_LAMP = (1.0, 0.85, 0.55)
NIGHT_AMBIENT = 0.07


def _paint(rgb: tuple[float, float, float], grey: bool) -> np.ndarray:
    c = np.asarray(rgb, dtype=np.float32)
    return np.array([c @ LUMA], dtype=np.float32) if grey else c


@lru_cache(maxsize=64)
def _geometry(width: int, height: int, pitch: float = 0.0) -> dict[str, np.ndarray | float | int]:
    """Per-row distances and per-column ray slopes of the ground (fixed for a size and a
    camera pitch; a pitch of a degree or two is a vertical shift of the image)."""
    f = FOCAL_PER_WIDTH * width
    horizon = HORIZON_PER_HEIGHT * height - f * math.tan(pitch)  # nose down: horizon rises
    rows = np.arange(height, dtype=np.float64) + 0.5
    first = math.floor(horizon + 0.5)  # first row whose centre is below the horizon
    dy = np.maximum(rows[first:] - horizon, 1e-3)
    z = np.minimum(f * CAMERA_HEIGHT / dy, 1e4)
    slope = ((np.arange(width) + 0.5 - width / 2) / f).astype(np.float32)
    # per-row footprints of one pixel: across (metres per column) and along (per row)
    return {"f": f, "horizon": horizon, "first": first, "z": z.astype(np.float32),
            "z64": z, "across": (z / f).astype(np.float32),
            "along": (z * z / (f * CAMERA_HEIGHT)).astype(np.float32), "slope": slope,
            "fog": (1.0 - np.exp(-z / 90.0)).astype(np.float32),
            "sky_t": (rows[:first] / max(horizon, 1.0)).astype(np.float32)}


def _box(u: np.ndarray, a: float, b: float, fp: np.ndarray) -> np.ndarray:
    """Fraction of [u - fp/2, u + fp/2] inside [a, b] (a box-filtered band)."""
    return np.clip((np.minimum(u + fp / 2, b) - np.maximum(u - fp / 2, a)) / fp, 0.0, 1.0)


def _bands(u: np.ndarray, fp: np.ndarray) -> Callable[[float, float], np.ndarray]:
    """``_box`` for many bands over the same samples (shares the footprint arithmetic)."""
    lo, hi, inv = u - fp / 2, u + fp / 2, 1 / fp

    def band(a: float, b: float) -> np.ndarray:
        out = np.minimum(hi, b)
        out -= np.maximum(lo, a)
        out *= inv
        return np.clip(out, 0.0, 1.0, out=out)

    return band


def _periodic(x: np.ndarray, fp: np.ndarray, period: float, duty: float) -> np.ndarray:
    """Box-filtered square wave: 1 on [k*period, k*period + duty), averaged over fp."""
    def cumulative(v: np.ndarray) -> np.ndarray:
        return np.floor(v / period) * duty + np.minimum(np.mod(v, period), duty)
    return (cumulative(x + fp / 2) - cumulative(x - fp / 2)) / fp


def _sinc(a: np.ndarray) -> np.ndarray:
    return np.sinc(a / np.pi)  # numpy's sinc is sin(pi x)/(pi x)


@lru_cache(maxsize=64)
def _world(world: int) -> dict[str, np.ndarray | float]:
    """Scenery of a drive: skyline profile (height and shade per angle), texture phases."""
    rng = np.random.default_rng([world, 0xB1D6])
    n = 2048
    heights = np.empty(n)
    shades = np.empty(n)
    i = 0
    while i < n:  # buildings: runs of constant height and shade
        w = int(rng.integers(12, 60))
        heights[i:i + w] = rng.uniform(0.02, 0.14) if rng.random() < 0.8 else 0.0
        shades[i:i + w] = rng.uniform(0.35, 0.75)
        i += w
    return {"heights": heights.astype(np.float32), "shades": shades.astype(np.float32),
            "phases": rng.uniform(0, 2 * np.pi, 4), "pole0": float(rng.uniform(0, 30)),
            "tree0": float(rng.uniform(0, 17))}


def _sky(img: np.ndarray, state: SceneState, g: dict, grey: bool) -> None:
    first = g["first"]
    if first <= 0:
        return
    light = state.facts.lighting
    top, low = _paint(SKY_TOP[light], grey), _paint(SKY_LOW[light], grey)
    t = g["sky_t"][:, None, None]
    sky = img[:first]
    sky[:] = top + (low - top) * t
    world = _world(state.world)
    n = len(world["heights"])
    pos = ((state.heading + np.arctan(g["slope"])) / (2 * np.pi) * n) % n
    i0 = pos.astype(np.int64)
    frac = (pos - i0).astype(np.float32)
    i0 %= n  # a tiny negative angle gives pos == n after the float modulo
    i1 = (i0 + 1) % n
    height = world["heights"][i0] * (1 - frac) + world["heights"][i1] * frac
    shade = world["shades"][i0] * (1 - frac) + world["shades"][i1] * frac
    top_row = g["horizon"] - g["f"] * height  # per column
    rows = np.arange(first, dtype=np.float32)[:, None]
    cover = np.clip(rows + 1 - top_row[None, :], 0.0, 1.0)
    base = _paint((0.55, 0.55, 0.6), grey) * (0.08 if state.night else 1.0)
    building = shade[None, :, None] * base
    sky += cover[:, :, None] * (building - sky)


def _ground(img: np.ndarray, state: SceneState, g: dict, grey: bool) -> None:
    first = g["first"]
    z, fp, fz = g["z"], g["across"], g["along"]
    s = state.distance
    world = _world(state.world)
    ph = [float(p) for p in world["phases"]]  # Python floats keep the arrays float32
    offset = (state.curvature * g["z64"] ** 2 / 2).astype(np.float32)
    x = g["slope"][None, :] * z[:, None]                  # lateral metres of each pixel
    u = x - offset[:, None]                                # ... relative to the road
    fpc = fp[:, None]
    w = (g["z64"] + s)                                     # world distance of each row
    # texture: box-filtered sinusoids in world coordinates (fade out where sub-pixel)
    t_row = (0.10 * np.sin(0.9 * w + ph[0]) * _sinc(0.45 * fz)
             + 0.06 * np.sin(3.1 * w + ph[1]) * _sinc(1.55 * fz)).astype(np.float32)
    t_2d = 0.08 * np.sin(2.3 * u + ph[2]) * _sinc(1.15 * fpc)
    # Layers (grass < pavement < asphalt < paint) as per-pixel coverages, composed at the end
    # as weights of five colours: one small matrix product instead of per-layer RGB blends.
    band = _bands(u, fpc)
    paved = band(ROAD_LEFT - SIDEWALK, ROAD_RIGHT + SIDEWALK)
    road = band(ROAD_LEFT, ROAD_RIGHT)
    dash = _periodic(w - ph[3], fz, 9.0, 3.0).astype(np.float32)
    lines = band(ROAD_RIGHT - 0.25, ROAD_RIGHT - 0.1)
    lines += band(ROAD_LEFT + 0.1, ROAD_LEFT + 0.25)
    lines += dash[:, None] * band(-LANE_WIDTH / 2 - 0.08, -LANE_WIDTH / 2 + 0.08)
    if state.cross_street_z is not None:
        a = state.cross_street_z
        across = _box(g["z64"], a, a + CROSS_STREET_LEN, fz).astype(np.float32)[:, None]
        road = road + across * (1 - road)  # the cross street is asphalt without markings
        lines *= 1 - across
    if state.crosswalk_z is not None:
        a = state.crosswalk_z
        along = _box(g["z64"], a, a + CROSSWALK_LEN, fz).astype(np.float32)
        rows = along > 0
        if rows.any():
            stripes = _periodic(u[rows], fpc[rows], 1.0, 0.5) * road[rows]
            lines[rows] = np.maximum(lines[rows], along[rows, None] * stripes)
    paint = np.minimum(lines, 1.0)
    light = np.broadcast_to((1 - g["fog"])[:, None], u.shape)
    if state.night:
        light = light * (NIGHT_AMBIENT + 1.4 * np.exp(-(x / (1.0 + 0.2 * z[:, None])) ** 2)
                         * np.exp(-z / 25.0)[:, None])
    weights = np.empty((5, *u.shape), dtype=np.float32)
    np.multiply(paint, light, out=weights[3])
    light = light * (1 - paint)
    np.multiply(road * light, 1 + 0.35 * t_row[:, None], out=weights[2])
    light *= 1 - road
    np.multiply(paved, light, out=weights[1])
    np.multiply((1 - paved) * light, 1 + t_row[:, None] + t_2d, out=weights[0])
    weights[4] = g["fog"][:, None]
    colours = np.stack([_paint(c, grey) for c in (GRASS, PAVEMENT, ASPHALT, PAINT,
                                                   SKY_LOW[state.facts.lighting])])
    mixed = colours.T @ weights.reshape(5, -1)  # C x pixels
    img[first:] = mixed.reshape(-1, *u.shape).transpose(1, 2, 0)


def _illumination(state: SceneState, x: float, z: float) -> float:
    if not state.night:
        return 1.0
    beam = 1.4 * math.exp(-(x / (1.0 + 0.2 * z)) ** 2) * math.exp(-z / 25.0)
    return NIGHT_AMBIENT + beam


class _Canvas:
    """Draws world boxes with box-filtered edges onto an image."""

    def __init__(self, img: np.ndarray, state: SceneState, g: dict, grey: bool) -> None:
        self.img, self.state, self.g, self.grey = img, state, g, grey
        self.h, self.w = img.shape[:2]
        self._cache: dict[tuple, np.ndarray] = {}

    def colour(self, rgb: tuple[float, float, float]) -> np.ndarray:
        if rgb not in self._cache:
            self._cache[rgb] = _paint(rgb, self.grey)
        return self._cache[rgb]

    def box(self, x: float, z: float, width: float, bottom: float, top: float,
            rgb: tuple[float, float, float], light: float = 1.0) -> None:
        """A vertical rectangle centred at lateral ``x`` (road frame), ``z`` ahead."""
        g = self.g
        xc = x + self.state.curvature * z * z / 2
        x0 = self.w / 2 + g["f"] * (xc - width / 2) / z
        x1 = self.w / 2 + g["f"] * (xc + width / 2) / z
        y0 = g["horizon"] + g["f"] * (CAMERA_HEIGHT - top) / z
        y1 = g["horizon"] + g["f"] * (CAMERA_HEIGHT - bottom) / z
        c0, c1 = max(math.floor(x0), 0), min(math.ceil(x1), self.w)
        r0, r1 = max(math.floor(y0), 0), min(math.ceil(y1), self.h)
        if c0 >= c1 or r0 >= r1:
            return
        cols = np.arange(c0, c1, dtype=np.float32)
        rows = np.arange(r0, r1, dtype=np.float32)
        ax = np.clip(np.minimum(cols + 1, x1) - np.maximum(cols, x0), 0.0, 1.0)
        ay = np.clip(np.minimum(rows + 1, y1) - np.maximum(rows, y0), 0.0, 1.0)
        alpha = (ay[:, None] * ax[None, :])[:, :, None]
        patch = self.img[r0:r1, c0:c1]
        patch += alpha * (self.colour(rgb) * light - patch)


def _scale(rgb: tuple[float, float, float], k: float) -> tuple[float, float, float]:
    return (rgb[0] * k, rgb[1] * k, rgb[2] * k)


def _car(cv: _Canvas, x: float, z: float, yaw: float, rgb: tuple, lit: float) -> None:
    side = abs(math.sin(yaw)) > abs(math.cos(yaw))
    length = 1.8 * abs(math.cos(yaw)) + 4.4 * abs(math.sin(yaw))
    dark = _scale(rgb, 0.45)
    night = cv.state.night
    cv.box(x, z, length + 0.08, 0.25, 0.98, dark, lit)        # outline
    if side:
        for dx in (-0.3 * length, 0.3 * length):
            cv.box(x + dx, z, 0.66, 0.0, 0.64, TYRE, lit)
        cv.box(x, z, length, 0.3, 0.95, rgb, lit)
        back = -0.08 * length * math.copysign(1.0, math.sin(yaw))
        cv.box(x + back, z, 0.56 * length, 0.95, 1.45, _scale(rgb, 0.85), lit)
        cv.box(x + back, z, 0.48 * length, 1.0, 1.38, GLASS, lit)
        if night:  # the car's own lights at its ends
            front = math.copysign(length / 2 - 0.1, math.sin(yaw))
            cv.box(x + front, z, 0.2, 0.65, 0.82, HEAD_LIGHT)
            cv.box(x - front, z, 0.2, 0.65, 0.82, TAIL_LIGHT)
        return
    cv.box(x, z, length - 0.1, 0.0, 0.35, TYRE, lit)
    cv.box(x, z, length, 0.3, 0.95, rgb, lit)
    cv.box(x, z, 0.86 * length, 0.95, 1.45, _scale(rgb, 0.85), lit)
    cv.box(x, z, 0.72 * length, 1.0, 1.38, GLASS, lit)
    facing = math.cos(yaw) < 0  # seen from the front: headlights
    lamp = HEAD_LIGHT if facing else TAIL_LIGHT
    glow = 1.0 if night else 0.8
    for dx in (-(length / 2 - 0.22), length / 2 - 0.22):
        cv.box(x + dx, z, 0.3, 0.68, 0.84, lamp if night else _scale(lamp, 0.8),
               glow if night else lit)


def _person(cv: _Canvas, x: float, z: float, yaw: float, clothes: tuple, phase: float,
            lit: float, bike: bool) -> None:
    side = abs(math.sin(yaw)) > 0.7
    swing = math.sin(phase)
    if bike:
        if side:
            for dx in (-0.55, 0.55):
                cv.box(x + dx, z, 0.62, 0.0, 0.62, TYRE, lit)
            cv.box(x, z, 1.1, 0.48, 0.58, (0.5, 0.5, 0.55), lit)
            cv.box(x + 0.15 * swing, z, 0.13, 0.3 + 0.1 * swing, 1.0, _scale(clothes, 0.6), lit)
        else:
            cv.box(x, z, 0.09, 0.0, 0.66, TYRE, lit)
            for sign in (-1.0, 1.0):
                cv.box(x + 0.1 * sign, z, 0.1, 0.35 + 0.12 * sign * swing, 1.0,
                       _scale(clothes, 0.6), lit)
        hip = 1.0
    else:
        for sign in (-1.0, 1.0):
            dx = 0.18 * sign * swing if side else 0.1 * sign
            lift = 0.0 if side else 0.06 * (1 + sign * swing)
            cv.box(x + dx, z, 0.13, lift, 0.86, _scale(clothes, 0.6), lit)
        hip = 0.85
    cv.box(x, z, 0.32 if side else 0.42, hip, hip + 0.6, clothes, lit)
    cv.box(x, z, 0.2, hip + 0.64, hip + 0.86, SKIN, lit)
    if cv.state.night and bike:
        cv.box(x, z, 0.1, 0.7, 0.8, TAIL_LIGHT)


def _traffic_light(cv: _Canvas, z: float, state: str, lit: float) -> None:
    cv.box(2.6, z, 0.14, 0.0, 3.1, (0.25, 0.25, 0.27), lit)
    cv.box(1.45, z, 2.4, 3.0, 3.12, (0.25, 0.25, 0.27), lit)
    cv.box(0.4, z, 0.42, 2.45, 3.6, (0.08, 0.08, 0.08), lit)
    for name, centre in (("red", 3.38), ("yellow", 3.03), ("green", 2.68)):
        on = name == state
        cv.box(0.4, z, 0.26, centre - 0.13, centre + 0.13,
               LAMP_ON[name] if on else LAMP_OFF, 1.0 if on else lit)


def _scenery(state: SceneState) -> list[tuple[float, str, float]]:
    """(z, kind, x) of street lamps and trees within view (world-fixed, every few metres)."""
    world = _world(state.world)
    s = state.distance
    items = []
    for kind, x, period, first in (("lamp", 4.8, 30.0, world["pole0"]),
                                   ("tree", -9.5, 17.0, world["tree0"]),
                                   ("tree", 8.5, 23.0, world["tree0"] + 5.0)):
        k = math.ceil((s + NEAR - first) / period)
        while (z := first + k * period - s) < 90.0:
            items.append((z, kind, x))
            k += 1
    return items


def _objects(img: np.ndarray, state: SceneState, g: dict, grey: bool) -> None:
    cv = _Canvas(img, state, g, grey)
    drawables: list[tuple[float, object]] = []
    for z, kind, x in _scenery(state):
        drawables.append((z, (kind, x)))
    for actor in state.actors:
        drawables.append((actor.z, actor))
    if state.light_z is not None:
        drawables.append((state.light_z, ("light", 0.0)))
    for z, item in sorted(drawables, key=lambda d: -d[0]):
        if z < NEAR:
            continue
        if isinstance(item, tuple):
            kind, x = item
            lit = _illumination(state, x, z)
            if kind == "lamp":
                cv.box(x, z, 0.15, 0.0, 5.5, (0.35, 0.35, 0.37), lit)
                cv.box(x - 0.3, z, 0.7, 5.3, 5.5, STREET_LAMP if state.night else (0.3,) * 3)
            elif kind == "tree":
                cv.box(x, z, 0.3, 0.0, 2.0, (0.35, 0.25, 0.15), lit)
                cv.box(x, z, 2.6, 1.8, 5.0, (0.12, 0.3, 0.1), lit)
            else:
                _traffic_light(cv, z, state.facts.light, lit)
            continue
        lit = _illumination(state, item.x, z)
        if item.kind == "car":
            _car(cv, item.x, z, item.yaw, CAR_RGB[item.color], lit)
        else:
            clothes = LOOKS[int(item.color[4:]) % len(LOOKS)]
            _person(cv, item.x, z, item.yaw, clothes, item.phase, lit, item.kind == "cyclist")


def render_linear(state: SceneState, width: int = 320, height: int = 240,
                  grey: bool = False) -> np.ndarray:
    """H x W x C float32 image in [0, 1] (C = 3, or 1 luminance channel with ``grey``)."""
    if width < 8 or height < 8:
        raise ValueError(f"render size must be at least 8x8, got {width}x{height}")
    g = _geometry(int(width), int(height), float(state.pitch))
    img = np.empty((height, width, 1 if grey else 3), dtype=np.float32)
    _sky(img, state, g, grey)
    _ground(img, state, g, grey)
    _objects(img, state, g, grey)
    return np.clip(img, 0.0, 1.0, out=img)


def render_rgb(state: SceneState, width: int = 320, height: int = 240) -> np.ndarray:
    """H x W x 3 uint8 RGB frame."""
    img = render_linear(state, width, height)
    img *= 255.0
    img += 0.5
    return img.astype(np.uint8)


def render_log(state: SceneState, width: int = 320, height: int = 240,
               eps: float = LOG_EPS) -> np.ndarray:
    """H x W float32 log intensity log(luminance + eps), the event simulator's input."""
    lum = render_linear(state, width, height, grey=True)[:, :, 0]
    lum += eps
    return np.log(lum, out=lum)
