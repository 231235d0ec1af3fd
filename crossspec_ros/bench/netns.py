"""Two hosts on one machine: network namespaces joined by a veth pair (``crossspec bench split``).

The robot side and the server side each get a namespace of their own with loopback and one end
of the link; DDS discovers across the link by multicast (the default route points at it) and
talks UDP only (``FASTDDS_BUILTIN_TRANSPORTS=UDPv4``: no shared memory between the "hosts"),
so every byte between them crosses the veth pair, where it is counted and can be capped
(``tc`` token bucket) or cut (the link set down). Nothing leaves the namespaces; ``close``
(also on failure or a stop signal) kills what runs in them and deletes them, and the link with
them. The namespaces are named ``crossspec-split-K-robot`` and ``-server`` (K tells concurrent
runs apart).

Needs root and iproute2 (``available`` says why not, for tests to skip with a reason).
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from crossspec_ros.streaming import signals_deferred

ROBOT, SERVER = "robot", "server"
SUBNET = "10.213.{k}.{host}/24"
NAMESPACE_PREFIX = "crossspec-split-{k}-"


def available() -> tuple[bool, str]:
    """(True, "") where namespaces can be made here, else (False, why)."""
    if os.geteuid() != 0:
        return False, "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return False, "iproute2 (ip, tc) is not installed"
    probe = f"cs-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return False, f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return True, ""


class TwoHosts:
    """The robot and the server namespaces and the link between them (a context manager).

    ``k`` (1-254) tells concurrent runs apart (names and subnet; default: one no namespace
    uses now); processes started with ``start`` and anything else left in the namespaces are
    stopped by ``close``. ``caught`` (what ``streaming.sigterm_as_interrupt`` yielded): a stop
    signal while ``start`` runs is held until the process is recorded, so ``close`` stops it."""

    def __init__(self, k: int | None = None, caught: dict[str, int] | None = None) -> None:
        self.k = unused_k() if k is None else k
        self.caught = caught
        prefix = NAMESPACE_PREFIX.format(k=self.k)
        self.ns = {ROBOT: f"{prefix}{ROBOT}", SERVER: f"{prefix}{SERVER}"}
        self.dev = {ROBOT: f"cs{self.k}r", SERVER: f"cs{self.k}s"}
        self.address = {ROBOT: SUBNET.format(k=self.k, host=1),
                        SERVER: SUBNET.format(k=self.k, host=2)}
        self.processes: list[subprocess.Popen] = []
        self.cap_mbit: float | None = None

    # ------------------------------------------------------------ the link
    def __enter__(self) -> TwoHosts:
        try:
            for side in (ROBOT, SERVER):
                _ip("netns", "add", self.ns[side])
            _ip("link", "add", self.dev[ROBOT], "netns", self.ns[ROBOT], "type", "veth",
                "peer", "name", self.dev[SERVER], "netns", self.ns[SERVER])
            for side in (ROBOT, SERVER):
                _ip("-n", self.ns[side], "addr", "add", self.address[side], "dev",
                    self.dev[side])
                _ip("-n", self.ns[side], "link", "set", "lo", "up")
                _ip("-n", self.ns[side], "link", "set", self.dev[side], "up")
                # multicast discovery and unicast both leave through the link
                _ip("-n", self.ns[side], "route", "add", "default", "dev", self.dev[side])
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def cap(self, mbit: float | None) -> None:
        """Cap each direction of the link at ``mbit`` Mbit/s (None: uncapped)."""
        for side in (ROBOT, SERVER):
            subprocess.run(["tc", "-n", self.ns[side], "qdisc", "del", "dev", self.dev[side],
                            "root"], capture_output=True)
            if mbit is not None:
                # a bucket of ~20 ms of traffic; packets wait at most 200 ms, then drop
                burst = max(int(mbit * 1e6 / 8 * 0.02), 16_000)
                _run(["tc", "-n", self.ns[side], "qdisc", "add", "dev", self.dev[side], "root",
                      "tbf", "rate", f"{mbit}mbit", "burst", str(burst), "latency", "200ms"])
        self.cap_mbit = mbit

    def link(self, up: bool) -> None:
        """Take the link down (a cable pulled, a radio out of range) or bring it back."""
        for side in (ROBOT, SERVER):
            _ip("-n", self.ns[side], "link", "set", self.dev[side], "up" if up else "down")
        if up:
            for side in (ROBOT, SERVER):  # routes go with the link
                subprocess.run(["ip", "-n", self.ns[side], "route", "replace", "default",
                                "dev", self.dev[side]], capture_output=True)

    def bytes_crossed(self) -> int:
        """Bytes the robot side sent and received on the link so far."""
        total = 0
        for what in ("tx_bytes", "rx_bytes"):
            out = _run(["ip", "netns", "exec", self.ns[ROBOT], "cat",
                        f"/sys/class/net/{self.dev[ROBOT]}/statistics/{what}"])
            total += int(out.strip())
        return total

    # ------------------------------------------------------------ processes
    def start(self, side: str, argv: list[str], env: dict[str, str], log: IO[str] | None
              ) -> subprocess.Popen:
        """``argv`` in ``side``'s namespace, in a process group of its own."""
        # a stop signal inside Popen would leave a child that was forked but not recorded: it
        # joins the namespace after close's sweep and outlives the run
        held = contextlib.nullcontext() if self.caught is None else signals_deferred(self.caught)
        with held:
            process = subprocess.Popen(["ip", "netns", "exec", self.ns[side], *argv], env=env,
                                       stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
            self.processes.append(process)
        if self.caught is not None and self.caught["signal"]:
            raise KeyboardInterrupt
        return process

    def stop(self, process: subprocess.Popen, sig: int = signal.SIGINT,
             timeout: float = 15.0) -> int | None:
        """``sig`` to the process's group, then SIGKILL if it has not ended in ``timeout``."""
        if process.poll() is None:
            _signal_group(process, sig)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait(timeout=5)
        return process.returncode

    def close(self) -> None:
        """Stop every process in the namespaces and delete them. Runs to its end even when a
        stop signal's KeyboardInterrupt comes meanwhile (the step it cut runs again, the
        interrupt is raised at the end): a half-closed pair would outlive us."""
        steps = [*(functools.partial(self._stop_at_close, p) for p in self.processes),
                 *(functools.partial(_remove_namespace, name) for name in self.ns.values())]
        interrupted: KeyboardInterrupt | None = None
        for step in steps:
            while True:
                try:
                    step()
                    break
                except KeyboardInterrupt as stop:
                    interrupted = stop
        if interrupted is not None:
            raise interrupted

    def _stop_at_close(self, process: subprocess.Popen) -> None:
        if process.poll() is None:
            self.stop(process, signal.SIGTERM, timeout=5)


def namespaces_left(k: int) -> list[str]:
    """The namespaces of run ``k`` that still exist (none once ``close`` ran)."""
    prefix = NAMESPACE_PREFIX.format(k=k)
    return sorted(n for n in _namespaces() if n.startswith(prefix))


def unused_k() -> int:
    """A run number (1-250) whose namespaces do not exist now."""
    names = _namespaces()
    free = [k for k in range(1, 251)
            if not any(n.startswith(NAMESPACE_PREFIX.format(k=k)) for n in names)]
    if not free:
        raise RuntimeError("250 crossspec-split namespace pairs exist: remove stale ones "
                           "with `ip netns del`")
    return random.choice(free)


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _remove_namespace(name: str) -> None:
    # what ``start`` had no time to record (a signal inside Popen) or a child that left its
    # process group goes first: ``del`` removes the name, but the namespace lives on while a
    # process is in it
    out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
    for pid in (int(word) for word in out.split() if word.isdigit()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.killpg(process.pid, sig)


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def wait_for(path: Path, timeout: float) -> bool:
    """Until ``path`` exists (a process's first output), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
