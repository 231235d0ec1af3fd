"""The edge-cloud split across two hosts (crossspec bench split): network namespaces joined by
a veth pair, the draft node and the player on one side, the verifier node on the other."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from crossspec_ros.bench import netns

AVAILABLE, WHY = netns.available()
needs_netns = pytest.mark.skipif(not AVAILABLE, reason=f"no network namespaces here: {WHY}")
pytestmark = pytest.mark.slow


@needs_netns
def test_two_robots_on_one_server_each_get_only_their_own_captions_through_one_robots_outage(
        tmp_path):
    # issue 57: one verifier serves both robots as streams; robot1's link goes down for 3 s
    out = tmp_path / "split.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "ROS_AUTOMATIC_DISCOVERY_RANGE"}
    run = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", "bench", "split",
                          "--robots", "2", "--duration", "8", "--no-compile", "--fault",
                          "link-down", "--json", str(out)], capture_output=True, text=True,
                         timeout=600, env=env)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    *rows, last = [json.loads(line) for line in out.read_text().splitlines()]
    for key in ("hosts", "link_mbit", "windows", "final", "lossless", "confirmed_ms_median",
                "draft_ms_p95", "link_mb_per_s"):
        assert key in last, key
    assert last["robots"] == 2 and last["runs"] == 1
    cut, other = rows
    assert [(r["robot"], r["hosts"], r["fault"], r["fault_here"], r["replay_start_s"])
            for r in rows] == [("robot1", 3, "link-down", True, 0.0),
                               ("robot2", 3, "link-down", False, 9.0)]
    for row in rows:
        assert row["wrong_robot"] == 0  # no window of the other robot's stretch reached it
        assert row["windows"] >= 6
        # every window FINAL or UNVERIFIED with its draft; nothing stuck or published twice
        assert row["final"] + row["unverified"] == row["windows"]
        assert row["unverified_with_draft"] == row["unverified"]
        assert row["stuck"] == 0 and row["published_twice"] == 0
        assert row["lossless"] == row["lossless_checked"] == row["final"] >= 3
        assert row["link_mb_per_s"] > 0 and row["namespaces_left"] == []
        # the player's own pace (8 s of bag from its first message to its last): a rate-1
        # replay is never faster than recorded, however late the first draft came
        assert 0 < row["realtime"] <= 1.01 and row["replay_wall_s"] >= 7.9
    assert cut["fault_s"] >= 3.0 and "final_during_fault" not in cut
    # the other robot's captions kept coming while robot1 was cut off
    assert other["final_during_fault"] >= 1 and "fault_s" not in other
    assert "robot2 with robot1's link down" not in run.stdout  # no run without it to pair


@needs_netns
def test_the_namespaces_are_removed_when_the_run_fails_inside_them():
    with pytest.raises(RuntimeError, match="inside"), netns.SplitHosts(k=251) as hosts:
        assert netns.namespaces_left(251) == ["crossspec-split-251-robot",
                                         "crossspec-split-251-server"]
        sleeper = hosts.start(netns.ROBOT, ["sleep", "60"], dict(os.environ), None)
        raise RuntimeError("a failure inside")
    assert netns.namespaces_left(251) == []
    assert sleeper.poll() is not None  # what ran there was stopped


@needs_netns
def test_a_stop_signal_in_the_middle_of_close_does_not_cut_it_short(monkeypatch):
    hosts = netns.SplitHosts(k=253).__enter__()
    try:
        sleeper = hosts.start(netns.ROBOT, ["sleep", "60"], dict(os.environ), None)
        stop, calls = hosts.stop, []

        def interrupted_once(process, *args, **kwargs):
            calls.append(process)
            if len(calls) == 1:  # as a SIGTERM's handler raises it while close waits
                raise KeyboardInterrupt
            return stop(process, *args, **kwargs)

        monkeypatch.setattr(hosts, "stop", interrupted_once)
        with pytest.raises(KeyboardInterrupt):  # raised again once all is removed
            hosts.close()
        assert netns.namespaces_left(253) == []
        assert sleeper.wait(timeout=10) is not None
    finally:
        for name in netns.namespaces_left(253):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_a_stop_signal_while_a_host_process_starts_leaves_it_recorded_for_close(monkeypatch):
    """A signal inside Popen (the child forked, Popen not yet returned) once left a draft node
    nobody stopped: it joined its namespace after close's sweep (CI, SIGINT)."""
    from crossspec_ros.streaming import STOP_SIGNALS, sigterm_as_interrupt

    started = []

    class SignalledWhileStarting:
        def __init__(self, argv, **kwargs):
            started.append(self)
            self.argv = argv
            signal.raise_signal(signal.SIGINT)  # the handler runs here, as in os.read

    monkeypatch.setattr(netns.subprocess, "Popen", SignalledWhileStarting)
    hosts = netns.SplitHosts(k=250)
    with sigterm_as_interrupt(signals=STOP_SIGNALS) as caught:
        hosts.caught = caught
        with pytest.raises(KeyboardInterrupt):  # still a stop, once the child is recorded
            hosts.start(netns.ROBOT, ["sleep", "60"], {}, None)
    assert caught["signal"] == signal.SIGINT
    assert hosts.processes == started and started[0].argv[:4] == [
        "ip", "netns", "exec", "crossspec-split-250-robot"]


