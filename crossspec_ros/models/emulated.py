"""The target's costs on any machine: a model's device calls made to last what a cost profile
says they cost on the target GPU.

The models here compute every token (captions, acceptance and losslessness stay real); each
call to a language model's forward or to its vision encoder then waits out the rest of what
the profile says that call costs on the target (``CostProfile.call_ms``). A forward over the
prompt is charged for the rows it stands for in the target's prompt (``PromptLayout``): the
tiny verifier's 17-token frame chunk costs what the 7B's 257-token chunk costs. A call whose
compute here ends after its emulated end is counted (``over_budget``): a run with any says the
emulation did not hold. Host work (frame and event preparation, tokenizing, the loops) is not
emulated: it runs on the host there too.

A profile (``data/cost_profiles/NAME.json``) is measured (``kind`` "measured": every number
traced to a GPU report) or a bound (``kind`` "bound": arithmetic from public specs); numbers a
report lacks are ``filled`` and say how. Two models on one emulated device follow the profile's
sharing rule; the one rule so far is "serial": one call on the device at a time, in the order
they come; a call's compute here never overlaps the other model's (``EmulatedDevice.acquire``).

Everything emulated says so: ``CostProfile.describe`` and ``EmulatedDevice.report`` name the
profile and its kind, and the numbers of a run on it are never a measurement of the machine it
ran on.

One door turns the emulation on for a model: ``emulate(model, role, profile)`` (the nodes'
parameter ``emulate`` through ``runtime_setup.prepare_runtime``, ``bench engine --emulate``),
on the one device of the process for that profile; one function reads it back:
``emulation_of(model)``. Which calls are a prefill and which a pass is one rule,
``forward_kind``, which the call trace (call_trace.py) files calls by too.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import json
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROFILE_DIR = Path(__file__).resolve().parents[1] / "data" / "cost_profiles"
# the call kinds of lanes (models/lanes.py, models/prompt_lanes.py) -> the key of a model's
# costs that prices them
LANE_KEYS = {"lane_pass": "lane_pass_ms_by_lanes", "lane_copy": "lane_copy_ms",
             "lane_chunk": "chunk_ms_by_frames", "vision_batch": "vision_ms_by_batch"}
# the lane costs that are tables by count (lanes, frames); the rest are single costs
LANE_TABLES = ("lane_pass_ms_by_lanes", "chunk_ms_by_frames", "vision_ms_by_batch")
SHARING_RULES = ("serial",)
FIRST_OVERRUNS = 20  # the overruns a report lists one by one


class ProfileError(ValueError):
    """A cost profile that cannot be used, in one line (what, where, what to do)."""


@dataclass(frozen=True)
class Cost:
    """One number of a profile and where it comes from (``filled``: not measured there)."""

    ms: float
    source: str
    filled: bool = False


@dataclass(frozen=True)
class PromptLayout:
    """The target model's prompt: its tokens and the chunks a prefill runs (the first with the
    prompt's head, one per frame), a fact of the model, not of the device."""

    tokens: int
    chunks: tuple[int, ...]
    source: str

    def positions(self, own_tokens: int, own_chunks: Sequence[int]) -> Callable[[int], float]:
        """A map from a model's prompt positions (its ``prompt_layout()``) to this one's,
        linear within each chunk (within the whole prompt when the chunk counts differ);
        positions after the prompt (generated tokens) keep their distance from its end."""
        own = [0, *itertools.accumulate(own_chunks), own_tokens]
        target = [0, *itertools.accumulate(self.chunks), self.tokens]
        if len(own_chunks) != len(self.chunks) or any(b < a for a, b in itertools.pairwise(own)) \
                or any(b < a for a, b in itertools.pairwise(target)):
            own, target = [0, own_tokens], [0, self.tokens]

        def at(pos: int) -> float:
            if pos >= own[-1]:
                return target[-1] + pos - own[-1]
            i = bisect.bisect_right(own, pos) - 1
            while own[i + 1] == own[i]:  # an empty chunk
                i += 1
            return target[i] + (target[i + 1] - target[i]) * (pos - own[i]) / (own[i + 1]
                                                                                - own[i])
        return at


