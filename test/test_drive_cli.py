"""`crossspec drive` as a user runs it: a subprocess on the sample bag with the bundled pair."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

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
    assert compare["passes"]["text_only"]["graph"] == ["verifier"]
    assert compare["passes"]["crossspec"]["graph"] == ["draft", "verifier"]
    assert "pass 4/4" in result.stderr and "crossspec_verifier" in result.stderr
    assert {r["pass"] for r in rows} == {"alone", "live_alone", "text_only", "crossspec"}
    # the JSON a script reads: each graph's latency, at the scene changes too, and the draft
    for name in ("alone", "live_alone", "text_only", "crossspec"):
        assert {"confirmed_ms_median", "changes"} <= set(compare["passes"][name])
        assert "confirmed_ms_median" in compare["passes"][name]["changes"]
    draft = compare["passes"]["crossspec"]["draft"]
    assert {"windows", "complete_ms_median", "before_confirmed"} <= set(draft)
    assert draft["windows"] >= 1  # drafted before the close, from the events so far
    drafted = [r for r in rows if r["pass"] == "crossspec" and r["draft_text"]]
    assert drafted and all("draft_complete_ms" in r and "draft_started_ms" in r
                           for r in drafted)
    assert "crossspec minus text_only, paired" in result.stdout
    assert not any(r["draft_text"] for r in rows if r["pass"] != "crossspec")
    main = compare["crossspec_vs_alone"]
    assert main["pairs"] >= 3 and main["paired_speedup_median"] > 0 and len(main["rounds"]) == 1
    assert compare["same_captions"] == compare["compared_captions"] >= 9
    for name in ("alone", "live_alone", "crossspec"):  # early start: ~0.1 ms can round to 0
        assert compare["passes"][name]["confirmed_ms_median"] >= 0
    assert compare["passes"]["alone"]["ready_before_close_ms_median"] is None  # no live prefill
    # the line leads with latencies after the close; the ratio of publication times last
    assert "confirmed after the close (median): alone" in result.stdout
    assert "paired speedup (ratio of publication times) vs the verifier node alone" in \
        result.stdout
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
    # the verifier's caption book counts drafts that came after a finished caption (how many
    # is a race with the FINAL's way back to the draft node: counted, never asserted 0)
    assert isinstance(summary["drafts_after_final"], int) and summary["drafts_after_final"] >= 0
    # how close each complete draft came to its final caption, per window and in the summary;
    # a draft that completes only after its window's FINAL is not scored, and under load that
    # can be all three windows (the scoring itself: test_run_rows.py's test_a_complete_draft_...)
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


def test_loop_replays_the_bag_again_with_each_passes_windows_in_an_epoch_of_their_own(
        tmp_path):
    out = tmp_path / "loop.jsonl"
    result = subprocess.run([*DRIVE, "--loop", "--duration", "2.5", "--max-windows", "5",
                             "--no-viz", "--json", str(out)],
                            capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    *rows, summary = [json.loads(line) for line in out.read_text().splitlines()]
    keys = [(r["epoch"], r["window"]) for r in rows]
    assert len(keys) == len(set(keys)) >= 5  # one row per window of each pass
    first = {w for e, w in keys if e == 0}
    again = {w for e, w in keys if e == 1}
    assert len(first) >= 2 and again and again <= first  # the same windows, replayed
    # --max-windows 5 stops the replay once 5 are finished: windows still open then (more
    # of them on a busy machine) are rows as they stood, counted unfinished, never hidden
    finished = [r for r in rows if r["status"] in ("FINAL", "UNVERIFIED")]
    assert len(finished) >= 5
    assert summary["summary"]["unfinished"] == len(rows) - len(finished)
    assert any(f"[{w}@1] " in result.stdout for w in again)


@pytest.mark.parametrize(("args", "message"), [
    (["--loop", "--compare"], "drop one of them"),
    (["--loop", "--duration", "1.5"], "longer than the nodes' reset_threshold_s")])
def test_loop_with_compare_or_with_too_short_a_pass_is_refused_at_once(capsys, args, message):
    from crossspec_ros.cli.main import main

    assert main(["drive", "--no-viz", *args]) == 2
    assert message in capsys.readouterr().err


@pytest.fixture(scope="module")
def foxglove_recorded_drive(tmp_path_factory):
    """One `crossspec drive --compare` serving Foxglove to a websocket client connected from
    the start and recording (--overwrite) over an earlier recording, a file: read by the
    Foxglove test and the --overwrite test (its crossspec pass runs the viz node, which does
    both)."""
    import re
    import threading
    from types import SimpleNamespace

    ws_client = pytest.importorskip("websockets.sync.client")
    out = tmp_path_factory.mktemp("recorded") / "out"
    out.write_text("an earlier recording, a file")
    process = subprocess.Popen([*DRIVE, "--compare", "--rounds", "1", "--max-windows", "1",
                                "--graphs", "live_alone,crossspec",
                                "--duration", "3", "--foxglove", "--foxglove-port", "0",
                                "--record", str(out), "--overwrite"],
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
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    reader.join(timeout=10)
    return SimpleNamespace(code=code, stderr="".join(stderr), passes_before=passes_before,
                           captions=captions, out=out)


def test_one_foxglove_server_serves_every_compare_pass_to_a_client_connected_from_the_start(
        foxglove_recorded_drive):
    run = foxglove_recorded_drive
    assert run.code == 0, run.stderr
    # connected before the first pass began; the captions came in the crossspec pass, the last
    assert run.passes_before <= 1, run.stderr
    assert "pass 2/2" in run.stderr
    assert run.captions >= 1, run.stderr


def stop_after_line(args: list[str], seen_enough: Callable[[list[str]], bool], signum: int
                    ) -> tuple[int, str]:
    """Run drive, send ``signum`` once its output so far (stdout and stderr, line by line)
    satisfies ``seen_enough``; (exit code, output)."""
    # the signal must reach it even where this test runs in the background (ignores SIGINT)
    process = subprocess.Popen([*DRIVE, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=dict(os.environ),
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    deadline = time.monotonic() + 180
    try:
        for line in process.stdout:
            seen.append(line)
            if seen_enough(seen) or time.monotonic() > deadline:
                break
        process.send_signal(signum)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, "".join(seen) + rest


def stop_after_confirmed(args: list[str], confirmed: int, signum: int) -> tuple[int, str]:
    """Run drive, send ``signum`` once ``confirmed`` captions were confirmed."""
    # a live-view line of a confirmed caption: "[window] confirmed  ... ms  text"
    return stop_after_line(args, lambda seen: sum(" confirmed " in s for s in seen) >= confirmed,
                           signum)


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


def test_sigterm_after_the_replay_still_writes_the_json_rows_a_summary_and_the_bag(tmp_path):
    """SIGTERM as the pass ends (the recording just finished, the lossless check next):
    the rows, a summary marked interrupted and the bag, none left under a hidden name."""
    bag, out = tmp_path / "out", tmp_path / "rows.jsonl"
    code, output = stop_after_line(
        ["--record", str(bag), "--json", str(out), "--check-lossless", "--max-windows", "3"],
        lambda seen: "recorded " in seen[-1] and " messages to " in seen[-1], signal.SIGTERM)
    assert code == 143, output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    rows, summary = lines[:-1], lines[-1]["summary"]
    assert summary["interrupted"] is True
    final = [r for r in rows if r["status"] == "FINAL"]
    assert sum(r["status"] in ("FINAL", "UNVERIFIED") for r in rows) >= 3
    assert final and all(r["confirmed_text"] for r in final)
    assert summary["final"] == len(final)
    # a window checked before the signal says so; none claims more than was checked
    assert summary.get("lossless_checked", 0) == sum("lossless" in r for r in rows)
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
    from crossspec_ros.comparison import pass_order

    order = [(k, graph.name) for k, graph in pass_order(2)]
    assert order == [(0, "alone"), (0, "live_alone"), (0, "text_only"), (0, "crossspec"),
                     (1, "crossspec"), (1, "text_only"), (1, "live_alone"), (1, "alone")]


def test_compare_pairs_the_graphs_window_by_window_within_each_round():
    from crossspec_ros.comparison import compare_graphs, compare_line, graphs_named

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
    compare = compare_graphs(results, range(2), graphs_named(["alone", "live_alone",
                                                              "crossspec"]))
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


def test_compare_splits_out_the_scene_changes_and_says_first_when_the_draft_was_complete():
    from crossspec_ros.comparison import compare_graphs, compare_line, scene_changes

    captions = {1: "a car", 2: "a car", 3: "a bus", 4: "a bus", 5: "a car"}
    assert scene_changes(captions) == {3, 5}
    assert scene_changes({1: "a", 3: "b"}) == set()  # no window before 3 to differ from

    def rows(ms: dict[int, float], draft: dict[int, tuple[float, bool]] | None = None
             ) -> list[dict]:
        out = []
        for w, v in ms.items():
            # the repeated captions confirmed in the prefill's pass, the others in 2 rounds
            row = {"window": w, "status": "FINAL", "confirmed_done_ms": v,
                   "confirmed_text": captions[w], "draft_first_token_ms": None,
                   "rounds": 0 if captions[w] == captions.get(w - 1) else 2}
            if draft and w in draft:
                complete, first = draft[w]
                row.update(draft_text="d", draft_complete_ms=complete,
                           draft_before_confirmed=first, draft_first_token_ms=complete - 50)
            out.append(row)
        return out

    ms = {1: 300.0, 2: 300.0, 3: 300.0, 4: 300.0, 5: 300.0}
    results = {("alone", 0): rows(ms),
               ("live_alone", 0): rows({w: 100.0 for w in ms}),
               ("text_only", 0): rows({1: 60.0, 2: 10.0, 3: 80.0, 4: 10.0, 5: 90.0}),
               ("crossspec", 0): rows({1: 40.0, 2: 12.0, 3: 20.0, 4: 12.0, 5: 30.0},
                                      draft={1: (-30.0, True), 2: (-20.0, True),
                                             3: (-10.0, True), 4: (5.0, False),
                                             5: (-40.0, True)})}
    compare = compare_graphs(results, range(1))
    assert compare["graphs"] == ["alone", "live_alone", "text_only", "crossspec"]
    assert compare["scene_changes"] == [3, 5]
    ours = compare["passes"]["crossspec"]
    assert ours["changes"] == {"windows": 2, "confirmed_ms_median": 25.0, "one_pass": 0,
                               "decoding_rounds": 4, "draft": ours["changes"]["draft"]}
    assert (ours["one_pass"], ours["decoding_rounds"]) == (2, 6)  # windows 2 and 4 repeat
    assert ours["draft"]["windows"] == 5 and ours["draft"]["complete_ms_median"] == -20.0
    assert ours["draft"]["before_confirmed"] == 4
    assert ours["draft"]["complete_before_close"] == 4
    assert compare["passes"]["text_only"]["changes"]["confirmed_ms_median"] == 85.0
    assert "draft" not in compare["passes"]["text_only"]
    assert compare["crossspec_minus_text_only"]["changes"]["ms_median"] == -60.0
    assert compare["crossspec_vs_text_only"]["changes"]["paired_speedup_median"] == \
        pytest.approx((80 / 20 + 90 / 30) / 2)
    line = compare_line(compare)
    assert line.startswith("crossspec's draft caption: in 5 windows, complete 20.0 ms before "
                           "the close (median), before the confirmed caption in 4 of 5")
    assert "at the 2 scene changes: alone 300.0 ms, live_alone 100.0 ms, text_only 85.0 ms, " \
        "crossspec 25.0 ms" in line
    assert "crossspec minus text_only, paired: " in line
    assert line.index("paired speedup") > line.index("draft")  # the ratio comes last


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


def test_record_with_overwrite_replaces_an_existing_out_with_the_new_recording(
        foxglove_recorded_drive):
    run, out = foxglove_recorded_drive, foxglove_recorded_drive.out
    assert run.code == 0, run.stderr
    assert out.is_dir() and (out / "metadata.yaml").is_file()
    assert any(topic == "/crossspec/caption" for topic, _, _ in read_bag(out))


# -- one line for a bad option (item 28) ------------------------------------------------------

@pytest.mark.parametrize(("args", "option"), [
    (["--rate", "-1"], "--rate"), (["--rate", "nan"], "--rate"),
    (["--duration", "inf"], "--duration"), (["--duration", "nan"], "--duration"),
    (["--duration", "0"], "--duration"), (["--foxglove-port", "70000"], "--foxglove-port"),
    (["--foxglove-port", "-1"], "--foxglove-port"),
    # issue 53, item 6: a negative count loaded the models and replayed nothing, exit 0
    (["--max-windows", "-3"], "--max-windows"), (["--namespace", "a b"], "--namespace"),
    (["--graphs", "alone,nope"], "--graphs")])
def test_a_bad_rate_duration_or_port_is_refused_in_one_line_before_anything_loads(
        capsys, args, option):
    from crossspec_ros.cli.main import main

    with pytest.raises(SystemExit) as stopped:
        main(["drive", "--no-viz", *args])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("crossspec drive: ") and option in err and args[1] in err


# -- a stop signal at any moment (item 23) ----------------------------------------------------

class StraySignalError(Exception):
    """A stop signal that came where drive had no handler of its own for it."""


@pytest.fixture
def signal_handlers():
    """Whatever a test does to SIGINT and SIGTERM is undone after it; meanwhile a SIGTERM
    that drive does not handle fails the test instead of ending pytest."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def stray(signum, _frame):
        raise StraySignalError(f"signal {signum} came where drive does not handle it")

    signal.signal(signal.SIGTERM, stray)
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _sigterm_now() -> None:
    """SIGTERM to this process, handled before returning (its handler raises here)."""
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.01)


