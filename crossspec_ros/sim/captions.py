"""Captions of the synthetic world: a small grammar, two paraphrase styles and a parser.

A caption is one or two sentences built from the window's ``Facts``::

    <ego subject> <ego motion> <road> [<traffic light>] [<night>] .
    <other user> <its action> .          (or a sentence saying no one else is there)

Every slot has several paraphrases (``PHRASES``). A *style* picks one paraphrase per slot
value, deterministically, so a model trained on one style can learn it exactly:

- ``"verifier"`` always takes the first paraphrase;
- ``"drafter"`` takes the one ``DRAFTER_CHOICE`` names, which differs from the verifier's for
  about half of the slot values and agrees for the rest. The drafter is trained on this mix,
  so the two models' greedy captions agree on only part of their tokens, as EventGPT and
  Video-LLaVA do. Over drives (200 seeds x 30 windows) the drafter caption shares 53 % of
  the verifier's tokens by LCS, 24 % position by position and a 15 % common prefix (the
  subject "the ego car" is shared; see ``style_agreement``);
- ``"random"`` draws every paraphrase from a generator (augmentation; the parser reads it).

Colours: the drafter style *does* name the car colour (the true one in its training
captions). An event camera cannot see colour, so a trained drafter has to guess it: the
realistic disagreement with the verifier. ``visibility.py`` lists what events can show. It
names the kind first ("a car painted red"): with the colour first ("a red car"), greedy
decoding split a car's probability over the six colour words and a likelier single word
won. Measured on a drafter trained that way (100 held-out windows): after "A", the colours
together outweighed "cyclist" and "person" for 35 of 35 cars, yet its greedy caption named
the car for 7 of them.

Tokens are lowercase words and the punctuation marks ``.`` and ``,``; ``tokenize`` and
``detokenize`` convert between a caption's text and its tokens (they round-trip every
caption the grammar makes) and ``caption_vocabulary`` lists every token either style or the
random mix can produce.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from crossspec_ros.sim.scene import (
    CAR_COLORS,
    EGO_MOTIONS,
    LIGHT_STATES,
    ROADS,
    USER_ACTIONS,
    Facts,
)

STYLES = ("verifier", "drafter", "random")
PUNCTUATION = (".", ",")
LIGHT_COLORS = tuple(c for c in LIGHT_STATES if c != "none")

# slot -> value -> paraphrases ("{c}" is the colour of a car or of the traffic light).
PHRASES: dict[str, dict[str, tuple[str, ...]]] = {
    "subject": {"ego": ("the ego car", "our car", "the ego vehicle")},
    "ego": {
        "driving": ("drives", "is driving", "moves forward"),
        "slowing": ("slows down", "is braking", "reduces its speed"),
        "stopped": ("is stopped", "stands still", "waits"),
        "accelerating": ("speeds up", "is accelerating", "pulls away"),
        "turning_left": ("turns left", "is turning left", "makes a left turn"),
        "turning_right": ("turns right", "is turning right", "makes a right turn"),
    },
    "road": {
        "straight": ("on a straight road", "on a straight street", "along a straight road"),
        "curve_left": ("on a road curving left", "in a left-hand bend",
                       "on a road that bends to the left"),
        "curve_right": ("on a road curving right", "in a right-hand bend",
                        "on a road that bends to the right"),
        "intersection": ("at an intersection", "at a crossroads", "at a junction"),
    },
    "light": {c: ("with a {c} traffic light", ", where the light is {c}",
                  "with the light showing {c}") for c in LIGHT_COLORS},
    "lighting": {"night": ("at night", "in the dark", "after dark")},
    "other": {
        "car": ("a {c} car", "a {c} vehicle", "a car painted {c}"),
        "cyclist": ("a cyclist", "a person on a bicycle", "a bike rider"),
        "pedestrian": ("a pedestrian", "a person on foot", "someone walking"),
    },
    "other_action": {
        "ahead": ("is ahead in the same lane", "is in front of our car", "is directly ahead"),
        "oncoming": ("comes from the opposite direction", "is oncoming",
                     "approaches in the other lane"),
        "crossing": ("crosses the road", "is crossing the road", "crosses in front of us"),
        "parked": ("is parked on the right", "is parked at the roadside",
                   "stands parked by the road"),
        "turning_left": ("turns left ahead", "is turning left ahead", "turns left in front"),
        "turning_right": ("turns right ahead", "is turning right ahead",
                          "turns right in front"),
        "sidewalk": ("walks on the sidewalk", "is walking on the pavement",
                     "walks along the sidewalk"),
    },
    "none": {"none": ("no other road users are visible", "there is no other traffic",
                      "the road is otherwise empty")},
}

# The drafter's paraphrase per (slot, value); absent = the verifier's (index 0).
DRAFTER_CHOICE: dict[tuple[str, str], int] = {
    ("ego", "driving"): 1, ("ego", "slowing"): 1, ("ego", "stopped"): 1, ("ego", "accelerating"): 1,
    ("ego", "turning_left"): 1, ("ego", "turning_right"): 1,
    ("road", "curve_left"): 1, ("road", "curve_right"): 1,
    ("road", "straight"): 1, ("road", "intersection"): 1,
    ("light", "red"): 1, ("light", "yellow"): 1, ("light", "green"): 1,
    ("lighting", "night"): 1,
    ("other", "car"): 2, ("other", "pedestrian"): 1,
    ("other_action", "ahead"): 1, ("other_action", "oncoming"): 1,
    ("other_action", "crossing"): 1, ("other_action", "sidewalk"): 1,
    ("none", "none"): 1,
}

_TOKEN = re.compile(r"[a-z]+(?:-[a-z]+)*|[.,]")


def _choose(slot: str, value: str, style: str, rng: np.random.Generator | None) -> str:
    options = PHRASES[slot][value]
    if style == "verifier":
        return options[0]
    if style == "drafter":
        return options[DRAFTER_CHOICE.get((slot, value), 0)]
    if rng is None:
        raise ValueError("style 'random' needs an rng")
    return options[int(rng.integers(len(options)))]


def caption(facts: Facts, style: str = "verifier", rng: np.random.Generator | None = None) -> str:
    """The caption of ``facts`` in a style ("verifier", "drafter" or "random" with ``rng``)."""
    if style not in STYLES:
        raise ValueError(f"unknown caption style {style!r}: use one of {STYLES}")
    first = [_choose("subject", "ego", style, rng), _choose("ego", facts.ego, style, rng),
             _choose("road", facts.road, style, rng)]
    if facts.light != "none":
        first.append(_choose("light", facts.light, style, rng).format(c=facts.light))
    if facts.lighting == "night":
        first.append(_choose("lighting", "night", style, rng))
    if facts.other == "none":
        second = [_choose("none", "none", style, rng)]
    else:
        second = [_choose("other", facts.other, style, rng).format(c=facts.other_color),
                  _choose("other_action", facts.other_action, style, rng)]
    return detokenize(tokenize(" ".join(first) + " . " + " ".join(second) + " ."))


def tokenize(text: str) -> list[str]:
    """Lowercase word and punctuation tokens of a caption."""
    return _TOKEN.findall(text.lower())


def detokenize(tokens: list[str]) -> str:
    """Caption text of tokens: punctuation attached, sentences capitalised."""
    out = ""
    start = True
    for tok in tokens:
        if tok in PUNCTUATION:
            out += tok
            start = tok == "."
            continue
        word = tok.capitalize() if start else tok
        out += (" " if out else "") + word
        start = False
    return out


def _expand(slot: str, value: str) -> list[tuple[str, ...]]:
    """Every token sequence a slot value can take (colours filled in)."""
    fills = {"light": [value], "other": list(CAR_COLORS)}.get(slot, [""])
    return [tuple(tokenize(p.format(c=c))) for p in PHRASES[slot][value] for c in fills]


@lru_cache(maxsize=1)
def _patterns() -> dict[str, list[tuple[tuple[str, ...], str, str]]]:
    """slot -> [(tokens, value, colour)], longest first (so "is turning left ahead" wins)."""
    out: dict[str, list[tuple[tuple[str, ...], str, str]]] = {}
    for slot, values in PHRASES.items():
        rows = []
        for value, phrases in values.items():
            for phrase in phrases:
                colours = CAR_COLORS if slot == "other" and "{c}" in phrase else ("",)
                for c in colours:
                    rows.append((tuple(tokenize(phrase.format(c=c or value))), value, c))
        out[slot] = sorted(rows, key=lambda r: -len(r[0]))
    return out


def _find(tokens: list[str], slot: str, at_start: bool = False) -> tuple[str, str] | None:
    """(value, colour) of the longest phrase of ``slot`` in ``tokens`` (or at their start)."""
    for pattern, value, colour in _patterns()[slot]:
        n = len(pattern)
        starts = range(1 if at_start else len(tokens) - n + 1)
        if any(tuple(tokens[i:i + n]) == pattern for i in starts):
            return value, colour
    return None


def parse_caption(text: str) -> dict[str, str]:
    """Attributes a caption of any style states (the keys of ``Facts``; "none" if absent).

    Unknown or missing parts come back as "unknown" (road, ego), so a model's broken caption
    scores as wrong rather than raising.
    """
    tokens = tokenize(text)
    sentences: list[list[str]] = [[]]
    for tok in tokens:
        if tok == ".":
            sentences.append([])
        else:
            sentences[-1].append(tok)
    sentences = [s for s in sentences if s]
    attrs = {"road": "unknown", "ego": "unknown", "light": "none", "lighting": "day",
             "other": "none", "other_color": "none", "other_action": "none"}
    for sentence in sentences:
        if _find(sentence, "subject", at_start=True):
            for slot in ("ego", "road", "light"):
                found = _find(sentence, slot)
                if found:
                    attrs[slot] = found[0]
            if _find(sentence, "lighting"):
                attrs["lighting"] = "night"
        elif _find(sentence, "none"):
            attrs["other"] = attrs["other_action"] = "none"
        else:
            found = _find(sentence, "other")
            if found:
                attrs["other"] = found[0]
                attrs["other_color"] = found[1] or "none"
            action = _find(sentence, "other_action")
            attrs["other_action"] = action[0] if action else "unknown"
    return attrs


@lru_cache(maxsize=1)
def _vocabulary() -> tuple[str, ...]:
    words = {tok for slot, values in PHRASES.items() for value in values
             for seq in _expand(slot, value) for tok in seq}
    return tuple(sorted(words - set(PUNCTUATION)) + list(PUNCTUATION))


def caption_vocabulary() -> list[str]:
    """Every token a caption can contain (lowercase words sorted, then "." and ",")."""
    return list(_vocabulary())


def lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence of two token lists."""
    if not a or not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def style_agreement(verifier: str, drafter: str) -> dict[str, float]:
    """How much two captions agree, as fractions of the verifier's tokens.

    ``lcs``: longest common subsequence; ``position``: same token at the same index;
    ``prefix``: the common prefix (what one greedy verification round would accept).
    """
    a, b = tokenize(verifier), tokenize(drafter)
    n = max(len(a), 1)
    prefix = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        prefix += 1
    return {"lcs": lcs_length(a, b) / n,
            "position": sum(x == y for x, y in zip(a, b, strict=False)) / n,
            "prefix": prefix / n}


def all_facts() -> list[Facts]:
    """Every combination of facts the grammar can state (for exhaustive tests)."""
    others = [("none", "none", "none")]
    for action in USER_ACTIONS[1:]:
        kinds = {"sidewalk": ["pedestrian"], "parked": ["car"], "turning_left": ["car"],
                 "turning_right": ["car"], "ahead": ["car", "cyclist"]}.get(
                     action, ["car", "cyclist", "pedestrian"])
        for kind in kinds:
            colours = CAR_COLORS if kind == "car" else ("none",)
            others += [(kind, c, action) for c in colours]
    return [Facts(road, ego, light, lighting, *other)
            for road in ROADS for ego in EGO_MOTIONS for light in LIGHT_STATES
            for lighting in ("day", "night") for other in others]