@dataclass(frozen=True)
class ModelCosts:
    """One model's device calls on the target."""

    vision_ms_per_frame: Cost
    prefill_ms_per_token: Cost
    pass_ms_by_rows: dict[int, Cost]  # a forward of that many rows (1: a decoding step)
    prompt: PromptLayout | None = None  # None: a forward's rows are charged as they are
    # a lane step of that many lanes (models/lanes.py: [S, step_rows] as one forward) and the
    # copy of a prompt into a lane; None: the profile has no lane costs (a lane step raises)
    lane_pass_ms_by_lanes: dict[int, Cost] | None = None
    lane_copy_ms: Cost | None = None
    # the streams' prompt work batched (models/prompt_lanes.py): a chunk step of that many
    # frames' chunks ([K, chunk] as one forward, the copy of its new positions out of the
    # lanes included) and a vision call of that many frames; None: the profile has none
    chunk_ms_by_frames: dict[int, Cost] | None = None
    vision_ms_by_batch: dict[int, Cost] | None = None

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

    def lane_pass_ms(self, lanes: int) -> float:
        """A lane step of ``lanes`` lanes (``by_count``)."""
        return self.by_count("lane_pass_ms_by_lanes", lanes)

    def by_count(self, key: str, count: int) -> float:
        """A call of ``count`` lanes (or frames) priced by the table ``key`` (``LANE_TABLES``):
        linear between the profile's counts (the first one's cost below it); past the last
        one the line through the last two, never less than the last (each lane adds work)."""
        table = getattr(self, key)
        if table is None:
            raise ProfileError(f"no {key} in these costs")
        known = sorted(table)
        ms = {s: table[s].ms for s in known}
        if count <= known[0]:
            return ms[known[0]]
        if count >= known[-1]:
            if len(known) == 1:
                return ms[known[-1]]
            lo, hi = known[-2], known[-1]
            return max(ms[hi], ms[hi] + (ms[hi] - ms[lo]) * (count - hi) / (hi - lo))
        at = bisect.bisect_left(known, count)
        if known[at] == count:
            return ms[count]
        lo, hi = known[at - 1], known[at]
        return ms[lo] + (ms[hi] - ms[lo]) * (count - lo) / (hi - lo)

    def vision_ms(self, frames: int) -> float:
        return frames * self.vision_ms_per_frame.ms

    def call_ms(self, kind: str, count: int) -> float:
        """One device call: ``kind`` "vision" encodes ``count`` frames one at a time,
        "vision_batch" ``count`` frames in one call, "lane_pass" is a lane step of ``count``
        lanes, "lane_chunk" a prompt chunk step of ``count`` lanes, "lane_copy" one prompt
        copied into a lane, any other kind ("pass", "prefill") is a forward of ``count`` rows
        of the target model."""
        if kind == "vision":
            return self.vision_ms(count)
        if kind in LANE_KEYS and LANE_KEYS[kind] in LANE_TABLES:
            return self.by_count(LANE_KEYS[kind], count)
        if kind == "lane_copy":
            if self.lane_copy_ms is None:
                raise ProfileError(f"no {LANE_KEYS['lane_copy']} in these costs")
            return self.lane_copy_ms.ms
        return self.pass_ms(count)

    def filled(self) -> list[str]:
        """The names of this model's numbers that were filled, not measured
        ("pass_ms_by_rows[25]", "lane_pass_ms_by_lanes[2, 4, 8]")."""
        numbers: dict[str, Cost | dict[int, Cost] | None] = {
            "vision_ms_per_frame": self.vision_ms_per_frame,
            "prefill_ms_per_token": self.prefill_ms_per_token,
            "pass_ms_by_rows": self.pass_ms_by_rows,
            "lane_pass_ms_by_lanes": self.lane_pass_ms_by_lanes, "lane_copy_ms": self.lane_copy_ms,
            "chunk_ms_by_frames": self.chunk_ms_by_frames,
            "vision_ms_by_batch": self.vision_ms_by_batch}
        names = []
        for name, number in numbers.items():
            if isinstance(number, dict):
                keys = [str(k) for k, cost in sorted(number.items()) if cost.filled]
                names += [f"{name}[{', '.join(keys)}]"] if keys else []
            elif number is not None and number.filled:
                names.append(name)
        return names


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

    def describe(self) -> str:
        """One line for a log: the label, the target, its sharing rule and the numbers that
        were filled, not measured."""
        filled = "; ".join(f"{role} {', '.join(names)}"
                           for role, names in self.filled().items())
        return f"{self.label}: {self.device}, {self.dtype}, {self.runtime}; sharing " \
               f"{self.sharing}" + (f"; filled, not measured: {filled}" if filled else "")

    def filled(self) -> dict[str, list[str]]:
        """Each model's numbers that were filled, not measured (roles without any left out)."""
        return {role: names for role in ("verifier", "drafter")
                if (names := self.costs(role).filled())}

    def costs(self, role: str) -> ModelCosts:
        return self.verifier if role == "verifier" else self.drafter

    def call_ms(self, role: str, kind: str, count: int) -> float:
        """What one device call costs on the target: ``kind`` "vision" encodes ``count``
        frames, any other kind ("pass", "prefill") is a forward of ``count`` rows of the
        target model; "lane_pass" a lane step of ``count`` lanes, "lane_copy" a prompt's copy
        into a lane (ProfileError when the profile lacks their costs). The emulation waits it
        out; the GPU kit's fidelity check sums it over a real run's trace."""
        costs = self.costs(role)
        key = LANE_KEYS.get(kind)
        if key is not None and getattr(costs, key) is None:
            raise ProfileError(
                f"cost profile {self.name}: no {role}.{key}, which an emulated {kind} needs: "
                f"add it to the profile (docs/engine.md, the emulation's lane costs) or run "
                f"the GPU kit's streams stage")
        return costs.call_ms(kind, count)

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
                verifier=model_costs(data["verifier"], "verifier"),
                drafter=model_costs(data["drafter"], "drafter"))
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


