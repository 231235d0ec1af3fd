"""Drives with frequent scene changes: ``Drive.segment_seconds`` and `make-sample --scene-seconds`.

The default range must leave every existing drive (the committed sample bag, the training
sets, the benchmarks' drives) exactly as it was.
"""

from __future__ import annotations

import hashlib
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from crossspec_ros.sim.scene import (
    SEGMENT_SECONDS,
    SPEED_CHANGE_DURATIONS,
    Drive,
    Facts,
    build_segment,
    random_facts,
)

SPEED_CHANGES = ("slowing", "accelerating")
# The frequent-change drive `make drive` can replay as a second bag (make-sample --seed 78
# --duration 16 --scene-seconds 1-2): its ground truth changes in 11 of 15 window pairs.
FREQUENT_SEED, FREQUENT_DURATION, FREQUENT_RANGE = 78, 16, (1, 2)


class DriveBeforeSceneSeconds(Drive):
    """``Drive`` with ``_extend`` as it was before ``segment_seconds`` (a verbatim copy)."""

    def _extend(self) -> None:
        prev = self.segments[-1] if self.segments else None
        if self.script is not None:
            facts, duration = self.script[min(len(self.segments), len(self.script) - 1)]
        else:
            facts = random_facts(self._rng, prev, self.lighting)
            low, high = {"stopped": (2, 6), "slowing": SPEED_CHANGE_DURATIONS,
                         "accelerating": SPEED_CHANGE_DURATIONS}.get(facts.ego, (3, 6))
            duration = float(self._rng.integers(low, high + 1))
        seg = build_segment(self._rng, prev, facts, duration, self.cruise_speed)
        self.segments.append(seg)
        self._starts.append(seg.start_s)


def window_facts(drive: Drive, seconds: int) -> list[Facts]:
    """The facts of each 1 s window (a window lies in one segment: its middle says them)."""
    return [drive.facts_at(t + 0.5) for t in range(seconds)]


def changes(drive: Drive, seconds: int) -> int:
    """How many consecutive windows' facts differ."""
    facts = window_facts(drive, seconds)
    return sum(a != b for a, b in itertools.pairwise(facts))


def facts_digest(drive: Drive, seconds: int) -> str:
    text = "|".join(repr(tuple(f.as_dict().values())) for f in window_facts(drive, seconds))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_the_default_range_draws_the_same_drives_as_before():
    # recorded with the code before segment_seconds: the facts of the first 30 windows and
    # the segment lengths up to 30 s
    before = {0: ("796c66fee3775e9b", [4, 4, 2, 3, 4, 5, 3, 5, 6]),
              5: ("4a5b5564fb116fff", [2, 3, 6, 3, 4, 5, 5, 4]),
              23: ("0497750024d1f349", [5, 4, 2, 3, 6, 3, 3, 6]),
              101: ("5c106d9b5bd5fdd8", [5, 3, 5, 6, 3, 5, 4])}
    for seed, (digest, lengths) in before.items():
        drive = Drive(seed)
        assert facts_digest(drive, 30) == digest, seed
        drive.segment_at(30.0)
        assert [seg.duration_s for seg in drive.segments] == lengths, seed


def test_the_default_range_makes_the_same_generator_calls_as_the_old_extend():
    for seed in range(40):
        old, new = DriveBeforeSceneSeconds(seed), Drive(seed, segment_seconds=SEGMENT_SECONDS)
        old.segment_at(90.0)
        new.segment_at(90.0)
        assert new.segments == old.segments, seed  # kinematics too, to the last bit
        # the same draws in the same order leave the generator in the same state
        assert new._rng.bit_generator.state == old._rng.bit_generator.state, seed
    assert Drive(7).segment_seconds == SEGMENT_SECONDS == (3, 6)


