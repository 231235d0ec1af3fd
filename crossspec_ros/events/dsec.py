"""Read DSEC ``events/left/events.h5`` files by time range on the image clock.

Layout: ``/events/{x,y,t,p}`` (t in us, sorted), ``/ms_to_idx`` (index of the first event
with t >= ms * 1000), ``/t_offset`` (us; add it to t to get the image-clock time), 640x480,
Blosc/zstd compressed (``hdf5plugin`` registers the filter). ``read`` touches only the needed
slice: two short reads of ``t`` inside one millisecond find the exact bounds, then the slice.
"""

from __future__ import annotations

import logging
from pathlib import Path

import h5py
import hdf5plugin  # noqa: F401  (registers the Blosc filter h5py needs to read DSEC)
import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.errors import EventSourceError

log = logging.getLogger(__name__)

DSEC_WIDTH, DSEC_HEIGHT = 640, 480
REQUIRED = ("events/x", "events/y", "events/t", "events/p", "ms_to_idx", "t_offset")


class DsecFormatError(EventSourceError):
    """The file is missing, not HDF5, or lacks a DSEC dataset."""


class DsecEventsReader:
    """Time-range reader of one DSEC events.h5. Use as a context manager (or ``close``)."""

    def __init__(self, path: str | Path, width: int = DSEC_WIDTH,
                 height: int = DSEC_HEIGHT) -> None:
        self.path = Path(path)
        self.width, self.height = width, height
        if not self.path.is_file():
            raise DsecFormatError(f"{self.path}: no such file. Pass a DSEC events file "
                                  "(<sequence>/events/left/events.h5).")
        try:
            self._file = h5py.File(self.path, "r")
        except OSError as exc:
            raise DsecFormatError(f"{self.path}: not a readable HDF5 file ({exc}).") from exc
        missing = [name for name in REQUIRED if name not in self._file]
        if missing:
            self.close()
            raise DsecFormatError(
                f"{self.path}: missing dataset(s) {', '.join('/' + m for m in missing)}; a DSEC "
                "events.h5 has /events/{x,y,t,p}, /ms_to_idx and /t_offset.")
        ev = self._file["events"]
        self._t, self._x, self._y, self._p = ev["t"], ev["x"], ev["y"], ev["p"]
        self.num_events = len(self._t)
        lengths = {len(d) for d in (self._t, self._x, self._y, self._p)}
        if len(lengths) > 1:
            self.close()
            raise DsecFormatError(f"{self.path}: /events/x,y,t,p differ in length {lengths}.")
        self.t_offset_us = int(np.asarray(self._file["t_offset"][()]).reshape(-1)[0])
        # One entry per millisecond (60k for a minute): small enough to hold.
        self._ms_to_idx = np.asarray(self._file["ms_to_idx"][:], dtype=np.int64)
        self.out_of_bounds_events = 0
        self._warned = False

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> DsecEventsReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def t_first_us(self) -> int | None:
        """Image-clock time of the first event."""
        return int(self._t[0]) + self.t_offset_us if self.num_events else None

    @property
    def t_last_us(self) -> int | None:
        """Image-clock time of the last event."""
        return int(self._t[-1]) + self.t_offset_us if self.num_events else None

    def _index(self, local_us: int) -> int:
        """Index of the first event with t >= local_us (file clock)."""
        if local_us <= 0 or self.num_events == 0:
            return 0
        ms = local_us // 1000
        n_ms = len(self._ms_to_idx)
        lo = int(self._ms_to_idx[min(ms, n_ms - 1)])
        hi = int(self._ms_to_idx[ms + 1]) if ms + 1 < n_ms else self.num_events
        lo, hi = min(lo, self.num_events), min(max(hi, lo), self.num_events)
        # Events of millisecond `ms` lie in [lo, hi): the answer is within, or hi.
        return lo + int(np.searchsorted(self._t[lo:hi], local_us, side="left"))

    def read(self, t0_us: int, t1_us: int) -> EventBatch:
        """Events with image-clock time in [t0_us, t1_us), t in ns on the image clock."""
        i0 = self._index(t0_us - self.t_offset_us)
        i1 = max(self._index(t1_us - self.t_offset_us), i0)
        t = self._t[i0:i1].astype(np.int64)
        t += self.t_offset_us
        t *= 1000
        batch = EventBatch(t, self._x[i0:i1], self._y[i0:i1], self._p[i0:i1],
                           self.width, self.height)
        inside = batch.in_bounds_mask()
        if not inside.all():
            dropped = int((~inside).sum())
            self.out_of_bounds_events += dropped
            level = logging.DEBUG if self._warned else logging.WARNING
            self._warned = True
            log.log(level, "%s: %d events outside %dx%d dropped", self.path, dropped,
                    self.width, self.height)
            batch = batch.take(inside)
        return batch
