"""`crossspec bench fuzz`: random and corrupted packets of each encoding through the decode
path; counts crashes (must be 0) and what the counters caught.

Per packet one of: random bytes, a valid packet truncated, a valid packet with bit flips,
a wrong or mangled encoding name, a bad sensor size, is_bigendian, random bytes as a uint8
array (the rosbags payload type), or a valid packet. Four decoders share the stream, so
state carried across packets meets every kind of damage (evt21's valid packets are in the
GenX320's byte order, so its decoder settles on it and then reads the damage that way).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

ENCODINGS = ("evt3", "evt2", "evt21", "libcaer_cmp")
WRONG_NAMES = ["mono", "EVT3", " evt2", "", "evt3\x00", "trigger", "libcaer", "LIBCAER_CMP"]
SIZES = [(0, 0), (1, 1), (7, 3), (4096, 10), (1280, 720), (2048, 2048), (10**6, 1)]
ROS_T0 = 1_700_000_000_000_000_000
COUNTERS = ("unsupported_encoding", "big_endian", "invalid_size", "empty_packets",
            "odd_length", "out_of_bounds_events", "size_changes", "size_mismatch",
            "unknown_words")


def valid_packets(encoding: str, seed: int = 0, n: int = 20_000) -> list[bytes]:
    """Payloads of real packets of ``encoding`` (640x480, 40 s of events, 200 ms packets)."""
    import numpy as np

    from crossspec_ros.events.batch import EventBatch
    from crossspec_ros.events.encode import encode_evt3_packets
    from crossspec_ros.events.evt2 import encode_evt2
    from crossspec_ros.events.evt21 import encode_evt21
    from crossspec_ros.events.libcaer_cmp import encode_libcaer_cmp

    rng = np.random.default_rng(seed)
    t_us = np.sort(rng.integers(0, 40_000_000, n))  # 40 s: EVT3's 16.8 s wrap included
    x, y, p = rng.integers(0, 640, n), rng.integers(0, 480, n), rng.integers(0, 2, n)
    if encoding == "evt3":
        batch = EventBatch(ROS_T0 + t_us * 1000, x, y, p, 640, 480)
        return [packet.events for packet in encode_evt3_packets(batch, 200_000_000)]
    edges = np.searchsorted(t_us, np.arange(0, 40_000_001, 200_000))
    payloads, high = [], None
    for a, b in pairwise(edges):
        if encoding == "evt2":
            data, high = encode_evt2(t_us[a:b], x[a:b], y[a:b], p[a:b], high)
        elif encoding == "evt21":
            data, high = encode_evt21(t_us[a:b], x[a:b], y[a:b], p[a:b], high)
        else:
            data = encode_libcaer_cmp(t_us[a:b] - (t_us[a] if b > a else 0), x[a:b], y[a:b],
                                      p[a:b])
        if data:
            payloads.append(data)
    return payloads


def fuzz_decode(encoding: str, n_packets: int, seed: int = 1234) -> dict[str, Any]:
    """Decode ``n_packets`` damaged packets of ``encoding``; the report counts crashes
    (exceptions out of ``decode``), bad batches (events outside the sensor, wrong types)
    and each problem counter of the decoders."""
    import numpy as np

    from crossspec_ros.events.decode import EventPacketDecoder

    rng = np.random.default_rng(seed)
    pool = valid_packets(encoding, seed)
    noise = rng.integers(0, 256, 1 << 22, dtype=np.uint8).tobytes()
    kind = rng.integers(0, 8, n_packets)
    pick = rng.integers(0, len(pool), n_packets)
    length = rng.integers(0, 96, n_packets)
    start = rng.integers(0, len(noise) - 96, n_packets)
    stamps = ROS_T0 + rng.integers(-(10**11), 10**11, n_packets)
    decoders = [EventPacketDecoder(name=f"fuzz{i}", count_triggers=i == 0) for i in range(4)]
    events_log = logging.getLogger("crossspec_ros.events")
    level = events_log.level
    events_log.setLevel(logging.ERROR)  # the expected warnings, for this run only
    try:
        crashes, bad_batches, emitted = _fuzz_loop(decoders, encoding, pool, noise, rng, kind,
                                                   pick, length, start, stamps)
    finally:
        events_log.setLevel(level)
    counters = {name: sum(getattr(d.stats, name) for d in decoders) for name in COUNTERS}
    return {"encoding": encoding, "packets": n_packets, "crashes": crashes,
            "bad_batches": bad_batches, "events": emitted,
            "decoded_packets": sum(d.stats.packets for d in decoders), "counters": counters}


def _fuzz_loop(decoders: list, encoding: str, pool: list, noise: bytes, rng: Any, kind: Any,
               pick: Any, length: Any, start: Any, stamps: Any) -> tuple[int, int, int]:
    import numpy as np

    from crossspec_ros.events.packet import EventPacketData

    crashes, bad_batches, emitted = 0, 0, 0
    for i in range(len(kind)):
        k, valid = int(kind[i]), pool[pick[i]]
        w, h, enc, events, bigendian = 640, 480, encoding, valid, False
        if k == 0:  # random bytes
            events = noise[start[i]:start[i] + length[i]]
        elif k == 1:  # truncated valid packet
            events = valid[: int(length[i]) % (len(valid) + 1)]
        elif k == 2:  # bit flips in a valid packet
            arr = np.frombuffer(valid, np.uint8).copy()
            arr[rng.integers(0, len(arr), 3)] ^= np.uint8(1 << int(length[i] % 8))
            events = arr
        elif k == 3:
            enc = WRONG_NAMES[i % len(WRONG_NAMES)]
        elif k == 4:
            w, h = SIZES[i % len(SIZES)]
        elif k == 5:
            bigendian = True
        elif k == 6:  # random bytes as a uint8 array
            events = np.frombuffer(noise, np.uint8, count=int(length[i]), offset=start[i])
        packet = EventPacketData(int(stamps[i]), w, h, i, int(stamps[i]), enc, events,
                                 is_bigendian=bigendian)
        try:
            out = decoders[i % 4].decode(packet)
        except Exception:  # the point of fuzzing: decode must never raise
            crashes += 1
            continue
        if len(out):
            emitted += len(out)
            if int(out.x.max()) >= out.width or int(out.y.max()) >= out.height or \
                    out.t.dtype != np.int64 or int(out.p.max()) > 1:
                bad_batches += 1
    return crashes, bad_batches, emitted


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fuzz", help="damaged packets of each encoding through the decode path (0 crashes)",
        description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("--packets", type=int, default=1_000_000,
                        help="packets per encoding (default 1,000,000)")
    parser.add_argument("--encodings", nargs="+", choices=ENCODINGS, default=list(ENCODINGS))
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the reports as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.packets < 1:
        print("crossspec bench fuzz: error: --packets must be positive", file=sys.stderr)
        return 2
    reports, failed = [], False
    for encoding in args.encodings:
        print(f"{encoding}: fuzzing {args.packets:,} packets...", file=sys.stderr)
        t0 = time.perf_counter()
        report = fuzz_decode(encoding, args.packets, args.seed)
        report["seconds"] = round(time.perf_counter() - t0, 1)
        reports.append(report)
        failed |= report["crashes"] > 0 or report["bad_batches"] > 0
        caught = ", ".join(f"{k} {v:,}" for k, v in report["counters"].items() if v)
        print(f"  {encoding:<12} {report['packets']:,} packets in {report['seconds']} s: "
              f"{report['crashes']} crashes, {report['bad_batches']} bad batches, "
              f"{report['events']:,} events; caught: {caught}")
    if args.json:
        args.json.write_text(json.dumps(reports, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 1 if failed else 0
