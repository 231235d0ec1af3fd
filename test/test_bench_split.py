"""The edge-cloud split across two hosts (crossspec bench split): network namespaces joined by
a veth pair, the draft node and the player on one side, the verifier node on the other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from crossspec_ros.bench import netns

AVAILABLE, WHY = netns.available()
needs_netns = pytest.mark.skipif(not AVAILABLE, reason=f"no network namespaces here: {WHY}")
pytestmark = pytest.mark.slow


@needs_netns
def test_a_drive_split_across_two_hosts_survives_the_link_going_down(tmp_path):
    out = tmp_path / "split.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "ROS_AUTOMATIC_DISCOVERY_RANGE"}
    run = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "bench", "split",
                          "--duration", "8", "--no-compile", "--fault", "link-down",
                          "--json", str(out)], capture_output=True, text=True, timeout=600,
                         env=env)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    *rows, last = [json.loads(line) for line in out.read_text().splitlines()]
    (row,) = rows
    for key in ("hosts", "link_mbit", "windows", "final", "lossless", "confirmed_ms_median",
                "draft_ms_p95", "link_mb_per_s"):
        assert key in last, key
    assert (row["hosts"], row["link_mbit"], row["images"], row["fault"]) == \
        (2, 20.0, "compressed", "link-down")
    assert row["windows"] >= 6 and row["final"] >= 3
    # every window FINAL or UNVERIFIED with its draft; nothing stuck or published twice
    assert row["final"] + row["unverified"] == row["windows"]
    assert row["unverified_with_draft"] == row["unverified"]
    assert row["stuck"] == 0 and row["published_twice"] == 0
    assert row["lossless"] == row["lossless_checked"] == row["final"]
    assert row["link_mb_per_s"] > 0 and row["fault_s"] >= 3.0
    assert row["namespaces_left"] == []


@needs_netns
def test_the_namespaces_are_removed_when_the_run_fails_inside_them():
    with pytest.raises(RuntimeError, match="inside"), netns.TwoHosts(k=251) as hosts:
        assert netns.namespaces_left(251) == ["cs251-robot", "cs251-server"]
        sleeper = hosts.start(netns.ROBOT, ["sleep", "60"], dict(os.environ), None)
        raise RuntimeError("a failure inside")
    assert netns.namespaces_left(251) == []
    assert sleeper.poll() is not None  # what ran there was stopped


@needs_netns
def test_the_link_carries_traffic_between_the_namespaces_and_can_be_cut():
    with netns.TwoHosts(k=252) as hosts:
        send = ["ip", "netns", "exec", hosts.ns[netns.ROBOT], sys.executable, "-c",
                "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                "s.sendto(b'x' * 1000, ('10.252.0.2', 9))"]
        before = hosts.bytes_crossed()
        assert subprocess.run(send, capture_output=True).returncode == 0
        deadline = time.monotonic() + 5  # the datagram waits for the peer's ARP answer
        while hosts.bytes_crossed() < before + 1000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hosts.bytes_crossed() >= before + 1000
        hosts.link(False)  # the route goes with the link: nothing can be sent
        assert subprocess.run(send, capture_output=True).returncode != 0
        hosts.link(True)
        assert subprocess.run(send, capture_output=True).returncode == 0


def test_without_namespaces_the_bench_says_why_in_one_line(monkeypatch, capsys):
    from crossspec_ros.cli.main import main

    monkeypatch.setattr(netns, "available", lambda: (False, "network namespaces need root"))
    assert main(["bench", "split"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["crossspec bench split: cannot make two hosts here: network namespaces "
                   "need root"]