def _finished_pass(rows: list[dict], interrupted_too: bool = False, **fields):
    """A stand-in for ``run_pass``: a pass that left ``rows`` (a signal ended it, with
    ``interrupted_too``)."""
    from crossspec_ros.nodes.drive_pass import PassResult
    from crossspec_ros.run_summary import DroppedWindows

    def run_pass(args, graph, models, on_row=None, label="", **_):
        for row in rows:  # streamed as they finished
            if row["status"] in ("FINAL", "UNVERIFIED"):
                on_row(dict(row))
        return PassResult(rows=rows, window_rows=None, engine=None, dropped=DroppedWindows(),
                          interrupted=interrupted_too, **fields)
    return run_pass


def test_a_stop_signal_during_the_lossless_check_still_writes_the_rows_and_a_summary(
        tmp_path, monkeypatch, signal_handlers):
    import argparse

    from crossspec_ros.cli import drive_cmd

    rows = [{"window": w, "epoch": 0, "status": "FINAL", "confirmed_text": "a car turns",
             "draft_first_token_ms": 8.0, "confirmed_done_ms": 3.0} for w in (1, 2, 3)]

    def check_lossless(engine, window_rows, rows):  # SIGTERM while the second window is checked
        rows[0].update(lossless=True, verifier_only_ms=1.0)
        _sigterm_now()

    monkeypatch.setattr(drive_cmd, "run_pass", _finished_pass(rows))
    monkeypatch.setattr(drive_cmd, "check_held_windows", check_lossless)
    out = tmp_path / "rows.jsonl"
    args = argparse.Namespace(compare=False, rounds=1, json=out, check_lossless=True,
                              loop=False)
    try:
        code = drive_cmd._drive(args)
    except KeyboardInterrupt:
        code = "KeyboardInterrupt escaped"
    assert code == 143
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["window"] for r in lines[:-1]] == [1, 2, 3]
    assert lines[0]["lossless"] is True and "lossless" not in lines[1]  # the verdicts so far
    summary = lines[-1]["summary"]
    assert summary["interrupted"] is True and summary["final"] == 3
    assert (summary["lossless"], summary["lossless_checked"]) == (1, 1)
    assert not list(tmp_path.glob(".*partial"))


