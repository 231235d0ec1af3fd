"""`crossspec bench decode`: decode speed of every encoding crossspec reads, and the evt3
library alone.

Synthetic events (uniform over a 640x480 sensor, DSEC's peak rate by default) are encoded
once into packets of each encoding (evt3, evt2, evt21, libcaer_cmp); then each path decodes
all packets several times and the median speed is reported. crossspec's path is the full one
a node runs: packet checks, the decoder, bounds check, time mapping, EventBatch. EVT3 is also
timed on uint8 arrays (what rosbags deserializes, one extra copy per packet). Uniform random
events are the worst case for libcaer_cmp (almost every event needs its own time and x
words; a real sensor's column readout shares them and uses vector words) and for evt21
(one 64-bit word per event, where a sensor's row readout fills a word's 32 valid bits).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import evt3
import numpy as np

from crossspec_ros.bench.outputs import save_outputs
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.decode import EventPacketDecoder
from crossspec_ros.events.evt2 import encode_evt2
from crossspec_ros.events.evt21 import encode_evt21
from crossspec_ros.events.libcaer_cmp import encode_libcaer_cmp
from crossspec_ros.events.packet import EVT2, EVT21, LIBCAER_CMP, EventPacketData

TARGET_MEV_S = 20.0
WIDTH, HEIGHT = 640, 480
ROS_T0_NS = 1_700_000_000_000_000_000


def synthetic_batch(n: int, rate_ev_s: float, seed: int = 0) -> EventBatch:
    """n events at about rate_ev_s, uniform over the sensor, on a ROS-like clock."""
    rng = np.random.default_rng(seed)
    duration_us = max(int(n / rate_ev_s * 1e6), 1)
    t = ROS_T0_NS + np.sort(rng.integers(0, duration_us, n)) * 1000
    return EventBatch(t, rng.integers(0, WIDTH, n), rng.integers(0, HEIGHT, n),
                      rng.integers(0, 2, n), WIDTH, HEIGHT)


def _time(fn: Callable[[], int], repeats: int) -> tuple[float, int]:
    """Median seconds of fn() over repeats, and the event count it returned."""
    times, count = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        count = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), count


def _evt3_only(packets: list[EventPacketData]) -> int:
    decoder = evt3.Decoder(sensor_width=WIDTH, sensor_height=HEIGHT)
    return sum(len(decoder.feed(p.events).x) for p in packets)


def _crossspec(packets: list[EventPacketData]) -> int:
    decoder = EventPacketDecoder()
    return sum(len(decoder.decode(p)) for p in packets)


def word_packets(batch: EventBatch, packet_ms: float, encoding: str) -> list[EventPacketData]:
    """``batch`` as evt2, evt21 or libcaer_cmp packets of ``packet_ms`` (stamped at their
    first event; libcaer_cmp's time base is that event's time)."""
    t_us = (batch.t - batch.t[0]) // 1000
    period_us = max(int(packet_ms * 1000), 1)
    edges = np.searchsorted(t_us, np.arange(0, int(t_us[-1]) + period_us + 1, period_us))
    packets, high = [], None
    for seq, (a, b) in enumerate(pairwise(edges)):
        if a == b:
            continue
        first_ns = int(batch.t[a])
        if encoding == EVT2:
            data, high = encode_evt2(t_us[a:b], batch.x[a:b], batch.y[a:b], batch.p[a:b], high)
        elif encoding == EVT21:
            data, high = encode_evt21(t_us[a:b], batch.x[a:b], batch.y[a:b], batch.p[a:b],
                                      high)
        else:
            data = encode_libcaer_cmp(t_us[a:b] - t_us[a], batch.x[a:b], batch.y[a:b],
                                      batch.p[a:b])
        packets.append(EventPacketData(first_ns, WIDTH, HEIGHT, seq, first_ns, encoding, data))
    return packets


def run_benchmark(n: int, packet_ms: float, repeats: int, rate_ev_s: float,
                  log: Callable[[str], None] = print) -> dict[str, Any]:
    # here, not at the top: faery (the encoder) is not on a GPU machine, where the bench
    # commands are registered too
    from crossspec_ros.events.encode import encode_evt3_packets

    batch = synthetic_batch(n, rate_ev_s)
    log(f"encoding {n:,} events into {packet_ms} ms packets (evt3, evt2, evt21, "
        "libcaer_cmp)...")
    packets = encode_evt3_packets(batch, int(packet_ms * 1e6))
    by_encoding = {"evt3": packets,
                   **{enc: word_packets(batch, packet_ms, enc)
                      for enc in (EVT2, EVT21, LIBCAER_CMP)}}
    as_arrays = [replace(p, events=np.frombuffer(p.events, np.uint8)) for p in packets]
    for encoding, encoded in by_encoding.items():
        checker = EventPacketDecoder()
        if not EventBatch.concat([checker.decode(p) for p in encoded]).equals(batch):
            raise RuntimeError(f"decode(encode(events)) differs from the events in "
                               f"{encoding}: benchmark invalid")
    results = {}
    for name, fn, data in [("evt3_library", _evt3_only, packets),
                           ("crossspec_bytes", _crossspec, packets),
                           ("crossspec_array", _crossspec, as_arrays),
                           ("crossspec_evt2", _crossspec, by_encoding[EVT2]),
                           ("crossspec_evt21", _crossspec, by_encoding[EVT21]),
                           ("crossspec_libcaer_cmp", _crossspec, by_encoding[LIBCAER_CMP])]:
        log(f"decoding with {name} ({repeats} repeats)...")
        seconds, count = _time(lambda f=fn, d=data: f(d), repeats)
        if count != n:
            raise RuntimeError(f"{name} decoded {count} events, expected {n}")
        results[name] = {"seconds": seconds, "mev_s": n / seconds / 1e6,
                         "bytes_per_event": sum(p.nbytes for p in data) / n}
    return {
        "events": n, "packets": len(packets), "packet_ms": packet_ms, "repeats": repeats,
        "rate_ev_s": rate_ev_s, "bytes": sum(p.nbytes for p in packets),
        "results": results, "target_mev_s": TARGET_MEV_S,
        "target_met": {k: r["mev_s"] >= TARGET_MEV_S for k, r in results.items()
                       if k.startswith("crossspec")},
    }


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["results"])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(names, [report["results"][k]["mev_s"] for k in names], color="tab:blue")
    ax.axhline(TARGET_MEV_S, color="tab:red", linestyle="--", label="target")
    ax.set_ylabel("M events/s (median)")
    ax.set_title(f"decode, {report['events']:,} events, {report['packet_ms']} ms packets")
    ax.tick_params(axis="x", labelrotation=20)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "decode", help="decode speed of evt3, evt2, evt21 and libcaer_cmp (and the evt3 "
        "library)",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
    )
    parser.add_argument("--events", type=int, default=5_000_000, help="events (default 5e6)")
    parser.add_argument("--packet-ms", type=float, default=1.0,
                        help="packet period in ms (default 1, metavision_driver's default)")
    parser.add_argument("--rate", type=float, default=15e6,
                        help="synthetic event rate, events/s (default 15e6, DSEC's peak)")
    parser.add_argument("--repeats", type=int, default=5, help="decode repeats (median)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the numbers as JSON")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write a bar chart")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.events < 1 or args.packet_ms <= 0 or args.repeats < 1 or args.rate <= 0:
        print("crossspec bench decode: error: --events, --packet-ms, --repeats and --rate "
              "must be positive", file=sys.stderr)
        return 2
    report = run_benchmark(args.events, args.packet_ms, args.repeats, args.rate,
                           log=lambda s: print(s, file=sys.stderr))
    print(f"{report['events']:,} events in {report['packets']:,} packets per encoding")
    for name, r in report["results"].items():
        met = report["target_met"].get(name)
        verdict = "" if met is None else ("  target met" if met else "  target NOT met")
        print(f"  {name:<22} {r['mev_s']:8.1f} M events/s  ({r['seconds'] * 1e3:.1f} ms, "
              f"{r['bytes_per_event']:.2f} bytes/event){verdict}")
    print(f"target: >= {TARGET_MEV_S:.0f} M events/s for each of crossspec's decode paths")
    save_outputs(report, args.json, args.plot, lambda path: _plot(report, path))
    return 0
