"""`crossspec bench streams`: several camera streams on one verifier and one device, sized as a
user sizes a server (issue 57).

N drives are replayed at once into one process: stream k sees the bag's windows rotated by
k·n/N and stamped onto the same grid, so every stream closes a window at the same moments
with another scene. Each stream runs the product's verifier loop (speculative/verifier_loop.py,
configured from the verifier node's parameters) on a worker thread of its own, every callback
on one executor thread (bench/live_replay.py), and the streams' device calls take turns,
earliest deadline first (models/device_turns.py). Two graphs, composed by
``composition.verifier_streams`` as a node would compose them:

    batched   one verifier whose streams decode in lanes of one laned runtime: the passes
              ready together run as one [S, B] step (models/lanes.py)
    separate  N verifiers on the one-stream runtime taking turns on the device: what a user
              builds today from N verifier nodes (here sharing one copy of the weights; on
              an emulated device the turns stand for N processes time-slicing one GPU, with
              no context-switch cost: optimistic for this baseline)

Per N and graph: every stream's confirmed caption after its window's close (median and p95
over all streams' windows after the warm-up), windows not FINAL, the device's busy share, and
whether every FINAL caption equals the greedy decoding of the window on that stream's own
runtime with no other stream active (the exactness contract of lanes.py). The graph is
text_only (comparison.py) by default: no drafter, so the question is the verifier's scaling.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from crossspec_ros import summaries
from crossspec_ros.bench.live_replay import (
    CLOSING_NS,
    SETTLE_S,
    TICK_S,
    ReplayedWindow,
    ReplayExecutor,
    record_captions,
    record_result,
    window_keys,
)
from crossspec_ros.composition import (
    VerifierStreams,
    verifier_loop,
    verifier_streams,
)
from crossspec_ros.models.device_turns import DeviceTurns
from crossspec_ros.models.emulated import emulation_of
from crossspec_ros.speculative.loop_clock import MONOTONIC
from crossspec_ros.speculative.worker import Worker
from crossspec_ros.stamps import ns_to_seconds, seconds_to_ns
from crossspec_ros.sync.captions import WindowKey
from crossspec_ros.sync.window import StampedFrame, Window

Message = tuple[int, int, Any]  # (stamp ns, stream, frame)


def shifted_window(window: Window, onto: Window) -> Window:
    """``window``'s frames and events stamped onto ``onto``'s place on the grid."""
    shift = onto.t0 - window.t0
    frames = [StampedFrame(f.stamp_ns + shift, f.image, f.encoding, f.frame_id)
              for f in window.frames]
    e = window.events
    events = replace(e, t=e.t + shift) if len(e) else e
    return replace(window, id=onto.id, t0=onto.t0, t1=onto.t1, events=events, frames=frames,
                   epoch=onto.epoch)


def _source(i: int, k: int, n: int, streams: int) -> int:
    """The bag window stream ``k`` replays in slot ``i`` (rotated by k·n/streams)."""
    return (i + k * n // streams) % n


def stream_windows(windows: Sequence[Window], streams: int) -> list[list[Window]]:
    """Each stream's windows: the bag's, rotated by k·n/streams for stream k, on the same
    grid (every stream closes a window at the same moments, each with another scene)."""
    n = len(windows)
    return [[shifted_window(windows[_source(i, k, n, streams)], onto)
             for i, onto in enumerate(windows)] for k in range(streams)]


def window_frames(path: str | Path, windows: Sequence[Window]) -> list[list[StampedFrame]]:
    """Every RGB frame the bag holds in each of ``windows`` (not only the ones a window
    selected: a camera sends them all, and the next one decides a window's last slot)."""
    from crossspec_ros.bags.inputs import read_inputs

    out: list[list[StampedFrame]] = [[] for _ in windows]
    starts = [w.t0 for w in windows]
    for item in read_inputs(path):
        if item.frame is None:
            continue
        i = bisect.bisect_right(starts, item.frame.stamp_ns) - 1
        if i >= 0 and item.frame.stamp_ns < windows[i].t1:
            out[i].append(item.frame)
    return out


RIGS = ("triggered", "free-running")


def stream_messages(windows: Sequence[Window], streams: int,
                    frames: Sequence[Sequence[StampedFrame]] | None = None,
                    rig: str = "triggered") -> list[Message]:
    """Every stream's frames in stamp order: in slot i stream k replays the frames of bag
    window ``_source(i, k, ...)`` (``frames``: every frame of each window, from
    ``window_frames``; None: only the frames each window selected), moved onto slot i, and
    one frame CLOSING_NS past the last window, so the last window closes by data. ``rig``
    "triggered": every stream's frames at slot i's own frame stamps (a surround rig's
    cameras fire together), each the source's frame nearest in the window; "free-running":
    stream k's frames k/streams of a frame interval later (the cameras' phases spread evenly:
    no two fire together)."""
    if rig not in RIGS:
        raise ValueError(f"rig {rig!r} is not one of {', '.join(RIGS)}")
    n = len(windows)
    frames = frames if frames is not None else [w.frames for w in windows]
    interval = frame_interval_ns(frames)
    out: list[Message] = []
    for k in range(streams):
        phase = 0 if rig == "triggered" else k * interval // streams
        for i, onto in enumerate(windows):
            source = _source(i, k, n, streams)
            shift = onto.t0 - windows[source].t0 + phase
            moved = [StampedFrame(f.stamp_ns + shift, f.image, f.encoding, f.frame_id)
                     for f in frames[source]]
            if rig == "triggered" and moved and frames[i]:
                moved = [_nearest(moved, f.stamp_ns) for f in frames[i]]
            out += [(f.stamp_ns, k, f) for f in moved]
        last = out[-1][2]
        after = windows[-1].t1 + CLOSING_NS
        out.append((after, k, StampedFrame(after, last.image, last.encoding, last.frame_id)))
    out.sort(key=lambda m: (m[0], m[1]))
    return out


def frame_interval_ns(frames: Sequence[Sequence[StampedFrame]]) -> int:
    """The median time between a window's consecutive frames (0 without two)."""
    gaps = [b.stamp_ns - a.stamp_ns for window in frames
            for a, b in itertools.pairwise(window)]
    return int(summaries.median(gaps)) if gaps else 0


def _nearest(frames: Sequence[StampedFrame], stamp_ns: int) -> StampedFrame:
    """The frame of ``frames`` nearest ``stamp_ns``, stamped ``stamp_ns``."""
    f = min(frames, key=lambda f: abs(f.stamp_ns - stamp_ns))
    return StampedFrame(stamp_ns, f.image, f.encoding, f.frame_id)


class StreamsReplay:
    """One replay of several streams' frames through ``streams``' loops (``p``: the verifier
    node's parameters). ``run()`` returns each stream's windows by key."""

    def __init__(self, streams: VerifierStreams, p: dict[str, Any],
                 log: Callable[[str], None] = print) -> None:
        self.streams, self.p, self.log = streams, p, log
        self.windows: list[dict[WindowKey, ReplayedWindow]] = [{} for _ in streams.engines]
        self.errors: list[str] = []
        self.loops: list[Any] = []

    def _on_error(self, k: int, error: str) -> None:
        self.errors.append(f"stream {k}: {error}")
        self.log(f"{self.streams.graph} stream {k}: {error}")

    def _loop(self, k: int, engine: Any) -> Any:
        p = self.p
        loop = verifier_loop(p, on_captions=partial(record_captions, self.windows[k]),
                             on_confirmed=lambda *_: None, clock=MONOTONIC,
                             lock=threading.Lock(), warn=self.log,
                             on_result=partial(record_result, self.windows[k]),
                             due=self.streams.due)
        loop.configure_from_params(p, engine)
        loop.start(p["max_queued_windows"])
        return loop

    def run(self, messages: Sequence[Message], expected: Sequence[set[WindowKey]]
            ) -> list[dict[WindowKey, ReplayedWindow]]:
        """Replay ``messages`` at their stamps and wait until every stream's book finished
        its ``expected`` windows (at most SETTLE_S after the last message)."""
        self.loops = [self._loop(k, e) for k, e in enumerate(self.streams.engines)]
        executor = ReplayExecutor([loop.tick for loop in self.loops])
        workers = [Worker.serving(f"stream{k}-verifier", loop, partial(self._on_error, k))
                   for k, loop in enumerate(self.loops)]
        for worker in workers:
            worker.start()
        try:
            t_first, start = messages[0][0], time.monotonic()
            for stamp, k, frame in messages:
                executor.run_until(start + ns_to_seconds(stamp - t_first))
                self.loops[k].add_frame(frame)
            deadline = time.monotonic() + SETTLE_S
            while not self._finished(expected) and time.monotonic() < deadline:
                executor.run_until(time.monotonic() + TICK_S)
        finally:
            for loop in self.loops:
                loop.stop_taking()
            for worker in workers:
                worker.stop()
        return self.windows

    def _finished(self, expected: Sequence[set[WindowKey]]) -> bool:
        return all(loop.book.is_finished(key) and (
            rows.get(key, ReplayedWindow(key)).status != "FINAL"
            or rows[key].tokens is not None)
            for loop, rows, keys in zip(self.loops, self.windows, expected, strict=True)
            for key in keys)

    def per_stream_counters(self) -> list[dict[str, Any]]:
        """Each stream's loop counters that say what it lost (dropped, live_dropped...)."""
        wanted = ("dropped_windows", "windows_shed", "live_dropped", "early_dropped",
                  "windows_verified")
        return [{k: v for k, v in loop.diagnostics.items() if k in wanted}
                for loop in self.loops]


TARGET_MEDIAN_MS = 100.0  # issue 57's targets: every stream's confirmed caption after its close
TARGET_P95_MS = 250.0


class References:
    """Each stream's reference captions: the greedy decoding of a window on the stream's own
    runtime with no other stream active (cached by stream, runtime and frames: rounds repeat
    them; the streams' frames share stamps, not content)."""

    def __init__(self, max_new_tokens: int) -> None:
        self.max_new_tokens = max_new_tokens
        self._made: dict[tuple[int, int, tuple[int, ...]], list[int]] = {}

    def of(self, stream: int, model: Any, row: ReplayedWindow) -> list[int]:
        key = (stream, id(model.runtime), row.frame_stamps)
        if key not in self._made:
            emulated = emulation_of(model)  # not a timed run: nothing to charge
            with emulated.paused() if emulated is not None else contextlib.nullcontext():
                self._made[key] = model.generate_greedy(model.prepare(row.window),
                                                        self.max_new_tokens)
        return self._made[key]


def stream_run_report(streams: VerifierStreams, outcomes: list[list[dict]],
                      keys: list[list[WindowKey]], references: References, *,
                      warmup: int) -> dict[str, Any]:
    """One graph at one N over its rounds (``outcomes[round][stream]``: key -> row): latency
    after the close over every stream's windows past ``warmup``, windows not FINAL, and each
    FINAL caption against its stream's reference."""
    latencies: list[float] = []
    per_stream, checked, equal = [], 0, 0
    for k, stream_keys in enumerate(keys):
        mine, not_final = [], 0
        for out in outcomes:
            for key in stream_keys[warmup:]:
                row = out[k].get(key, ReplayedWindow(key))
                if row.status != "FINAL" or row.tokens is None:
                    not_final += 1
                    continue
                mine.append(row.confirmed_done_ms)
                checked += 1
                equal += row.tokens == references.of(k, streams.models[k], row)
        latencies += mine
        per_stream.append({"stream": k, "final": len(mine), "not_final": not_final,
                           "confirmed_ms_median": summaries.median_ms(mine),
                           "confirmed_ms_p95": summaries.percentile_ms(mine, 95)})
    return {"confirmed_ms_median": summaries.median_ms(latencies),
            "confirmed_ms_p95": summaries.percentile_ms(latencies, 95),
            "dropped": sum(s["not_final"] for s in per_stream),
            "lossless": checked > 0 and equal == checked, "lossless_checked": checked,
            "lossless_equal": equal, "per_stream": per_stream}


def holds_target(run: dict[str, Any]) -> bool:
    """The issue's target for one run: median and p95 within bounds, 0 dropped, lossless."""
    med, p95 = run["confirmed_ms_median"], run["confirmed_ms_p95"]
    return (med is not None and p95 is not None and med <= TARGET_MEDIAN_MS
            and p95 <= TARGET_P95_MS and run["dropped"] == 0 and run["lossless"])


class DeviceClock:
    """The device's busy time and the emulation's overruns, read before and after a run."""

    def __init__(self, turns: DeviceTurns, emulated: Any) -> None:
        self.turns, self.emulated = turns, emulated

    def read(self) -> tuple[float, float, int, dict[str, float], dict[str, float]]:
        e, turns = self.emulated, self.turns.report()
        if e is None:
            return time.monotonic(), self.turns.busy_s, 0, {}, turns
        return time.monotonic(), sum(e.emulated_ms.values()) / 1e3, e.calls_over_budget, \
            dict(e.emulated_ms), turns

    def since(self, before: tuple) -> dict[str, Any]:
        now = self.read()
        wall, busy = now[0] - before[0], now[1] - before[1]
        out: dict[str, Any] = {"wall_s": round(wall, 1),
                               "device_busy_share": round(busy / wall, 3) if wall > 0 else None,
                               "turns": now[4]["turns"] - before[4]["turns"],
                               "turns_that_waited": now[4]["waited_turns"]
                               - before[4]["waited_turns"]}
        if self.emulated is not None:
            out["emulated"] = {"profile": self.emulated.profile.name,
                               "over_budget": now[2] - before[2]}
            out["device_ms_by_kind"] = {k: round(v - before[3].get(k, 0.0), 1)
                                        for k, v in now[3].items() if v > before[3].get(k, 0.0)}
        else:
            out["emulated"] = None
        return out


def counters_since(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What the shared lanes' counters (``VerifierStreams.counters``: numbers and tables of
    numbers) counted between two readings: a round's steps, not the warm-up's or the
    references'."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        if isinstance(value, dict):
            was = before.get(key, {})
            out[key] = {k: v - was.get(k, 0) for k, v in value.items() if v != was.get(k, 0)}
        elif isinstance(value, (int, float)):
            out[key] = round(value - before.get(key, 0), 1)
    return out


def summed_counters(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The rounds' counters (``counters_since``) added up."""
    total: dict[str, Any] = {}
    for counted in rounds:
        for key, value in counted.items():
            if isinstance(value, dict):
                table = total.setdefault(key, {})
                for k, v in value.items():
                    table[k] = table.get(k, 0) + v
            else:
                total[key] = round(total.get(key, 0) + value, 1)
    return {k: dict(sorted(v.items())) if isinstance(v, dict) else v for k, v in total.items()}


def run_streams_bench(verifier: Any, windows: Sequence[Window], p: dict[str, Any], *,
                      counts: Sequence[int], graphs: Sequence[str], rounds: int, warmup: int,
                      frames: Sequence[Sequence[StampedFrame]] | None = None,
                      rig: str = "triggered", emulated: Any = None,
                      log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every graph at every stream count, ``rounds`` times (every other round in reverse
    order, so a drifting load favours no graph; ``frames``: every frame of each window, as
    ``window_frames`` reads them; ``rig``: ``stream_messages``); returns the report
    (``runs``)."""
    turns = DeviceTurns()
    turns.install(verifier)  # after the emulation (load_pair): the turn wraps it
    clock, references = DeviceClock(turns, emulated), References(p["max_new_tokens"])
    window_ns = seconds_to_ns(p["window_length_s"])
    runs = []
    for n in counts:
        per_stream = stream_windows(windows, n)
        messages = stream_messages(windows, n, frames, rig)
        keys = [list(window_keys(ws, window_ns)) for ws in per_stream]
        built = {g: verifier_streams(p, verifier, n, graph=g,
                                     where=f"bench streams {g} x{n}", say=log) for g in graphs}
        outcomes: dict[str, list] = {g: [] for g in graphs}
        device: dict[str, list] = {g: [] for g in graphs}
        for r in range(rounds):
            for g in (graphs if r % 2 == 0 else graphs[::-1]):
                before, counted = clock.read(), built[g].counters()
                replay = StreamsReplay(built[g], p, log)
                outcomes[g].append(replay.run(messages, [set(k) for k in keys]))
                device[g].append({**clock.since(before),
                                  "per_stream": replay.per_stream_counters(),
                                  "counters": counters_since(counted, built[g].counters()),
                                  "errors": replay.errors[:5]})
                final = sum(row.status == "FINAL" for out in outcomes[g][-1]
                            for row in out.values())
                log(f"streams {n}, {g}, round {r + 1}/{rounds}: {final}/{n * len(windows)} "
                    f"windows FINAL ({device[g][-1]['wall_s']:.0f} s)")
        log(f"streams {n}: every FINAL caption against its stream's own greedy decoding")
        for g in graphs:
            run = {"streams": n, "graph": g,
                   **stream_run_report(built[g], outcomes[g], keys, references,
                                       warmup=warmup),
                   "rounds": device[g],
                   **summed_counters([d["counters"] for d in device[g]])}
            run["emulated"] = device[g][0]["emulated"]
            if run["emulated"] is not None:
                run["emulated"] = {**run["emulated"], "over_budget": sum(
                    d["emulated"]["over_budget"] for d in device[g])}
            run["device_busy_share"] = summaries.median(
                d["device_busy_share"] for d in device[g])
            run["holds_target"] = holds_target(run)
            runs.append(run)
    return {"runs": runs, "most_streams_holding_target": {
        g: max((r["streams"] for r in runs if r["graph"] == g and r["holds_target"]),
               default=0) for g in graphs}}
