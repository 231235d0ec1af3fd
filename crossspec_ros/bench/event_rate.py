"""`crossspec bench event-rate`: the event rates the draft node keeps up with, live.

A live camera's driver publishes an EventPacket every millisecond or so (metavision_driver's
and libcaer_driver's ``event_message_time_threshold`` default to 1 ms); the draft node decodes
each one in its subscription callback, windows the events and drafts each closed window on its
worker thread. For each rate a camera process (standing in for the driver, which is a process
of its own) publishes synthetic evt3 packets (uniform over a 640x480 sensor, 1 ms each) in real
time over DDS on loopback to the real draft node with the real drafter, and this reads what the
node reports: windows drafted and dropped, late events, the first draft token after each
window's close, and the CPU the draft node's process used. A rate is kept up with when the
packets went out on time and all of them reached the node, no window was dropped and the first
draft token's p95 stayed within the target (100 ms).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from crossspec_ros import summaries
from crossspec_ros.bench.outputs import save_outputs
from crossspec_ros.stamps import ns_to_seconds

TARGET_FIRST_TOKEN_MS = 100.0  # the draft node's promise: a draft within tens of ms


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "event-rate", help="the event rates the draft node keeps up with, live (packets over "
        "DDS into the real draft node and drafter)",
        description=__doc__.splitlines()[0].split(": ", 1)[1])
    parser.add_argument("--rates", type=float, nargs="+", default=[0.5, 1, 2, 5, 10, 20],
                        metavar="MEV_S", help="event rates in millions of events/s "
                        "(default 0.5 1 2 5 10 20)")
    parser.add_argument("--seconds", type=float, default=4.0,
                        help="seconds of events per rate (default 4: three closed windows)")
    parser.add_argument("--drafter-model", type=Path, default=None,
                        help="drafter directory (default: the nodes' default drafter)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the numbers as JSON")
    parser.add_argument("--plot", type=Path, metavar="PNG",
                        help="plot first-token latency and CPU against the event rate")
    parser.set_defaults(func=run)


def packets_at(rate_ev_s: float, seconds: float, seed: int = 0) -> list[Any]:
    """``seconds`` of uniform random events at ``rate_ev_s`` as evt3 EventPacketData, 1 ms
    each, stamped with their first event's time."""
    from crossspec_ros.bench.decode import synthetic_batch
    from crossspec_ros.events.encode import Evt3PacketEncoder

    batch = synthetic_batch(max(int(rate_ev_s * seconds), 1), rate_ev_s, seed)
    return Evt3PacketEncoder(batch.width, batch.height).encode(batch)


def _to_msg(packet: Any) -> Any:
    from event_camera_msgs.msg import EventPacket
    from std_msgs.msg import Header

    from crossspec_ros.nodes.common import ns_to_msg

    return EventPacket(header=Header(stamp=ns_to_msg(packet.stamp_ns), frame_id="camera"),
                       height=packet.height, width=packet.width, seq=packet.seq,
                       time_base=packet.time_base, encoding=packet.encoding,
                       is_bigendian=False, events=packet.events_bytes())


def publish_packets(rate_ev_s: float, seconds: float, topic: str, depth: int,
                    results: Any) -> None:
    """The camera driver's side, in a process of its own (a driver is one): build the
    packets, wait for the draft node's subscription, publish them on their own schedule; put
    (seconds it took, packets sent late and by how much in ms) on ``results``."""
    import rclpy
    from event_camera_msgs.msg import EventPacket

    from crossspec_ros.nodes.common import sensor_qos

    packets = packets_at(rate_ev_s, seconds)
    messages = [_to_msg(p) for p in packets]
    rclpy.init()
    try:
        node = rclpy.create_node("crossspec_bench_camera")
        publisher = node.create_publisher(EventPacket, topic, sensor_qos(depth))
        deadline = time.monotonic() + 30
        while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # matched on this side: give the reader's side time to match too
        late_ms = []
        results.put("start")
        start = time.monotonic()
        for packet, msg in zip(packets, messages, strict=True):
            ahead = start + ns_to_seconds(packet.stamp_ns - packets[0].stamp_ns) - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            else:
                late_ms.append(-ahead * 1e3)
            publisher.publish(msg)
        sent_s = time.monotonic() - start
        time.sleep(0.5)  # the last samples are still on their way: a writer gone loses them
        results.put((sent_s, late_ms, len(messages)))
        node.destroy_node()
    finally:
        rclpy.shutdown()


