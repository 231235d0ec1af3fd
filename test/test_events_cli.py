"""`crossspec events` and `crossspec bench decode`, run in-process."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from crossspec_ros.cli.main import main
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.encode import encode_evt3_packets

ROS_T0 = 1_700_000_000_000_000_000


@pytest.fixture
def bag(tmp_path: Path, write_event_bag: Callable[..., Path]) -> tuple[Path, EventBatch, list]:
    """An EVT3 topic with trigger words in some packets, and an iniVation topic."""
    rng = np.random.default_rng(0)
    n = 4000
    t = ROS_T0 + np.sort(rng.integers(0, 500_000, n)) * 1000
    batch = EventBatch(t, rng.integers(0, 1280, n), rng.integers(0, 720, n),
                       rng.integers(0, 2, n), 1280, 720)
    msgs, triggers = [], []
    for i, p in enumerate(encode_evt3_packets(batch, 1_000_000)):
        if i % 7 == 0:  # every 7th packet ends with an EXT_TRIGGER word, values 0, 1, 0...
            triggers.append((i // 7) % 2)
            word = np.array([0xA000 | triggers[-1]], "<u2").tobytes()
            p = replace(p, events=p.events + word)
        msgs.append(("/cam/events", p))
    for k in range(5):
        msgs.append(("/davis/events", replace(msgs[k][1], encoding="libcaer", width=346,
                                              height=260, events=bytes(range(k, k + 40)))))
    msgs.sort(key=lambda m: m[1].stamp_ns)
    return write_event_bag(tmp_path / "bag", msgs), batch, triggers


def test_events_json_reports_what_was_written(bag: tuple, capsys: pytest.CaptureFixture) -> None:
    path, batch, triggers = bag
    assert main(["events", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)  # exactly one JSON object on stdout
    cam, davis = report["topics"]["/cam/events"], report["topics"]["/davis/events"]
    assert cam["packets"] == len(np.unique(batch.t // 1_000_000))
    assert (cam["encoding"], cam["width"], cam["height"]) == ("evt3", 1280, 720)
    assert cam["cd_events"] == {"p0": int((batch.p == 0).sum()), "p1": int(batch.p.sum())}
    assert cam["triggers"] == {"p0": triggers.count(0), "p1": triggers.count(1)}
    assert cam["t_first_us"] == batch.t[0] // 1000 and cam["t_last_us"] == batch.t[-1] // 1000
    span_s = (batch.t[-1] - batch.t[0]) / 1e9
    assert cam["rate_ev_s"] == pytest.approx(len(batch) / span_s)
    assert not any(cam["bad"].values())
    assert davis["packets"] == 5 and davis["encoding"] == "libcaer"
    assert davis["triggers"] is None and davis["cd_events"] == {"p0": 0, "p1": 0}
    assert davis["bad"]["unsupported_encoding"] == 5 and davis["t_first_us"] is None


def test_events_table_and_topic_filter(bag: tuple, capsys: pytest.CaptureFixture) -> None:
    path, batch, _ = bag
    assert main(["events", str(path)]) == 0
    out = capsys.readouterr().out
    assert "/cam/events" in out and "/davis/events" in out and "1280x720" in out
    assert f"{int(batch.p.sum()):,}" in out and "unsupported_encoding=5" in out
    assert main(["events", str(path), "--topic", "/davis/events", "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["topics"]) == ["/davis/events"]


def test_one_damaged_packet_does_not_make_the_rate_of_a_topic(
        tmp_path: Path, write_event_bag: Callable[..., Path], capsys: pytest.CaptureFixture
        ) -> None:
    # an EVT 2.1 stream in which one packet's middle time high word reads 15,752 s later
    from bag_helpers import evt21_packets, with_wild_time_high

    rng = np.random.default_rng(1)
    n = 20_000
    t = ROS_T0 + np.sort(rng.integers(0, 2_000_000, n)) * 1000
    batch = EventBatch(t, rng.integers(0, 320, n), rng.integers(0, 240, n),
                       rng.integers(0, 2, n), 320, 240)
    packets = evt21_packets(batch, ROS_T0 - 1428 * 10**9)
    k = len(packets) // 2
    packets[k] = with_wild_time_high(packets[k], 15_752 * 10**6)
    path = write_event_bag(tmp_path / "bag", [("/cam/events", p) for p in packets])
    assert main(["events", str(path), "--json"]) == 0
    cam = json.loads(capsys.readouterr().out)["topics"]["/cam/events"]
    lost = int(np.count_nonzero((batch.t >= packets[k].stamp_ns)
                                & (batch.t < packets[k + 1].stamp_ns)))
    assert cam["bad"]["outlier_events"] == lost > 0
    assert sum(cam["cd_events"].values()) == n - lost
    assert cam["t_first_us"] == batch.t[0] // 1000 and cam["t_last_us"] == batch.t[-1] // 1000
    assert cam["rate_ev_s"] == pytest.approx((n - lost) / ((batch.t[-1] - batch.t[0]) / 1e9),
                                             rel=1e-3)


def test_events_on_a_missing_bag_exits_1_with_a_clear_message(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["events", str(tmp_path / "missing_bag")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "missing_bag: no such file or directory" in captured.err
    assert "Traceback" not in captured.err


def test_bench_decode_writes_its_numbers(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "decode.json"
    assert main(["bench", "decode", "--events", "20000", "--repeats", "1",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["events"] == 20000
    assert set(report["results"]) == {"evt3_library", "crossspec_bytes", "crossspec_array",
                                      "crossspec_evt2", "crossspec_evt21",
                                      "crossspec_libcaer_cmp"}
    assert set(report["target_met"]) == set(report["results"]) - {"evt3_library"}
    assert all(r["mev_s"] > 0 for r in report["results"].values())
    assert "M events/s" in capsys.readouterr().out