def test_a_pass_a_signal_ended_writes_its_rows_and_an_interrupted_summary(tmp_path, monkeypatch):
    """Mid-replay (the subprocess tests stop a real drive this way without --json)."""
    import argparse

    from crossspec_ros.cli import drive_cmd

    rows = [{"window": 1, "epoch": 0, "status": "FINAL", "confirmed_text": "a car turns",
             "draft_first_token_ms": 8.0, "confirmed_done_ms": 3.0},
            {"window": 2, "epoch": 0, "status": "DRAFT", "draft_first_token_ms": 9.0}]
    monkeypatch.setattr(drive_cmd, "run_pass", _finished_pass(rows, interrupted_too=True))
    out = tmp_path / "rows.jsonl"
    args = argparse.Namespace(compare=False, rounds=1, json=out, check_lossless=True,
                              loop=False)
    assert drive_cmd._drive(args) == 130
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["window"], r["status"]) for r in lines[:-1]] == [(1, "FINAL"), (2, "DRAFT")]
    summary = lines[-1]["summary"]
    assert summary["interrupted"] is True and (summary["final"], summary["unfinished"]) == (1, 1)


def test_a_comparison_without_crossspec_checks_and_sums_up_its_last_graph(tmp_path, monkeypatch):
    """`--compare --graphs live_alone,text_only` once ended in an AttributeError after its
    passes: only a crossspec pass carried the lossless check and the summary."""
    import argparse

    from crossspec_ros.cli import drive_cmd
    from crossspec_ros.comparison import LIVE_ALONE, TEXT_ONLY

    rows = [{"window": w, "epoch": 0, "status": "FINAL", "confirmed_text": "a car turns",
             "draft_first_token_ms": None, "confirmed_done_ms": 3.0} for w in (1, 2)]
    checked = []

    def check_lossless(engine, window_rows, pass_rows):
        checked.append(pass_rows)
        for row in pass_rows:
            row.update(lossless=True, verifier_only_ms=1.0)

    monkeypatch.setattr(drive_cmd, "run_pass", _finished_pass(rows))
    monkeypatch.setattr(drive_cmd, "check_held_windows", check_lossless)
    out = tmp_path / "rows.jsonl"
    args = argparse.Namespace(compare=True, rounds=1, graphs=(LIVE_ALONE, TEXT_ONLY), json=out,
                              check_lossless=True, loop=False)
    assert drive_cmd._drive(args) == 0
    assert checked == [rows]  # once: the last graph named (text_only) carries the check
    last = json.loads(out.read_text().splitlines()[-1])
    assert (last["summary"]["lossless"], last["summary"]["lossless_checked"]) == (2, 2)
    assert set(last["compare"]["passes"]) == {"live_alone", "text_only"}