def model_costs(data: dict[str, Any], role: str = "") -> ModelCosts:
    """One model's part of a profile file (``role``: ``verifier`` or ``drafter``, for the
    errors)."""
    passes = {int(rows): _cost(entry) for rows, entry in data["pass_ms_by_rows"].items()}
    if not passes or min(passes) < 1:
        raise ValueError("pass_ms_by_rows needs row counts >= 1")
    tables, copy = _lane_costs(data, f"{role}." if role else "")
    prompt = None
    if "prompt" in data:
        entry = data["prompt"]
        prompt = PromptLayout(int(entry["tokens"]), tuple(int(c) for c in entry["chunks"]),
                              str(entry["from"]))
        if prompt.tokens < 1 or sum(prompt.chunks) > prompt.tokens or min(prompt.chunks) < 0:
            raise ValueError(f"a prompt of {prompt.tokens} tokens in chunks {prompt.chunks}")
    return ModelCosts(_cost(data["vision_ms_per_frame"]), _cost(data["prefill_ms_per_token"]),
                      passes, prompt, tables["lane_pass_ms_by_lanes"], copy,
                      tables["chunk_ms_by_frames"], tables["vision_ms_by_batch"])


def _lane_costs(data: dict[str, Any], where: str
                ) -> tuple[dict[str, dict[int, Cost] | None], Cost | None]:
    """A model's optional lane costs: the tables of ``LANE_TABLES`` (counts >= 1 in
    ascending order, each cost > 0) and ``lane_copy_ms`` (> 0). ``where``: "verifier."."""
    tables: dict[str, dict[int, Cost] | None] = dict.fromkeys(LANE_TABLES)
    for key in LANE_TABLES:
        if key not in data:
            continue
        table = data[key]
        if not isinstance(table, dict) or not table:
            raise ValueError(f"{where}{key} must map counts to costs")
        counts = [int(k) if str(k).isdigit() else 0 for k in table]
        if min(counts) < 1 or counts != sorted(set(counts)):
            raise ValueError(f"{where}{key} needs counts >= 1 in ascending order, got "
                             f"{list(table)}")
        tables[key] = {int(k): _positive(entry, f"{where}{key}[{k}]")
                       for k, entry in table.items()}
    copy = None
    if "lane_copy_ms" in data:
        copy = _positive(data["lane_copy_ms"], f"{where}lane_copy_ms")
    return tables, copy


def _positive(entry: dict[str, Any], name: str) -> Cost:
    try:
        cost = _cost(entry)
    except (KeyError, TypeError) as err:
        raise ValueError(f"{name} needs an ms and a from ({type(err).__name__}: {err})") \
            from err
    if not cost.ms > 0:
        raise ValueError(f"{name} must cost more than 0 ms, got {cost.ms}")
    return cost


def available() -> list[str]:
    """The bundled profiles' names."""
    return sorted(path.stem for path in PROFILE_DIR.glob("*.json"))


