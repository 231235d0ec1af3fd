"""Convert a DSEC sequence directory into a ROS 2 bag (what ``crossspec convert-dsec`` runs).

DSEC ships no rosbags; crossspec replays bags. Input layout (DESIGN.md section 5)::

    <seq>/events/left/events.h5            /events/{x,y,t,p} (t in us), /ms_to_idx, /t_offset
    <seq>/images/left/rectified/NNNNNN.png  rectified RGB frames
    <seq>/images/timestamps.txt             one image time per line [us, image clock]
    <seq>/events/left/rectify_map.h5       /rectify_map (only read with ``rectify=True``)

Output topics (the defaults of config/drive.yaml):

- ``/event_camera/events``: event_camera_msgs/msg/EventPacket, ``evt3``, one packet per
  ``packet_ms`` period that has events, each stamped with the ROS time of its first event
  (``events/encode.py``), so ``events/clock.py`` maps sensor time onto the ROS clock exactly;
- ``/camera/image_raw``: sensor_msgs/msg/Image rgb8, or ``/camera/image_raw/compressed``:
  sensor_msgs/msg/CompressedImage png/jpeg; stamped by ``timestamps.txt``.

All stamps are on the image clock (event ``t + t_offset``), in ns (us * 1000); log time = stamp.

DSEC's images are rectified, its events are not. ``rectify=True`` moves each event to its
rectified pixel through the sequence's ``rectify_map.h5`` (``DsecRectifyMap``: rounded to the
nearest pixel), so events and frames line up; events whose rectified pixel is off the sensor
are dropped and counted. Without it the events are written as recorded, byte for byte as before
the option existed.

How: the sequence is walked in chunks of ~100 ms whose bounds are multiples of the packet
period (so no packet is split), reading events by time range through ``/ms_to_idx``
(``events/dsec.py``): memory stays flat whatever the sequence length. Events read and CD events
inside the written EVT3 packets are counted separately and must agree (less the events dropped
outside the sensor, raw or rectified), or the conversion fails.
The bag is written into a temporary sibling of ``out`` and renamed into place at the end, so a
failure or Ctrl-C never leaves a partial bag.
"""

from __future__ import annotations

import io
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError
from tqdm import tqdm

from crossspec_ros.bags.writer import BagWriter, header, output_problem
from crossspec_ros.events.dsec import (
    DSEC_HEIGHT,
    DSEC_WIDTH,
    MAX_STAMP_US,
    DsecEventsReader,
    DsecFieldError,
    DsecFormatError,
    DsecRectifyMap,
)
from crossspec_ros.events.encode import ADDR_X, VECT_8, VECT_12, Evt3PacketEncoder
from crossspec_ros.events.words import set_bits

EVENT_TOPIC = "/event_camera/events"
IMAGE_TOPIC = "/camera/image_raw"
COMPRESSED_TOPIC = "/camera/image_raw/compressed"
COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"
EVENT_FRAME_ID = "event_camera"
IMAGE_FRAME_ID = "camera"
EVENTS_H5 = Path("events/left/events.h5")
RECTIFY_MAP_H5 = Path("events/left/rectify_map.h5")
IMAGE_DIR = Path("images/left/rectified")
TIMESTAMPS = Path("images/timestamps.txt")
CHUNK_US = 100_000  # events read per step: ~2 M at DSEC's peak rate
JPEG_QUALITY = 90
# Events and images of one sequence are recorded together: event times (t + t_offset) farther
# than this from every image mean a wrong /t_offset, and converting the gap would take as long
# as walking it (a t_offset of 2**62 us was a 4.6e12 s progress bar).
MAX_EVENTS_TO_IMAGES_US = 60_000_000
COMPRESSED_FORMATS = ("png", "jpeg")


class DsecConvertError(Exception):
    """The sequence or the options cannot be converted; the message says what to do."""


class RectifyMapError(DsecConvertError):
    """``rectify=True`` but the sequence's rectify_map.h5 is missing or cannot serve."""


class MalformedSequenceError(DsecConvertError):
    """A file of the sequence is there but holds values no DSEC sequence has (an empty
    /ms_to_idx, a /t_offset that puts the events where no image is)."""


@dataclass(frozen=True)
class DsecLayout:
    """The files of one DSEC sequence, checked to exist and to agree with each other."""

    root: Path
    events_h5: Path
    images: list[Path]
    image_stamps_us: np.ndarray  # int64, strictly increasing, one per image
    rectify_map_h5: Path | None = None  # checked to exist only when rectifying


