"""What the robot sees in ``crossspec bench split``, as JSON lines (run in its namespace).

    python -m crossspec_ros.bench.split_monitor --out FILE

Every Caption (window, status, texts, latencies), the first DraftTokens message of each window
(its first-token latency), the frames each window's caption describes (ConfirmedTokens
``frame_stamps_sec``/``_nanosec``: what the verifier alone must be given for the lossless
check) and, when the nodes emulate a target (``--emulate``), each node's emulation verdict as
its /diagnostics change it, as the robot receives them. Nothing here subscribes to the
cameras: the link carries what the graph itself carries. One line per message, flushed at
once; "ready" once the subscriptions exist. Ends on SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from crossspec_ros.models.emulated import emulation_held
from crossspec_ros.stamps import join_ns
from crossspec_ros.summaries import rounded


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)

    import rclpy
    from crossspec import msg as cs_msg
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.signals import SignalHandlerOptions

    from crossspec_ros.nodes.common import reliable_qos

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("crossspec_split_monitor")
    lock = threading.Lock()
    out = open(args.out, "w", buffering=1)  # noqa: SIM115 (closed in the finally below)

    def write(record: dict[str, Any]) -> None:
        with lock:
            out.write(json.dumps({**record, "t": time.monotonic()}) + "\n")

    on_caption, on_draft, on_confirmed, on_diagnostics = _callbacks(write)
    node.create_subscription(cs_msg.Caption, args.caption_topic, on_caption, reliable_qos())
    node.create_subscription(cs_msg.DraftTokens, args.draft_topic, on_draft, reliable_qos())
    node.create_subscription(cs_msg.ConfirmedTokens, args.confirmed_topic, on_confirmed,
                             reliable_qos())
    node.create_subscription(DiagnosticArray, args.diagnostics_topic, on_diagnostics, 10)
    write({"kind": "ready"})
    try:
        while not stop.is_set():
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        node.destroy_node()
        rclpy.shutdown()
        out.close()
    return 0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="split_monitor")
    parser.add_argument("--out", required=True)
    parser.add_argument("--caption-topic", default="crossspec/caption")
    parser.add_argument("--draft-topic", default="crossspec/draft")
    parser.add_argument("--confirmed-topic", default="crossspec/confirmed")
    parser.add_argument("--diagnostics-topic", default="/diagnostics")
    return parser.parse_args(argv)


_Callback = Callable[[Any], None]


def _callbacks(write: Callable[[dict[str, Any]], None]
               ) -> tuple[_Callback, _Callback, _Callback, _Callback]:
    """The subscriptions' callbacks (caption, draft, confirmed, diagnostics), each writing its
    records with ``write``: every caption; a window's first draft with tokens and its first
    frames only; a node's emulation verdict only when it changes."""
    drafted: set[tuple[int, int]] = set()
    framed: set[tuple[int, int]] = set()

    def on_caption(msg: Any) -> None:
        write({"kind": "caption", "window": int(msg.window_id), "epoch": int(msg.epoch),
               "status": int(msg.status), "confirmed_text": msg.confirmed_text,
               "acceptance_rule": msg.acceptance_rule,
               "draft_text": msg.draft_text, "unverified_reason": int(msg.unverified_reason),
               "draft_state": int(msg.draft_state),
               "draft_first_token_ms": _num(msg.draft_first_token_ms),
               "confirmed_done_ms": _num(msg.confirmed_done_ms)})

    def on_draft(msg: Any) -> None:
        key = (int(msg.epoch), int(msg.window_id))
        if key in drafted or not msg.token_ids:
            return
        drafted.add(key)
        write({"kind": "draft", "window": key[1], "epoch": key[0],
               "first_token_ms": _num(msg.first_token_latency_ms)})

    def on_confirmed(msg: Any) -> None:
        key = (int(msg.epoch), int(msg.window_id))
        if key in framed:
            return
        framed.add(key)
        write({"kind": "frames", "window": key[1], "epoch": key[0],
               "stamps_ns": [join_ns(sec, nsec) for sec, nsec in
                             zip(msg.frame_stamps_sec, msg.frame_stamps_nanosec, strict=True)]})

    emulation: dict[str, tuple[bool, int]] = {}  # node -> its last verdict written

    def on_diagnostics(msg: Any) -> None:
        for status in msg.status:
            record = emulation_record(status.name, {kv.key: kv.value for kv in status.values})
            if record is None:
                continue
            state = (record["held"], record["over_budget"])
            if emulation.get(status.name) != state:
                emulation[status.name] = state
                write(record)

    return on_caption, on_draft, on_confirmed, on_diagnostics


def emulation_record(node: str, values: dict[str, str]) -> dict[str, Any] | None:
    """A node's emulation verdict from its /diagnostics values (``runtime_counters``: the
    profile's label, calls over budget), or None when it emulates nothing."""
    if "emulation_over_budget" not in values:
        return None
    over_budget = int(values["emulation_over_budget"])
    return {"kind": "emulation", "node": node, "profile": values.get("emulated", ""),
            "held": emulation_held(over_budget), "over_budget": over_budget}


_num = rounded  # NaN (a latency not measured) -> None in the records


if __name__ == "__main__":
    raise SystemExit(main())