class EmulatedDevice:
    """One emulated GPU that the models emulated on it share (the profile's sharing rule).
    Counts every call by kind and those whose compute here ended after their end there."""

    def __init__(self, profile: CostProfile) -> None:
        self.profile = profile
        self._lock = threading.Lock()
        self._paused = 0  # inside paused(): calls are not charged
        self.uncharged: Counter[str] = Counter()
        self._free_at = 0.0  # monotonic time the device finishes its last call (serial)
        self._turn = threading.Condition()
        self._holder: int | None = None  # the thread whose call computes here
        self._depth = 0  # its calls within calls
        self.calls: Counter[str] = Counter()
        self.over_budget: Counter[str] = Counter()
        self.emulated_ms: Counter[str] = Counter()
        self.over_budget_ms: Counter[str] = Counter()  # how far the overruns went, in all
        # the first overruns: (kind, which call of its kind from 1, its cost, how far over)
        self.first_overruns: list[tuple[str, int, float, float]] = []

    def acquire(self) -> float:
        """Wait while another model's call computes here, and return when this call begins
        (monotonic): the two models' compute never shares this machine's cores, so neither
        slows the other's (on the target each call has the device to itself). It may compute
        while the call before waits out its emulated time: ``occupy`` then starts it on the
        emulated device when that one is done. A call within a call of the same thread does
        not wait."""
        me = threading.get_ident()
        with self._turn:
            if self._holder != me:
                while self._holder is not None:
                    self._turn.wait()
                self._holder = me
            self._depth += 1
        return time.monotonic()

    def occupy(self, kind: str, started: float, cost_ms: float) -> None:
        """A call of ``kind`` that began at ``started`` (monotonic; from ``acquire``) and
        computed until now: let the next call compute, and wait until this one would be done
        on the target. It overran when its compute here ended after its end there (on a busy
        device it begins there when the call before ends)."""
        self.give_back()
        if self._paused:
            self.uncharged[kind] += 1
            return
        self._wait_out(kind, started, cost_ms)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Calls inside cost what they cost here, charged nothing and counted apart
        (``uncharged``): a bench's reference decodings after its timed runs, which no
        reported number includes."""
        with self._lock:
            self._paused += 1
        try:
            yield
        finally:
            with self._lock:
                self._paused -= 1

    def give_back(self) -> None:
        """This thread's compute is over (``occupy`` calls it; a call that raised, alone)."""
        with self._turn:
            if self._holder == threading.get_ident():
                self._depth -= 1
                if self._depth == 0:
                    self._holder = None
                    self._turn.notify_all()

    def _wait_out(self, kind: str, started: float, cost_ms: float) -> None:
        now = time.monotonic()
        with self._lock:
            begin = max(started, self._free_at)
            done = begin + cost_ms / 1e3
            self._free_at = max(done, now)
            self.calls[kind] += 1
            self.emulated_ms[kind] += cost_ms
            if now > done:
                self.over_budget[kind] += 1
                self.over_budget_ms[kind] += (now - done) * 1e3
                if len(self.first_overruns) < FIRST_OVERRUNS:
                    self.first_overruns.append((kind, self.calls[kind], round(cost_ms, 2),
                                                round((now - done) * 1e3, 2)))
        if done > now:
            time.sleep(done - now)

    @property
    def calls_over_budget(self) -> int:
        """The calls whose compute here ended after their emulated end, all kinds together."""
        return sum(self.over_budget.values())

    @property
    def held(self) -> bool:
        return emulation_held(self.calls_over_budget)

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

    def report(self) -> dict[str, Any]:
        """What a run's JSON says about its emulation."""
        return {"emulated": True, "profile": self.profile.name, "kind": self.profile.kind,
                "label": self.profile.label, "report": self.profile.report,
                "sharing": self.profile.sharing, "calls": dict(self.calls),
                "emulated_ms": {k: round(v, 1) for k, v in self.emulated_ms.items()},
                "over_budget": dict(self.over_budget),
                "over_budget_ms": {k: round(v, 1) for k, v in self.over_budget_ms.items()},
                "first_overruns": [list(o) for o in self.first_overruns],
                "uncharged": dict(self.uncharged),
                "filled": self.profile.filled(),
                "held": self.held,
                "checked_against_a_gpu": False}


def forward_rows(args: tuple, kwargs: dict[str, Any]) -> int:
    for name in ("inputs_embeds", "input_ids"):
        value = kwargs.get(name)
        if value is not None:
            return int(value.shape[1])
    return int(args[0].shape[1]) if args else 1


def forward_lanes(args: tuple, kwargs: dict[str, Any]) -> int:
    """A forward's batch rows: > 1 for a lane step (models/lanes.py: one row a lane)."""
    for name in ("inputs_embeds", "input_ids"):
        value = kwargs.get(name)
        if value is not None:
            return int(value.shape[0])
    return int(args[0].shape[0]) if args else 1


