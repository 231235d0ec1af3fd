"""Foxglove output: live captions, images and stats on a Foxglove WebSocket server and/or MCAP.

Wraps foxglove-sdk (`import foxglove`, 0.30). Each FoxgloveOutput owns its own foxglove.Context,
so two outputs in one process (a live server and a separate recording, or parallel tests) never
see each other's channels, and nothing goes through the SDK's global context.

Every message is logged with log_time = the caller's stamp_ns (the ROS header stamp / window
time), not the wall clock, so an MCAP written while replaying a bag plays back on the bag's
timeline, and the live view and the recording agree.

The caption channel (/crossspec/caption) is JSON whose field names are those of msg/Caption.msg
(window_id, confirmed_text, unconfirmed_text, draft_first_token_ms, ...), so the layout in
config/crossspec.foxglove.json plots the same paths whether Foxglove reads this output or the
ROS topic through foxglove_bridge. Its `status` is the name ("PARTIAL"); `status_code` the
Caption.msg number. `epoch` tells apart the windows of one id in different passes (a bag loop:
`drive --loop` brings every id once per pass); `unverified_reason` is Caption.msg's REASON_*
number (0 unless UNVERIFIED), `unverified_reason_name` its words ("verifier busy").

The SDK's server speaks the `foxglove.sdk.v1` WebSocket subprotocol only (checked on 0.30.3).
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import foxglove
import numpy as np
from foxglove.channels import ImageAnnotationsChannel, RawImageChannel
from foxglove.messages import (
    Color,
    ImageAnnotations,
    Point2,
    RawImage,
    TextAnnotation,
    Timestamp,
)

from crossspec_ros.stamps import split_ns
from crossspec_ros.viz.overlay import (
    CONFIRMED_RGB,
    STATUS_NAMES,
    STATUS_RGB,
    UNCONFIRMED_RGB,
    UNVERIFIED_REASON_NAMES,
    status_name,
)

DEFAULT_HOST = "127.0.0.1"  # loopback: exposing the server to a network is an explicit choice
DEFAULT_PORT = 8765  # Foxglove's usual port
CAPTION_TOPIC = "/crossspec/caption"
ANNOTATED_IMAGE_TOPIC = "/crossspec/annotated_image"
ANNOTATIONS_TOPIC = "/crossspec/caption_annotations"

# JSON Schema of the caption channel: lets Foxglove offer the fields in its path editors.
# Latency fields are null until measured (JSON has no NaN).
_NUMBER_OR_NULL = {"type": ["number", "null"]}
CAPTION_SCHEMA: dict[str, Any] = {
    "title": "crossspec.Caption",
    "type": "object",
    "properties": {
        "header": {
            "type": "object",
            "properties": {
                "stamp": {
                    "type": "object",
                    "properties": {"sec": {"type": "integer"}, "nsec": {"type": "integer"}},
                },
                "frame_id": {"type": "string"},
            },
        },
        "window_id": {"type": "integer"},
        "epoch": {"type": "integer"},
        "status": {"type": "string", "enum": list(STATUS_NAMES)},
        "status_code": {"type": "integer"},
        "confirmed_text": {"type": "string"},
        "unconfirmed_text": {"type": "string"},
        "text": {"type": "string"},
        "draft_first_token_ms": _NUMBER_OR_NULL,
        "draft_done_ms": _NUMBER_OR_NULL,
        "confirmed_first_ms": _NUMBER_OR_NULL,
        "confirmed_done_ms": _NUMBER_OR_NULL,
        "acceptance": _NUMBER_OR_NULL,
        "acceptance_rule": {"type": "string"},  # "": lossless; else the relaxed rule (LOSSY)
        "unverified_reason": {"type": "integer"},
        "unverified_reason_name": {"type": "string"},
    },
}

_IMAGE_ENCODINGS = {1: "mono8", 3: "rgb8", 4: "rgba8"}


def _jsonable(value: Any) -> Any:
    """JSON-safe copy: numpy scalars/arrays to Python, NaN/inf to null (JSON has no NaN)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _timestamp(stamp_ns: int) -> Timestamp:
    return Timestamp(*split_ns(stamp_ns))


def _color(rgb: tuple[int, int, int], alpha: float = 1.0) -> Color:
    return Color(r=rgb[0] / 255, g=rgb[1] / 255, b=rgb[2] / 255, a=alpha)


@dataclass(frozen=True)
class CaptionLabel:
    """One text label of a caption drawn over an image (pixels; y is the text's baseline)."""

    text: str
    x: float
    y: float
    size: float
    colour: tuple[int, int, int]
    backdrop: tuple[int, int, int]
    backdrop_alpha: float


