"""`crossspec drive` on a ROS 1 bag of dvs_msgs EventArrays and mono8 frames, and on the ROS 2
bag `crossspec convert-bag` makes of it: FINAL captions, lossless, the same windows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from event_array_bags import write_pattern_bag

from crossspec_ros.models.pair import BUNDLED_PAIR

pytestmark = [pytest.mark.ros, pytest.mark.slow,
              pytest.mark.skipif(not (BUNDLED_PAIR / "verifier").is_dir(),
                                 reason="no bundled pair (run crossspec train-tiny)")]

CLI = [sys.executable, "-m", "crossspec_ros.cli.main"]


def drive(bag: Path, out: Path) -> tuple[list[dict], dict, str]:
    """Two windows of `crossspec drive --bag BAG` checked for losslessness: rows, summary,
    stderr."""
    result = subprocess.run([*CLI, "drive", "--bag", str(bag), "--max-windows", "2",
                             "--check-lossless", "--no-viz", "--json", str(out)],
                            capture_output=True, text=True, timeout=240, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return lines[:-1], lines[-1]["summary"], result.stderr


@pytest.fixture(scope="module")
def dvs_bag(tmp_path_factory):
    return write_pattern_bag(tmp_path_factory.mktemp("dvs") / "davis.bag", "dvs_msgs",
                             ros1=True, seconds=3.0, outside_every=97)


@pytest.fixture(scope="module")
def driven(dvs_bag, tmp_path_factory):
    return drive(dvs_bag.path, tmp_path_factory.mktemp("drive") / "drive.jsonl")


def finals(rows: list[dict]) -> dict[int, dict]:
    return {r["window"]: r for r in rows if r["status"] == "FINAL"}


def test_drive_captions_a_ros1_dvs_bag_losslessly(driven):
    rows, summary, stderr = driven
    # the nodes listen on the bag's topics; the EventArrays reach the draft node as evt3
    assert "events /dvs/events (dvs_msgs/msg/EventArray, replayed as evt3 EventPackets)" in \
        stderr
    assert "drafting dvs/events" in stderr and "verifying dvs/image_raw" in stderr
    final = finals(rows)
    assert len(final) == 2 and summary["lossless"] == summary["final"] == 2
    for row in final.values():
        assert row["lossless"] is True and row["confirmed_text"]
        assert row["t1"] - row["t0"] == pytest.approx(1.0)


def test_the_converted_bag_drives_to_the_same_windows_and_captions(dvs_bag, driven, tmp_path):
    from crossspec_ros.cli.main import main

    out = tmp_path / "converted"
    assert main(["convert-bag", str(dvs_bag.path), str(out), "--quiet"]) == 0
    rows, summary, stderr = drive(out, tmp_path / "drive.jsonl")
    assert "crossspec drive: inputs" not in stderr  # crossspec's own topics: nothing to point
    original, again = finals(driven[0]), finals(rows)
    assert summary["lossless"] == summary["final"] == 2
    assert {w: (r["t0"], r["t1"], r["confirmed_text"]) for w, r in again.items()} == \
        {w: (r["t0"], r["t1"], r["confirmed_text"]) for w, r in original.items()}
