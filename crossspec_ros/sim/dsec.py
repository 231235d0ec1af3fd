"""Write a synthetic drive in DSEC's sequence layout (for converters and readers of DSEC).

::

    <out>/events/left/events.h5         /events/{x,y,t,p}, /ms_to_idx, /t_offset (Blosc+zstd)
    <out>/images/left/rectified/NNNNNN.png   RGB frames
    <out>/images/timestamps.txt          one image time per line [us]

As in DSEC, event times ``t`` are microseconds relative to ``t_offset`` (adding it gives the
image clock of ``timestamps.txt``), ``ms_to_idx[ms]`` is the index of the first event with
``t >= ms * 1000``, and x, y are uint16, p uint8, t uint32. Events are written as they are
simulated (resizable datasets), so memory stays flat. Default sizes are DSEC's (events
640x480, images 1440x1080); tests use small ones.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
from PIL import Image

from crossspec_ros.sim.events import EventConfig
from crossspec_ros.sim.stream import record

# DSEC's t_offset values are sensor uptimes of this order (tens of thousands of seconds).
DEFAULT_T_OFFSET_US = 50_000_000_000
CHUNK_EVENTS = 1 << 16


def _blosc() -> hdf5plugin.Blosc:
    return hdf5plugin.Blosc(cname="zstd", clevel=3, shuffle=hdf5plugin.Blosc.SHUFFLE)


def write_dsec_sequence(out_dir: str | Path, seed: int, duration_s: float, *,
                        event_size: tuple[int, int] = (640, 480),
                        image_size: tuple[int, int] = (1440, 1080), rgb_hz: float = 20.0,
                        t_offset_us: int = DEFAULT_T_OFFSET_US,
                        config: EventConfig | None = None) -> dict[str, int]:
    """Write drive ``seed`` as a DSEC sequence in ``out_dir``; returns event and image counts."""
    out = Path(out_dir)
    events_dir = out / "events" / "left"
    images_dir = out / "images" / "left" / "rectified"
    events_dir.mkdir(parents=True, exist_ok=True)
    images_dir.mkdir(parents=True, exist_ok=True)
    per_ms = np.zeros(int(np.ceil(duration_s * 1000)) + 1, dtype=np.int64)
    stamps: list[int] = []
    n_events = 0
    with h5py.File(events_dir / "events.h5", "w") as f:
        columns = {}
        for name, dtype in (("x", np.uint16), ("y", np.uint16), ("p", np.uint8),
                            ("t", np.uint32)):
            columns[name] = f.create_dataset(f"events/{name}", shape=(0,), maxshape=(None,),
                                             dtype=dtype, chunks=(CHUNK_EVENTS,), **_blosc())
        for chunk in record(seed, duration_s, event_size=event_size, rgb_size=image_size,
                            rgb_hz=rgb_hz, start_ns=t_offset_us * 1000, config=config):
            ev = chunk.events
            t_us = ev.t // 1000 - t_offset_us
            values = {"x": ev.x, "y": ev.y, "p": ev.p, "t": t_us.astype(np.uint32)}
            for name, column in columns.items():
                column.resize((n_events + len(ev),))
                column[n_events:] = values[name]
            n_events += len(ev)
            per_ms += np.bincount(np.minimum(t_us // 1000, len(per_ms) - 1),
                                  minlength=len(per_ms))
            for stamp_ns, rgb in chunk.frames:
                Image.fromarray(rgb).save(images_dir / f"{len(stamps):06d}.png")
                stamps.append(stamp_ns // 1000)
        # ms_to_idx[ms] = events before millisecond ms = first index with t >= ms * 1000
        ms_to_idx = np.concatenate([[0], np.cumsum(per_ms)[:-1]]).astype(np.uint64)
        f.create_dataset("ms_to_idx", data=ms_to_idx, **_blosc())
        f.create_dataset("t_offset", data=np.int64(t_offset_us))
    (out / "images" / "timestamps.txt").write_text("".join(f"{s}\n" for s in stamps))
    return {"events": n_events, "images": len(stamps)}