def test_a_stop_signal_while_a_pass_shuts_down_lets_the_shutdown_finish(signal_handlers):
    from crossspec_ros.streaming import signals_deferred, sigterm_as_interrupt

    steps = []
    with sigterm_as_interrupt(ends_process=True) as caught, signals_deferred(caught):
        steps.append("nodes stopped")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        steps.append("recording finished")
    assert steps == ["nodes stopped", "recording finished"]
    assert caught["signal"] == signal.SIGTERM


# -- a node that died (issue 45's targets) ----------------------------------------------------

def test_a_graph_thread_that_ends_on_an_exception_is_named_in_one_line():
    import threading

    from crossspec_ros.nodes.drive_pass import NodeDeaths

    def spin() -> None:
        raise ValueError("cannot concat batches of sensors 320x240 and 160x120")

    with NodeDeaths(quiet=True) as deaths:
        assert deaths.found() == []
        thread = threading.Thread(target=spin, name="crossspec_spin")
        thread.start()
        thread.join()
        process_alive = [True]
        deaths.watch_process("the draft node's drafter process", lambda: process_alive[0])
        assert deaths.found() == ["thread crossspec_spin ended on ValueError: cannot concat "
                                  "batches of sensors 320x240 and 160x120"]
        process_alive[0] = False
        assert deaths.found()[1] == "the draft node's drafter process is gone"


