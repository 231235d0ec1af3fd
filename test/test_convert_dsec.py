"""`crossspec convert-dsec`: DSEC sequence -> ROS 2 bag, lossless, checked, atomic."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from PIL import Image
from rosbags.highlevel import AnyReader

from crossspec_ros.bags import dsec_convert
from crossspec_ros.bags.dsec_convert import DsecConvertError, convert_dsec
from crossspec_ros.bags.events_report import events_report
from crossspec_ros.bags.inputs import read_inputs
from crossspec_ros.cli.main import main
from crossspec_ros.events.bag import EventBagReader, read_events
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.sim.dsec import write_dsec_sequence

T_OFFSET_US = 47_000_123_000
EVENT_SIZE = (64, 48)
IMAGE_SIZE = (48, 36)


@pytest.fixture(scope="module")
def sequence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2 s synthetic drive in DSEC's layout (written once, never modified)."""
    root = tmp_path_factory.mktemp("dsec") / "zurich_sim_00_a"
    write_dsec_sequence(root, seed=3, duration_s=2.0, event_size=EVENT_SIZE,
                        image_size=IMAGE_SIZE, t_offset_us=T_OFFSET_US)
    return root


@pytest.fixture
def sequence_copy(sequence: Path, tmp_path: Path) -> Path:
    """A copy a test may break."""
    return Path(shutil.copytree(sequence, tmp_path / sequence.name))


def h5_events(sequence: Path) -> dict[str, np.ndarray]:
    """The file's events, t on the image clock in ns, in (t, y, x, p) order."""
    with h5py.File(sequence / "events/left/events.h5") as f:
        ev = {k: f[f"events/{k}"][:] for k in "xytp"}
        offset = int(f["t_offset"][()])
    ev["t"] = (ev["t"].astype(np.int64) + offset) * 1000
    return canonical(ev)


