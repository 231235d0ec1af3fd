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


def replace_h5_dataset(sequence: Path, name: str, value: np.ndarray) -> None:
    with h5py.File(sequence / "events/left/events.h5", "a") as f:
        del f[name]
        f.create_dataset(name, data=value)


@pytest.mark.timeout(60)  # a t_offset of 2**62 once ran a 4.6e12 s progress bar
@pytest.mark.parametrize(("field", "value", "message"), [
    ("ms_to_idx", np.zeros(0, np.uint64), "/ms_to_idx is empty but the file holds"),
    ("t_offset", np.int64(-T_OFFSET_US), "/t_offset = -47000123000 us puts the first event at "
     "-47000116414 us on the image clock, outside what a ROS stamp holds"),
    ("t_offset", np.int64(2**62), "/t_offset = 4611686018427387904 us puts the first event at"),
    ("t_offset", np.int64(T_OFFSET_US + 3600 * 10**6),
     "/t_offset = 50600123000 us puts the events 3598.1 s after the last image"),
    ("t_offset", np.zeros(0, np.int64), "/t_offset holds no value"),
    ("t_offset", np.float64(np.nan), "/t_offset must be a whole number of microseconds, got nan"),
], ids=["empty ms_to_idx", "negative t_offset", "t_offset 2**62", "t_offset an hour off",
        "empty t_offset", "nan t_offset"])