@dataclass(frozen=True)
class ConvertReport:
    """What a conversion wrote.

    ``events_read == events_written + events_out_of_bounds + events_rectified_off_sensor``;
    when ``rectified``, ``events_rectified == events_written`` (each event went through the map).
    """

    out: Path
    storage: str
    events_read: int
    events_written: int
    events_out_of_bounds: int
    packets: int
    packet_ms: float
    images: int
    image_encoding: str
    image_size: tuple[int, int] | None
    t_start_us: int
    t_end_us: int
    seconds: float
    rectified: bool = False
    events_rectified: int = 0
    events_rectified_off_sensor: int = 0

    @property
    def duration_s(self) -> float:
        return (self.t_end_us - self.t_start_us) / 1e6

    def summary(self) -> str:
        """A few lines for people: counts, span, speed and the count check."""
        size = f" {self.image_size[0]}x{self.image_size[1]}" if self.image_size else ""
        dropped = self.events_out_of_bounds + self.events_rectified_off_sensor
        speed = self.duration_s / self.seconds if self.seconds > 0 else math.inf
        lines = [
            f"wrote {self.out} ({self.storage})",
            f"  events:   {self.events_written:,} in {self.packets:,} evt3 packets of "
            f"{self.packet_ms:g} ms on {EVENT_TOPIC}",
            *([f"  rectify:  {self.events_rectified + self.events_rectified_off_sensor:,} "
               f"events in, {self.events_rectified:,} rectified, "
               f"{self.events_rectified_off_sensor:,} dropped off the sensor (rectify_map.h5)"]
              if self.rectified else []),
            f"  images:   {self.images:,} ({self.image_encoding}{size})",
            f"  duration: {self.duration_s:.3f} s of the sequence, converted in "
            f"{self.seconds:.1f} s ({speed:.2f}x real time)",
            f"  check:    {self.events_read:,} events read == {self.events_written:,} "
            "events in the packets"
            + (f" + {dropped:,} outside the sensor (dropped)" if dropped else ""),
        ]
        return "\n".join(lines)


def _read_timestamps(path: Path) -> np.ndarray:
    stamps = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            stamps.append(int(text))
        except ValueError:
            raise DsecConvertError(
                f"{path}:{number}: expected one integer time in microseconds per line, got "
                f"{text[:40]!r}. Use the sequence's original images/timestamps.txt.") from None
    out = np.asarray(stamps, dtype=np.int64)
    outside = np.flatnonzero((out < 0) | (out >= MAX_STAMP_US))
    if len(outside):
        raise MalformedSequenceError(
            f"{path}:{int(outside[0]) + 1}: image time {int(out[outside[0]])} us is outside what "
            f"a ROS stamp holds (0 to {MAX_STAMP_US} us). Use the sequence's original "
            "images/timestamps.txt.")
    back = np.flatnonzero(np.diff(out) <= 0)
    if len(back):
        raise DsecConvertError(
            f"{path}: image times must increase, but entry {int(back[0]) + 2} "
            f"({int(out[back[0] + 1])} us) is not after the one before ({int(out[back[0]])} us).")
    return out


def check_layout(sequence_dir: str | Path, *, rectify: bool = False) -> DsecLayout:
    """Check the DSEC layout before any work, so problems surface as one clear message.

    rectify: the events' rectify_map.h5 must be there too (RectifyMapError if not).
    """
    root = Path(sequence_dir)
    if not root.is_dir():
        raise DsecConvertError(
            f"{root}: no such directory. Pass a DSEC sequence directory (it holds "
            f"{EVENTS_H5} and {IMAGE_DIR}/), e.g. the unzipped zurich_city_00_a.")
    events_h5 = root / EVENTS_H5
    if not events_h5.is_file():
        raise DsecConvertError(
            f"{events_h5}: missing. A DSEC sequence has its left event camera in {EVENTS_H5}; "
            "download and unzip the sequence's events (<name>_events_left.zip) into "
            f"{root / EVENTS_H5.parent}.")
    image_dir = root / IMAGE_DIR
    if not image_dir.is_dir():
        raise DsecConvertError(
            f"{image_dir}: missing. Unzip the sequence's rectified left images "
            f"(<name>_images_rectified_left.zip) into {image_dir}.")
    images = sorted(image_dir.glob("*.png"))
    if not images:
        raise DsecConvertError(f"{image_dir}: no .png images in it. Unzip the sequence's "
                               "rectified left images there.")
    stamps_path = root / TIMESTAMPS
    if not stamps_path.is_file():
        raise DsecConvertError(
            f"{stamps_path}: missing. DSEC's image times come with the sequence "
            f"(<name>_image_timestamps.txt); save it as {stamps_path}.")
    stamps = _read_timestamps(stamps_path)
    if len(stamps) != len(images):
        raise DsecConvertError(
            f"{stamps_path} has {len(stamps)} times but {image_dir} has {len(images)} .png "
            "images; they must match one to one. Re-extract the images and timestamps of the "
            "same sequence.")
    rectify_map_h5 = None
    if rectify:
        rectify_map_h5 = root / RECTIFY_MAP_H5
        if not rectify_map_h5.is_file():
            raise RectifyMapError(
                f"{rectify_map_h5}: missing, and --rectify needs it. DSEC ships it in the "
                "sequence's events zip (<name>_events_left.zip, beside events.h5): unzip "
                f"rectify_map.h5 into {root / RECTIFY_MAP_H5.parent}.")
    return DsecLayout(root, events_h5, images, stamps, rectify_map_h5)


