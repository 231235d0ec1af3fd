"""Summary of the event topics of a bag (what ``crossspec events BAG`` prints).

Per event topic: message type, packets (messages), encoding(s), sensor size, CD events by
polarity, external triggers by value, first/last event time (ROS clock, us), mean event rate
and the decoder's problem counters. Triggers: the evt3 streaming decoder returns CD events
only, so triggers are counted from the EVT3 words themselves (events/triggers.py); for topics
without any decodable EVT3 packet (``libcaer_cmp``, ``mono``...) they cannot be decoded and
are reported as null. EventArray topics (dvs_msgs, prophesee_event_msgs) have no encoding (one
message field per event: reported as "") and no triggers (null).

A packet far from its topic's time goes through the outlier gate of ``sync/outliers.py``, as
in the nodes: alone (a damaged time word, a bad stamp) its events are left out of the counts,
the first/last times and the rate, and counted in ``outlier_events``; a jump confirmed by the
next packet (a bag of two recordings, a camera reset) is counted as data.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from crossspec_ros.events.bag import EventBagReader, EventDecoder, event_decoder
from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.event_array import EVENT_ARRAY_TYPES, EventArrayData
from crossspec_ros.sync.outliers import DEFAULT_THRESHOLD_NS, TimeOutlierGate

# Decoder counters that mean a problem (shown in the table when non-zero).
PROBLEMS = ("empty_packets", "unsupported_encoding", "big_endian", "invalid_size",
            "size_changes", "size_mismatch", "odd_length", "decoder_errors", "out_of_bounds_events",
            "clock_resets", "unknown_words", "untimed_events", "unsupported_words",
            "missing_packets")


@dataclass
class _TopicTally:
    msgtype: str
    decoder: EventDecoder
    packets: int = 0
    encodings: Counter = field(default_factory=Counter)
    width: int = 0
    height: int = 0
    p0: int = 0
    p1: int = 0
    t_first_ns: int | None = None
    t_last_ns: int | None = None
    outlier_events: int = 0
    gate: TimeOutlierGate[EventBatch] = field(
        default_factory=lambda: TimeOutlierGate(DEFAULT_THRESHOLD_NS))
    recent_ns: int | None = None  # the latest time of the packets counted
    tallied: int = 0              # packets with events counted

    def add(self, packet: Any) -> None:
        self.packets += 1
        if not isinstance(packet, EventArrayData):
            self.encodings[packet.encoding] += 1
        self.width, self.height = packet.width, packet.height
        batch = self.decoder.decode(packet)
        if len(batch):
            self._take(self.gate.offer(batch, int(batch.t_first), int(batch.t_last),
                                       self.recent_ns))

    def finish(self) -> None:
        """End of the topic: what the decoder or the gate still held is decided."""
        self.decoder.finish()
        self._take(self.gate.settle(self.recent_ns))

    def _take(self, verdict: Any) -> None:
        self.outlier_events += sum(len(b) for b in verdict.dropped)
        if verdict.jump and self.tallied == 1:
            # the one packet counted so far was the outlier: what follows agrees elsewhere
            self.outlier_events += self.p0 + self.p1
            self.p0 = self.p1 = self.tallied = 0
            self.t_first_ns = self.t_last_ns = None
        for batch in verdict.passed:
            self._tally(batch)

    def _tally(self, batch: EventBatch) -> None:
        self.tallied += 1
        self.recent_ns = int(batch.t_last)
        ones = int(np.count_nonzero(batch.p))
        self.p1 += ones
        self.p0 += len(batch) - ones
        t0, t1 = int(batch.t.min()), int(batch.t.max())
        self.t_first_ns = t0 if self.t_first_ns is None else min(self.t_first_ns, t0)
        self.t_last_ns = t1 if self.t_last_ns is None else max(self.t_last_ns, t1)

    def result(self) -> dict[str, Any]:
        stats = self.decoder.stats
        accepted = stats.packets - stats.unsupported_encoding - stats.big_endian - \
            stats.invalid_size
        has_triggers = accepted > 0 and self.msgtype not in EVENT_ARRAY_TYPES
        events = self.p0 + self.p1
        first_us = None if self.t_first_ns is None else self.t_first_ns // 1000
        last_us = None if self.t_last_ns is None else self.t_last_ns // 1000
        span_s = None if first_us is None else (last_us - first_us) / 1e6
        return {
            "type": self.msgtype,
            "packets": self.packets,
            "encoding": ",".join(e for e, _ in self.encodings.most_common()),
            "encodings": dict(self.encodings),
            "width": self.width,
            "height": self.height,
            "cd_events": {"p0": self.p0, "p1": self.p1},
            "triggers": ({"p0": stats.triggers_p0, "p1": stats.triggers_p1}
                         if has_triggers else None),
            "t_first_us": first_us,
            "t_last_us": last_us,
            "duration_s": span_s,
            "rate_ev_s": events / span_s if span_s else None,
            "bad": {**{k: getattr(stats, k) for k in PROBLEMS},
                    "outlier_events": self.outlier_events},
        }


def events_report(path: str | Path, topic: str | None = None,
                  progress: bool | None = None) -> dict[str, Any]:
    """``{"topics": {topic: {...}}}`` for the bag's event topics (or only ``topic``).

    progress: show a tqdm bar on stderr (default: only when stderr is a terminal).
    Raises EventBagError (with a message saying what to do) for unusable bags.
    """
    if progress is None:
        progress = sys.stderr.isatty()
    with EventBagReader(path, [topic] if topic else None) as reader:
        tallies = {t: _TopicTally(reader.msgtypes[t],
                                  event_decoder(reader.msgtypes[t], t, count_triggers=True))
                   for t in reader.topics}
        total = sum(reader.message_counts().values())
        with tqdm(total=total, unit="packet", file=sys.stderr, disable=not progress,
                  desc="reading events") as bar:
            for name, _, packet in reader.packets():
                tallies[name].add(packet)
                bar.update()
        for tally in tallies.values():
            tally.finish()
        topics = {name: tally.result() for name, tally in tallies.items()}
        for name, result in topics.items():
            result["bad"]["undecodable_messages"] = reader.bad_messages[name]
    return {"topics": topics}


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def format_report(report: dict[str, Any]) -> str:
    """A readable table (one row per topic) plus a line per topic with problems."""
    header = ["topic", "type", "packets", "encoding", "size", "CD p0", "CD p1", "trig p0/p1",
              "first (us)", "last (us)", "rate (ev/s)"]
    rows = [header]
    notes = []
    for name, r in report["topics"].items():
        trig = r["triggers"]
        rows.append([
            name, r["type"].replace("/msg/", "/"), _fmt(r["packets"]), r["encoding"] or "-",
            f"{r['width']}x{r['height']}",
            _fmt(r["cd_events"]["p0"]), _fmt(r["cd_events"]["p1"]),
            "-" if trig is None else f"{trig['p0']}/{trig['p1']}",
            _fmt(r["t_first_us"]), _fmt(r["t_last_us"]), _fmt(r["rate_ev_s"]),
        ])
        bad = {k: v for k, v in r["bad"].items() if v}
        if bad:
            notes.append(f"{name}: " + ", ".join(f"{k}={v}" for k, v in bad.items()))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i in (0, 1, 3, 4) else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if notes:
        lines += ["", "problems (see the decoder warnings above):", *notes]
    if any(r["triggers"] is None and r["type"] not in EVENT_ARRAY_TYPES
           for r in report["topics"].values()):
        lines.append("trig '-': no decodable EVT3 packet, triggers cannot be counted")
    return "\n".join(lines)
