"""The target's costs on any machine: a model's device calls made to last what a cost profile
says they cost on the target GPU.

The models here compute every token (captions, acceptance and losslessness stay real); each
call to a language model's forward or to its vision encoder then waits out the rest of what
the profile says that call costs on the target (``CostProfile.call_ms``). A call whose real
compute already took longer is counted (``over_budget``): a run with any says the emulation did
not hold. Host work (frame and event preparation, tokenizing, the loops) is not emulated: it
runs on the host there too.

A profile (``data/cost_profiles/NAME.json``) is measured (``kind`` "measured": every number
traced to a GPU report) or a bound (``kind`` "bound": arithmetic from public specs); numbers a
report lacks are ``filled`` and say how. Two models on one emulated device follow the profile's
sharing rule; the one rule so far is "serial": one call on the device at a time, in the order
they come (a call's emulated time starts when it began and the device was free).

Everything emulated says so: ``EmulatedDevice.describe`` and ``report`` name the profile and
its kind, and the numbers of a run on it are never a measurement of the machine it ran on.
"""

from __future__ import annotations

import bisect
import functools
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROFILE_DIR = Path(__file__).resolve().parents[1] / "data" / "cost_profiles"
SHARING_RULES = ("serial",)


class ProfileError(ValueError):
    """A cost profile that cannot be used, in one line (what, where, what to do)."""


@dataclass(frozen=True)
class Cost:
    """One number of a profile and where it comes from (``filled``: not measured there)."""

    ms: float
    source: str
    filled: bool = False


@dataclass(frozen=True)
class ModelCosts:
    """One model's device calls on the target."""

    vision_ms_per_frame: Cost
    prefill_ms_per_token: Cost
    pass_ms_by_rows: dict[int, Cost]  # a forward of that many rows (1: a decoding step)

    def pass_ms(self, rows: int) -> float:
        """A forward of ``rows`` rows: linear between the profile's row counts (the first one's
        cost below it); past the last one a prefill of that many tokens, never less than the
        last pass."""
        known = sorted(self.pass_ms_by_rows)
        if rows <= known[0]:
            return self.pass_ms_by_rows[known[0]].ms
        if rows > known[-1]:
            return max(self.pass_ms_by_rows[known[-1]].ms,
                       rows * self.prefill_ms_per_token.ms)
        at = bisect.bisect_left(known, rows)
        if known[at] == rows:
            return self.pass_ms_by_rows[rows].ms
        lo, hi = known[at - 1], known[at]
        a, b = self.pass_ms_by_rows[lo].ms, self.pass_ms_by_rows[hi].ms
        return a + (b - a) * (rows - lo) / (hi - lo)

    def vision_ms(self, frames: int) -> float:
        return frames * self.vision_ms_per_frame.ms


@dataclass(frozen=True)
class CostProfile:
    """What each device call of the two models costs on one target (device, dtype, runtime)."""

    name: str
    kind: str            # "measured" or "bound"
    device: str
    dtype: str
    runtime: str
    report: str          # where its numbers come from
    sharing: str         # one of SHARING_RULES
    sharing_about: str
    verifier: ModelCosts
    drafter: ModelCosts

    @property
    def label(self) -> str:
        """How every output names it: "emulated: NAME (a measured profile, REPORT)"."""
        what = "a measured profile" if self.kind == "measured" else "a bound, not measured"
        return f"emulated: {self.name} ({what}; {self.report})"

    def costs(self, role: str) -> ModelCosts:
        return self.verifier if role == "verifier" else self.drafter

    @classmethod
    def load(cls, name_or_path: str | Path) -> CostProfile:
        """A bundled profile by name (``available()``) or a profile file."""
        path = Path(name_or_path)
        if not path.suffix:
            path = PROFILE_DIR / f"{name_or_path}.json"
        if not path.is_file():
            raise ProfileError(f"no cost profile {name_or_path!r}: give a profile file or one "
                               f"of {', '.join(available())}")
        try:
            data = json.loads(path.read_text())
            profile = cls(
                name=data["name"], kind=data["kind"], device=data["device"],
                dtype=data["dtype"], runtime=data["runtime"], report=data["report"],
                sharing=data["sharing"]["rule"], sharing_about=data["sharing"]["about"],
                verifier=_model_costs(data["verifier"]), drafter=_model_costs(data["drafter"]))
        except (ValueError, KeyError, TypeError) as err:
            raise ProfileError(f"{path}: not a cost profile ({type(err).__name__}: {err}); "
                               f"see {PROFILE_DIR} for the layout") from err
        if profile.kind not in ("measured", "bound"):
            raise ProfileError(f"{path}: kind {profile.kind!r} is neither 'measured' nor "
                               "'bound'")
        if profile.sharing not in SHARING_RULES:
            raise ProfileError(f"{path}: sharing rule {profile.sharing!r} is not one of "
                               f"{', '.join(SHARING_RULES)}")
        return profile