def _packet_us(packet_ms: float) -> int:
    packet_us = round(packet_ms * 1000)
    if not (packet_ms > 0 and packet_us >= 1 and abs(packet_us - packet_ms * 1000) < 1e-6):
        raise DsecConvertError(
            f"--packet-ms must be > 0 and a whole number of microseconds, got {packet_ms:g}")
    return packet_us


def cd_event_count(payload: bytes | np.ndarray) -> int:
    """CD events in an EVT3 payload: one per ADDR_X word, one per set bit of VECT words.

    Counted from the bytes written, independently of the batch the encoder was given.
    """
    words = np.frombuffer(bytes(payload), dtype="<u2")
    kind = words >> 12
    return (int(np.count_nonzero(kind == ADDR_X))
            + int(set_bits(words[kind == VECT_12] & 0xFFF).sum())
            + int(set_bits(words[kind == VECT_8] & 0xFF).sum()))


class _ImageConverter:
    """PNG file -> the message to write (rgb8 Image or png/jpeg CompressedImage)."""

    def __init__(self, scale: float, compressed: str | None) -> None:
        if not (scale > 0 and math.isfinite(scale)):
            raise DsecConvertError(f"--image-scale must be > 0, got {scale:g}")
        if compressed is not None and compressed not in COMPRESSED_FORMATS:
            raise DsecConvertError(f"compressed format must be png or jpeg, got {compressed!r}")
        self.scale, self.compressed = scale, compressed
        self.size: tuple[int, int] | None = None

    @property
    def encoding(self) -> str:
        return self.compressed or "rgb8"

    @property
    def topic(self) -> str:
        return COMPRESSED_TOPIC if self.compressed else IMAGE_TOPIC

    def _load(self, path: Path) -> tuple[Image.Image, bool]:
        """RGB image (scaled) and whether the file's own bytes are the wanted PNG."""
        try:
            with Image.open(path) as image:
                image.load()
                is_rgb_png = image.format == "PNG" and image.mode == "RGB"
                rgb = image.convert("RGB")
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
            raise DsecConvertError(
                f"{path}: cannot read this image ({type(exc).__name__}: {exc}). The file is "
                "damaged or not a PNG; re-extract the sequence's images.") from None
        if self.scale != 1.0:
            size = (max(1, round(rgb.width * self.scale)), max(1, round(rgb.height * self.scale)))
            if size != rgb.size:
                rgb = rgb.resize(size, Image.Resampling.BILINEAR)
                is_rgb_png = False
        return rgb, is_rgb_png

    def write(self, bag: BagWriter, path: Path, stamp_ns: int) -> None:
        rgb, is_rgb_png = self._load(path)
        self.size = rgb.size
        if self.compressed is None:
            bag.write_rgb(IMAGE_TOPIC, stamp_ns, np.asarray(rgb), frame_id=IMAGE_FRAME_ID)
            return
        if self.compressed == "png" and is_rgb_png:
            data = path.read_bytes()  # already what we would write: skip re-encoding
        else:
            buffer = io.BytesIO()
            if self.compressed == "png":
                rgb.save(buffer, format="PNG", compress_level=1)
            else:
                rgb.save(buffer, format="JPEG", quality=JPEG_QUALITY)
            data = buffer.getvalue()
        msg = bag.store.types[COMPRESSED_TYPE](
            header=header(stamp_ns, IMAGE_FRAME_ID), format=self.compressed,
            data=np.frombuffer(data, dtype=np.uint8))
        bag.write(COMPRESSED_TOPIC, COMPRESSED_TYPE, msg, stamp_ns)


