"""Two `crossspec drive` runs and a third graph on one ROS domain: each drive hears only its
own graph, and one told to share a namespace with another graph says so and does not pass.

Before runs had namespaces of their own, two drives started together on one domain swapped
captions silently (issue 53: in one run's JSON 14 of 18 FINAL captions were the other's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from crossspec_ros.models.pair import BUNDLED_PAIR
from crossspec_ros.paths import sample_bag

pytestmark = [pytest.mark.ros, pytest.mark.slow,
              pytest.mark.skipif(not (BUNDLED_PAIR / "verifier").is_dir(),
                                 reason="no bundled pair (run crossspec train-tiny)")]

CLI = [sys.executable, "-m", "crossspec_ros.cli.main"]
FOREIGN = "A CAPTION FROM ANOTHER GRAPH"
SHARED = "shared_run"
START_S = 1_700_000_000  # the bags' first window (make-sample's start)


def _foreign_graph(stop: threading.Event) -> threading.Thread:
    """A graph that publishes FINAL captions of the drives' windows, in the root namespace
    (where every drive published before runs had their own) and in SHARED, until ``stop``."""
    import rclpy
    from crossspec import msg as cs_msg

    from crossspec_ros.nodes.common import reliable_qos

    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("crossspec_verifier", context=context)
    publishers = [node.create_publisher(cs_msg.Caption, topic, reliable_qos())
                  for topic in ("/crossspec/caption", f"/{SHARED}/crossspec/caption")]

    def publish() -> None:
        try:
            while not stop.wait(0.05):
                for window in range(START_S, START_S + 4):
                    msg = cs_msg.Caption(window_id=window, status=cs_msg.Caption.STATUS_FINAL,
                                         confirmed_text=FOREIGN, draft_text=FOREIGN)
                    msg.window_start.sec, msg.window_end.sec = window, window + 1
                    for publisher in publishers:
                        publisher.publish(msg)
        finally:
            node.destroy_node()
            rclpy.shutdown(context=context)

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    return thread


def _rows_and_summary(path) -> tuple[list[dict], dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return lines[:-1], lines[-1]["summary"]


def test_two_drives_and_another_graph_on_one_domain_each_drive_hears_only_its_own(tmp_path):
    other_bag = tmp_path / "seed8"
    subprocess.run([*CLI, "make-sample", "--seed", "8", "--duration", "3", "--quiet",
                    str(other_bag)], check=True, timeout=120)
    stop = threading.Event()
    foreign = _foreign_graph(stop)
    try:
        runs = {name: subprocess.Popen(
            [*CLI, "drive", "--bag", str(bag), "--duration", "3", "--no-viz", "--json",
             str(tmp_path / f"{name}.jsonl"), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
            for name, bag, extra in (("own", sample_bag(), []),
                                     ("shared", other_bag, ["--namespace", SHARED]))}
        outputs = {name: run.communicate(timeout=300)[0] for name, run in runs.items()}
    finally:
        stop.set()
        foreign.join(timeout=10)
    own_rows, own_summary = _rows_and_summary(tmp_path / "own.jsonl")
    shared_rows, shared_summary = _rows_and_summary(tmp_path / "shared.jsonl")
    # the drive in a namespace of its own: its own captions only, none of the other drive's
    # (another bag: other scenes) nor the root namespace's graph's
    assert runs["own"].returncode == 0, outputs["own"]
    assert "in namespace /crossspec_drive_" in outputs["own"]
    assert "foreign_publishers" not in own_summary
    own_final = {r["window"]: r["confirmed_text"] for r in own_rows if r["status"] == "FINAL"}
    assert len(own_final) >= 2 and FOREIGN not in own_final.values()
    # the drive told to share its namespace with the third graph: says so, does not pass
    assert runs["shared"].returncode == 1, outputs["shared"]
    topic = f"/{SHARED}/crossspec/caption"
    # this graph's: its verifier's and its draft node's (for windows no verifier answers)
    assert f"{topic} has 3 publishers, 2 of them this graph's" in outputs["shared"]
    assert topic in shared_summary["foreign_publishers"]
    assert "ANOTHER GRAPH published on" in outputs["shared"]
    shared_final = {r["window"]: r["confirmed_text"] for r in shared_rows
                    if r["status"] == "FINAL" and r["confirmed_text"] != FOREIGN}
    # the two drives' bags differ: so do their captions wherever both have one
    both = set(own_final) & set(shared_final)
    assert both and any(own_final[w] != shared_final[w] for w in both)