def _cost(entry: dict[str, Any]) -> Cost:
    ms = float(entry["ms"])
    if not ms >= 0:  # NaN too
        raise ValueError(f"a cost of {ms} ms")
    return Cost(ms, str(entry["from"]), bool(entry.get("filled", False)))


def _model_costs(data: dict[str, Any]) -> ModelCosts:
    passes = {int(rows): _cost(entry) for rows, entry in data["pass_ms_by_rows"].items()}
    if not passes or min(passes) < 1:
        raise ValueError("pass_ms_by_rows needs row counts >= 1")
    return ModelCosts(_cost(data["vision_ms_per_frame"]), _cost(data["prefill_ms_per_token"]),
                      passes)


def available() -> list[str]:
    """The bundled profiles' names."""
    return sorted(path.stem for path in PROFILE_DIR.glob("*.json"))


class EmulatedDevice:
    """One emulated GPU that the models emulated on it share (the profile's sharing rule).
    Counts every call by kind and those whose real compute overran the profile."""

    def __init__(self, profile: CostProfile) -> None:
        self.profile = profile
        self._lock = threading.Lock()
        self._free_at = 0.0  # monotonic time the device finishes its last call (serial)
        self.calls: Counter[str] = Counter()
        self.over_budget: Counter[str] = Counter()
        self.emulated_ms: Counter[str] = Counter()
        self.over_budget_ms: Counter[str] = Counter()  # how far the overruns went, in all

    def occupy(self, kind: str, started: float, cost_ms: float) -> None:
        """A call of ``kind`` that began at ``started`` (monotonic) and computed until now:
        wait until it would be done on the target."""
        now = time.monotonic()
        with self._lock:
            begin = max(started, self._free_at)
            done = begin + cost_ms / 1e3
            self._free_at = done
            self.calls[kind] += 1
            self.emulated_ms[kind] += cost_ms
            if now - started > cost_ms / 1e3:
                self.over_budget[kind] += 1
                self.over_budget_ms[kind] += (now - started) * 1e3 - cost_ms
        if done > now:
            time.sleep(done - now)

    @property
    def held(self) -> bool:
        """No call's real compute overran its emulated cost."""
        return not sum(self.over_budget.values())

    def overruns(self) -> str:
        """The calls that overran, by kind, and by how much in all: "verifier_vision 435
        calls, +812 ms" (what a summary says when the emulation did not hold)."""
        return ", ".join(f"{kind} {n} of {self.calls[kind]} calls, "
                         f"+{self.over_budget_ms[kind]:.0f} ms"
                         for kind, n in sorted(self.over_budget.items()))

    def verdict(self) -> str:
        """What every summary ends with: whether the emulation held, and that no GPU has
        checked it yet."""
        held = "the emulation held" if self.held else \
            f"the emulation did NOT hold: calls whose compute here overran their cost there: " \
            f"{self.overruns()}"
        return f"{held}; not yet checked against a GPU"

    def describe(self) -> str:
        return f"{self.profile.label}: {self.profile.device}, {self.profile.dtype}, " \
               f"{self.profile.runtime}; sharing {self.profile.sharing}"

    def report(self) -> dict[str, Any]:
        """What a run's JSON says about its emulation."""
        return {"emulated": True, "profile": self.profile.name, "kind": self.profile.kind,
                "label": self.profile.label, "report": self.profile.report,
                "sharing": self.profile.sharing, "calls": dict(self.calls),
                "emulated_ms": {k: round(v, 1) for k, v in self.emulated_ms.items()},
                "over_budget": dict(self.over_budget),
                "over_budget_ms": {k: round(v, 1) for k, v in self.over_budget_ms.items()},
                "held": self.held,
                "checked_against_a_gpu": False}


