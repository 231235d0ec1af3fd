"""Hosts on one machine: network namespaces joined by veth links (``crossspec bench split``).

The robots and the server each get a namespace of their own with loopback and one end of a
link. One robot: a veth pair between it and the server. Several: each robot's veth pair ends
in a bridge on the server (a switch: one link per robot, each cut or capped on its own). DDS
discovers across the links by multicast (the default route points at them) and talks UDP only
(``FASTDDS_BUILTIN_TRANSPORTS=UDPv4``: no shared memory between the "hosts"), so every byte
between them crosses a link, where it is counted and can be capped (``tc`` token bucket) or
cut (the link set down). Nothing leaves the namespaces; ``close`` (also on failure or a stop
signal) kills what runs in them and deletes them, and the links with them. The namespaces are
named ``crossspec-split-K-robot`` (``-robot1``, ``-robot2``, ... with several) and
``-server`` (K tells concurrent runs apart).

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
SERVER_HOST = 254  # the server's address on a bridge (robots are 1, 2, ...)


def robot_names(robots: int) -> list[str]:
    """The robots' names: "robot" alone, "robot1", "robot2", ... with several (each also the
    ROS namespace of its topics in a several-robot split)."""
    if robots < 1 or robots > 9:
        raise ValueError(f"1 to 9 robots, not {robots}")
    return [ROBOT] if robots == 1 else [f"{ROBOT}{i}" for i in range(1, robots + 1)]


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


class SplitHosts:
    """The robots' and the server's namespaces and the links between them (a context manager).

    ``robots``: how many robots (``robot_names``). ``k`` (1-254) tells concurrent runs apart
    (names and subnet; default: one no namespace uses now); processes started with ``start``
    and anything else left in the namespaces are stopped by ``close``. ``caught`` (what
    ``streaming.sigterm_as_interrupt`` yielded): a stop signal while ``start`` runs is held
    until the process is recorded, so ``close`` stops it."""

    def __init__(self, k: int | None = None, caught: dict[str, int] | None = None,
                 robots: int = 1) -> None:
        self.k = unused_k() if k is None else k
        self.caught = caught
        self.robots = robot_names(robots)
        prefix = NAMESPACE_PREFIX.format(k=self.k)
        self.ns = {side: f"{prefix}{side}" for side in [*self.robots, SERVER]}
        # each robot's link: (its end in the robot, its end on the server); names <= 15 chars
        self.links = {robot: (f"cs{self.k}r{i}", f"cs{self.k}s{i}")
                      for i, robot in enumerate(self.robots, 1)}
        self.bridge = f"cs{self.k}br" if robots > 1 else None
        server_host = 2 if robots == 1 else SERVER_HOST
        self.address = {**{robot: SUBNET.format(k=self.k, host=i)
                           for i, robot in enumerate(self.robots, 1)},
                        SERVER: SUBNET.format(k=self.k, host=server_host)}
        self.processes: list[subprocess.Popen] = []
        self.cap_mbit: float | None = None

    # ------------------------------------------------------------ the links
    def __enter__(self) -> SplitHosts:
        try:
            for side in self.ns:
                _ip("netns", "add", self.ns[side])
                _ip("-n", self.ns[side], "link", "set", "lo", "up")
            server_dev = self._make_bridge()
            for robot, (robot_end, server_end) in self.links.items():
                _ip("link", "add", robot_end, "netns", self.ns[robot], "type", "veth",
                    "peer", "name", server_end, "netns", self.ns[SERVER])
                _ip("-n", self.ns[robot], "addr", "add", self.address[robot], "dev", robot_end)
                if self.bridge is not None:
                    _ip("-n", self.ns[SERVER], "link", "set", server_end, "master", self.bridge)
                _ip("-n", self.ns[robot], "link", "set", robot_end, "up")
                _ip("-n", self.ns[SERVER], "link", "set", server_end, "up")
                # multicast discovery and unicast both leave through the link
                _ip("-n", self.ns[robot], "route", "add", "default", "dev", robot_end)
            server_dev = server_dev or self.links[self.robots[0]][1]
            _ip("-n", self.ns[SERVER], "addr", "add", self.address[SERVER], "dev", server_dev)
            _ip("-n", self.ns[SERVER], "route", "add", "default", "dev", server_dev)
        except BaseException:
            self.close()
            raise
        return self

    def _make_bridge(self) -> str | None:
        """The server's bridge (several robots), or None. Without IGMP snooping: with no
        querier on the segment, snooping would stop forwarding DDS's discovery multicast to a
        port once its membership report aged out."""
        if self.bridge is None:
            return None
        _ip("-n", self.ns[SERVER], "link", "add", self.bridge, "type", "bridge",
            "mcast_snooping", "0")
        _ip("-n", self.ns[SERVER], "link", "set", self.bridge, "up")
        return self.bridge

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _ends(self, robot: str | None = None) -> list[tuple[str, str]]:
        """(namespace, device) of both ends of ``robot``'s link, or of every link."""
        robots = self.robots if robot is None else [robot]
        return [end for r in robots for end in ((self.ns[r], self.links[r][0]),
                                                 (self.ns[SERVER], self.links[r][1]))]

    def cap(self, mbit: float | None) -> None:
        """Cap each direction of every link at ``mbit`` Mbit/s (None: uncapped)."""
        for ns, dev in self._ends():
            subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"],
                           capture_output=True)
            if mbit is not None:
                # a bucket of ~20 ms of traffic; packets wait at most 200 ms, then drop
                burst = max(int(mbit * 1e6 / 8 * 0.02), 16_000)
                _run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                      f"{mbit}mbit", "burst", str(burst), "latency", "200ms"])
        self.cap_mbit = mbit

    def link(self, up: bool, robot: str | None = None) -> None:
        """Take ``robot``'s link (default: the first robot's) down (a cable pulled, a radio out
        of range) or bring it back; the other robots' links stay as they are."""
        robot = robot or self.robots[0]
        for ns, dev in self._ends(robot):
            _ip("-n", ns, "link", "set", dev, "up" if up else "down")
        if up:  # routes go with the link
            subprocess.run(["ip", "-n", self.ns[robot], "route", "replace", "default", "dev",
                            self.links[robot][0]], capture_output=True)
            if self.bridge is None:
                subprocess.run(["ip", "-n", self.ns[SERVER], "route", "replace", "default",
                                "dev", self.links[robot][1]], capture_output=True)

    def bytes_crossed(self, robot: str | None = None) -> int:
        """Bytes ``robot`` (default: every robot) sent and received on its link so far."""
        total = 0
        for r in self.robots if robot is None else [robot]:
            for what in ("tx_bytes", "rx_bytes"):
                out = _run(["ip", "netns", "exec", self.ns[r], "cat",
                            f"/sys/class/net/{self.links[r][0]}/statistics/{what}"])
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
