"""EventBatch: the one in-memory form of event-camera data in crossspec.

Struct-of-arrays numpy (one array per field), so slicing, concatenation and
rendering stay vectorised. Times are nanoseconds on the ROS clock of the RGB
stamps (see ``events/clock.py`` for how sensor time is mapped there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

T_DTYPE = np.dtype(np.int64)
XY_DTYPE = np.dtype(np.uint16)
P_DTYPE = np.dtype(np.uint8)


@dataclass(frozen=True, eq=False)
class EventBatch:
    """Change-detection events of one sensor, sorted or not (see ``is_sorted``).

    t: int64 ns, x/y: uint16 pixel coordinates, p: uint8 polarity (0 = OFF, 1 = ON).
    width/height: sensor size in pixels.
    """

    t: np.ndarray
    x: np.ndarray
    y: np.ndarray
    p: np.ndarray
    width: int
    height: int

    def __post_init__(self) -> None:
        n = len(self.t)
        if not (len(self.x) == len(self.y) == len(self.p) == n):
            raise ValueError(
                f"EventBatch arrays differ in length: t={n} x={len(self.x)} "
                f"y={len(self.y)} p={len(self.p)}"
            )
        object.__setattr__(self, "t", np.asarray(self.t, dtype=T_DTYPE))
        object.__setattr__(self, "x", np.asarray(self.x, dtype=XY_DTYPE))
        object.__setattr__(self, "y", np.asarray(self.y, dtype=XY_DTYPE))
        object.__setattr__(self, "p", np.asarray(self.p, dtype=P_DTYPE))

    @classmethod
    def empty(cls, width: int, height: int) -> EventBatch:
        return cls(
            np.empty(0, T_DTYPE), np.empty(0, XY_DTYPE), np.empty(0, XY_DTYPE),
            np.empty(0, P_DTYPE), width, height,
        )

    @classmethod
    def concat(cls, batches: list[EventBatch], width: int | None = None,
               height: int | None = None) -> EventBatch:
        """Concatenate batches of one sensor (order kept). Empty list needs width/height."""
        if not batches:
            if width is None or height is None:
                raise ValueError("concat of no batches needs width and height")
            return cls.empty(width, height)
        w, h = batches[0].width, batches[0].height
        for b in batches:
            if (b.width, b.height) != (w, h):
                raise ValueError(
                    f"cannot concat batches of sensors {w}x{h} and {b.width}x{b.height}")
        return cls(
            np.concatenate([b.t for b in batches]), np.concatenate([b.x for b in batches]),
            np.concatenate([b.y for b in batches]), np.concatenate([b.p for b in batches]),
            w, h,
        )

    def __len__(self) -> int:
        return len(self.t)

    def take(self, index: np.ndarray | slice) -> EventBatch:
        """Events selected by a boolean mask, an index array or a slice."""
        return EventBatch(self.t[index], self.x[index], self.y[index], self.p[index],
                          self.width, self.height)

    def is_sorted(self) -> bool:
        return bool(len(self.t) < 2 or np.all(self.t[1:] >= self.t[:-1]))

    def sorted(self) -> EventBatch:
        """Time-sorted copy (stable, so equal stamps keep their order)."""
        if self.is_sorted():
            return self
        return self.take(np.argsort(self.t, kind="stable"))

    def between(self, t0: int, t1: int) -> EventBatch:
        """Events with t0 <= t < t1 (binary search when sorted, a mask otherwise)."""
        if self.is_sorted():
            i0, i1 = np.searchsorted(self.t, [t0, t1], side="left")
            return self.take(slice(int(i0), int(i1)))
        return self.take((self.t >= t0) & (self.t < t1))

    def in_bounds_mask(self) -> np.ndarray:
        """True where (x, y) lies inside width x height."""
        return (self.x < self.width) & (self.y < self.height)

    @property
    def t_first(self) -> int | None:
        return int(self.t.min()) if len(self.t) else None

    @property
    def t_last(self) -> int | None:
        return int(self.t.max()) if len(self.t) else None

    def equals(self, other: EventBatch) -> bool:
        """Field-by-field equality (same order), including sensor size."""
        return (
            (self.width, self.height) == (other.width, other.height)
            and np.array_equal(self.t, other.t) and np.array_equal(self.x, other.x)
            and np.array_equal(self.y, other.y) and np.array_equal(self.p, other.p)
        )
