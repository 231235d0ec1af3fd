"""crossspec_ros.viz: caption overlay, RViz marker text, Foxglove server/MCAP output, configs.

The MCAP check reads the file with the `mcap` library (test/mcap_helpers.py), not with the
writer's own library (foxglove-sdk), so the writer is not trusted to read back what it wrote.
The live-server check is a real WebSocket client on loopback with short timeouts.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
import yaml
from mcap_helpers import read_mcap

from crossspec_ros.viz.foxglove_out import CAPTION_SCHEMA, CAPTION_TOPIC, FoxgloveOutput
from crossspec_ros.viz.overlay import (
    CONFIRMED_RGB,
    MAX_BAND_FRACTION,
    UNCONFIRMED_RGB,
    annotate_frame,
    marker_text,
)

REPO = Path(__file__).resolve().parents[1]
LATENCIES = {"draft_first_token_ms": 45.2, "confirmed_first_ms": 321.0,
             "confirmed_done_ms": float("nan"), "acceptance": 0.41}


def _gradient(width: int, height: int) -> np.ndarray:
    """A frame whose every pixel differs from its darkened version (no pure black)."""
    yy, xx = np.mgrid[0:height, 0:width]
    return np.stack([64 + xx * 191 // max(1, width - 1), 64 + yy * 191 // max(1, height - 1),
                     np.full_like(xx, 160)], axis=-1).astype(np.uint8)


def _changed_rows(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.any(before != after, axis=(1, 2)))


def _has_colour(image: np.ndarray, rgb: tuple[int, int, int]) -> bool:
    return bool(np.all(image == np.array(rgb, np.uint8), axis=-1).any())


# -- overlay ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(160, 120), (640, 480), (1440, 1080)])
def test_overlay_keeps_size_and_changes_only_a_bottom_band(size):
    width, height = size
    frame = _gradient(width, height)
    original = frame.copy()
    out = annotate_frame(frame, "A white car drives on a wet road, turn", "ing left", "PARTIAL",
                         1234, LATENCIES)
    assert out.shape == frame.shape and out.dtype == np.uint8
    assert np.array_equal(frame, original), "the input frame must not be modified"
    rows = _changed_rows(frame, out)
    assert rows.size > 0, "no caption band was drawn"
    top = rows[0]
    # the band is one contiguous block that reaches the bottom edge ...
    assert np.array_equal(rows, np.arange(top, height))
    # ... no taller than the documented cap, and everything above it is byte-identical
    assert height - top <= int(height * MAX_BAND_FRACTION)
    assert np.array_equal(out[:top], frame[:top])


def test_overlay_draws_confirmed_white_and_unconfirmed_tail_in_its_own_colour():
    frame = np.zeros((480, 640, 3), np.uint8)
    both = annotate_frame(frame, "confirmed words here", " draft guess tail", "PARTIAL", 3)
    assert _has_colour(both, CONFIRMED_RGB)
    assert _has_colour(both, UNCONFIRMED_RGB)
    confirmed_only = annotate_frame(frame, "confirmed words here", "", "FINAL", 3)
    assert _has_colour(confirmed_only, CONFIRMED_RGB)
    assert not _has_colour(confirmed_only, UNCONFIRMED_RGB)


def test_overlay_status_tag_changes_the_band():
    frame = _gradient(320, 240)
    draft = annotate_frame(frame, "", "a car", "DRAFT", 1)
    final = annotate_frame(frame, "a car", "", "FINAL", 1)
    by_code = annotate_frame(frame, "a car", "", 2, 1)  # Caption.msg STATUS_FINAL
    assert not np.array_equal(draft, final)
    assert np.array_equal(final, by_code)


def test_overlay_long_text_wraps_grows_the_band_and_stays_capped():
    frame = _gradient(640, 480)
    short = annotate_frame(frame, "a car", "", "FINAL", 1)
    medium_text = " ".join(["a car drives past a parked truck"] * 3)
    medium = annotate_frame(frame, medium_text, "", "FINAL", 1)
    huge = annotate_frame(frame, " ".join(["word"] * 2000) + "x" * 500, "tail " * 300, "FINAL", 1)
    band = {name: 480 - _changed_rows(frame, img)[0]
            for name, img in (("short", short), ("medium", medium), ("huge", huge))}
    assert band["short"] < band["medium"] < band["huge"]
    assert band["huge"] <= int(480 * MAX_BAND_FRACTION)


@pytest.mark.parametrize("size", [(160, 120), (1440, 1080), (24, 16), (1, 1)])
def test_overlay_handles_empty_text_and_extreme_sizes(size):
    width, height = size
    frame = _gradient(width, height)
    for confirmed, unconfirmed in (("", ""), ("", "draft only"), ("x" * 300, "")):
        out = annotate_frame(frame, confirmed, unconfirmed, "UNVERIFIED", -5, {})
        assert out.shape == frame.shape


def test_overlay_rejects_non_rgb_input_with_a_clear_message():
    with pytest.raises(ValueError, match="H x W x 3 uint8"):
        annotate_frame(np.zeros((10, 10), np.uint8), "a", "", "FINAL", 0)
    with pytest.raises(ValueError, match="H x W x 3 uint8"):
        annotate_frame(np.zeros((10, 10, 3), np.float32), "a", "", "FINAL", 0)


def test_overlay_shows_unknown_status_instead_of_failing():
    out = annotate_frame(_gradient(160, 120), "a", "", "SOMETHING_NEW", 0)
    assert out.shape == (120, 160, 3)
    annotate_frame(_gradient(160, 120), "a", "", 99, 0)


def test_marker_text_has_status_confirmed_and_bracketed_tail():
    text = marker_text("A car is turn", "ing left at the lights", "PARTIAL")
    assert text.startswith("[PARTIAL] A car is turn[ing")
    assert "left at the lights]" in text.replace("\n", " ")
    spaced = marker_text("A car is", " turning", 0)
    assert spaced == "[DRAFT] A car is [turning]"


def test_marker_text_wraps_long_captions_and_handles_empty():
    text = marker_text("word " * 60, "guess " * 20, "FINAL", width=30)
    lines = text.split("\n")
    assert len(lines) > 5 and all(len(line) <= 30 for line in lines)
    assert marker_text("", "", "FINAL") == "[FINAL]"


# -- Foxglove output ------------------------------------------------------------------------


def test_foxglove_mcap_records_captions_images_and_stats_on_their_timeline(tmp_path):
    path = tmp_path / "sub" / "run.mcap"
    frame = _gradient(32, 24)
    t0 = 1_700_000_000_123_456_789
    with FoxgloveOutput(serve=False, mcap_path=path) as out:
        assert out.port is None
        out.log_caption(7, "DRAFT", "", "a car", {"draft_first_token_ms": 41.0}, t0)
        out.log_caption(7, 2, "a car turns", "", LATENCIES, t0 + 500_000_000)
        out.log_image("/crossspec/annotated_image", frame, t0 + 10, frame_id="camera")
        out.log_json("/crossspec/stats", {"acceptance": np.float32(0.25),
                                          "queue": np.int64(2), "nan": float("nan")}, t0 + 20)
    out.close()  # idempotent

    mcap = read_mcap(path)
    topics = {c.topic: c for c in mcap["channels"].values()}
    assert set(topics) == {CAPTION_TOPIC, "/crossspec/annotated_image", "/crossspec/stats"}
    caption_schema = mcap["schemas"][topics[CAPTION_TOPIC].schema_id]
    assert (caption_schema.name, caption_schema.encoding) == ("crossspec.Caption", "jsonschema")
    assert topics[CAPTION_TOPIC].message_encoding == "json"
    image_schema = mcap["schemas"][topics["/crossspec/annotated_image"].schema_id]
    assert (image_schema.name, image_schema.encoding) == ("foxglove.RawImage", "protobuf")
    assert len(mcap["messages"]) == 4
    assert mcap["statistics"].message_count == 4

    by_topic: dict[str, list] = {}
    for topic, log_time, data, schema_name in mcap["messages"]:
        assert schema_name == mcap["schemas"][topics[topic].schema_id].name
        by_topic.setdefault(topic, []).append((log_time, data))
    captions = [(t, json.loads(d)) for t, d in by_topic[CAPTION_TOPIC]]
    assert [t for t, _ in captions] == [t0, t0 + 500_000_000]  # log_time = stamp, not wall clock
    first, final = captions[0][1], captions[1][1]
    assert (first["status"], first["unconfirmed_text"], first["draft_first_token_ms"]) == \
        ("DRAFT", "a car", 41.0)
    assert (final["status"], final["status_code"], final["confirmed_text"]) == \
        ("FINAL", 2, "a car turns")
    assert final["confirmed_done_ms"] is None  # NaN is not JSON: written as null
    assert final["header"]["stamp"] == {"sec": (t0 + 500_000_000) // 10**9,
                                        "nsec": (t0 + 500_000_000) % 10**9}
    (image_time, image_data), = by_topic["/crossspec/annotated_image"]
    assert image_time == t0 + 10
    assert frame.tobytes() in image_data  # protobuf keeps the pixel bytes verbatim
    (_, stats), = by_topic["/crossspec/stats"]
    assert json.loads(stats) == {"acceptance": 0.25, "queue": 2, "nan": None}


def test_foxglove_captions_say_which_pass_and_why_unverified(tmp_path):
    """Under drive --loop one window id comes once per pass: the epoch tells them apart;
    an UNVERIFIED caption says why (Caption.msg's REASON_* code)."""
    path = tmp_path / "run.mcap"
    with FoxgloveOutput(serve=False, mcap_path=path) as out:
        out.log_caption(7, "FINAL", "a car turns", "", LATENCIES, 1, epoch=0)
        out.log_caption(7, "FINAL", "a car turns", "", LATENCIES, 2, epoch=2)
        out.log_caption(8, "UNVERIFIED", "", "a truck", {}, 3, epoch=2, unverified_reason=2)
    captions = [json.loads(data) for topic, _, data, _ in read_mcap(path)["messages"]
                if topic == CAPTION_TOPIC]
    assert [(c["window_id"], c["epoch"], c["unverified_reason"]) for c in captions] == \
        [(7, 0, 0), (7, 2, 0), (8, 2, 2)]
    assert captions[2]["unverified_reason_name"] == "verifier busy"
    assert captions[0]["unverified_reason_name"] == ""
    assert {"epoch", "unverified_reason", "unverified_reason_name"} <= \
        set(CAPTION_SCHEMA["properties"])


def test_caption_labels_put_status_confirmed_and_tail_on_the_image_in_their_colours():
    from crossspec_ros.viz.foxglove_out import caption_labels

    status, confirmed, tail = caption_labels("a red car", " turns left", 1, 320, 240)
    assert status.text.strip() == "PARTIAL"
    assert (confirmed.text, tail.text) == ("a red car", "turns left")
    assert (confirmed.colour, tail.colour) == (CONFIRMED_RGB, UNCONFIRMED_RGB)
    assert 0 < confirmed.y < tail.y <= 240  # two lines at the bottom
    final = caption_labels("a red car turns", "", 2, 320, 240)
    assert [label.text for label in final][1:] == ["a red car turns"]  # no tail line


def test_caption_annotations_are_recorded_for_foxglove(tmp_path):
    from crossspec_ros.viz.foxglove_out import ANNOTATIONS_TOPIC, caption_annotations

    path = tmp_path / "a.mcap"
    with FoxgloveOutput(serve=False, mcap_path=path) as out:
        out.log_annotations(ANNOTATIONS_TOPIC, caption_annotations("a car", "", 2, 32, 24, 5),
                            5)
    mcap = read_mcap(path)
    [(topic, log_time, data, schema)] = mcap["messages"]
    assert (topic, log_time, schema) == (ANNOTATIONS_TOPIC, 5, "foxglove.ImageAnnotations")
    assert b"a car" in data


def test_overlay_words_keep_a_visible_gap_at_the_sample_bags_size():
    frame = np.zeros((240, 320, 3), np.uint8)
    out = annotate_frame(frame, "The ego car drives", "", "FINAL", 1)
    # the caption line: rows with confirmed-white pixels; columns with any such ink
    white = np.all(out > 200, axis=-1)
    rows = np.flatnonzero(white.any(axis=1))
    ink = white[rows.min():rows.max() + 1].any(axis=0)
    cols = np.flatnonzero(ink)
    gaps = np.diff(cols) - 1
    words = 4
    # the widest gaps are the word gaps: three of them, each at least 3 px wide
    assert sorted(gaps)[-(words - 1):][0] >= 3, sorted(gaps)[-6:]


def test_foxglove_output_refuses_an_existing_mcap_unless_told(tmp_path):
    path = tmp_path / "run.mcap"
    FoxgloveOutput(serve=False, mcap_path=path).close()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        FoxgloveOutput(serve=False, mcap_path=path)
    FoxgloveOutput(serve=False, mcap_path=path, overwrite=True).close()


def test_foxglove_output_rejects_bad_arguments_and_topic_kind_clashes(tmp_path):
    with pytest.raises(ValueError, match="serve=True or an mcap_path"):
        FoxgloveOutput(serve=False)
    with FoxgloveOutput(serve=False, mcap_path=tmp_path / "a.mcap") as out:
        with pytest.raises(ValueError, match="already carries"):
            out.log_image(CAPTION_TOPIC, np.zeros((2, 2, 3), np.uint8), 1)
        with pytest.raises(ValueError, match="uint8"):
            out.log_image("/img", np.zeros((2, 2, 3), np.float64), 1)
    out.log_caption(1, "FINAL", "late", "", {}, 5)  # after close: ignored and counted
    assert out.dropped_after_close == 1


def test_foxglove_server_advertises_caption_channel_to_a_websocket_client():
    ws_client = pytest.importorskip("websockets.sync.client")
    with FoxgloveOutput(host="127.0.0.1", port=0) as out:
        port = out.port
        assert port and port > 0
        # the server says where it listens: loopback, on the free port it was given
        ds_url = parse_qs(urlparse(out.app_url).query)["ds.url"]
        assert ds_url == [f"ws://127.0.0.1:{port}"]
        with ws_client.connect(f"ws://127.0.0.1:{port}", subprotocols=["foxglove.sdk.v1"],
                               open_timeout=5, close_timeout=2) as ws:
            assert ws.subprotocol == "foxglove.sdk.v1"
            channel = None
            deadline = time.monotonic() + 5
            while channel is None and time.monotonic() < deadline:
                msg = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
                if msg.get("op") == "advertise":
                    channel = next((c for c in msg["channels"] if c["topic"] == CAPTION_TOPIC),
                                   None)
            assert channel is not None, "caption channel was not advertised"
            assert (channel["encoding"], channel["schemaName"]) == ("json", "crossspec.Caption")

            # subscribe, then log until the server has registered the subscription
            ws.send(json.dumps({"op": "subscribe",
                                "subscriptions": [{"id": 11, "channelId": channel["id"]}]}))
            stamp = 1_700_000_000_000_000_000
            data = None
            deadline = time.monotonic() + 5
            while data is None and time.monotonic() < deadline:
                out.log_caption(42, "PARTIAL", "a bus", " stops", LATENCIES, stamp)
                try:
                    frame = ws.recv(timeout=0.2)
                except TimeoutError:
                    continue
                if isinstance(frame, bytes) and frame[0] == 0x01:  # messageData
                    data = frame
            assert data is not None, "no caption message reached the client"
            sub_id, log_time = struct.unpack_from("<IQ", data, 1)
            assert (sub_id, log_time) == (11, stamp)
            caption = json.loads(data[13:])
            assert (caption["window_id"], caption["text"]) == (42, "a bus stops")
    assert out.closed and out.port is None


# -- configs ---------------------------------------------------------------------------------


def _caption_fields() -> set[str]:
    fields = set()
    for line in (REPO / "msg" / "Caption.msg").read_text().splitlines():
        parts = line.split("#")[0].split()
        if len(parts) == 2 and "=" not in parts[1]:
            fields.add(parts[1])
    return fields


def _layout_leaves(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    return _layout_leaves(node["first"]) + _layout_leaves(node["second"])


def test_foxglove_layout_shows_image_caption_and_latency_plot_of_real_fields():
    layout = json.loads((REPO / "config" / "crossspec.foxglove.json").read_text())
    panels = layout["configById"]
    assert sorted(_layout_leaves(layout["layout"])) == sorted(panels)
    by_type = {panel_id.split("!")[0]: config for panel_id, config in panels.items()}
    assert by_type["Image"]["imageMode"]["imageTopic"] == "/crossspec/annotated_image"
    assert by_type["RawMessages"]["topicPath"] == CAPTION_TOPIC
    paths = [p["value"] for p in by_type["Plot"]["paths"]]
    assert paths and all(p.startswith(CAPTION_TOPIC + ".") for p in paths)
    # the plotted fields exist in Caption.msg (ROS via a bridge) and in our JSON captions
    assert {p.split(".", 1)[1] for p in paths} <= _caption_fields()


def test_rviz_config_shows_annotated_image_and_caption_marker_in_camera_frame():
    config = yaml.safe_load((REPO / "config" / "crossspec.rviz").read_text())
    manager = config["Visualization Manager"]
    assert manager["Global Options"]["Fixed Frame"] == "camera"
    displays = {d["Class"]: d for d in manager["Displays"]}
    image = displays["rviz_default_plugins/Image"]
    assert image["Topic"]["Value"] == "/crossspec/annotated_image"
    marker = displays["rviz_default_plugins/Marker"]
    assert marker["Topic"]["Value"] == "/crossspec/caption_marker"


def test_a_lossy_caption_says_so_in_the_marker_and_on_the_frame():
    assert marker_text("A car turns", "", "FINAL", lossy="top_k:3").startswith(
        "[FINAL, LOSSY top_k:3] A car")
    assert marker_text("A car turns", "", "FINAL").startswith("[FINAL] A car")
    rgb = np.zeros((120, 160, 3), np.uint8)
    plain = annotate_frame(rgb, "A car turns", "", "FINAL", 3)
    lossy = annotate_frame(rgb, "A car turns", "", "FINAL", 3, lossy="top_k:3")
    assert not np.array_equal(plain, lossy)  # the header carries the mark