def test_drive_exits_1_with_the_rows_and_says_which_node_died(tmp_path, monkeypatch, capsys):
    import argparse

    from crossspec_ros.cli import drive_cmd

    rows = [{"window": 1, "epoch": 0, "status": "FINAL", "confirmed_text": "a car turns",
             "draft_first_token_ms": 8.0, "confirmed_done_ms": 3.0}]
    died = ["thread crossspec_spin ended on ValueError: boom"]
    monkeypatch.setattr(drive_cmd, "run_pass", _finished_pass(rows, died=died))
    out = tmp_path / "rows.jsonl"
    args = argparse.Namespace(compare=False, rounds=1, json=out, check_lossless=False,
                              loop=False)
    assert drive_cmd._drive(args) == 1
    err = capsys.readouterr().err
    assert "crossspec drive: the graph stopped: thread crossspec_spin ended on ValueError: " \
        "boom" in err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["window"] == 1 and lines[-1]["summary"]["node_died"] == died


def test_wait_ends_as_soon_as_a_node_died():
    from types import SimpleNamespace

    from crossspec_ros.nodes.drive_pass import wait_for_windows

    never = SimpleNamespace(is_set=lambda: False)
    player = SimpleNamespace(done=never, stop=lambda: None)
    verifier = SimpleNamespace(params={"max_lateness_s": 0.2, "window_length_s": 1.0})
    window_rows = SimpleNamespace(finished=lambda: 0, last_activity=time.monotonic())
    deaths = SimpleNamespace(found=lambda: ["thread crossspec_spin ended on ValueError: x"])
    started = time.monotonic()
    wait_for_windows(player, verifier, window_rows, 0, deaths)  # else it waits for the bag forever
    assert time.monotonic() - started < 60