def _open_events(layout: DsecLayout, sensor_size: tuple[int, int]) -> DsecEventsReader:
    try:
        reader = DsecEventsReader(layout.events_h5, *sensor_size)
    except DsecFieldError as exc:
        raise MalformedSequenceError(
            f"{exc}. Re-extract the sequence's events (<name>_events_left.zip).") from None
    except DsecFormatError as exc:
        raise DsecConvertError(
            f"{exc} Re-download and unzip the sequence's events (<name>_events_left.zip); "
            "reading DSEC's Blosc-compressed files needs the hdf5plugin package.") from None
    try:
        _check_events_meet_images(layout, reader)
    except MalformedSequenceError:
        reader.close()
        raise
    return reader


def _check_events_meet_images(layout: DsecLayout, reader: DsecEventsReader) -> None:
    """Events and images on one clock, as DSEC records them (else the conversion would walk
    the whole gap between them, 100 ms at a time)."""
    if not reader.num_events:
        return
    first_image, last_image = int(layout.image_stamps_us[0]), int(layout.image_stamps_us[-1])
    after = reader.t_first_us - last_image
    before = first_image - reader.t_last_us
    if max(after, before) > MAX_EVENTS_TO_IMAGES_US:
        where = (f"{after / 1e6:.1f} s after the last image" if after > 0 else
                 f"{before / 1e6:.1f} s before the first image")
        raise MalformedSequenceError(
            f"{layout.events_h5}: /t_offset = {reader.t_offset_us} us puts the events {where} "
            f"({layout.root / TIMESTAMPS}); a sequence's events and images overlap (at most "
            f"{MAX_EVENTS_TO_IMAGES_US / 1e6:g} s apart). Re-extract the sequence's events "
            "(<name>_events_left.zip) and its image timestamps.")


def _load_rectify_map(path: Path, sensor_size: tuple[int, int]) -> DsecRectifyMap:
    try:
        return DsecRectifyMap.load(path, *sensor_size)
    except DsecFormatError as exc:
        raise RectifyMapError(
            f"{exc} Re-extract rectify_map.h5 from the sequence's events zip "
            "(<name>_events_left.zip).") from None


