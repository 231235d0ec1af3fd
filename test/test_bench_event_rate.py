"""`crossspec bench event-rate`: a camera process publishes evt3 packets in real time to the
real draft node, whose drafts and counters make the row."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("rclpy")

pytestmark = pytest.mark.ros


def test_packets_published_at_a_rate_are_windowed_and_drafted_and_reported(tmp_path):
    out = tmp_path / "rate.json"
    result = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "bench",
                             "event-rate", "--rates", "0.2", "--seconds", "3", "--json",
                             str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    row = report["rows"][0]
    assert row["rate_mev_s"] == 0.2 and row["events"] == 600_000
    # paced by the packets' stamps: never faster than asked (a busy machine sends slower)
    assert 0 < row["sent_rate_mev_s"] <= 1.1 * 0.2
    # three seconds of events close at least two 1 s windows; each was drafted, none dropped
    assert row["windows_with_a_draft"] >= 2 and row["dropped_windows"] == 0
    # a number was measured (< 0 where the draft node drafts the window before its close)
    assert row["bad_packets"] == 0 and row["first_token_ms_p95"] is not None
    # kept up with: by the row's own numbers, whatever this machine's speed made them
    assert row["keeps_up"] == (row["windows_with_a_draft"] > 0 and row["dropped_windows"] == 0
                               and row["packets_received"] == row["packets"]
                               and row["sent_rate_mev_s"] >= 0.95 * row["rate_mev_s"]
                               and row["first_token_ms_p95"]
                               <= report["target_first_token_ms"])
    assert "keeps up with up to" in result.stdout


def test_a_too_short_run_is_refused():
    from crossspec_ros.cli.main import main

    assert main(["bench", "event-rate", "--seconds", "1"]) == 2