def canonical(ev: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    order = np.lexsort((ev["p"], ev["x"], ev["y"], ev["t"]))
    return {k: np.asarray(ev[k])[order].astype(np.int64) for k in "txyp"}


def bag_events(bag: Path) -> dict[str, np.ndarray]:
    batch = read_events(bag)
    return canonical({"t": batch.t, "x": batch.x, "y": batch.y, "p": batch.p})


def image_stamps_ns(sequence: Path) -> list[int]:
    return [int(s) * 1000 for s in (sequence / "images/timestamps.txt").read_text().split()]


def assert_same_events(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert len(got["t"]) == len(want["t"]) > 1000
    for key in "txyp":
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_bag_holds_exactly_the_h5_events_on_the_image_clock(sequence: Path, tmp_path: Path):
    out = tmp_path / "bag"
    report = convert_dsec(sequence, out, progress=False)
    want = h5_events(sequence)
    assert report.events_read == report.events_written == len(want["t"])
    assert report.events_out_of_bounds == 0
    assert_same_events(bag_events(out), want)
    topic = events_report(out, progress=False)["topics"]["/event_camera/events"]
    assert topic["encoding"] == "evt3" and topic["packets"] == report.packets
    assert topic["cd_events"]["p0"] + topic["cd_events"]["p1"] == len(want["t"])
    assert (topic["width"], topic["height"]) == (640, 480)
    assert (out / f"{out.name}.mcap").is_file() and leftovers(tmp_path) == []


def test_each_packet_is_one_period_stamped_with_its_first_event(sequence: Path,
                                                                tmp_path: Path):
    out = tmp_path / "bag"
    convert_dsec(sequence, out, packet_ms=5.0, progress=False)
    decoder = EventPacketDecoder()
    with EventBagReader(out) as reader:
        packets = [(stamp, packet) for _, stamp, packet in reader.packets()]
    assert len(packets) > 100
    for log_time, packet in packets:
        batch = decoder.decode(packet)
        assert packet.frame_id == "event_camera" and log_time == packet.stamp_ns
        assert packet.stamp_ns == int(batch.t[0])
        assert int(batch.t[0]) // 5_000_000 == int(batch.t[-1]) // 5_000_000


def test_images_match_the_pngs_and_timestamps(sequence: Path, tmp_path: Path):
    out = tmp_path / "bag"
    report = convert_dsec(sequence, out, progress=False)
    frames = [item.frame for item in read_inputs(out) if item.frame is not None]
    pngs = sorted((sequence / "images/left/rectified").glob("*.png"))
    assert report.images == len(frames) == len(pngs) == 40
    assert [f.stamp_ns for f in frames] == image_stamps_ns(sequence)
    for frame, png in zip(frames, pngs, strict=True):
        np.testing.assert_array_equal(frame.image, np.asarray(Image.open(png).convert("RGB")))
    with AnyReader([out]) as reader:
        assert {c.topic: c.msgtype for c in reader.connections} == {
            "/event_camera/events": "event_camera_msgs/msg/EventPacket",
            "/camera/image_raw": "sensor_msgs/msg/Image"}


def test_duration_keeps_only_the_first_seconds(sequence: Path, tmp_path: Path):
    out = tmp_path / "bag"
    report = convert_dsec(sequence, out, duration_s=0.75, progress=False)
    want = h5_events(sequence)
    stamps = image_stamps_ns(sequence)
    t0 = min(int(want["t"][0]), stamps[0])
    keep = want["t"] < t0 + 750_000_000
    assert 0 < keep.sum() < len(keep) and report.duration_s == pytest.approx(0.75)
    assert_same_events(bag_events(out), {k: v[keep] for k, v in want.items()})
    frames = [item.frame for item in read_inputs(out) if item.frame is not None]
    assert [f.stamp_ns for f in frames] == [s for s in stamps if s < t0 + 750_000_000]
    assert report.images == len(frames) == 15


def test_compressed_png_reads_back_to_the_same_pixels(sequence: Path, tmp_path: Path):
    out = tmp_path / "bag"
    assert main(["convert-dsec", str(sequence), str(out), "--compressed", "--quiet",
                 "--duration", "0.5"]) == 0
    with AnyReader([out]) as reader:
        topics = {c.topic: c.msgtype for c in reader.connections}
        assert topics["/camera/image_raw/compressed"] == "sensor_msgs/msg/CompressedImage"
    frames = [item.frame for item in read_inputs(out) if item.frame is not None]
    pngs = sorted((sequence / "images/left/rectified").glob("*.png"))
    assert len(frames) == 10
    for frame, png in zip(frames, pngs, strict=False):
        np.testing.assert_array_equal(frame.image, np.asarray(Image.open(png).convert("RGB")))


def test_image_scale_and_jpeg_resize_the_images(sequence: Path, tmp_path: Path):
    out = tmp_path / "bag"
    report = convert_dsec(sequence, out, duration_s=0.3, image_scale=0.5, compressed="jpeg",
                          progress=False)
    frames = [item.frame for item in read_inputs(out) if item.frame is not None]
    assert report.image_size == (24, 18) and report.image_encoding == "jpeg"
    assert frames and all(f.image.shape == (18, 24, 3) for f in frames)


def test_sqlite3_storage_holds_the_same_events(sequence: Path, tmp_path: Path):
    out = tmp_path / "bag"
    assert main(["convert-dsec", str(sequence), str(out), "--storage", "sqlite3",
                 "--quiet"]) == 0
    assert list(out.glob("*.db3")) and "sqlite3" in (out / "metadata.yaml").read_text()
    assert_same_events(bag_events(out), h5_events(sequence))


def test_events_outside_the_sensor_are_counted_as_dropped(sequence: Path, tmp_path: Path):
    out = tmp_path / "bag"
    report = convert_dsec(sequence, out, sensor_size=(32, 24), progress=False)
    want = h5_events(sequence)
    inside = (want["x"] < 32) & (want["y"] < 24)
    assert 0 < report.events_out_of_bounds == int((~inside).sum())
    assert report.events_read == report.events_written + report.events_out_of_bounds
    assert_same_events(bag_events(out), {k: v[inside] for k, v in want.items()})


def test_cli_prints_a_summary_with_the_count_check(sequence: Path, tmp_path: Path, capsys):
    assert main(["convert-dsec", str(sequence), str(tmp_path / "bag"), "--duration", "0.2",
                 "--packet-ms", "2"]) == 0
    captured = capsys.readouterr()
    assert "evt3 packets of 2 ms" in captured.out and "events read ==" in captured.out
    assert "images:" in captured.out and "converting" in captured.err  # the progress bar


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = main(["convert-dsec", *args, "--quiet"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


def test_missing_directory_and_events_file_are_clear_errors(sequence_copy: Path,
                                                            tmp_path: Path, capsys):
    out = tmp_path / "bag"
    code, err = run_cli(capsys, str(tmp_path / "nope"), str(out))
    assert code == 1 and "no such directory" in err
    (sequence_copy / "events/left/events.h5").unlink()
    code, err = run_cli(capsys, str(sequence_copy), str(out))
    assert code == 1 and "events/left/events.h5: missing" in err and "unzip" in err
    assert not out.exists() and leftovers(tmp_path) == []


def test_missing_dataset_is_a_clear_error(sequence_copy: Path, tmp_path: Path, capsys):
    with h5py.File(sequence_copy / "events/left/events.h5", "a") as f:
        del f["ms_to_idx"]
    out = tmp_path / "bag"
    code, err = run_cli(capsys, str(sequence_copy), str(out))
    assert code == 1 and "missing dataset(s) /ms_to_idx" in err
    assert not out.exists() and leftovers(tmp_path) == []


def test_timestamp_count_mismatch_is_a_clear_error(sequence_copy: Path, tmp_path: Path,
                                                   capsys):
    stamps = sequence_copy / "images/timestamps.txt"
    stamps.write_text("".join(stamps.read_text().splitlines(keepends=True)[:-1]))
    out = tmp_path / "bag"
    code, err = run_cli(capsys, str(sequence_copy), str(out))
    assert code == 1 and "has 39 times but" in err and "40 .png images" in err
    assert not out.exists() and leftovers(tmp_path) == []


def test_unreadable_png_fails_without_leaving_a_partial_bag(sequence_copy: Path,
                                                            tmp_path: Path, capsys):
    (sequence_copy / "images/left/rectified/000020.png").write_bytes(b"\x89PNG not really")
    out = tmp_path / "bag"
    code, err = run_cli(capsys, str(sequence_copy), str(out))
    assert code == 1 and "000020.png: cannot read this image" in err
    assert not out.exists() and leftovers(tmp_path) == []


def test_existing_output_needs_overwrite(sequence: Path, tmp_path: Path, capsys):
    out = tmp_path / "bag"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    code, err = run_cli(capsys, str(sequence), str(out), "--duration", "0.1")
    assert code == 1 and "--overwrite" in err and (out / "keep.txt").exists()
    code, _ = run_cli(capsys, str(sequence), str(out), "--duration", "0.1", "--overwrite")
    assert code == 0 and not (out / "keep.txt").exists() and (out / "metadata.yaml").exists()
    assert leftovers(tmp_path) == []


def test_count_mismatch_fails_and_leaves_nothing(sequence: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(dsec_convert, "cd_event_count", lambda payload: 0)
    with pytest.raises(DsecConvertError, match="event count check failed"):
        convert_dsec(sequence, tmp_path / "bag", duration_s=0.2, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_interrupt_leaves_no_partial_bag(sequence: Path, tmp_path: Path, monkeypatch):
    def interrupt(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(dsec_convert._ImageConverter, "write", interrupt)
    assert main(["convert-dsec", str(sequence), str(tmp_path / "bag"), "--quiet"]) == 130
    assert list(tmp_path.iterdir()) == []


def test_sigterm_removes_the_staging_folder_too(sequence: Path, tmp_path: Path, monkeypatch,
                                                capsys):
    import os
    import signal

    def terminate(*args: object) -> None:  # what systemd, docker or launch sends
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(dsec_convert._ImageConverter, "write", terminate)
    assert main(["convert-dsec", str(sequence), str(tmp_path / "bag"), "--quiet"]) == 143
    assert list(tmp_path.iterdir()) == []
    assert "staging folder removed" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is given back


def test_bad_options_are_clear_errors(sequence: Path, tmp_path: Path, capsys):
    for args, message in ((["--packet-ms", "0"], "--packet-ms must be > 0"),
                          (["--packet-ms", "0.0005"], "whole number of microseconds"),
                          (["--duration", "-1"], "--duration must be > 0"),
                          (["--image-scale", "0"], "--image-scale must be > 0")):
        code, err = run_cli(capsys, str(sequence), str(tmp_path / "bag"), *args)
        assert code == 1 and message in err
    assert list(tmp_path.iterdir()) == []


def test_help_describes_the_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["convert-dsec", "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and out.startswith("usage: crossspec convert-dsec")
    assert "SEQUENCE_DIR" in out and "--duration" in out and "--compressed" in out
