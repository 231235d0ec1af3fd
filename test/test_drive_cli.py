"""`crossspec drive` as a user runs it: a subprocess on the sample bag with the bundled pair."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from crossspec_ros.models.pair import BUNDLED_PAIR

pytestmark = [pytest.mark.ros, pytest.mark.slow,
              pytest.mark.skipif(not (BUNDLED_PAIR / "verifier").is_dir(),
                                 reason="no bundled pair (run crossspec train-tiny)")]

DRIVE = [sys.executable, "-m", "crossspec_ros.cli.main", "drive"]


def test_drive_writes_one_json_object_per_window_and_checks_losslessness(tmp_path):
    out = tmp_path / "drive.jsonl"
    result = subprocess.run([*DRIVE, "--max-windows", "3", "--check-lossless", "--json",
                             str(out), "--no-viz"], capture_output=True, text=True,
                            timeout=240, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    rows, summary = lines[:-1], lines[-1]["summary"]
    final = [r for r in rows if r["status"] == "FINAL"]
    assert len(final) >= 3
    for row in final:
        assert {"window", "t0", "t1", "draft_text", "draft_first_token_ms", "confirmed_text",
                "confirmed_done_ms", "accepted", "proposed", "status", "verifier_only_text",
                "lossless"} <= set(row)
        assert row["lossless"] is True and row["confirmed_text"] == row["verifier_only_text"]
        assert row["t1"] - row["t0"] == pytest.approx(1.0)
    assert summary["final"] == len(final) and summary["lossless"] == len(final)
    assert "lossless 3/3" in result.stdout or f"lossless {len(final)}/{len(final)}" \
        in result.stdout
    assert "confirmed" in result.stdout and "draft" in result.stdout


def test_ctrl_c_stops_drive_cleanly_and_leaves_a_readable_mcap(tmp_path):
    from mcap_helpers import read_mcap

    mcap = tmp_path / "out.mcap"
    # Ctrl-C must reach it even where this test runs in the background (which ignores SIGINT)
    process = subprocess.Popen([*DRIVE, "--record", str(mcap)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=dict(os.environ),
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    deadline = time.monotonic() + 180
    try:
        for line in process.stdout:
            seen.append(line)
            # a live-view line of a confirmed caption: "[window] confirmed  ... ms  text"
            if (line.startswith("[17") and " confirmed " in line) \
                    or time.monotonic() > deadline:
                break
        time.sleep(1.0)
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, "".join(seen) + rest
    recorded = read_mcap(mcap)
    topics = {m[0] for m in recorded["messages"]}
    assert "/crossspec/caption" in topics, topics
