"""Isolated wild timestamps versus real clock jumps, for one stream of timed data.

A damaged time word, a bad header stamp or a driver glitch gives one datum (an event batch, a
frame, an EventArray message) a time seconds or days away from its stream; a bag looping or a
camera or clock reset moves every datum after it. On the datum itself they look alike; the
stream's next datum tells them apart. The rule, ``TimeOutlierGate``:

- A datum *agrees* with a time ``ref`` when all of it lies within ``threshold_ns`` of ``ref``.
  The caller gives the *timeline* with each datum: the latest time it has accepted (the
  synchronizer: the latest time of any of its streams), None before the first.
- A datum that agrees with the timeline passes at once (the usual case: no delay), as does
  the first one, when there is no timeline yet.
- One that does not is held, and the stream's next datum decides:

  - it agrees with the timeline: the held one was an isolated outlier; it is dropped (the
    caller counts it) and the new one passes;
  - it agrees with the held one: the timeline jumped. Both pass, the held one first, and the
    verdict says so (``jump``, ``jump_ns``: the held one's latest time);
  - neither: the held one is dropped and the new one is held in its place.

- A datum whose own times span more than ``threshold_ns`` agrees with nothing (no camera
  packet, frame or message spans seconds: its times are damaged): it is dropped at once.
- A held datum the timeline has meanwhile come to (another stream jumped with it) passes
  ahead of the stream's next datum. ``settle`` decides a held datum at the end of the input:
  it passes if it agrees with the timeline then, else it is dropped.

So an outlier costs that one datum, and a real jump delays its stream by one datum. The limit,
by construction: two data in a row that agree with each other and not with the timeline are a
jump, however wild.

Example (threshold 5 s, times in s): 10.0, 10.1, 500.0, 10.2 -> 500.0 is held at its arrival
and dropped when 10.2 comes (10.2 passes). 10.0, 10.1, 0.0, 0.1 -> 0.0 is held, then 0.1
confirms the jump: 0.0 and 0.1 pass with ``jump`` set (a bag looping).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

# The synchronizer's default reset threshold, and the gate's where no node parameter sets one
# (``crossspec events``, the EventArray conversion): no packet or message spans 2 s.
DEFAULT_THRESHOLD_NS = 2_000_000_000


@dataclass
class GateVerdict(Generic[T]):
    """What to do with the data after one offer: use ``passed`` now, in that order (when
    ``jump``, ``passed[0]`` is the first datum of the new timeline, at ``jump_ns``); count
    ``dropped`` as outliers."""

    passed: list[T] = field(default_factory=list)
    dropped: list[T] = field(default_factory=list)
    jump: bool = False
    jump_ns: int | None = None


class TimeOutlierGate(Generic[T]):
    """One stream's gate (see the module docstring). Not thread-safe."""

    def __init__(self, threshold_ns: int) -> None:
        if threshold_ns <= 0:
            raise ValueError(f"threshold_ns must be > 0, got {threshold_ns}")
        self.threshold_ns = int(threshold_ns)
        self._held: tuple[T, int, int] | None = None  # (datum, first time, last time)

    @property
    def held(self) -> T | None:
        """The datum waiting for the stream's next one, if any."""
        return self._held[0] if self._held is not None else None

    def _agrees(self, t_first: int, t_last: int, ref: int | None) -> bool:
        return ref is not None and ref - self.threshold_ns <= t_first \
            and t_last <= ref + self.threshold_ns

    def offer(self, item: T, t_first: int, t_last: int,
              timeline_ns: int | None) -> GateVerdict[T]:
        """The stream's next datum, whose times lie in [``t_first``, ``t_last``]."""
        t_first, t_last = int(t_first), int(t_last)
        verdict: GateVerdict[T] = GateVerdict()
        if self._held is not None and self._agrees(*self._held[1:], timeline_ns):
            verdict.passed.append(self._held[0])  # the timeline came to it meanwhile
            self._held = None
        if t_last - t_first > self.threshold_ns:
            verdict.dropped.append(item)
            return verdict
        first = timeline_ns is None and self._held is None
        if first or self._agrees(t_first, t_last, timeline_ns):
            if self._held is not None:
                verdict.dropped.append(self._held[0])
                self._held = None
            verdict.passed.append(item)
            return verdict
        if self._held is not None:
            held, _, held_last = self._held
            self._held = None
            if self._agrees(t_first, t_last, held_last):
                verdict.passed += [held, item]
                verdict.jump, verdict.jump_ns = True, held_last
                return verdict
            verdict.dropped.append(held)
        self._held = (item, t_first, t_last)
        return verdict

    def settle(self, timeline_ns: int | None) -> GateVerdict[T]:
        """End of the input: a held datum passes if it agrees with the timeline, else it
        is dropped (nothing will ever confirm it)."""
        verdict: GateVerdict[T] = GateVerdict()
        if self._held is not None:
            item = self._held[0]
            agrees = self._agrees(*self._held[1:], timeline_ns)
            (verdict.passed if agrees else verdict.dropped).append(item)
            self._held = None
        return verdict