def forward_position(kwargs: dict[str, Any]) -> int:
    """The cached positions before a forward: its first position id (the static runtime's),
    else its cache's length (transformers')."""
    for name in ("position_ids", "cache_position"):
        value = kwargs.get(name)
        if value is not None:
            return int(value.reshape(-1)[0])
    cache = kwargs.get("past_key_values")
    return int(cache.get_seq_length()) if cache is not None else 0


def emulation_held(calls_over_budget: int) -> bool:
    """The emulation's verdict: it held when no call's compute here ended after its emulated
    end (``EmulatedDevice.held``; a node's diagnostics print the count, whoever reads them
    asks this)."""
    return calls_over_budget == 0


def forward_kind(pos: int, prompt_tokens: int) -> str:
    """A language model forward after ``pos`` cached positions of a model whose prompt holds
    ``prompt_tokens``: "prefill" when it reaches into the prompt, else "pass" (generated
    tokens only). The one rule: the emulation charges by it, the call trace files by it."""
    return "prefill" if pos < prompt_tokens else "pass"


def target_rows(model: Any, costs: ModelCosts) -> Callable[[int, int], tuple[int, str]]:
    """For a forward of ``rows`` rows after ``pos`` cached positions of ``model``: the rows it
    stands for on the target (through the profile's prompt layout) and its kind
    (``forward_kind``: a prefill or a pass)."""
    own_tokens, own_chunks = model.prompt_layout()
    at = costs.prompt.positions(own_tokens, own_chunks) if costs.prompt is not None else None

    def rows_of(pos: int, rows: int) -> tuple[int, str]:
        kind = forward_kind(pos, own_tokens)
        if at is None:
            return rows, kind
        return max(1, round(at(pos + rows) - at(pos))), kind
    return rows_of


def _frames(pixels: Any) -> int:
    """Images in a pixel tensor [..., 3, H, W]."""
    return max(1, int(pixels.numel()) // int(pixels.shape[-3] * pixels.shape[-2]
                                             * pixels.shape[-1]))


# which method of a model runs its vision (or event) encoder, and the frames it encodes
VISION_METHODS = {"_encode": lambda args, kwargs: _frames(args[0]),
                  "_embeds": lambda args, kwargs: _frames(args[0].pixel_values)}


def wrap_vision(model: Any, wrap: Callable[[Any, Any], Any]) -> list[Callable[[], None]]:
    """Replace ``model``'s vision (or event) encoder method (``VISION_METHODS``) by
    ``wrap(method, frames_of)``; returns the undo steps (none for a model without one)."""
    for name, frames_of in VISION_METHODS.items():
        method = getattr(model, name, None)
        if method is None:
            continue
        undo = functools.partial(setattr, model, name, method) if name in model.__dict__ \
            else functools.partial(model.__dict__.pop, name, None)
        setattr(model, name, wrap(method, frames_of))
        return [undo]
    return []


_SHARED: dict[str, EmulatedDevice] = {}
_SHARED_LOCK = threading.Lock()


def _device_of_process(profile: str | Path) -> EmulatedDevice:
    """The one emulated device of this process for ``profile`` (a name or a file): the models
    emulated in one process share it, as they share one GPU there."""
    with _SHARED_LOCK:
        key = str(profile)
        if key not in _SHARED:
            _SHARED[key] = EmulatedDevice(CostProfile.load(profile))
        return _SHARED[key]


def emulation_of(model: Any) -> EmulatedDevice | None:
    """The emulated device ``model``'s calls are timed on (None: its own machine's costs):
    what every report, summary and diagnostics asks."""
    return getattr(model, "_emulated_on", None)


def emulate(model: Any, role: str, profile: str | Path) -> EmulatedDevice:
    """Make ``model``'s device calls (its language model's forward, its vision encoder) last
    what ``profile`` (a bundled profile's name or a profile file; ProfileError when it cannot
    be used) says for ``role`` ("verifier" or "drafter"), on the one emulated device of this
    process for that profile. Install before taking twins of the model (``with_runtime``):
    they share its modules and copy its attributes. Again on the same device: nothing
    changes; on another: that one instead. Returns the device."""
    device = _device_of_process(profile)
    if emulation_of(model) is not device:
        _install(model, role, device)
    return device