def test_the_replay_speed_is_the_players_bag_time_over_its_own_wall_time():
    from crossspec_ros.bench.split import player_pace

    started = ("crossspec play: waiting for crossspec_verifier to become active\n"
               "crossspec play: /tmp/x: y/compressed: 3 topics, 8.00 s per pass, rate 1\n")
    assert player_pace(started) is None  # not finished: no speed
    assert player_pace(started + "crossspec play: 4167 messages in 14.55 s (/camera/image_raw "
                       "160, /event_camera/events 4000)\n") == (8.0, 14.55)


@needs_netns
def test_the_link_carries_traffic_between_the_namespaces_and_can_be_cut():
    with netns.SplitHosts(k=252) as hosts:
        server = hosts.address[netns.SERVER].split("/")[0]  # answers ARP: the datagram goes
        send = ["ip", "netns", "exec", hosts.ns[netns.ROBOT], sys.executable, "-c",
                "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                f"s.sendto(b'x' * 1000, ('{server}', 9))"]
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


# ------------------------------------------------------------ stopped by a signal
SPLIT = [sys.executable, "-m", "crossspec_ros.cli.main", "bench", "split"]
MARK = "CROSSSPEC_TEST_SPLIT_RUN"  # in the environment of the bench and all it starts
HOSTS_LINE = re.compile(r"hosts (crossspec-split-\d+-)robot\d*, ")


class SplitRun:
    """A `crossspec bench split` in the background: its stderr read line by line, its temporary
    files under its own TMPDIR, every process it starts marked by an environment variable
    (found again in /proc, wherever it was reparented)."""

    def __init__(self, tmp_path: Path, args: list[str]) -> None:
        self.mark = uuid.uuid4().hex
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "ROS_AUTOMATIC_DISCOVERY_RANGE"}
        env.update({MARK: self.mark, "TMPDIR": str(self.tmp), "PYTHONUNBUFFERED": "1"})
        self.process = subprocess.Popen([*SPLIT, *args], env=env, text=True,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self.prefix: str | None = None  # the run's namespaces, once it named them
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.put(line.rstrip("\n"))

    def wait_line(self, text: str, timeout: float) -> str:
        """Until a stderr line containing ``text`` (fails after ``timeout`` or at the end)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                line = self.lines.get(timeout=0.2)
                self._keep(line)
                if text in line:
                    return line
                continue
            if self.process.poll() is not None and self.lines.empty():
                break
        pytest.fail(f"no line with {text!r}:\n" + "\n".join(self.stderr[-40:]))

    def finish(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        time.sleep(0.2)  # the reader's last lines
        while not self.lines.empty():
            self._keep(self.lines.get())
        return code

    def _keep(self, line: str) -> None:
        self.stderr.append(line)
        found = HOSTS_LINE.search(line)
        if found:
            self.prefix = found.group(1)

    def marked_processes(self) -> list[int]:
        """Processes (but this run's bench itself) carrying this run's mark."""
        needle = f"{MARK}={self.mark}".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.process.pid:
                continue
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
        return pids

    def temp_dirs(self) -> list[str]:
        return sorted(p.name for p in self.tmp.glob("crossspec-split-*"))

    def namespaces(self) -> list[str]:
        if self.prefix is None:
            return []
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return sorted(n for n in (line.split()[0] for line in out.splitlines() if line.strip())
                      if n.startswith(self.prefix))

    def wait_until(self, done: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def remove_leftovers(self) -> None:
        """Whatever this run left (the test failed): its processes and namespaces."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in self.marked_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for name in self.namespaces():
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.fixture
def split_run(tmp_path):
    runs: list[SplitRun] = []

    def start(*args: str) -> SplitRun:
        runs.append(SplitRun(tmp_path, list(args)))
        return runs[-1]

    yield start
    for run in runs:
        run.remove_leftovers()


@needs_netns
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         ids=lambda s: s.name)
def test_a_stop_signal_once_the_hosts_run_removes_namespaces_processes_and_files(split_run,
                                                                                 stop):
    run = split_run("--images", "raw", "--duration", "4", "--no-compile")
    run.wait_line("crossspec bench split: hosts crossspec-split-", timeout=300)
    assert run.namespaces() == [f"{run.prefix}robot", f"{run.prefix}server"]
    assert len(run.temp_dirs()) == 1
    # the monitor, the verifier and the draft node are running in them
    assert run.wait_until(lambda: len(run.marked_processes()) >= 3, timeout=120), \
        "\n".join(run.stderr[-20:])
    run.process.send_signal(stop)
    assert run.finish(timeout=180) == 128 + stop, "\n".join(run.stderr[-20:])
    assert run.stderr[-1] == f"crossspec bench split: stopped by {stop.name}: the hosts, " \
        "their processes and the temporary files are removed"
    # none of them left behind, reparented to PID 1
    assert run.wait_until(lambda: not run.marked_processes(), timeout=30), \
        [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in run.marked_processes()]
    assert run.namespaces() == []
    assert run.temp_dirs() == []


@needs_netns
def test_sigterm_before_the_hosts_exist_removes_the_temporary_files(split_run):
    run = split_run("--no-compile")  # the frames are re-encoded before any host is made
    run.wait_line("re-encoding the bag's frames", timeout=120)
    assert len(run.temp_dirs()) == 1
    run.process.send_signal(signal.SIGTERM)
    assert run.finish(timeout=120) == 128 + signal.SIGTERM, "\n".join(run.stderr[-20:])
    assert run.prefix is None, "the hosts were made before the signal: nothing tested"
    assert run.temp_dirs() == []
    assert run.wait_until(lambda: not run.marked_processes(), timeout=30)


# ------------------------------------------------------------ a run that replayed nothing
def test_a_run_that_replayed_nothing_fails_with_one_line_saying_why(monkeypatch, capsys,
                                                                    tmp_path):
    from crossspec_ros.bench import split
    from crossspec_ros.cli.main import main

    why = "no draft reached the robot; the player exited 1: crossspec play: error: " \
          "crossspec_verifier did not become active within 1 s"

    def nothing_replayed(bag, mbit, image_mode, fault, args, work, caught=None):
        row = split.summarize([], {})  # the monitor saw no draft, no caption
        row.update(hosts=2, link_mbit=mbit, images=image_mode, fault=fault, replayed=False,
                   why_not_replayed=why, namespaces_left=[], link_mb_per_s=0.0,
                   link_mb_per_s_wall=None, replay_wall_s=None, realtime=None)
        return [row]

    monkeypatch.setattr(netns, "available", lambda: (True, ""))
    monkeypatch.setattr(split, "run_once", nothing_replayed)
    out = tmp_path / "split.jsonl"
    assert main(["bench", "split", "--images", "raw", "--json", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == \
        f"crossspec bench split: run 1 (link 20 Mbit/s, raw images, fault none) replayed " \
        f"nothing: {why}"
    row, _summary = [json.loads(line) for line in out.read_text().splitlines()]
    assert (row["replayed"], row["windows"], row["why_not_replayed"]) == (False, 0, why)


def test_an_emulated_run_says_so_in_every_row_and_whether_each_nodes_emulation_held():
    from crossspec_ros.bench import split
    from crossspec_ros.bench.split_monitor import emulation_record

    # as the robot hears the nodes' /diagnostics: nothing emulated, then each node's verdict
    assert emulation_record("crossspec_draft", {"eager_steps": "0"}) is None
    robot = [emulation_record("crossspec_draft", {"emulated": "emulated: p", "emulation_held":
                                                  "True", "emulation_over_budget": "0"}),
             emulation_record("crossspec_verifier", {"emulated": "emulated: p", "emulation_held":
                                                     "True", "emulation_over_budget": "0"}),
             emulation_record("crossspec_verifier", {"emulated": "emulated: p", "emulation_held":
                                                     "False", "emulation_over_budget": "3"})]
    row = split.summarize(robot, {})
    assert row["emulation"] == {"crossspec_draft": {"held": True, "over_budget": 0},
                                "crossspec_verifier": {"held": False, "over_budget": 3}}
    row.update(hosts=2, link_mbit=20.0, images="raw", fault="none", realtime=1.0,
               link_mb_per_s=0.1, lossless=0, lossless_checked=0,
               emulated="emulated: p (a measured profile; docs/x.md)")
    line = split.row_line(row)
    assert line.startswith("[EMULATED emulated: p (a measured profile; docs/x.md)] link 20")
    assert line.endswith("the emulation did NOT hold: crossspec_verifier 3 calls over their "
                         "cost")
    assert split.emulation_verdict({}).startswith("the emulation's verdict never reached")
    row["emulated"] = None
    assert "EMULATED" not in split.row_line(row) and "emulation" not in split.row_line(row)
    # nothing measured is said in words, never "None ms" (issue 53, item 7)
    assert "None" not in line
    assert "not measured (no draft reached the robot to time its close by) after the " \
        "robot's" in line
    assert "draft first token p95 not measured (no draft)" in line


def test_an_unknown_cost_profile_is_refused_in_one_line_before_any_host_is_made(capsys):
    from crossspec_ros.cli.main import main

    assert main(["bench", "split", "--emulate", "a100-nonexistent"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--emulate: no cost profile 'a100-nonexistent'" in err[0]
    assert "h200-bf16-static-2026-11-27" in err[0]


def test_a_draft_that_reaches_the_robot_after_its_caption_is_counted():
    from crossspec_ros.bench import split

    def draft(window, t):
        return {"kind": "draft", "window": window, "epoch": 0, "t": t, "first_token_ms": 5.0}

    def final(window, t):
        return {"kind": "caption", "window": window, "status": split.FINAL, "t": t,
                "confirmed_done_ms": 1.0, "confirmed_text": "a", "draft_text": ""}

    # window 1: the draft first; window 2: the caption crossed the link first; 3: no draft
    robot = [draft(1, 10.0), final(1, 10.2), final(2, 11.1), draft(2, 11.3), final(3, 12.0)]
    row = split.summarize(robot, {})
    assert (row["final"], row["drafted"], row["drafts_after_final"]) == (3, 2, 1)


def test_the_robots_first_finished_caption_per_window_is_counted_by_the_run_records_tally():
    from crossspec_ros.bench import split

    def caption(window, status, done_ms, t):
        return {"kind": "caption", "window": window, "status": status, "t": t,
                "confirmed_done_ms": done_ms, "confirmed_text": "a", "draft_text": "d"}

    robot = [{"kind": "draft", "window": 1, "epoch": 0, "t": 1.0, "first_token_ms": 4.0},
             caption(1, split.FINAL, 10.0, 1.1), caption(1, split.FINAL, 99.0, 1.2),  # twice
             {"kind": "draft", "window": 2, "epoch": 0, "t": 2.0, "first_token_ms": 8.0},
             caption(2, split.UNVERIFIED, None, 2.5),
             caption(3, split.FINAL, 30.0, 3.1),
             {"kind": "draft", "window": 4, "epoch": 0, "t": 4.0, "first_token_ms": 6.0}]
    rows = split.window_rows([1, 2, 3, 4], {1: robot[1:3], 2: [robot[4]], 3: [robot[5]]},
                             {1: robot[0], 2: robot[3], 4: robot[6]})
    assert [r["status"] for r in rows] == ["FINAL", "UNVERIFIED", "FINAL", "DRAFT"]
    row = split.summarize(robot, {})
    assert (row["windows"], row["final"], row["unverified"]) == (4, 2, 1)
    assert (row["stuck"], row["published_twice"]) == (1, 1)
    assert row["confirmed_ms_median"] == 20.0  # the first FINAL of each window
    assert row["draft_ms_p95"] == 7.8