def measure_rate(rate_ev_s: float, seconds: float, drafter: Any, drafter_model: Path | None,
                 log: Any = print) -> tuple[dict[str, Any], Any]:
    """One rate: a camera process publishes the packets in real time to a fresh draft node
    in this process; (the rate's row, the drafter, loaded once and handed to the next
    rate)."""
    import rclpy

    from crossspec_ros.nodes.graph import create_nodes, make_executor, spin_in_thread
    from crossspec_ros.nodes.isolation import private_namespace, run_ros_args

    events = int(rate_ev_s * seconds)
    # a namespace of its own: another graph on this domain neither feeds nor hears it
    rclpy.init(args=run_ros_args(private_namespace("event_rate")))
    executor = make_executor()
    nodes: list = []
    stop_spinning = None
    camera = None
    first_token: dict[int, float] = {}
    try:
        extra = {"drafter_model": str(drafter_model)} if drafter_model else {}
        nodes = create_nodes(("draft",), extra={"draft": extra}, models=(None, drafter))
        draft = nodes[0]
        drafter = draft.drafter
        nodes.append(_first_token_listener(draft.params["draft_topic"], first_token))
        for node in nodes:
            executor.add_node(node)
        stop_spinning = spin_in_thread(executor)
        camera, results = _camera_process(rate_ev_s, seconds, draft)
        camera.start()
        if results.get(timeout=seconds * 20 + 120) != "start":  # its packets are built
            raise RuntimeError("the camera process did not start publishing")
        cpu0, wall0 = time.process_time(), time.monotonic()
        sent_s, late_ms, packets = results.get(timeout=seconds * 5 + 60)
        # the draft node's CPU while the events stream in (decoding, windowing, drafting)
        cpu_s, wall_s = time.process_time() - cpu0, time.monotonic() - wall0
        camera.join(timeout=30)
        # the last window closes max_lateness_s after its end; wait for its draft too
        time.sleep(draft.params["max_lateness_s"] + draft.params["window_length_s"] + 1.5)
        row = _rate_row(rate_ev_s, events, packets, sent_s, late_ms, cpu_s / wall_s, draft,
                        list(first_token.values()), log)
        return row, drafter
    finally:
        if camera is not None and camera.is_alive():
            camera.kill()
        if stop_spinning is not None:
            stop_spinning()
        executor.shutdown(timeout_sec=2.0)
        for node in nodes:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


def _first_token_listener(draft_topic: str, first_token: dict[int, float]) -> Any:
    """A node noting each window's first draft token latency (its first DraftTokens with
    tokens) into ``first_token``, by window."""
    import rclpy
    from crossspec import msg as cs_msg

    listener = rclpy.create_node("crossspec_bench_event_rate")

    def on_draft(msg: Any) -> None:
        if msg.window_id not in first_token and msg.token_ids:
            first_token[msg.window_id] = float(msg.first_token_latency_ms)

    listener.create_subscription(cs_msg.DraftTokens, draft_topic, on_draft, 100)
    return listener