def _rows(args: tuple, kwargs: dict[str, Any]) -> int:
    for name in ("inputs_embeds", "input_ids"):
        value = kwargs.get(name)
        if value is not None:
            return int(value.shape[1])
    return int(args[0].shape[1]) if args else 1


def _frames(pixels: Any) -> int:
    """Images in a pixel tensor [..., 3, H, W]."""
    return max(1, int(pixels.numel()) // int(pixels.shape[-3] * pixels.shape[-2]
                                             * pixels.shape[-1]))


# which method of a model runs its vision (or event) encoder, and the frames it encodes
VISION_METHODS = {"_encode": lambda args, kwargs: _frames(args[0]),
                  "_embeds": lambda args, kwargs: _frames(args[0].pixel_values)}


_SHARED: dict[str, EmulatedDevice] = {}
_SHARED_LOCK = threading.Lock()


def shared_device(profile: str) -> EmulatedDevice:
    """The one emulated device of this process for ``profile`` (a name or a file): the graph's
    models in one process share it, as they share one GPU there."""
    with _SHARED_LOCK:
        if profile not in _SHARED:
            _SHARED[profile] = EmulatedDevice(CostProfile.load(profile))
        return _SHARED[profile]


def emulate(model: Any, role: str, device: EmulatedDevice) -> Any:
    """Make ``model``'s device calls (its language model's forward, its vision encoder) last
    what ``device``'s profile says for ``role`` ("verifier" or "drafter"). Install before
    taking twins of the model (``with_runtime``): they share its modules and copy its
    attributes. Again on the same device: nothing changes; on another: that one instead.
    Returns the model."""
    if getattr(model, "emulated_on", None) is device:
        return model
    for undo in model.__dict__.pop("_emulation_undo", ()):
        undo()
    costs = device.profile.costs(role)
    lm = model.language_model_parts()[0]
    undo_steps: list[Any] = []
    started: dict[int, float] = {}

    def before(_module: Any, _args: tuple, _kwargs: dict) -> None:
        started[threading.get_ident()] = time.monotonic()

    def after(_module: Any, args: tuple, kwargs: dict, _out: Any) -> None:
        rows = _rows(args, kwargs)
        begun = started.pop(threading.get_ident(), time.monotonic())
        device.occupy(f"{role}_pass" if rows <= max(costs.pass_ms_by_rows) else
                      f"{role}_prefill", begun, costs.pass_ms(rows))

    undo_steps += [lm.register_forward_pre_hook(before, with_kwargs=True).remove,
                   lm.register_forward_hook(after, with_kwargs=True).remove]
    for name, frames_of in VISION_METHODS.items():
        method = getattr(model, name, None)
        if method is None:
            continue
        own = name in model.__dict__
        undo_steps.append(functools.partial(setattr, model, name, method) if own
                          else functools.partial(model.__dict__.pop, name, None))

        @functools.wraps(method)
        def timed(*args: Any, _method: Any = method, _frames_of: Any = frames_of,
                  **kwargs: Any) -> Any:
            begun = time.monotonic()
            out = _method(*args, **kwargs)
            device.occupy(f"{role}_vision", begun, costs.vision_ms(_frames_of(args, kwargs)))
            return out

        setattr(model, name, timed)
        break
    model.emulated_on = device
    model._emulation_undo = undo_steps
    return model
