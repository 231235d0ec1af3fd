"""The DSEC-layout writer: its events.h5 reads back with crossspec's DSEC reader."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
from PIL import Image

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.dsec import DsecEventsReader
from crossspec_ros.sim.dsec import write_dsec_sequence
from crossspec_ros.sim.stream import record

T_OFFSET_US = 47_000_123_000


def test_dsec_sequence_reads_back_with_the_dsec_reader(tmp_path: Path):
    counts = write_dsec_sequence(tmp_path, seed=1, duration_s=2.0, event_size=(64, 48),
                                 image_size=(64, 48), t_offset_us=T_OFFSET_US)
    expected = EventBatch.concat([c.events for c in record(
        1, 2.0, event_size=(64, 48), rgb_size=(64, 48), start_ns=T_OFFSET_US * 1000)])
    assert counts == {"events": len(expected), "images": 40} and len(expected) > 1000
    with DsecEventsReader(tmp_path / "events/left/events.h5", 64, 48) as reader:
        assert reader.num_events == len(expected)
        assert reader.t_offset_us == T_OFFSET_US
        start = T_OFFSET_US
        assert reader.read(start, start + 2_000_000).equals(expected)
        part = reader.read(start + 700_123, start + 1_300_000)
        assert part.equals(expected.between((start + 700_123) * 1000, (start + 1_300_000) * 1000))


def test_dsec_layout_has_ms_index_images_and_timestamps(tmp_path: Path):
    write_dsec_sequence(tmp_path, seed=1, duration_s=1.0, event_size=(64, 48),
                        image_size=(48, 36), t_offset_us=T_OFFSET_US)
    with h5py.File(tmp_path / "events/left/events.h5") as f:
        t = f["events/t"][:]
        ms_to_idx = f["ms_to_idx"][:]
        assert f["events/x"].dtype == np.uint16 and f["events/p"].dtype == np.uint8
        assert f["events/t"].dtype == np.uint32 and t[0] < 20_000
    assert np.array_equal(ms_to_idx, np.searchsorted(t, np.arange(len(ms_to_idx)) * 1000))
    stamps = [int(s) for s in (tmp_path / "images/timestamps.txt").read_text().split()]
    assert stamps == [T_OFFSET_US + 50_000 * k for k in range(20)]
    pngs = sorted((tmp_path / "images/left/rectified").glob("*.png"))
    assert [p.name for p in pngs][:2] == ["000000.png", "000001.png"] and len(pngs) == 20
    assert np.asarray(Image.open(pngs[3])).shape == (36, 48, 3)
