"""The sample bag: readable by crossspec's bag tools, counts match, written atomically."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from rosbags.highlevel import AnyReader

import crossspec_ros.bags.sample as sample
from crossspec_ros.bags.inputs import InputStats, read_inputs
from crossspec_ros.bags.sample import GROUND_TRUTH_TOPIC, write_sample_bag
from crossspec_ros.cli import sample_cmd
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.sim.captions import caption
from crossspec_ros.sim.scene import Drive
from crossspec_ros.sim.stream import DRIVE_START_NS, WINDOW_NS, record
from crossspec_ros.sim.visibility import seen_facts


def canonical(batch: EventBatch) -> np.ndarray:
    order = np.lexsort((batch.p, batch.x, batch.y, batch.t))
    return np.stack([batch.t[order], batch.x[order], batch.y[order], batch.p[order]])


@pytest.fixture(scope="module")
def bag(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("sample") / "drive"
    return out, write_sample_bag(out, seed=1, duration_s=2.0, progress=False)


def test_the_bag_holds_every_simulated_event_and_frame(bag):
    path, counts = bag
    stats = InputStats()
    items = list(read_inputs(path, None, None, stats))
    events = EventBatch.concat([i.events for i in items if i.events is not None])
    frames = [i.frame for i in items if i.frame is not None]
    expected = EventBatch.concat([c.events for c in record(1, 2.0)])
    assert counts["events"] == len(expected) == len(events) > 10_000
    assert np.array_equal(canonical(events), canonical(expected))
    assert counts["frames"] == len(frames) == 40 and stats.bad_frames == 0
    assert frames[0].image.shape == (240, 320, 3)
    assert counts["event_packets"] == stats.event_packets


def test_ground_truth_captions_are_final_and_name_their_windows(bag):
    path, _ = bag
    drive = Drive(1)
    with AnyReader([path]) as reader:
        conns = [c for c in reader.connections if c.topic == GROUND_TRUTH_TOPIC]
        msgs = [reader.deserialize(raw, c.msgtype)
                for c, _, raw in reader.messages(connections=conns)]
    assert [m.confirmed_text for m in msgs] == [caption(seen_facts(drive.state(k + 0.5)))
                                              for k in (0, 1)]
    assert all(m.status == 2 for m in msgs)
    assert [m.window_id for m in msgs] == [DRIVE_START_NS // WINDOW_NS + k for k in (0, 1)]
    assert msgs[0].window_end.sec == msgs[0].window_start.sec + 1


def test_mcap_chunks_are_compressed(tmp_path: Path):
    write_sample_bag(tmp_path / "z", seed=2, duration_s=1.0, progress=False)
    write_sample_bag(tmp_path / "raw", seed=2, duration_s=1.0, progress=False, compress=False)
    small = (tmp_path / "z" / "z.mcap").stat().st_size
    assert small < 0.5 * (tmp_path / "raw" / "raw.mcap").stat().st_size


def test_a_failure_leaves_no_output_and_no_temporary_files(tmp_path: Path, monkeypatch):
    def broken(*args, **kwargs):
        yield from record(1, 1.0, event_size=(32, 24), rgb_size=(32, 24))
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(sample, "record", broken)
    with pytest.raises(RuntimeError, match="simulated crash"):
        write_sample_bag(tmp_path / "bag", duration_s=3.0, event_size=(32, 24),
                         rgb_size=(32, 24), progress=False)
    assert list(tmp_path.iterdir()) == []


def make_sample(argv: list[str]) -> int:
    # only this command's parser: the full CLI would import every command (torch included)
    parser = argparse.ArgumentParser(prog="crossspec")
    sample_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["make-sample", *argv])
    return args.func(args)


def test_make_sample_writes_a_bag_and_refuses_to_overwrite(tmp_path: Path, capsys):
    out = tmp_path / "s"
    args = [str(out), "--seed", "3", "--duration", "1", "--quiet", "--event-size", "64x48",
            "--rgb-size", "64x48", "--storage", "sqlite3"]
    assert make_sample(args) == 0
    assert "wrote" in capsys.readouterr().out
    assert (out / "metadata.yaml").is_file() and list(out.glob("*.db3"))
    assert make_sample(args) == 1
    assert "exists" in capsys.readouterr().err


def test_make_sample_rejects_bad_sizes():
    with pytest.raises(SystemExit):
        make_sample(["x", "--rgb-size", "320by240"])