def test_malformed_events_h5_fields_are_one_line_errors_before_anything_is_written(
        sequence_copy: Path, tmp_path: Path, capsys, field: str, value: np.ndarray,
        message: str):
    replace_h5_dataset(sequence_copy, field, value)
    out = tmp_path / "bag"
    code, err = run_cli(capsys, str(sequence_copy), str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "events/left/events.h5" in err and message in err
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
    assert "--rectify" in out and "rectify_map.h5" in out


def write_rectify_map(sequence: Path, rectified_xy: np.ndarray) -> None:
    with h5py.File(sequence / "events/left/rectify_map.h5", "w") as f:
        f.create_dataset("rectify_map", data=rectified_xy)


def shifted_map() -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A rectify map whose answer is known: (+3, -2) with sub-half-pixel noise, and some raw
    pixels sent off the sensor. Returns the map and, per raw pixel, the expected rectified
    x, y and whether it stays on the 640x480 sensor."""
    y, x = np.mgrid[0:480, 0:640]
    noise = np.random.default_rng(0).uniform(-0.45, 0.45, (480, 640, 2))
    rectified_xy = np.stack([x + 3, y - 2], axis=-1) + noise  # rounds back to (+3, -2)
    rectified_xy[:, 40:44, 0] = 700.2  # right of the sensor
    rectified_xy[:, 50, :] = np.nan  # no rectified position at all
    rectified_xy[30, :, 1] = 479.5  # rounds to row 480: just below the sensor
    want_x, want_y = x + 3, y - 2
    on_sensor = (want_y >= 0) & (want_x < 640)
    on_sensor[:, 40:44] = on_sensor[:, 50] = on_sensor[30, :] = False
    return rectified_xy.astype(np.float32), {"x": want_x, "y": want_y, "on_sensor": on_sensor}


def bag_bytes(bag: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(bag.iterdir())}


def test_rectify_keeps_exactly_the_events_whose_rectified_pixel_is_on_the_sensor(
        sequence_copy: Path, tmp_path: Path):
    rectified_xy, answer = shifted_map()
    write_rectify_map(sequence_copy, rectified_xy)
    out = tmp_path / "bag"
    report = convert_dsec(sequence_copy, out, rectify=True, progress=False)
    raw = h5_events(sequence_copy)
    keep = answer["on_sensor"][raw["y"], raw["x"]]
    # every kind of drop happens in this drive (the raw events lie in 64x48)
    assert all(np.any(~keep & part) for part in (raw["y"] < 2, (raw["x"] >= 40) & (raw["x"] < 44),
                                                 raw["x"] == 50, raw["y"] == 30))
    want = canonical({"t": raw["t"][keep], "p": raw["p"][keep],
                      "x": answer["x"][raw["y"], raw["x"]][keep],
                      "y": answer["y"][raw["y"], raw["x"]][keep]})
    assert_same_events(bag_events(out), want)
    assert report.rectified and report.events_read == len(raw["t"])
    assert report.events_rectified == report.events_written == int(keep.sum())
    assert report.events_rectified_off_sensor == int((~keep).sum()) > 0
    assert report.events_out_of_bounds == 0
    assert "rectify:" in report.summary() and leftovers(tmp_path) == []


def test_cli_rectify_prints_events_in_rectified_and_dropped(sequence_copy: Path,
                                                             tmp_path: Path, capsys):
    rectified_xy, _ = shifted_map()
    write_rectify_map(sequence_copy, rectified_xy)
    assert main(["convert-dsec", str(sequence_copy), str(tmp_path / "bag"), "--rectify",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    report = convert_dsec(sequence_copy, tmp_path / "again", rectify=True, progress=False)
    line = (f"rectify:  {report.events_read:,} events in, {report.events_rectified:,} "
            f"rectified, {report.events_rectified_off_sensor:,} dropped off the sensor")
    assert line in out
    assert f"+ {report.events_rectified_off_sensor:,} outside the sensor (dropped)" in out


def test_without_rectify_the_bag_is_byte_identical_whatever_map_the_sequence_holds(
        sequence: Path, sequence_copy: Path, tmp_path: Path):
    rectified_xy, _ = shifted_map()
    write_rectify_map(sequence_copy, rectified_xy)
    plain = tmp_path / "plain" / "bag"
    report = convert_dsec(sequence, plain, progress=False)
    with_map = tmp_path / "with_map" / "bag"
    convert_dsec(sequence_copy, with_map, progress=False)
    assert bag_bytes(with_map) == bag_bytes(plain)
    assert not report.rectified and "rectify:" not in report.summary()


def test_rectify_through_an_identity_map_changes_no_byte(sequence: Path, sequence_copy: Path,
                                                         tmp_path: Path):
    y, x = np.mgrid[0:480, 0:640]
    write_rectify_map(sequence_copy, np.stack([x, y], axis=-1).astype(np.float32))
    plain = tmp_path / "plain" / "bag"
    convert_dsec(sequence, plain, progress=False)
    rectified = tmp_path / "rectified" / "bag"
    report = convert_dsec(sequence_copy, rectified, rectify=True, progress=False)
    assert report.events_rectified == report.events_read > 1000
    assert report.events_rectified_off_sensor == 0
    assert bag_bytes(rectified) == bag_bytes(plain)


def test_rectify_without_the_map_names_the_file_to_unzip_and_writes_nothing(
        sequence: Path, tmp_path: Path, capsys):
    out = tmp_path / "bag"
    code, err = run_cli(capsys, str(sequence), str(out), "--rectify")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "events/left/rectify_map.h5: missing" in err and "_events_left.zip" in err
    assert "unzip" in err
    assert not out.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize(("rectified_xy", "message"), [
    (np.zeros((480, 640, 2), np.int32), "is int32 (480, 640, 2)"),
    (np.zeros((640, 480, 2), np.float32), "is float32 (640, 480, 2)"),
    (np.zeros((480, 640), np.float64), "is float64 (480, 640)"),
])
def test_rectify_map_of_the_wrong_shape_or_dtype_is_a_one_line_error(
        sequence_copy: Path, tmp_path: Path, capsys, rectified_xy: np.ndarray, message: str):
    write_rectify_map(sequence_copy, rectified_xy)
    out = tmp_path / "bag"
    code, err = run_cli(capsys, str(sequence_copy), str(out), "--rectify")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert message in err and "expected float (480, 640, 2)" in err
    assert not out.exists() and leftovers(tmp_path) == []
