"""The sample bag: a synthetic drive (sim/) as a ROS 2 bag, written atomically.

Topics (the defaults of config/drive.yaml):

- ``/event_camera/events``: event_camera_msgs/msg/EventPacket, evt3, one packet per 2 ms;
- ``/camera/image_raw``: sensor_msgs/msg/Image rgb8 at 20 Hz;
- ``/crossspec/ground_truth``: crossspec/msg/Caption, one per 1 s window, status FINAL,
  ``confirmed_text`` = the verifier-style caption; published at the window's end. For
  evaluation only: nothing in the pipeline subscribes to it.

All stamps are on one clock starting at ``DRIVE_START_NS`` (1 700 000 000 s); log time =
header stamp. MCAP bags use zstd chunk compression (rosbags' ``CompressionMode.STORAGE``;
rosbags' AnyReader, ros2 bag and Foxglove read it), which makes the bag ~8x smaller (raw
rgb8 at 320x240x20 Hz is 4.6 MB/s; the 24 s sample is 14.5 MB instead of ~120 MB). The bag
is written into a temporary sibling directory and renamed into place, so a failure or an
interrupt never leaves a partial bag at ``out``.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from tqdm import tqdm

from crossspec_ros.bags.writer import BagWriter, header, ns_to_time
from crossspec_ros.events.encode import Evt3PacketEncoder
from crossspec_ros.sim.scene import SEGMENT_SECONDS, Drive
from crossspec_ros.sim.stream import DRIVE_START_NS, WINDOW_NS, record

EVENT_TOPIC = "/event_camera/events"
RGB_TOPIC = "/camera/image_raw"
GROUND_TRUTH_TOPIC = "/crossspec/ground_truth"
CAPTION_TYPE = "crossspec/msg/Caption"
STATUS_FINAL = 2


def ground_truth_caption(store: Any, t0: int, t1: int, text: str) -> Any:
    """A FINAL crossspec/Caption of window [t0, t1) saying ``text`` (rosbags type ``store``),
    as sample bags file their ground truth: no draft, no latencies."""
    nan = math.nan
    return store.types[CAPTION_TYPE](
        header=header(t1, "crossspec_sim"), window_id=t0 // WINDOW_NS, epoch=0,
        window_start=ns_to_time(t0), window_end=ns_to_time(t1),
        status=STATUS_FINAL, confirmed_text=text, unconfirmed_text="", draft_text="",
        draft_first_token_ms=nan, draft_done_ms=nan, confirmed_first_ms=nan,
        confirmed_done_ms=nan, acceptance=nan, unverified_reason=0, draft_state=0,
        acceptance_rule="")


SAMPLE_DRIVE_SEED = 23  # the simulated drive in the committed rosbags/sample


def write_sample_bag(out: str | Path, seed: int = SAMPLE_DRIVE_SEED, duration_s: float = 24.0, *,
                     storage: str = "mcap", compress: bool = True,
                     event_size: tuple[int, int] = (320, 240),
                     rgb_size: tuple[int, int] = (320, 240), rgb_hz: float = 20.0,
                     packet_ms: float = 2.0, progress: bool = True,
                     segment_seconds: tuple[int, int] = SEGMENT_SECONDS) -> dict[str, int]:
    """Write drive ``seed`` as a bag directory ``out`` (must not exist); returns counts.

    ``segment_seconds``: the length range of the drive's ordinary segments (``Drive``); a
    short one such as (1, 2) writes a drive with frequent scene changes."""
    drive = Drive(seed, segment_seconds=segment_seconds)  # checks the range before writing
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} exists; remove it or choose another output")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        # named like the final bag, so the storage file inside is <name>.mcap
        counts = _write(staging / out.name, drive, duration_s, storage, compress, event_size,
                        rgb_size, rgb_hz, packet_ms, progress)
        os.rename(staging / out.name, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return counts


def _write(path: Path, drive: Drive, duration_s: float, storage: str, compress: bool,
           event_size: tuple[int, int], rgb_size: tuple[int, int], rgb_hz: float,
           packet_ms: float, progress: bool) -> dict[str, int]:
    counts = {"events": 0, "event_packets": 0, "frames": 0, "captions": 0}
    encoder = Evt3PacketEncoder(*event_size, packet_period_ns=round(packet_ms * 1e6),
                                epoch_ns=DRIVE_START_NS, frame_id="event_camera")
    bag = BagWriter(path, storage=storage, compress=compress and storage == "mcap")
    chunks = record(drive.seed, duration_s, event_size=event_size, rgb_size=rgb_size,
                    rgb_hz=rgb_hz, drive=drive)
    bar = tqdm(total=math.ceil(duration_s), unit="s", desc=f"sample bag seed {drive.seed}",
               file=sys.stderr, disable=not progress)
    with bag, bar:
        for chunk in chunks:
            packets = encoder.encode(chunk.events)
            # one time-ordered stream per second: packets, frames, then the window's caption
            messages = [(p.stamp_ns, 0, p) for p in packets]
            messages += [(t, 1, rgb) for t, rgb in chunk.frames]
            for stamp, kind, item in sorted(messages, key=lambda m: (m[0], m[1])):
                if kind == 0:
                    bag.write_event_packet(EVENT_TOPIC, item)
                else:
                    bag.write_rgb(RGB_TOPIC, stamp, item, frame_id="camera")
            bag.write(GROUND_TRUTH_TOPIC, CAPTION_TYPE,
                      ground_truth_caption(bag.store, chunk.t0, chunk.t1, chunk.caption_verifier),
                      chunk.t1)
            counts["events"] += len(chunk.events)
            counts["event_packets"] += len(packets)
            counts["frames"] += len(chunk.frames)
            counts["captions"] += 1
            bar.update(1)
    return counts
