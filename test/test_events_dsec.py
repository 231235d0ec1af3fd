"""DSEC events.h5: time-range reads match brute force and touch only the needed slice."""

from __future__ import annotations

from pathlib import Path

import h5py
import hdf5plugin
import numpy as np
import pytest

from crossspec_ros.events.dsec import DsecEventsReader, DsecFormatError

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