def caption_labels(confirmed: str, unconfirmed: str, status: int | str, width: int,
                   height: int) -> list[CaptionLabel]:
    """Where a caption goes on a ``width`` x ``height`` image: the status at the top left in
    its colour, the confirmed text (white) and the unconfirmed draft tail (amber) on their own
    lines at the bottom, each on a dark backdrop."""
    size = max(12.0, height / 18)
    name = status_name(status)
    labels = [CaptionLabel(f" {name} ", 8.0, 8.0 + size, size, (255, 255, 255),
                           STATUS_RGB.get(name, (110, 110, 110)), 1.0),
              CaptionLabel(confirmed or "(nothing confirmed yet)", 8.0, height - 16.0 - size,
                           size, CONFIRMED_RGB, (0, 0, 0), 0.6)]
    if unconfirmed.strip():
        labels.append(CaptionLabel(unconfirmed.strip(), 8.0, height - 8.0, size,
                                   UNCONFIRMED_RGB, (0, 0, 0), 0.6))
    return labels


def caption_annotations(confirmed: str, unconfirmed: str, status: int | str, width: int,
                        height: int, stamp_ns: int) -> ImageAnnotations:
    """``caption_labels`` as foxglove.ImageAnnotations for the image stamped ``stamp_ns``:
    Foxglove draws them over the raw image, at any zoom, in its own readable font."""
    return ImageAnnotations(timestamp=_timestamp(stamp_ns), texts=[
        TextAnnotation(timestamp=_timestamp(stamp_ns), position=Point2(x=label.x, y=label.y),
                       text=label.text, font_size=label.size, text_color=_color(label.colour),
                       background_color=_color(label.backdrop, label.backdrop_alpha))
        for label in caption_labels(confirmed, unconfirmed, status, width, height)])