def test_a_short_range_bounds_ordinary_segments_and_stops_but_not_speed_changes():
    for seed in range(40):
        drive = Drive(seed, segment_seconds=(1, 2))
        drive.segment_at(60.0)
        for seg in drive.segments:
            assert seg.duration_s == int(seg.duration_s)
            ego = seg.facts.ego
            if ego in SPEED_CHANGES:
                low, high = SPEED_CHANGE_DURATIONS  # braking and pulling away take time
            elif ego == "stopped":
                low, high = 2, 2  # a stop is never shorter than 2 s
            else:
                low, high = 1, 2
            assert low <= seg.duration_s <= high, (seed, ego, seg.duration_s)


def test_stops_stay_within_two_to_six_seconds_whatever_the_range():
    for segment_seconds, stop_high in (((1, 1), 2), ((2, 4), 4), ((4, 9), 6)):
        stops = [seg.duration_s for seed in range(40)
                 for seg in _segments(Drive(seed, segment_seconds=segment_seconds), 60.0)
                 if seg.facts.ego == "stopped"]
        assert stops and min(stops) >= 2 and max(stops) <= stop_high, segment_seconds
    long = [seg.duration_s for seed in range(20)
            for seg in _segments(Drive(seed, segment_seconds=(7, 8)), 60.0)
            if seg.facts.ego not in (*SPEED_CHANGES, "stopped")]
    assert min(long) >= 7 and max(long) <= 8


def _segments(drive: Drive, until_s: float) -> list:
    drive.segment_at(until_s)
    return drive.segments


def test_a_short_range_changes_the_scene_more_often():
    default = [changes(Drive(seed), 16) for seed in range(1, 41)]
    short = [changes(Drive(seed, segment_seconds=(1, 2)), 16) for seed in range(1, 41)]
    assert sum(short) > 1.5 * sum(default)
    assert max(short) > max(default)


def test_the_frequent_change_drive_changes_in_most_window_pairs():
    drive = Drive(FREQUENT_SEED, segment_seconds=FREQUENT_RANGE)
    assert changes(drive, FREQUENT_DURATION) >= 10  # of 15 pairs (measured: 11)


def test_a_drive_with_a_short_range_is_still_reproducible():
    a = Drive(9, segment_seconds=(1, 2))
    b = Drive(9, segment_seconds=(1, 2))
    times = [0.0, 3.7, 12.25, 29.9]
    assert [a.state(t) for t in times] == [b.state(t) for t in reversed(times)][::-1]


@pytest.mark.parametrize("bad", [(2, 1), (0, 2), (0, 0), (-1, 3), (1.5, 2), (1, 2.0),
                                 (True, 2), (1,), (1, 2, 3), "12", None])
def test_a_bad_range_is_refused(bad):
    with pytest.raises(ValueError, match="segment_seconds"):
        Drive(1, segment_seconds=bad)


def test_scripted_drives_are_unaffected():
    facts = Facts("straight", "driving")
    drive = Drive.scripted(4, [(facts, 30.0)])
    assert drive.facts_at(12.0) == facts and drive.segment_at(12.0).duration_s == 30.0


def make_sample(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "make-sample", *argv],
                          capture_output=True, text=True, timeout=300)


def test_make_sample_writes_a_drive_with_short_scenes(tmp_path: Path):
    out = tmp_path / "frequent"
    done = make_sample("--seed", str(FREQUENT_SEED), "--duration", "2", "--scene-seconds",
                       "1-2", "--quiet", str(out))
    assert done.returncode == 0, done.stderr
    assert "scenes 1-2 s" in done.stdout and "2 captions" in done.stdout
    assert (out / "metadata.yaml").is_file() and list(out.glob("*.mcap"))


@pytest.mark.parametrize("value", ["2-1", "x", "0-2", "1-2-3", "1.5-2"])
def test_make_sample_refuses_a_bad_scene_range_in_one_line(tmp_path: Path, value: str):
    done = make_sample("--duration", "2", "--scene-seconds", value, "--quiet",
                       str(tmp_path / "never"))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--scene-seconds" in lines[0] and value in lines[0], done.stderr
    assert not (tmp_path / "never").exists()
