"""DSEC events.h5: time-range reads match brute force and touch only the needed slice.

DSEC rectify_map.h5: events move to the nearest rectified pixel, or are dropped off the sensor.
"""

from __future__ import annotations

import re
from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.dsec import DsecEventsReader, DsecFormatError, DsecRectifyMap

T_OFFSET_US = 5_000_123


def write_dsec(path: Path, n: int = 50_000, span_us: int = 300_000, seed: int = 0,
               skip: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.sort(rng.integers(0, span_us, n)).astype(np.uint32)
    t[n // 2: n // 2 + 5000] = t[n // 2]  # a burst at one timestamp
    t.sort()
    data = {"x": rng.integers(0, 640, n).astype(np.uint16),
            "y": rng.integers(0, 480, n).astype(np.uint16),
            "p": rng.integers(0, 2, n).astype(np.uint8), "t": t}
    ms_to_idx = np.searchsorted(t, np.arange(int(t[-1]) // 1000 + 2) * 1000).astype(np.uint64)
    blosc = hdf5plugin.Blosc(cname="zstd", clevel=3, shuffle=hdf5plugin.Blosc.SHUFFLE)
    with h5py.File(path, "w") as f:
        for name, values in data.items():
            if f"events/{name}" not in skip:
                f.create_dataset(f"events/{name}", data=values, chunks=True, **blosc)
        if "ms_to_idx" not in skip:
            f.create_dataset("ms_to_idx", data=ms_to_idx, **blosc)
        if "t_offset" not in skip:
            f.create_dataset("t_offset", data=np.int64(T_OFFSET_US))
    return data


class SliceLog:
    """Wraps an h5py dataset and records the length of every read."""

    def __init__(self, dataset: h5py.Dataset, log: list[int]) -> None:
        self.dataset, self.log = dataset, log

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: object) -> np.ndarray:
        out = np.asarray(self.dataset[key])
        self.log.append(out.size)
        return out


def test_read_matches_brute_force_on_the_image_clock(tmp_path: Path) -> None:
    data = write_dsec(tmp_path / "events.h5")
    image_t = data["t"].astype(np.int64) + T_OFFSET_US
    rng = np.random.default_rng(1)
    with DsecEventsReader(tmp_path / "events.h5") as reader:
        assert reader.t_first_us == image_t[0] and reader.t_last_us == image_t[-1]
        burst = int(image_t[len(image_t) // 2])
        ranges = [(burst, burst + 1), (burst - 3, burst), (0, 10**12), (-5, T_OFFSET_US),
                  (int(image_t[-1]) + 1, int(image_t[-1]) + 10**6), (100, 50)]
        ranges += [tuple(sorted(rng.integers(T_OFFSET_US - 1000, int(image_t[-1]) + 1000, 2)))
                   for _ in range(40)]
        for t0, t1 in ranges:
            batch = reader.read(t0, t1)
            keep = (image_t >= t0) & (image_t < t1)
            assert np.array_equal(batch.t, image_t[keep] * 1000), (t0, t1)
            for name in ("x", "y", "p"):
                assert np.array_equal(getattr(batch, name), data[name][keep])
            assert (batch.width, batch.height) == (640, 480)


def test_read_touches_only_the_needed_slice(tmp_path: Path) -> None:
    data = write_dsec(tmp_path / "events.h5", n=200_000, span_us=1_000_000)
    with DsecEventsReader(tmp_path / "events.h5") as reader:
        log: list[int] = []
        for name in ("_t", "_x", "_y", "_p"):
            setattr(reader, name, SliceLog(getattr(reader, name), log))
        t0 = T_OFFSET_US + 400_250
        batch = reader.read(t0, t0 + 10_000)
    per_ms = np.bincount(data["t"] // 1000).max()
    assert len(batch) > 0
    assert max(log) <= max(len(batch), per_ms)  # never more than the slice or one ms
    assert sum(log) < 4 * len(batch) + 4 * per_ms < len(data["t"]) // 5


@pytest.mark.parametrize("missing", ["events/t", "events/p", "ms_to_idx", "t_offset"])
def test_missing_dataset_is_named_in_the_error(tmp_path: Path, missing: str) -> None:
    path = tmp_path / "events.h5"
    write_dsec(path, n=100, skip=(missing,))
    with pytest.raises(DsecFormatError, match=rf"events\.h5: missing dataset\(s\) /{missing}"):
        DsecEventsReader(path)


def test_missing_or_non_hdf5_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DsecFormatError, match="no such file"):
        DsecEventsReader(tmp_path / "events.h5")
    (tmp_path / "junk.h5").write_bytes(b"junk")
    with pytest.raises(DsecFormatError, match="not a readable HDF5 file"):
        DsecEventsReader(tmp_path / "junk.h5")


def identity_map(width: int, height: int) -> np.ndarray:
    """float32 (height, width, 2): every raw pixel [y, x] at rectified (x, y)."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x, y], axis=-1).astype(np.float32)


def test_rectify_rounds_to_the_nearest_pixel_and_drops_what_lands_off_the_sensor() -> None:
    rectified_xy = identity_map(8, 6)
    # raw pixel (x, 0) -> rectified (x, y) entry, and the pixel it must land on (None: dropped)
    cases = {0: ((2.5, 1.49), (3, 1)), 1: ((-0.5, 0.0), (0, 0)), 2: ((-0.51, 0.0), None),
             3: ((7.49, 5.49), (7, 5)), 4: ((7.5, 0.0), None), 5: ((0.0, 5.5), None),
             6: ((np.nan, 1.0), None), 7: ((3.0, np.inf), None)}
    for x, (entry, _) in cases.items():
        rectified_xy[0, x] = entry
    rectified_xy[2, 5] = (3.2, 0.8)  # raw (5, 2) lands where raw (0, 0) does: both kept
    xs = [*cases, 5, 4, 6]
    ys = [0] * len(cases) + [2, 4, 5]
    batch = EventBatch(np.arange(len(xs)) * 1000, xs, ys, np.arange(len(xs)) % 2, 8, 6)
    got, dropped = DsecRectifyMap(rectified_xy, 8, 6).rectify(batch)
    want = [(i, *pixel) for i, (_, pixel) in enumerate(cases.values()) if pixel is not None]
    want += [(8, 3, 1), (9, 4, 4), (10, 6, 5)]  # the collision, then two identity pixels
    keep = [i for i, _, _ in want]
    assert dropped == len(xs) - len(want) == 5
    assert got.equals(EventBatch(batch.t[keep], [x for _, x, _ in want], [y for _, _, y in want],
                                 batch.p[keep], 8, 6))


def test_rectify_keeps_every_event_when_all_land_on_the_sensor() -> None:
    batch = EventBatch(np.arange(5), [0, 7, 7, 3, 0], [0, 5, 5, 2, 5], [1, 0, 0, 1, 1], 8, 6)
    rectify_map = DsecRectifyMap(identity_map(8, 6), 8, 6)
    got, dropped = rectify_map.rectify(batch)
    assert dropped == 0 and got.equals(batch)
    empty, dropped = rectify_map.rectify(EventBatch.empty(8, 6))
    assert dropped == 0 and len(empty) == 0


def test_rectify_map_file_of_the_wrong_shape_dtype_or_content_is_a_clear_error(
        tmp_path: Path) -> None:
    path = tmp_path / "rectify_map.h5"
    for data, message in ((identity_map(640, 480).astype(np.int32), "int32 (480, 640, 2)"),
                          (identity_map(480, 640), "float32 (640, 480, 2)"),
                          (identity_map(640, 480)[..., 0], "float32 (480, 640);")):
        with h5py.File(path, "w") as f:
            f.create_dataset("rectify_map", data=data)
        with pytest.raises(DsecFormatError, match=re.escape(message)) as error:
            DsecRectifyMap.load(path)
        assert "expected float (480, 640, 2) for a 640x480 sensor" in str(error.value)
    with h5py.File(path, "w") as f:
        f.create_dataset("rectify_maps", data=identity_map(640, 480))
    with pytest.raises(DsecFormatError, match="no /rectify_map dataset"):
        DsecRectifyMap.load(path)
    path.write_bytes(b"junk")
    with pytest.raises(DsecFormatError, match="not a readable HDF5 file"):
        DsecRectifyMap.load(path)
    with pytest.raises(DsecFormatError, match="no such file"):
        DsecRectifyMap.load(tmp_path / "nope.h5")