class FoxgloveServerError(RuntimeError):
    """The Foxglove server could not start (a busy port); the message says what to do."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


class FoxgloveOutput:
    """Serve live on a Foxglove WebSocket server and/or record an MCAP file.

    serve: start a WebSocket server on host:port (port=0 picks any free port; see `.port`).
    mcap_path: also record everything to this MCAP file (refused if it exists unless
        overwrite=True). At least one of the two is required.

    Thread-safe: ROS callbacks on several executor threads may log concurrently. Logging after
    close() is ignored and counted in `.dropped_after_close` (a late callback during shutdown
    must not crash the node). Use as a context manager or call close(): close() finishes the
    MCAP (until then the file has no summary and most readers reject it) and stops the server.
    """

    def __init__(
        self,
        *,
        serve: bool = True,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        mcap_path: str | Path | None = None,
        overwrite: bool = False,
        name: str = "crossspec",
        caption_topic: str = CAPTION_TOPIC,
    ) -> None:
        if not serve and mcap_path is None:
            raise ValueError("FoxgloveOutput needs serve=True or an mcap_path (or both)")
        if not 0 <= int(port) <= 65535:
            raise ValueError(f"port must be 0..65535 (0 = any free port), got {port}")
        self._lock = threading.Lock()
        self._closed = False
        self.dropped_after_close = 0
        self._context = foxglove.Context()
        # topic -> (kind, channel); kinds keep one topic from being used with two schemas
        self._channels: dict[str, tuple[str, Any]] = {}
        self._server: Any = None
        self._mcap: Any = None
        self.mcap_path = Path(mcap_path) if mcap_path is not None else None
        self.caption_topic = caption_topic
        try:
            if self.mcap_path is not None:
                self.mcap_path.parent.mkdir(parents=True, exist_ok=True)
                try:
                    self._mcap = foxglove.open_mcap(
                        self.mcap_path, allow_overwrite=overwrite, context=self._context)
                except FileExistsError as err:
                    raise FileExistsError(
                        f"{self.mcap_path} exists; pass overwrite=True to replace it") from err
            if serve:
                try:
                    self._server = foxglove.start_server(
                        name=name, host=host, port=int(port), context=self._context)
                except Exception as err:
                    raise FoxgloveServerError(
                        f"could not start the Foxglove server on {host}:{port} "
                        f"({_first_line(err)}); is the port in use? port 0 picks a free "
                        "one") from None
            # Created up front so a client sees the caption channel (and the layout's paths)
            # as soon as it connects, before the first window is captioned.
            self._json_channel(caption_topic, CAPTION_SCHEMA)
        except BaseException:
            self.close()
            raise

    # -- properties ----------------------------------------------------------------------

    @property
    def port(self) -> int | None:
        """The port the server listens on (the real one when port=0), or None without one."""
        return self._server.port if self._server is not None else None

    @property
    def app_url(self) -> str | None:
        """A Foxglove app URL that opens this server, or None without a running server."""
        return self._server.app_url() if self._server is not None and not self._closed else None

    @property
    def closed(self) -> bool:
        return self._closed

    # -- channels ------------------------------------------------------------------------

    def _channel(self, topic: str, kind: str, make) -> Any:
        entry = self._channels.get(topic)
        if entry is None:
            entry = (kind, make())
            self._channels[topic] = entry
        elif entry[0] != kind:
            raise ValueError(f"topic {topic} already carries {entry[0]} messages, not {kind}")
        return entry[1]

    def _json_channel(self, topic: str, schema: Mapping[str, Any] | None = None) -> Any:
        kind = "json:" + (str(schema.get("title", "")) if schema else "")
        return self._channel(topic, kind, lambda: foxglove.Channel(
            topic, schema=dict(schema) if schema else None, message_encoding="json",
            context=self._context))

    def _image_channel(self, topic: str) -> Any:
        return self._channel(topic, "foxglove.RawImage",
                             lambda: RawImageChannel(topic, context=self._context))

    # -- logging -------------------------------------------------------------------------

    def log_caption(
        self,
        window_id: int,
        status: int | str,
        confirmed: str,
        unconfirmed: str,
        latencies: Mapping[str, float] | None,
        stamp_ns: int,
        *,
        frame_id: str = "",
        epoch: int = 0,
        unverified_reason: int = 0,
    ) -> None:
        """Log one caption update on the caption topic (JSON, Caption.msg field names).

        latencies: Caption.msg fields such as draft_first_token_ms, confirmed_first_ms,
        confirmed_done_ms, acceptance; NaN (not measured yet) is written as null.
        epoch, unverified_reason: Caption.msg's (a reason code, 0 unless UNVERIFIED).
        """
        name = status_name(status)
        reason = int(unverified_reason)
        sec, nsec = split_ns(stamp_ns)
        message: dict[str, Any] = {
            "header": {"stamp": {"sec": sec, "nsec": nsec}, "frame_id": frame_id},
            "window_id": int(window_id),
            "epoch": int(epoch),
            "unverified_reason": reason,
            "unverified_reason_name": UNVERIFIED_REASON_NAMES[reason]
            if 0 <= reason < len(UNVERIFIED_REASON_NAMES) else str(reason),
            "status": name,
            "status_code": STATUS_NAMES.index(name) if name in STATUS_NAMES else -1,
            "confirmed_text": confirmed or "",
            "unconfirmed_text": unconfirmed or "",
            "text": (confirmed or "") + (unconfirmed or ""),
        }
        for key, value in (latencies or {}).items():
            if key not in message:  # latencies never overwrite the identity fields above
                message[key] = value
        self._log_json(self.caption_topic, message, stamp_ns, CAPTION_SCHEMA)

    def log_json(self, topic: str, data: Mapping[str, Any], stamp_ns: int) -> None:
        """Log a dict (stats, diagnostics) as a schemaless JSON message on `topic`."""
        self._log_json(topic, data, stamp_ns, None)

    def _log_json(self, topic: str, data: Mapping[str, Any], stamp_ns: int,
                  schema: Mapping[str, Any] | None) -> None:
        payload = json.dumps(_jsonable(data), allow_nan=False).encode("utf-8")
        with self._lock:
            if self._closed:
                self.dropped_after_close += 1
                return
            self._json_channel(topic, schema).log(payload, log_time=int(stamp_ns))

    def log_image(self, topic: str, rgb: np.ndarray, stamp_ns: int, frame_id: str = "camera") \
            -> None:
        """Log an image as foxglove.RawImage: H x W x 3 uint8 (rgb8), H x W (mono8) or x4 (rgba8).
        """
        if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8 or rgb.ndim not in (2, 3) \
                or (rgb.ndim == 3 and rgb.shape[2] not in _IMAGE_ENCODINGS):
            shape = getattr(rgb, "shape", None)
            dtype = getattr(rgb, "dtype", type(rgb).__name__)
            raise ValueError(
                f"log_image needs uint8 H x W, H x W x 3 or H x W x 4, got {shape} {dtype}")
        height, width = rgb.shape[:2]
        channels = 1 if rgb.ndim == 2 else rgb.shape[2]
        message = RawImage(
            timestamp=_timestamp(stamp_ns), frame_id=frame_id, width=width, height=height,
            encoding=_IMAGE_ENCODINGS[channels], step=width * channels,
            data=np.ascontiguousarray(rgb).tobytes())
        with self._lock:
            if self._closed:
                self.dropped_after_close += 1
                return
            self._image_channel(topic).log(message, log_time=int(stamp_ns))

    def log_annotations(self, topic: str, annotations: ImageAnnotations, stamp_ns: int) -> None:
        """Log foxglove.ImageAnnotations (e.g. ``caption_annotations``) on ``topic``."""
        with self._lock:
            if self._closed:
                self.dropped_after_close += 1
                return
            self._channel(topic, "foxglove.ImageAnnotations",
                          lambda: ImageAnnotationsChannel(topic, context=self._context)
                          ).log(annotations, log_time=int(stamp_ns))

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Finish the MCAP (readable from then on) and stop the server. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            mcap, self._mcap = self._mcap, None
            server, self._server = self._server, None
        try:
            if mcap is not None:
                mcap.close()
        finally:
            if server is not None:
                server.stop()

    def __enter__(self) -> FoxgloveOutput:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