def test_a_bag_shorter_than_the_models_loading_still_waits_for_its_last_windows_caption():
    # issue 53, item 2: a 0.5 s bag ended before the first caption while the drive's quiet
    # clock had run since before the models loaded: it stopped at once with "0 windows"
    import threading
    from types import SimpleNamespace

    from crossspec_ros.nodes.drive_pass import wait_for_windows

    done = threading.Event()
    done.set()  # the replay is over
    player = SimpleNamespace(done=done, stop=lambda: None)
    verifier = SimpleNamespace(params={"max_lateness_s": 0.0, "window_length_s": 0.1},
                               loop=SimpleNamespace(queue=[], book=SimpleNamespace(windows={})))
    window_rows = SimpleNamespace(finished=lambda: 0, last_activity=time.monotonic() - 100.0)
    caption = threading.Timer(0.5, lambda: setattr(window_rows, "last_activity",
                                                   time.monotonic()))
    caption.start()  # its window closes by the synchronizer's idle timeout, then captioned
    try:
        wait_for_windows(player, verifier, window_rows, 0)
        returned = time.monotonic()
    finally:
        caption.cancel()
    assert window_rows.last_activity > time.monotonic() - 60  # the caption came, and then
    assert returned > window_rows.last_activity  # the wait ended only after it