def convert_dsec(sequence_dir: str | Path, out: str | Path, *, duration_s: float | None = None,
                 image_scale: float = 1.0, storage: str = "mcap", compressed: str | None = None,
                 packet_ms: float = 5.0, sensor_size: tuple[int, int] = (DSEC_WIDTH, DSEC_HEIGHT),
                 overwrite: bool = False, compress: bool = True, rectify: bool = False,
                 progress: bool = True) -> ConvertReport:
    """Convert one DSEC sequence into the bag directory ``out``, atomically.

    compressed: None (rgb8 Image), "png" or "jpeg" (CompressedImage). compress: zstd chunk
    compression (MCAP only). rectify: move the events through the sequence's rectify_map.h5
    (RectifyMapError, before anything is written, if it is missing or malformed). Raises
    DsecConvertError for bad input or a failed count check; then, as on any other error or an
    interrupt, ``out`` is left as it was.
    """
    start = time.perf_counter()
    out = Path(out)
    if storage not in ("mcap", "sqlite3"):
        raise DsecConvertError(f"unknown storage '{storage}': use mcap or sqlite3")
    if duration_s is not None and not (duration_s > 0 and math.isfinite(duration_s)):
        raise DsecConvertError(f"--duration must be > 0 seconds, got {duration_s:g}")
    packet_us = _packet_us(packet_ms)
    images = _ImageConverter(image_scale, compressed)
    layout = check_layout(sequence_dir, rectify=rectify)
    # loaded before anything is written: a malformed map fails as a missing one does
    rectify_map = (_load_rectify_map(layout.rectify_map_h5, sensor_size)
                   if layout.rectify_map_h5 else None)
    problem = output_problem(out, layout.root, overwrite, "sequence")
    if problem:
        raise DsecConvertError(problem)
    with _open_events(layout, sensor_size) as reader:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
        try:
            # named like the final bag, so the storage file inside is <name>.mcap / .db3
            bag = BagWriter(staging / out.name, storage=storage,
                            compress=compress and storage == "mcap")
            counts = _write(bag, layout, reader, rectify_map, images, duration_s, packet_us,
                            progress)
            if out.exists() or out.is_symlink():  # --overwrite: only now, after success
                old = staging / ".replaced"
                os.rename(out, old)
            os.rename(staging / out.name, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return ConvertReport(out=out, storage=storage, packet_ms=packet_us / 1000,
                         image_encoding=images.encoding, image_size=images.size,
                         seconds=time.perf_counter() - start, rectified=rectify, **counts)


def _time_range(layout: DsecLayout, reader: DsecEventsReader,
                duration_s: float | None) -> tuple[int, int]:
    """[start, end) in image-clock us: from the first image/event, all or ``duration_s``."""
    firsts = [int(layout.image_stamps_us[0])]
    lasts = [int(layout.image_stamps_us[-1])]
    if reader.num_events:
        firsts.append(reader.t_first_us)
        lasts.append(reader.t_last_us)
    t_start, t_end = min(firsts), max(lasts) + 1
    if duration_s is not None:
        t_end = min(t_end, t_start + round(duration_s * 1e6))
    return t_start, t_end


def _write(bag: BagWriter, layout: DsecLayout, reader: DsecEventsReader,
           rectify_map: DsecRectifyMap | None, images: _ImageConverter,
           duration_s: float | None, packet_us: int, progress: bool) -> dict[str, int]:
    t_start, t_end = _time_range(layout, reader, duration_s)
    encoder = Evt3PacketEncoder(reader.width, reader.height, packet_period_ns=packet_us * 1000,
                                frame_id=EVENT_FRAME_ID)
    chunk_us = packet_us * max(1, CHUNK_US // packet_us)
    stamps = layout.image_stamps_us
    counts = {"events_read": 0, "events_written": 0, "events_out_of_bounds": 0,
              "events_rectified": 0, "events_rectified_off_sensor": 0, "packets": 0,
              "images": 0, "t_start_us": t_start, "t_end_us": t_end}
    # counted in integer us (exact at the end), shown in seconds
    bar = tqdm(total=t_end - t_start, unit_scale=1e-6, file=sys.stderr,
               desc=f"converting {layout.root.name}", disable=not progress,
               bar_format="{l_bar}{bar}| {n:.1f}/{total:.1f} s [{elapsed}<{remaining}]{postfix}")
    # Chunk bounds are multiples of the packet period (on the absolute clock, as the encoder's
    # packets are), so every packet is encoded in one call.
    c0 = t_start // packet_us * packet_us
    with bag, bar:
        while c0 < t_end:
            c1 = min(c0 + chunk_us, t_end)
            dropped_before = reader.out_of_bounds_events
            batch = reader.read(max(c0, t_start), c1)
            dropped = reader.out_of_bounds_events - dropped_before
            counts["events_read"] += len(batch) + dropped
            counts["events_out_of_bounds"] += dropped
            if rectify_map is not None:
                batch, off_sensor = rectify_map.rectify(batch)
                counts["events_rectified"] += len(batch)
                counts["events_rectified_off_sensor"] += off_sensor
            try:
                packets = encoder.encode(batch)
            except ValueError as exc:
                raise DsecConvertError(
                    f"{layout.events_h5}: events between {c0} and {c1} us cannot be encoded "
                    f"({exc}); the file's /events/t must be sorted.") from None
            messages: list[tuple[int, int, object]] = [(p.stamp_ns, 0, p) for p in packets]
            i0, i1 = np.searchsorted(stamps, [max(c0, t_start), c1], side="left")
            messages += [(int(stamps[i]) * 1000, 1, layout.images[i]) for i in range(i0, i1)]
            for stamp_ns, kind, item in sorted(messages, key=lambda m: (m[0], m[1])):
                if kind == 0:
                    bag.write_event_packet(EVENT_TOPIC, item)
                    counts["events_written"] += cd_event_count(item.events)
                    counts["packets"] += 1
                else:
                    images.write(bag, item, stamp_ns)
                    counts["images"] += 1
            bar.update(c1 - max(c0, t_start))
            bar.set_postfix(events=f"{counts['events_written']:,}", refresh=False)
            c0 = c1
        whole = reader.num_events == 0 or t_end > reader.t_last_us
        _verify(counts, reader, layout, whole)
    return counts


def _verify(counts: dict[str, int], reader: DsecEventsReader, layout: DsecLayout,
            whole: bool) -> None:
    """Events in == events out (else the bag is dropped: a converter must not lose events)."""
    read, written = counts["events_read"], counts["events_written"]
    dropped = counts["events_out_of_bounds"] + counts["events_rectified_off_sensor"]
    if read != written + dropped:
        raise DsecConvertError(
            f"event count check failed: {read:,} events read from {layout.events_h5} but "
            f"{written:,} in the written packets (+ {dropped:,} dropped outside the sensor). "
            "No bag was written; please report this with the sequence name.")
    if whole and read != reader.num_events:
        raise DsecConvertError(
            f"event count check failed: {layout.events_h5} holds {reader.num_events:,} events "
            f"but {read:,} were read over the whole time range; its /ms_to_idx or /events/t "
            "may be damaged. No bag was written.")