def _install(model: Any, role: str, device: EmulatedDevice) -> None:
    """``emulate``'s hooks on ``model``, in place of any it had."""
    for undo in model.__dict__.pop("_emulation_undo", ()):
        undo()
    costs = device.profile.costs(role)
    rows_of = target_rows(model, costs)
    lm = model.language_model_parts()[0]
    undo_steps: list[Any] = []
    started: dict[int, tuple[float, int]] = {}

    def before(_module: Any, _args: tuple, kwargs: dict) -> None:
        # the position before the forward: it moves the cache on
        started[threading.get_ident()] = (device.acquire(), forward_position(kwargs))

    def after(_module: Any, args: tuple, kwargs: dict, _out: Any) -> None:
        begun, pos = started.pop(threading.get_ident(), (time.monotonic(), 0))
        try:
            kind, cost_ms = _forward_cost(device, role, rows_of, pos, args, kwargs)
        except BaseException:  # a profile without lane costs: the device is not held on
            device.give_back()
            raise
        device.occupy(f"{role}_{kind}", begun, cost_ms)

    # always_call: a forward that raises gives the device back too
    undo_steps += [lm.register_forward_pre_hook(before, with_kwargs=True).remove,
                   lm.register_forward_hook(after, with_kwargs=True, always_call=True).remove]

    def timed(method: Any, frames_of: Any) -> Any:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            kind, cost_ms = _vision_cost(device, role, args, frames_of(args, kwargs))
            begun = device.acquire()
            try:
                out = method(*args, **kwargs)
            except BaseException:
                device.give_back()
                raise
            device.occupy(f"{role}_{kind}", begun, cost_ms)
            return out
        return call

    undo_steps += wrap_vision(model, timed)
    _LM_EMULATION[lm] = (device, role)
    undo_steps.append(functools.partial(_LM_EMULATION.pop, lm, None))
    model._emulated_on = device
    model._emulation_undo = undo_steps


def _vision_cost(device: EmulatedDevice, role: str, args: tuple, frames: int
                 ) -> tuple[str, float]:
    """(kind, ms) of a vision call of ``frames`` frames: a batch of several videos' frames
    (pixels [B > 1, F, 3, H, W]: the streams' frames of models/prompt_lanes.py) is F calls of
    B frames each ("vision_batch", priced before the call: a profile without it raises
    first); anything else is encoded frame by frame ("vision")."""
    shape = getattr(args[0], "shape", ()) if args else ()
    batch = int(shape[0]) if len(shape) == 5 else 1
    if batch > 1:
        return "vision_batch", frames // batch * device.profile.call_ms(
            role, "vision_batch", batch)
    return "vision", device.profile.call_ms(role, "vision", frames)


def _forward_cost(device: EmulatedDevice, role: str, rows_of: Callable[[int, int],
                  tuple[int, str]], pos: int, args: tuple, kwargs: dict[str, Any]
                  ) -> tuple[str, float]:
    """(kind, ms) of a language model forward after ``pos`` cached positions: a lane step
    (several batch rows; its per-lane positions are no prefill) is priced by its lanes,
    any other forward by the rows it stands for on the target."""
    lanes = forward_lanes(args, kwargs)
    if lanes > 1:  # a decoding step, or a prompt chunk step (the cache says which)
        kind = getattr(kwargs.get("past_key_values"), "lane_kind", "lane_pass")
        return kind, device.profile.call_ms(role, kind, lanes)
    rows, kind = rows_of(pos, forward_rows(args, kwargs))
    return kind, device.profile.call_ms(role, kind, rows)


# a language model module -> the emulated device and role its model is emulated on: what a
# device call outside a forward (a lane's adoption copy) is charged on
_LM_EMULATION: weakref.WeakKeyDictionary[Any, tuple[EmulatedDevice, str]] = \
    weakref.WeakKeyDictionary()


@contextlib.contextmanager
def emulated_call(lm: Any, kind: str, count: int = 1) -> Iterator[None]:
    """A device call that is no forward (``kind`` "lane_copy": a prompt copied into a lane),
    made on the language model ``lm``: on the emulated device of the model ``lm`` belongs
    to, it takes the device (``acquire``) and lasts what the profile says (``occupy``);
    nothing changes when that model is not emulated. The price is read before the call
    runs: a profile without it raises ProfileError first."""
    emulated = _LM_EMULATION.get(lm)
    if emulated is None:
        yield
        return
    device, role = emulated
    cost_ms = device.profile.call_ms(role, kind, count)
    begun = device.acquire()
    try:
        yield
    except BaseException:
        device.give_back()
        raise
    device.occupy(f"{role}_{kind}", begun, cost_ms)