# -- the drive's own view of the captions (item 24) --------------------------------------------

def test_the_drive_watcher_takes_a_burst_of_captions_the_executor_was_too_busy_to_take():
    import rclpy
    from crossspec import msg as cs_msg
    from rclpy.executors import SingleThreadedExecutor

    from crossspec_ros.nodes.common import reliable_qos
    from crossspec_ros.nodes.drive_pass import watch_captions

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node("drive_watcher_burst", context=context)
        publisher = node.create_publisher(cs_msg.Caption, "burst_caption", reliable_qos())
        got: list[int] = []
        watch_captions(node, "burst_caption", lambda msg: got.append(msg.window_id))
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        deadline = time.monotonic() + 30
        while publisher.get_subscription_count() < 1 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        # 300 captions while the executor takes none (as when it is busy for a while)
        for wid in range(300):
            publisher.publish(cs_msg.Caption(window_id=wid))
        deadline = time.monotonic() + 60
        while len(got) < 300 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        assert got == list(range(300))
        executor.shutdown()
        node.destroy_node()
    finally:
        rclpy.shutdown(context=context)


def test_the_recording_files_each_message_under_its_own_header_stamp(tmp_path):
    from crossspec import msg as cs_msg
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image

    from crossspec_ros.bags.recorder import BagRecorder

    frame = Image(height=1, width=1, encoding="rgb8", step=3, data=b"\x01\x02\x03")
    frame.header.stamp.sec, frame.header.stamp.nanosec = 1_700_000_003, 250_000_000
    caption = cs_msg.Caption(window_id=1_700_000_002)
    caption.header.stamp.sec, caption.header.stamp.nanosec = 1_700_000_004, 0
    unstamped = cs_msg.Caption(window_id=1_700_000_005)
    recorder = BagRecorder(tmp_path / "out")
    # the graph's clock when the viz node took them: 20 s on, after a busy spell
    late = 1_700_000_020 * 10**9
    recorder.write("/crossspec/annotated_image", "sensor_msgs/msg/Image",
                   serialize_message(frame), late)
    recorder.write("/crossspec/caption", "crossspec/msg/Caption", serialize_message(caption),
                   late)
    recorder.write("/crossspec/caption", "crossspec/msg/Caption",
                   serialize_message(unstamped), late + 1)
    recorder.close()
    assert sorted(t for _, _, t in read_bag(tmp_path / "out")) == [
        1_700_000_003_250_000_000, 1_700_000_004 * 10**9, late + 1]


def test_drive_on_an_emulated_target_says_so_and_stays_lossless(tmp_path):
    out = tmp_path / "drive.jsonl"
    result = subprocess.run([*DRIVE, "--max-windows", "2", "--check-lossless", "--json",
                             str(out), "--no-viz", "--emulate", "h100-bf16-eager-2026-11-24"],
                            capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(out.read_text().splitlines()[-1])["summary"]
    emulation = summary["emulation"]
    assert emulation["profile"] == "h100-bf16-eager-2026-11-24" and emulation["emulated"]
    # both models' calls went through the one emulated device (which of the drafter's kinds
    # depends on how far it got before each caption: any of them; on the eager profile the
    # verifier takes ~1 s a window, so the drafter always starts)
    calls = emulation["calls"]
    assert calls["verifier_pass"] > 0
    assert sum(n for kind, n in calls.items() if kind.startswith("drafter_")) > 0
    assert summary["line"].startswith("[EMULATED emulated: h100-bf16-eager-2026-11-24")
    assert "EMULATED target, not this machine's costs" in result.stderr
    assert "EMULATED emulated: h100-bf16-eager-2026-11-24" in result.stderr  # nodes' log
    assert summary["lossless"] == summary["lossless_checked"] >= 1