def _camera_process(rate_ev_s: float, seconds: float, draft: Any) -> tuple[Any, Any]:
    """(the camera process, not started yet, publishing to the ``draft`` node's event topic
    by its full name; the queue it reports on)."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    camera = spawn.Process(target=publish_packets, daemon=True, args=(
        rate_ev_s, seconds, draft.resolve_topic_name(draft.params["event_topic"]),
        draft.params["event_qos_depth"], results))
    return camera, results


def _rate_row(rate_ev_s: float, events: int, packets: int, sent_s: float,
              late_ms: list[float], cpu_cores: float, draft: Any, latencies: list[float],
              log: Any) -> dict[str, Any]:
    """One rate's row from what the camera sent and the draft node counted (its stats read
    now), ``keeps_up`` included, logged in one line."""
    sync, decoder = draft.loop.sync.stats, draft.decoder.stats
    row = {
        "rate_mev_s": rate_ev_s / 1e6, "events": events, "packets": packets,
        # what reached the node (sensor-data QoS is best effort: a slow reader loses
        # packets, which the node cannot count)
        "events_received": decoder.events, "packets_received": decoder.packets,
        "sent_rate_mev_s": round(events / sent_s / 1e6, 2),
        "packets_late": len(late_ms),
        "packets_late_ms_p95": summaries.rounded(summaries.percentile(late_ms, 95), 1)
        if late_ms else 0.0,
        "draft_node_cpu_cores": round(cpu_cores, 2),
        "windows_with_a_draft": len(latencies),
        "dropped_windows": draft.loop.queue.dropped + sync.dropped_windows,
        "late_events": sync.late_events, "bad_packets": decoder.bad_packets,
        "missing_packets": decoder.missing_packets,
        "first_token_ms_p50": summaries.rounded(statistics.median(latencies), 1)
        if latencies else None,
        "first_token_ms_p95": summaries.rounded(summaries.percentile(latencies, 95), 1)
        if latencies else None}
    row["keeps_up"] = bool(
        latencies and row["dropped_windows"] == 0 and decoder.packets == packets
        and row["sent_rate_mev_s"] >= 0.95 * row["rate_mev_s"]
        and row["first_token_ms_p95"] <= TARGET_FIRST_TOKEN_MS)
    log(f"  {row['rate_mev_s']:5.1f} M ev/s: sent {row['sent_rate_mev_s']} M ev/s, "
        f"received {decoder.packets}/{packets} packets, "
        f"{row['windows_with_a_draft']} windows drafted, {row['dropped_windows']} dropped, "
        f"first token p50 {row['first_token_ms_p50']} / p95 {row['first_token_ms_p95']} "
        f"ms, draft node {row['draft_node_cpu_cores']} cores")
    return row


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = [r["rate_mev_s"] for r in rows]
    fig, left = plt.subplots(figsize=(6, 3.5))
    left.plot(rates, [r["first_token_ms_p95"] or float("nan") for r in rows], "o-",
              label="first draft token p95 (ms)")
    left.axhline(TARGET_FIRST_TOKEN_MS, color="grey", linestyle="--", label="target")
    left.set_xlabel("event rate (M events/s)")
    left.set_ylabel("ms after the window's close")
    right = left.twinx()
    right.plot(rates, [r["draft_node_cpu_cores"] for r in rows], "s:", color="tab:red",
               label="draft node CPU (cores)")
    right.set_ylabel("CPU cores used")
    handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    left.legend(handles=handles, loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run(args: argparse.Namespace) -> int:
    if args.seconds < 2.5 or any(r <= 0 for r in args.rates):
        print("crossspec bench event-rate: --seconds must be >= 2.5 (two closed windows) and "
              "every rate > 0", file=sys.stderr)
        return 2
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    from crossspec_ros.process_tuning import tune_process_for_models

    tune_process_for_models()
    print(f"crossspec bench event-rate: {args.seconds} s of events per rate into the draft "
          f"node, live", file=sys.stderr)
    rows, drafter = [], None
    for rate in args.rates:
        row, drafter = measure_rate(rate * 1e6, args.seconds, drafter, args.drafter_model,
                                    log=lambda s: print(s, file=sys.stderr))
        rows.append(row)
    print(f"{'M ev/s':>7} {'sent':>6} {'received':>9} {'drafted':>8} {'dropped':>8} "
          f"{'p50 ms':>7} {'p95 ms':>7} {'cores':>6}  keeps up")
    for r in rows:
        print(f"{r['rate_mev_s']:>7.1f} {r['sent_rate_mev_s']:>6.2f} "
              f"{r['packets_received'] / r['packets']:>9.1%} "
              f"{r['windows_with_a_draft']:>8} {r['dropped_windows']:>8} "
              f"{r['first_token_ms_p50'] or float('nan'):>7.1f} "
              f"{r['first_token_ms_p95'] or float('nan'):>7.1f} "
              f"{r['draft_node_cpu_cores']:>6.2f}  "
              f"{'yes' if r['keeps_up'] else 'NO'}")
    kept = 0.0  # the highest rate below which every rate was kept up with
    for r in sorted(rows, key=lambda r: r["rate_mev_s"]):
        if not r["keeps_up"]:
            break
        kept = r["rate_mev_s"]
    print(f"keeps up with up to {kept} M events/s (first draft token p95 "
          f"<= {TARGET_FIRST_TOKEN_MS:.0f} ms, no window dropped, every packet sent on time "
          f"and received)")
    report = {"seconds": args.seconds, "target_first_token_ms": TARGET_FIRST_TOKEN_MS,
              "cpu_count": os.cpu_count(), "keeps_up_to_mev_s": kept, "rows": rows}
    save_outputs(report, args.json, args.plot, lambda path: _plot(rows, path))
    return 0
