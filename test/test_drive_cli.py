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


def test_drive_compares_the_verifier_node_alone_with_crossspec_and_checks_losslessness(
        tmp_path):
    out = tmp_path / "drive.jsonl"
    result = subprocess.run([*DRIVE, "--max-windows", "3", "--check-lossless", "--json",
                             str(out), "--no-viz", "--compare", "--rounds", "1"],
                            capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    rows, summary, compare = lines[:-1], lines[-1]["summary"], lines[-1]["compare"]
    # three graphs, named in the output and the JSON: the baseline runs no drafter
    assert compare["baseline"] == "alone"
    assert compare["passes"]["alone"]["graph"] == ["verifier"]
    assert compare["passes"]["live_alone"]["graph"] == ["verifier"]
    assert compare["passes"]["crossspec"]["graph"] == ["draft", "verifier"]
    assert "pass 3/3" in result.stderr and "crossspec_verifier" in result.stderr
    assert {r["pass"] for r in rows} == {"alone", "live_alone", "crossspec"}
    assert not any(r["draft_text"] for r in rows if r["pass"] != "crossspec")
    main = compare["crossspec_vs_alone"]
    assert main["pairs"] >= 3 and main["paired_speedup_median"] > 0 and len(main["rounds"]) == 1
    assert compare["same_captions"] == compare["compared_captions"] >= 6
    for name in ("alone", "live_alone", "crossspec"):  # early start: ~0.1 ms can round to 0
        assert compare["passes"][name]["confirmed_ms_median"] >= 0
    assert compare["passes"]["alone"]["ready_before_close_ms_median"] is None  # no live prefill
    assert "crossspec vs the verifier node alone: paired speedup" in result.stdout
    assert "[alone] [" in result.stdout and "[crossspec] [" in result.stdout
    final = [r for r in rows if r["status"] == "FINAL" and r["pass"] == "crossspec"]
    assert len(final) >= 3
    for row in final:
        assert {"window", "t0", "t1", "draft_text", "draft_first_token_ms", "confirmed_text",
                "confirmed_done_ms", "accepted", "proposed", "status", "verifier_only_text",
                "lossless"} <= set(row)
        assert row["lossless"] is True and row["confirmed_text"] == row["verifier_only_text"]
        assert row["live_prefill_frames"] >= 0  # never a live prefill redone in one shot
        assert row["t1"] - row["t0"] == pytest.approx(1.0)
        if row["ready_before_close_ms"] is not None:  # early start: published at the close
            assert row["confirmed_done_ms"] >= 0
    assert summary["final"] == len(final) and summary["lossless"] == len(final)
    assert f"lossless {len(final)}/{len(final)}" in result.stdout
    # how close each complete draft came to its final caption, per window and in the summary;
    # a draft that completes only after its window's FINAL is not scored, and under load that
    # can be all three windows (the scoring itself: test_drive_monitor_scores_...)
    scored = [r for r in final if r.get("complete_draft")]
    for row in scored:
        assert 0.0 <= row["draft_token_agreement"] <= 1.0 and row["draft_word_error_rate"] >= 0
    for row in final:
        if not row.get("complete_draft"):
            assert "draft_token_agreement" not in row
    assert summary["draft_agreement_windows"] == len(scored)
    assert ("complete drafts against their final captions" in result.stdout) == bool(scored)
    if scored:
        assert 0.0 <= summary["draft_token_agreement_median"] <= 1.0
        assert "; draft: token agreement " in result.stdout


def _caption(wid: int, status: int, draft: str, draft_done_ms: float, confirmed: str = "",
             done_ms: float = float("nan"), acceptance_rule: str = ""):
    from types import SimpleNamespace

    stamp = SimpleNamespace(sec=wid, nanosec=0)
    end = SimpleNamespace(sec=wid + 1, nanosec=0)
    return SimpleNamespace(window_id=wid, epoch=0, status=status, window_start=stamp,
                           window_end=end,
                           draft_text=draft, draft_first_token_ms=5.0,
                           draft_done_ms=draft_done_ms, confirmed_text=confirmed,
                           confirmed_done_ms=done_ms, acceptance=0.5, unverified_reason=0,
                           draft_state=3, acceptance_rule=acceptance_rule)


def test_drive_monitor_scores_a_complete_draft_against_its_final_caption_and_skips_a_late_one():
    import io

    from crossspec_ros.cli.drive_cmd import DriveMonitor, summarize

    out = io.StringIO()
    monitor = DriveMonitor(out=out)
    monitor.tokenize = lambda text: text.split()
    nan = float("nan")
    # window 1: the draft completes (draft_done_ms set) before the FINAL caption
    monitor.on_caption(_caption(1, 0, "the ego car waits", nan))
    monitor.on_caption(_caption(1, 0, "the ego car waits at a light", 12.0))
    monitor.on_caption(_caption(1, 2, "the ego car waits at a light", 12.0,
                                "the ego car waits at a red light", 20.0))
    # window 2: FINAL before the draft was complete: nothing to score
    monitor.on_caption(_caption(2, 0, "a truck", nan))
    monitor.on_caption(_caption(2, 2, "a truck", nan, "a truck turns left", 9.0))
    first, second = monitor.rows[(0, 1)], monitor.rows[(0, 2)]
    assert first["complete_draft"] == "the ego car waits at a light"
    assert first["draft_word_error_rate"] == pytest.approx(1 / 8, abs=0.01)  # one word missing
    assert 0.0 < first["draft_token_agreement"] < 1.0
    assert "complete_draft" not in second and "draft_token_agreement" not in second
    assert "; draft: token agreement " in out.getvalue()
    summary = summarize([first, second], dropped=0)
    assert summary["draft_agreement_windows"] == 1
    assert summary["draft_word_error_rate_median"] == pytest.approx(first["draft_word_error_rate"],
                                                                    abs=0.001)
    assert "complete drafts against their final captions (1 windows)" in summary["line"]
    assert summary["early_started"] == 0 and "early start" not in summary["line"]


def test_a_lossy_caption_is_marked_in_the_terminal_and_the_json_and_checked_apart(capsys):
    import io
    from types import SimpleNamespace

    from crossspec_ros.cli.drive_cmd import DriveMonitor, _check_lossless, summarize

    out = io.StringIO()
    monitor = DriveMonitor(out=out)
    monitor.on_caption(_caption(1, 2, "", float("nan"), "a car turns", 3.0))
    monitor.on_caption(_caption(2, 2, "", float("nan"), "a car waits", 3.0,
                                acceptance_rule="top_k:3"))
    assert "[1] confirmed " in out.getvalue() and "[2] LOSSY (top_k:3) " in out.getvalue()
    rows = [monitor.rows[(0, 1)], monitor.rows[(0, 2)]]
    assert [r["acceptance_rule"] for r in rows] == ["", "top_k:3"]
    # the verifier alone says "a car turns" for both windows (token ids 7 and 8)
    for wid, tokens in ((1, [7]), (2, [8])):
        monitor.windows[(0, wid)] = object()
        monitor.results[(0, wid)] = SimpleNamespace(tokens=tokens)
    engine = SimpleNamespace(config=SimpleNamespace(mode="greedy"), verifier_only=lambda w: [7],
                             verifier=SimpleNamespace(tokenizer=SimpleNamespace(
                                 decode=lambda ids, skip_special_tokens: "a car turns")))
    _check_lossless(engine, monitor, rows)
    assert rows[0]["lossless"] is True and "lossless" not in rows[1]
    assert rows[1]["lossy_same_as_verifier"] is False
    assert "NOT LOSSLESS" not in capsys.readouterr().out  # lossy by choice, not a fault
    summary = summarize(rows, dropped=0)
    assert (summary["lossless"], summary["lossless_checked"]) == (1, 1)
    assert summary["lossy_windows"] == 1 and summary["acceptance_rules"] == ["top_k:3"]
    assert "LOSSY (top_k:3): 1 captions under a relaxed acceptance rule, 0 of them the " \
        "verifier's own" in summary["line"]


def test_the_summary_says_how_many_captions_were_decoded_before_their_close():
    from crossspec_ros.cli.drive_cmd import summarize

    rows = [{"window": w, "status": "FINAL", "draft_first_token_ms": 8.0,
             "confirmed_done_ms": 0.3, "ready_before_close_ms": ahead}
            for w, ahead in ((1, 30.0), (2, 10.0), (3, None))]
    summary = summarize(rows, dropped=0)
    assert summary["early_started"] == 2 and summary["ready_before_close_ms_median"] == 20.0
    assert "2 of 3 captions decoded before the close (early start), complete a median " \
        "20.0 ms before it" in summary["line"]


def test_loop_replays_the_bag_again_with_each_passes_windows_in_an_epoch_of_their_own(
        tmp_path):
    out = tmp_path / "loop.jsonl"
    result = subprocess.run([*DRIVE, "--loop", "--duration", "2.5", "--max-windows", "5",
                             "--no-viz", "--json", str(out)],
                            capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()][:-1]
    keys = [(r["epoch"], r["window"]) for r in rows]
    assert len(keys) == len(set(keys)) >= 5  # one row per window of each pass
    first = {w for e, w in keys if e == 0}
    again = {w for e, w in keys if e == 1}
    assert len(first) >= 2 and again and again <= first  # the same windows, replayed
    assert all(r["status"] in ("FINAL", "UNVERIFIED") for r in rows)
    assert any(f"[{w}@1] " in result.stdout for w in again)


@pytest.mark.parametrize(("args", "message"), [
    (["--loop", "--compare"], "drop one of them"),
    (["--loop", "--duration", "1.5"], "longer than the nodes' reset_threshold_s"),
    (["--duration", "0"], "--duration must be > 0")])
def test_loop_with_compare_or_with_too_short_a_pass_is_refused_at_once(capsys, args, message):
    from crossspec_ros.cli.main import main

    assert main(["drive", "--no-viz", *args]) == 2
    assert message in capsys.readouterr().err


def test_one_foxglove_server_serves_every_compare_pass_to_a_client_connected_from_the_start():
    import re
    import threading

    ws_client = pytest.importorskip("websockets.sync.client")
    process = subprocess.Popen([*DRIVE, "--compare", "--rounds", "1", "--max-windows", "1",
                                "--duration", "3", "--foxglove", "--foxglove-port", "0"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ))
    stderr: list[str] = []
    url = threading.Event()
    found: dict[str, str] = {}

    def read_stderr() -> None:
        for line in process.stderr:
            stderr.append(line)
            match = re.search(r"Foxglove: (ws://\S+)", line)
            if match and not url.is_set():
                found["url"] = match.group(1)
                url.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    captions = 0
    passes_before = None
    try:
        deadline = time.monotonic() + 120
        while not url.wait(0.5) and process.poll() is None and time.monotonic() < deadline:
            pass
        assert url.is_set(), "".join(stderr)
        with ws_client.connect(found["url"], subprotocols=["foxglove.sdk.v1"],
                               open_timeout=10) as ws:
            passes_before = sum("crossspec drive: pass " in line for line in stderr)
            deadline = time.monotonic() + 240
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    msg = ws.recv(timeout=1.0)
                except TimeoutError:
                    continue
                except Exception:  # the server closed: the run ended (or it was restarted)
                    break
                if isinstance(msg, str):
                    op = json.loads(msg)
                    if op.get("op") == "advertise":
                        ids = [c["id"] for c in op["channels"]
                               if c["topic"] == "/crossspec/caption"]
                        if ids:
                            ws.send(json.dumps({"op": "subscribe", "subscriptions": [
                                {"id": 1, "channelId": ids[0]}]}))
                elif msg[:1] == b"\x01" and int.from_bytes(msg[1:5], "little") == 1:
                    captions += 1  # message data of our subscription
        assert process.wait(timeout=120) == 0, "".join(stderr)
    finally:
        if process.poll() is None:
            process.kill()
    reader.join(timeout=10)
    # connected before the first pass began; the captions came in the crossspec pass, the last
    assert passes_before <= 1, "".join(stderr)
    assert "pass 3/3" in "".join(stderr)
    assert captions >= 1, "".join(stderr)


def stop_after_confirmed(args: list[str], confirmed: int, signum: int) -> tuple[int, str]:
    """Run drive, send ``signum`` once ``confirmed`` captions were confirmed; (exit code,
    output)."""
    # the signal must reach it even where this test runs in the background (ignores SIGINT)
    process = subprocess.Popen([*DRIVE, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=dict(os.environ),
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    deadline = time.monotonic() + 180
    try:
        for line in process.stdout:
            seen.append(line)
            # a live-view line of a confirmed caption: "[window] confirmed  ... ms  text"
            if sum(" confirmed " in s for s in seen) >= confirmed \
                    or time.monotonic() > deadline:
                break
        process.send_signal(signum)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, "".join(seen) + rest


def read_bag(path) -> list[tuple[str, str, int]]:
    from rosbags.highlevel import AnyReader

    with AnyReader([path]) as reader:
        return [(c.topic, c.msgtype, t) for c, t, _ in reader.messages()]


SAMPLE_START_NS, SAMPLE_END_NS = 1_700_000_000 * 10**9, 1_700_000_024 * 10**9


def test_ctrl_c_stops_drive_cleanly_and_leaves_a_readable_bag_on_the_bags_clock(tmp_path):
    bag = tmp_path / "out"
    code, output = stop_after_confirmed(["--record", str(bag)], 3, signal.SIGINT)
    assert code == 130, output
    recorded = read_bag(bag)
    topics = {(topic, msgtype) for topic, msgtype, _ in recorded}
    assert {("/crossspec/caption", "crossspec/msg/Caption"),
            ("/crossspec/annotated_image", "sensor_msgs/msg/Image"),
            ("/crossspec/caption_marker", "visualization_msgs/msg/Marker"),
            ("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray")} <= topics, topics
    # one clock: every message is filed under the replayed bag's time
    assert all(SAMPLE_START_NS <= t <= SAMPLE_END_NS + 10**10 for _, _, t in recorded)
    assert not list(tmp_path.glob(".*partial"))


def test_sigterm_ends_drive_like_ctrl_c_with_json_rows_and_the_bag(tmp_path):
    bag, out = tmp_path / "out", tmp_path / "rows.jsonl"
    code, output = stop_after_confirmed(["--record", str(bag), "--json", str(out)], 2,
                                        signal.SIGTERM)
    assert code == 143, output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    rows, summary = lines[:-1], lines[-1]["summary"]
    assert summary["interrupted"] is True
    final = [r for r in rows if r["status"] == "FINAL"]
    assert len(final) >= 2 and all(r["confirmed_text"] for r in final)
    # a draft can come after its window's FINAL on a loaded machine, not in every window
    assert any(r["draft_text"] for r in final)
    assert {t for t, _, _ in read_bag(bag)} >= {"/crossspec/caption"}
    assert not list(tmp_path.glob(".*partial"))


def test_a_killed_recording_leaves_nothing_under_the_final_name(tmp_path):
    from crossspec_ros.bags.recorder import BagRecorder

    recorder = BagRecorder(tmp_path / "out")
    recorder.write("/x", "crossspec/msg/Caption", b"", 1)  # never closed: as after SIGKILL
    assert not (tmp_path / "out").exists() and recorder.staging.is_dir()
    BagRecorder(tmp_path / "out").close()  # the next run clears the leftover staging
    assert (tmp_path / "out").is_dir() and not recorder.staging.exists()


def test_passes_alternate_their_order_round_by_round():
    from crossspec_ros.cli.drive_cmd import pass_order

    order = [(k, graph.name) for k, graph in pass_order(2)]
    assert order == [(0, "alone"), (0, "live_alone"), (0, "crossspec"),
                     (1, "crossspec"), (1, "live_alone"), (1, "alone")]


def test_compare_pairs_the_graphs_window_by_window_within_each_round():
    from crossspec_ros.cli.drive_cmd import compare_graphs, compare_line

    def rows(ms: dict[int, float], text: str = "a", ahead: float | None = None) -> list[dict]:
        return [{"window": w, "status": "FINAL", "confirmed_done_ms": v,
                 "confirmed_text": text if w != 3 else "x", "ready_before_close_ms": ahead}
                for w, v in ms.items()]

    results = {("alone", 0): rows({1: 300.0, 2: 100.0, 3: 200.0}),
               ("live_alone", 0): rows({1: 150.0, 2: 100.0, 3: 100.0}),
               ("crossspec", 0): rows({1: 100.0, 2: 100.0, 3: 50.0, 4: 50.0}),  # 4: alone only
               ("alone", 1): rows({1: 600.0, 2: 200.0}),
               ("live_alone", 1): rows({1: 100.0, 2: 100.0}, ahead=20.0),
               ("crossspec", 1): [*rows({1: 100.0}),
                                  {"window": 2, "status": "UNVERIFIED", "confirmed_text": ""}]}
    compare = compare_graphs(results, range(2))
    main = compare["crossspec_vs_alone"]
    assert main["rounds"] == [3.0, 6.0]  # round 0: ratios 3, 1, 4; round 1: 6
    assert main["pairs"] == 4 and main["paired_speedup_median"] == 3.5
    assert compare["passes"]["alone"]["confirmed_ms_median_rounds"] == [200.0, 400.0]
    assert compare["crossspec_vs_live_alone"]["rounds"] == [1.5, 1.0]
    assert (compare["same_captions"], compare["compared_captions"]) == (8, 8)
    # early start: how long before the close captions were complete, where they were
    assert compare["passes"]["live_alone"]["ready_before_close_ms_median"] == 20.0
    assert compare["passes"]["crossspec"]["ready_before_close_ms_median"] is None
    assert "complete before the close (early start, median): live_alone 20.0 ms" in \
        compare_line(compare)


def test_check_lossless_with_sampling_says_it_compares_greedy_only(capsys):
    from types import SimpleNamespace

    from crossspec_ros.cli.drive_cmd import _check_lossless

    engine = SimpleNamespace(config=SimpleNamespace(mode="sampling"))
    rows = [{"window": 1, "status": "FINAL"}]
    _check_lossless(engine, SimpleNamespace(windows={}, results={}), rows)
    assert "only greedy decoding" in capsys.readouterr().err
    assert "lossless" not in rows[0]  # nothing claimed either way


def test_record_without_the_viz_node_is_refused_at_once(tmp_path, capsys):
    from crossspec_ros.cli.main import main

    assert main(["drive", "--no-viz", "--record", str(tmp_path / "out")]) == 2
    assert "drop --no-viz" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["directory", "file"])
def test_record_refuses_to_replace_an_existing_out_unless_told_to_overwrite(tmp_path, capsys,
                                                                           kind):
    from crossspec_ros.cli.main import main

    out = tmp_path / "out"
    if kind == "directory":
        out.mkdir()
        (out / "keep.txt").write_text("an earlier recording")
    else:
        out.write_text("an earlier recording")
    assert main(["drive", "--record", str(out), "--max-windows", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"crossspec drive: {out} exists; pass --overwrite to replace it, or "
                   "choose another OUT")
    assert (out / "keep.txt").exists() if kind == "directory" else out.read_text()


def test_record_never_overwrites_the_bag_it_replays(tmp_path, capsys):
    import shutil

    from crossspec_ros.cli.main import main
    from crossspec_ros.paths import sample_bag

    bag = tmp_path / "sample"
    shutil.copytree(sample_bag(), bag)
    assert main(["drive", "--bag", str(bag), "--record", str(bag), "--overwrite"]) == 2
    assert "holds the bag being replayed" in capsys.readouterr().err
    assert (bag / "metadata.yaml").exists()


def test_record_with_overwrite_replaces_an_existing_out_with_the_new_recording(tmp_path):
    out = tmp_path / "out"
    out.write_text("an earlier recording, a file")
    result = subprocess.run([*DRIVE, "--max-windows", "1", "--record", str(out), "--overwrite"],
                            capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    assert out.is_dir() and (out / "metadata.yaml").is_file()
    assert any(topic == "/crossspec/caption" for topic, _, _ in read_bag(out))
