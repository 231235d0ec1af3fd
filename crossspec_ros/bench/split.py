"""`crossspec bench split`: the edge-cloud split across two hosts, measured.

Two network namespaces joined by a veth pair stand for the robot and the GPU server
(``bench/netns.py``): on the robot the bag player (standing for the cameras), the draft node
and a monitor of what the robot receives (``bench/split_monitor.py``); on the server the
verifier node. The nodes are the ones ``ros2 launch crossspec robot.launch.py``
/ ``server.launch.py`` start (``crossspec node draft|verifier``), each in a process of its own,
discovering each other over the link by DDS multicast, UDP only.

Per run (every combination of ``--link-mbit``, ``--images`` and ``--fault``):
  link capped at N Mbit/s each way (tc token bucket); images raw (rgb8 Image) or compressed
  (the bag's frames re-encoded as JPEG CompressedImage, as image_transport's compressed
  republisher would send them); a fault in mid-drive:
    link-down          the link is down for 3 s (the robot drafts on, the server hears nothing)
    verifier-restart   the verifier process is killed (SIGKILL) and started again
With ``--robots N`` (N > 1) the server serves N robots, each in its own namespace with its own
link to the server's bridge, player, draft node and monitor, and its own stretch of the bag
(disjoint, a window apart); one verifier node takes them as streams (parameter ``streams``:
robot1,robot2,...), and a link-down fault cuts the first robot's link only. Each robot's row
also says how many windows of another robot's stretch reached it (``wrong_robot``, the
target 0), and, given runs with and without the fault, the other robots' confirmed latency
at the robot with the outage against without it, paired by window (``bench/split_outage.py``;
the target: within 10%). ``--repeat R`` alternates the runs R times.
Reported (one JSON line per run, the last line the runs and the headline run's numbers):
  windows, final, unverified (with and without a draft), stuck (a draft but no FINAL or
  UNVERIFIED caption at the end), published_twice (more than one FINAL/UNVERIFIED caption for
  a window), drafts_after_final (a window's first draft reached the robot after its FINAL
  caption), lossless (FINAL captions equal to the verifier alone on the frames the verifier
  says it captioned: ConfirmedTokens ``frame_stamps_sec``/``_nanosec``), confirmed_ms_median
  (the verifier's close -> last confirmed token),
  confirmed_at_robot_ms_median (the robot's close -> the FINAL caption's arrival there: the link
  both ways included), draft_ms_p95 (the draft node's close -> first draft token),
  link_mb_per_s (bytes both ways during the replay over the replayed bag's length), realtime
  (the bag time replayed over the wall time the player took from its first message to its
  last, as the player reports them: a link slower than the images slows the player, since DDS
  sends into full socket buffers synchronously), and for faults what happened around them.
A run that replayed nothing (no draft or caption reached the robot) fails the command, with one line
saying why. SIGINT, SIGTERM and SIGHUP alike stop every process, delete both namespaces and
the temporary files (exit 128 + the signal).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from crossspec_ros.bench.split_outage import effect_line, outage_effects
from crossspec_ros.paths import sample_bag
from crossspec_ros.run_record import LosslessTally, lossy_words, status_name, verdict
from crossspec_ros.run_summary import tally_of
from crossspec_ros.stamps import ns_to_seconds, seconds_to_ns
from crossspec_ros.streaming import (
    STOP_SIGNALS,
    exit_code_for,
    signals_deferred,
    sigterm_as_interrupt,
)
from crossspec_ros.summaries import median_ms
from crossspec_ros.sync.captions import CaptionStatus

LINK_DOWN_S = 3.0
FAULTS = ("none", "link-down", "verifier-restart")
IMAGE_MODES = ("compressed", "raw")
FINAL, UNVERIFIED = CaptionStatus.FINAL, CaptionStatus.UNVERIFIED


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "split", help="the draft node on a robot, the verifier on a server: two network "
        "namespaces, a capped link, faults (needs root)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bag", type=Path, default=None,
                        help="bag to replay on the robot (default: the sample bag)")
    parser.add_argument("--link-mbit", type=float, nargs="+", default=[20.0],
                        help="link caps to run, Mbit/s each way (default 20)")
    parser.add_argument("--images", choices=(*IMAGE_MODES, "both"), default="compressed")
    parser.add_argument("--fault", choices=FAULTS, nargs="+", default=["none"])
    parser.add_argument("--duration", type=float, default=None,
                        help="replay at most S seconds of the bag (default: all of it)")
    parser.add_argument("--fault-at", type=float, default=0.4,
                        help="when the fault comes, as a share of the replay (default 0.4)")
    parser.add_argument("--node-timeout", type=float, default=300.0,
                        help="seconds the nodes may take to become active (default 300)")
    parser.add_argument("--no-compile", action="store_true",
                        help="the nodes step their models eager (no compile at start)")
    parser.add_argument("--emulate", default="", metavar="PROFILE",
                        help="both nodes' model calls last what a cost profile says they cost "
                        "on the target (models/emulated.py; node parameter emulate): every "
                        "row says EMULATED and whether each node's emulation held")
    parser.add_argument("--robots", type=int, default=1, choices=range(1, 10), metavar="N",
                        help="robots sharing the server (default 1): each its own namespace, "
                        "link, player, draft node and stretch of the bag, one verifier serving "
                        "them as streams; a link-down fault cuts the first robot's link only")
    parser.add_argument("--repeat", type=int, default=1, metavar="R",
                        help="run every combination R times, alternating (default 1)")
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep every process's output in this directory")
    parser.add_argument("--json", type=Path, default=None, help="write the rows as JSON lines")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    bag = args.bag or sample_bag()
    refused = refusal(args, bag)
    if refused is not None:
        print(f"crossspec bench split: {refused}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    effects: list[dict[str, Any]] = []
    # ends_process: a second signal while the hosts are taken down must not cut it short
    with sigterm_as_interrupt(ends_process=True, signals=STOP_SIGNALS) as caught:
        try:
            rows, effects = run_all(args, bag, caught)
        except KeyboardInterrupt:
            caught["signal"] = caught["signal"] or signal.SIGINT
        if caught["signal"]:  # raised, or noted while a cleanup ran
            name = signal.Signals(caught["signal"]).name
            print(f"crossspec bench split: stopped by {name}: the hosts, their processes and "
                  "the temporary files are removed", file=sys.stderr)
            return exit_code_for(caught)
    return report(args, rows, effects)


def refusal(args: argparse.Namespace, bag: Path) -> str | None:
    """Why the runs asked for cannot be made here (None: they can), before any host is made;
    says when the target is emulated (``args.emulated``: the profile's label)."""
    from crossspec_ros.bench import netns

    args.emulated = ""
    if args.emulate:
        from crossspec_ros.models.emulated import CostProfile, ProfileError

        try:
            args.emulated = CostProfile.load(args.emulate).label
        except ProfileError as err:
            return f"--emulate: {err}"
        print(f"crossspec bench split: EMULATED target, not this machine's costs: "
              f"{args.emulated}", file=sys.stderr)
    if args.robots > 1 and args.emulate:
        # the lossless check's reference is the one-stream runtime; an emulated GPU puts the
        # streams in lanes, whose captions that runtime need not give (docs/streams.md)
        return ("--emulate with --robots > 1 is not built: the lossless check has no laned "
                "reference yet; run the robots unemulated")
    if args.repeat < 1:
        return "--repeat must be at least 1"
    ok, why = netns.available()
    if not ok:
        return f"cannot make two hosts here: {why}"
    if args.fault_at <= 0 or args.fault_at >= 1:
        return "--fault-at must be between 0 and 1"
    if args.robots > 1:
        try:  # the robots' stretches must fit in the bag
            robot_stretches(bag, args.robots, args.duration, seconds_to_ns(
                verifier_defaults()["window_length_s"]))
        except ValueError as err:
            return f"--robots {args.robots}: {err}"
    return None


def report(args: argparse.Namespace, rows: list[dict[str, Any]],
           effects: list[dict[str, Any]]) -> int:
    """The outage's effects printed, the JSON written (rows, then a summary of the headline
    run), a line per run that replayed nothing; the exit code: 0 when every run replayed and
    every row is lossless, with nothing stuck, published twice or on the wrong robot."""
    headline = next((r for r in rows if r["fault"] == "none" and r["images"] == "compressed"
                     and r["link_mbit"] == 20), rows[-1] if rows else {})
    summary = {**{k: v for k, v in headline.items() if not k.startswith("fault_")},
               "runs": len({r["run"] for r in rows}), "robots": args.robots}
    if effects:
        summary["outage_effects"] = effects
        for effect in effects:
            print(effect_line(effect), flush=True)
    if args.json is not None:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in [*rows, summary]))
        print(f"wrote {args.json}", file=sys.stderr)
    empty = [r for r in rows if not r["replayed"] or r["windows"] == 0]
    for r in empty:
        print(f"crossspec bench split: run {r['run']} ({run_label(r)}) replayed nothing: "
              f"{r.get('why_not_replayed') or 'no window reached the robot'}", file=sys.stderr)
    return 0 if rows and not empty and all(
        r["lossless"] == r["lossless_checked"] and r["stuck"] == 0
        and r["published_twice"] == 0 and not r.get("wrong_robot") for r in rows) else 1


def run_all(args: argparse.Namespace, bag: Path, caught: dict[str, int]
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every run asked for, in a temporary directory removed at the end (a stop signal's
    KeyboardInterrupt included; ``caught``: what ``sigterm_as_interrupt`` yielded): their
    rows (one per robot and run) and, with several robots, the outage's effect on the
    others (``outage_effects``)."""
    rows: list[dict[str, Any]] = []
    with temporary_directory("crossspec-split-", caught) as work:
        try:
            images = IMAGE_MODES if args.images == "both" else (args.images,)
            bags = {"raw": bag}
            if "compressed" in images:
                print("crossspec bench split: re-encoding the bag's frames as JPEG "
                      "CompressedImage", file=sys.stderr)
                # several robots replay stretches further in: the whole bag
                bags["compressed"] = jpeg_bag(bag, work / "compressed",
                                              args.duration if args.robots == 1 else None)
            reference = ReferenceVerifier(compile=not args.no_compile)
            runs = [(repeat, *combination) for repeat in range(1, args.repeat + 1)
                    for combination in itertools.product(args.link_mbit, images, args.fault)]
            for number, (repeat, mbit, image_mode, fault) in enumerate(runs, 1):
                print(f"crossspec bench split: run {number}/{len(runs)}: link {mbit:g} Mbit/s, "
                      f"{image_mode} images, fault {fault}", file=sys.stderr)
                for row in run_once(bags[image_mode], mbit, image_mode, fault, args,
                                    work / str(number), caught):
                    row.update(reference.check(bags[image_mode], row.pop("_finals"),
                                               row.pop("_frames")), run=number, repeat=repeat)
                    rows.append(row)
                    print(row_line(row), flush=True)
        finally:
            if args.logs is not None:
                with signals_deferred(caught):
                    args.logs.mkdir(parents=True, exist_ok=True)
                    for log in [*work.glob("*/*.log"), *work.glob("*/*.jsonl")]:
                        shutil.copy(log, args.logs / f"{log.parent.name}-{log.name}")
    effects = outage_effects(rows)
    for row in rows:
        row.pop("_at_robot", None)
    return rows, effects


@contextlib.contextmanager
def temporary_directory(prefix: str, caught: dict[str, int]) -> Iterator[Path]:
    """A new directory under the system's temporary one, removed when the block ends however
    it ends. A stop signal while it is made or removed only is noted in ``caught`` (what
    ``sigterm_as_interrupt`` yielded), so neither is cut halfway."""
    with signals_deferred(caught):
        path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        if caught["signal"]:  # came while it was made
            raise KeyboardInterrupt
        yield path
    finally:
        with signals_deferred(caught):
            shutil.rmtree(path, ignore_errors=True)


# ------------------------------------------------------------ one run
def run_once(bag: Path, mbit: float, image_mode: str, fault: str, args: argparse.Namespace,
             work: Path, caught: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """One run: the hosts made, the nodes and players started, the fault injected, every
    process stopped and the hosts removed; one row per robot."""
    from crossspec_ros.bench import netns

    work.mkdir(parents=True)
    env = split_env(args.no_compile)
    py = [sys.executable, "-m"]
    node = [*py, "crossspec_ros.cli.main", "node"]
    robots = plan_robots(bag, args, work)
    # the hosts close first (every process stopped), then the logs
    with contextlib.ExitStack() as logs, \
            netns.SplitHosts(caught=caught, robots=len(robots)) as hosts:
        def log(name: str) -> Any:
            return logs.enter_context(open(work / f"{name}.log", "w"))

        hosts.cap(mbit)
        print(f"crossspec bench split: hosts {', '.join(hosts.ns.values())} up, link "
              f"{mbit:g} Mbit/s each: starting the monitors and the draft nodes on the "
              "robots, the verifier node on the server", file=sys.stderr)
        verifier_argv = [*node, "verifier", *verifier_ros_args(args.emulate, robots)]
        verifier = _start_nodes(hosts, py, node, verifier_argv, robots, args.emulate, env, log)
        for robot in robots:
            robot.player = hosts.start(robot.name, _player_argv(py, bag, args, robot), env,
                                       log(robot.file("player")))
        replay = _replay(hosts, robots, args, fault,
                         lambda: inject(fault, hosts, verifier, verifier_argv, env,
                                        log("verifier-restarted")))
        first = [p for r in robots for p in (r.player, r.draft)]
        for process in [*first, *[p for p in hosts.processes if p not in first]]:
            hosts.stop(process)
        k = hosts.k
    rows = []
    for robot in robots:
        # a fault on a link is on the first robot's; a verifier's restart hits every robot
        hit = fault == "verifier-restart" or (fault == "link-down" and robot is robots[0])
        row = robot_row(robot, replay.fault_info, hit, replay.players_finished,
                        replay.crossed[robot.name])
        row.update(emulated=args.emulated or None, hosts=len(robots) + 1, link_mbit=mbit,
                   images=image_mode, fault=fault, replayed=replay.started,
                   why_not_replayed=replay.why_not, namespaces_left=netns.namespaces_left(k))
        if len(robots) > 1:
            row.update(fault_here=hit, replay_start_s=robot.start_s)
        rows.append(row)
    return rows


@dataclasses.dataclass
class Replay:
    """How a run's replay went: whether the graph worked (the robots saw drafts or captions),
    why not, the fault's start and end, whether every player finished, each robot's bytes."""

    started: bool = False
    why_not: str | None = None
    fault_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    players_finished: bool = False
    crossed: dict[str, int] = dataclasses.field(default_factory=dict)


def _replay(hosts: Any, robots: list[SplitRobot], args: argparse.Namespace, fault: str,
            inject_fault: Callable[[], dict[str, Any]]) -> Replay:
    """Wait for the players to start and the graph to work, inject the fault, wait for the
    players' end and the last captions."""
    replay = Replay(crossed=dict.fromkeys((r.name for r in robots), 0))
    # the links' bytes are the replay's: from the players' announcement (the nodes are
    # active, their first message comes) to their end
    announced = all([wait_player_announced(r.player_log, r.player, args.node_timeout + 60)
                     for r in robots])
    before = {r.name: hosts.bytes_crossed(r.name) for r in robots}
    replay.started = announced and all([wait_first_output(r.seen, r.player, args.node_timeout)
                                        for r in robots])
    if not replay.started:
        replay.why_not = "; ".join(
            (f"{r.name}: " if len(robots) > 1 else "") + why_not_replayed(
                r.player.poll(), r.player_log.read_text(), args.node_timeout)
            for r in robots if not r.seen_output())
        return replay
    if fault != "none":
        time.sleep(args.fault_at * robots[0].seconds)
        replay.fault_info = inject_fault()
    replay.players_finished = all([_wait_player_done(r.player, r.seconds * 3 + 60)
                                   for r in robots])
    replay.crossed = {r.name: hosts.bytes_crossed(r.name) - before[r.name] for r in robots}
    time.sleep(settle_seconds())  # the last windows close, their captions cross
    return replay


def robot_row(robot: SplitRobot, fault_info: dict[str, Any], hit: bool,
              players_finished: bool, bytes_crossed: int) -> dict[str, Any]:
    """What ``robot`` saw (``summarize``), its link's MB/s over the bag time replayed and over
    the player's wall time, its replay's pace, and with several robots the windows of
    another robot's stretch of the bag that reached it (``wrong_robot``)."""
    records = read_jsonl(robot.seen)
    row = {"robot": robot.name, **summarize(records, fault_info, hit)}
    if robot.windows is not None:
        row["wrong_robot"] = len({r["window"] for r in records if "window" in r}
                                 - set(robot.windows))
    # a link slower than the images pushes back on the player (DDS sends synchronously into
    # full socket buffers): the replay then runs slower than recorded
    pace = player_pace(robot.player_log.read_text()) if players_finished else None
    row.update(link_mb_per_s=round(bytes_crossed / 1e6 / robot.seconds, 3),
               link_mb_per_s_wall=None, replay_wall_s=None, realtime=None)
    if pace is not None:
        row.update(link_mb_per_s_wall=round(bytes_crossed / 1e6 / pace[1], 3),
                   replay_wall_s=round(pace[1], 2), realtime=round(pace[0] / pace[1], 2))
    return row


@dataclasses.dataclass
class SplitRobot:
    """One robot of a run: its name (with several robots also the ROS namespace of its
    topics and nodes), the stretch of the bag it replays, the window ids of that stretch
    (None with one robot), its files and its processes."""

    name: str
    namespace: str
    start_s: float
    seconds: float
    windows: range | None
    work: Path
    player: Any = None
    draft: Any = None

    def file(self, kind: str) -> str:
        """A log's name: "player" with one robot, "robot1-player" with several."""
        return f"{self.name}-{kind}" if self.namespace else kind

    @property
    def seen(self) -> Path:
        return self.work / f"{self.name}.jsonl"

    @property
    def player_log(self) -> Path:
        return self.work / f"{self.file('player')}.log"

    def topic(self, name: str) -> str:
        """One of crossspec's topics as this robot's monitor hears it."""
        return f"/{self.namespace}/{name}" if self.namespace else name

    def seen_output(self) -> bool:
        return any(r.get("kind") in ("draft", "caption") for r in read_jsonl(self.seen))


def plan_robots(bag: Path, args: argparse.Namespace, work: Path) -> list[SplitRobot]:
    """The robots of a run and the bag stretch each replays: one robot the bag from its
    start (``--duration`` of it); several, disjoint stretches of ``--duration`` (default: as
    long as fit) a window apart, so no window is two robots' and a caption on another robot's
    topics is told by its window."""
    from crossspec_ros.bench import netns

    names = netns.robot_names(args.robots)
    if len(names) == 1:
        return [SplitRobot(names[0], "", 0.0, args.duration or bag_seconds(bag), None, work)]
    window_ns = seconds_to_ns(verifier_defaults()["window_length_s"])
    start_ns, stretches = robot_stretches(bag, len(names), args.duration, window_ns)
    return [SplitRobot(name, name, ns_to_seconds(offset), ns_to_seconds(length),
                       range((start_ns + offset) // window_ns,
                             -(-(start_ns + offset + length) // window_ns)), work)
            for name, (offset, length) in zip(names, stretches, strict=True)]


def robot_stretches(bag: Path, robots: int, duration_s: float | None, window_ns: int
                    ) -> tuple[int, list[tuple[int, int]]]:
    """(the bag's start, [(offset, length) of each robot's stretch]), in nanoseconds; raises
    ValueError when the stretches do not fit in the bag."""
    from crossspec_ros.bagfile import any_reader

    with any_reader(bag) as reader:
        start_ns, bag_ns = reader.start_time, reader.end_time - reader.start_time
    gaps = (robots - 1) * window_ns
    length = seconds_to_ns(duration_s) if duration_s else \
        (bag_ns - gaps) // robots // window_ns * window_ns
    if length <= 0 or robots * length + gaps > bag_ns:
        raise ValueError(f"{robots} robots need {robots} disjoint stretches of the bag a window "
                         f"apart: {ns_to_seconds(bag_ns):.1f} s of bag do not hold "
                         f"{robots} x {ns_to_seconds(max(length, 0)):.1f} s; pass a shorter "
                         "--duration or a longer --bag")
    return start_ns, [(i * (length + window_ns), length) for i in range(robots)]


def verifier_defaults() -> dict[str, Any]:
    """The verifier node's parameters as the nodes of a split run them (their defaults)."""
    from crossspec_ros.params import VERIFIER_NODE_PARAMS, validate

    return validate({}, VERIFIER_NODE_PARAMS)


def draft_ros_args(emulate: str, robot: SplitRobot) -> list[str]:
    """A draft node's ROS arguments: the bag's clock (its robot's, with several robots: the
    player publishes NS/clock), and the emulated target if any."""
    ros = ["--ros-args", "-p", "use_sim_time:=true"]
    if robot.namespace:
        ros += ["-r", f"__ns:=/{robot.namespace}", "-r", "/clock:=clock"]
    if emulate:  # each host its own emulated device: a robot's and a server's
        ros += ["-p", f"emulate:={emulate}"]
    return ros


def verifier_ros_args(emulate: str, robots: list[SplitRobot]) -> list[str]:
    """The verifier's ROS arguments: with one robot the bag's clock; with several, one stream
    per robot (each robot's bag time is its own: the verifier decides by the frames' stamps
    and its steady clock, so it keeps its system clock)."""
    if len(robots) > 1:
        ros = ["--ros-args", "-p", f"streams:={','.join(r.namespace for r in robots)}"]
    else:
        ros = ["--ros-args", "-p", "use_sim_time:=true"]
    if emulate:
        ros += ["-p", f"emulate:={emulate}"]
    return ros


def _start_nodes(hosts: Any, py: list[str], node: list[str], verifier_argv: list[str],
                 robots: list[SplitRobot], emulate: str, env: dict[str, str],
                 log: Callable[[str], Any]) -> Any:
    """Each robot's monitor (writing its ``seen``), the server's verifier node and each
    robot's draft node, in that order; the verifier once every monitor has started."""
    from crossspec_ros.bench import netns

    for robot in robots:
        hosts.start(robot.name, [*py, "crossspec_ros.bench.split_monitor", "--out",
                                 str(robot.seen), *monitor_topics(robot)], env,
                    log(robot.file("monitor")))
    verifier = hosts.start(netns.SERVER, verifier_argv, env, log("verifier"))
    for robot in robots:
        robot.draft = hosts.start(robot.name, [*node, "draft", *draft_ros_args(emulate, robot)],
                                  env, log(robot.file("draft")))
    for robot in robots:
        if not netns.wait_for(robot.seen, 60):
            raise RuntimeError(f"{robot.name}'s monitor never started; see its log")
    return verifier


def monitor_topics(robot: SplitRobot) -> list[str]:
    """The monitor's topic arguments: its robot's namespace (none with one robot)."""
    if not robot.namespace:
        return []
    return [f"--{kind}-topic={robot.topic(f'crossspec/{kind}')}"
            for kind in ("caption", "draft", "confirmed")]


def _player_argv(py: list[str], bag: Path, args: argparse.Namespace, robot: SplitRobot
                 ) -> list[str]:
    """`crossspec play` of ``robot``'s stretch of ``bag``, once its draft node and the
    verifier are active."""
    player_args = [*py, "crossspec_ros.cli.main", "play", str(bag), "--wait-timeout",
                   str(args.node_timeout)]
    if robot.namespace:
        player_args += ["--namespace", robot.namespace, "--start", str(robot.start_s),
                        "--duration", str(robot.seconds), "--wait-active", "crossspec_draft",
                        "/crossspec_verifier"]
    else:
        player_args += ["--wait-active", "crossspec_draft", "crossspec_verifier"]
        if args.duration:
            player_args += ["--duration", str(args.duration)]
    return player_args


def _wait_player_done(player: Any, timeout: float) -> bool:
    """Until the player ends or ``timeout`` passes; whether it ended."""
    deadline = time.monotonic() + timeout
    while player.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    return player.poll() is not None


# `crossspec play`'s lines (cli/play_cmd.py): once it starts, and its summary at the end
PLAYER_STARTS = re.compile(r"^crossspec play: .*: \d+ topics, ([0-9.]+) s per pass", re.M)
PLAYER_ENDED = re.compile(r"^crossspec play: \d+ messages in ([0-9.]+) s", re.M)


def player_pace(output: str) -> tuple[float, float] | None:
    """(bag seconds replayed, wall seconds from the first message to the last) from
    `crossspec play`'s output; None before it has finished a replay. Their ratio is the
    replay's speed (1 at recorded speed when nothing holds the player back)."""
    starts, ended = PLAYER_STARTS.search(output), PLAYER_ENDED.search(output)
    if starts is None or ended is None or float(ended.group(1)) <= 0:
        return None
    return float(starts.group(1)), float(ended.group(1))


def wait_player_announced(path: Path, player: Any, timeout: float) -> bool:
    """Until the player says it starts replaying (the nodes it waits for are active), it
    ended, or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and player.poll() is None:
        if path.exists() and PLAYER_STARTS.search(path.read_text()):
            return True
        time.sleep(0.2)
    return path.exists() and PLAYER_STARTS.search(path.read_text()) is not None


def why_not_replayed(player_code: int | None, player_output: str, timeout: float) -> str:
    """Why no draft or caption reached the robot, in a few words, with the player's last
    line."""
    lines = [line for line in player_output.splitlines() if line.strip()]
    said = f": {lines[-1].strip()}" if lines else ""
    if player_code is None:
        return f"no draft or caption reached the robot within {timeout:g} s " \
            f"(--node-timeout); the player was still running{said}"
    return f"no draft or caption reached the robot; the player exited {player_code}{said}"


def split_env(no_compile: bool) -> dict[str, str]:
    """The nodes' environment: DDS across the link (not loopback), UDP only, a domain of this
    run's own."""
    env = dict(os.environ)
    env.pop("ROS_LOCALHOST_ONLY", None)
    env.update(ROS_AUTOMATIC_DISCOVERY_RANGE="SUBNET", FASTDDS_BUILTIN_TRANSPORTS="UDPv4",
               ROS_DOMAIN_ID=str(random.randint(1, 101)), PYTHONUNBUFFERED="1")
    if no_compile:
        env["CROSSSPEC_NO_COMPILE"] = "1"
    return env


def settle_seconds() -> float:
    """How long the last window takes to finish after the bag: its close, the lateness the
    synchronizers allow, the caption protocol's patience (nodes' defaults), and a margin."""
    p = verifier_defaults()
    return 2 * (p["window_length_s"] + p["max_lateness_s"]) + 3.0


def wait_first_output(path: Path, player: Any, timeout: float) -> bool:
    """Until the robot has seen the graph's first draft or caption (the replay has begun and
    the nodes work; a verifier ahead of the drafter leaves windows undrafted, so a draft alone
    is no sign), the player ended ``settle_seconds`` ago (a short replay's first window closes
    after its end), or ``timeout``."""
    deadline, ended = time.monotonic() + timeout, False
    while time.monotonic() < deadline:
        if any(r.get("kind") in ("draft", "caption") for r in read_jsonl(path)):
            return True
        if not ended and player.poll() is not None:
            ended, deadline = True, min(deadline, time.monotonic() + settle_seconds())
        time.sleep(0.2)
    return False


def inject(fault: str, hosts: Any, verifier: Any, verifier_argv: list[str],
           env: dict[str, str], log: Any) -> dict[str, Any]:
    """The fault, now; returns when it started and ended (monotonic seconds)."""
    t0 = time.monotonic()
    if fault == "link-down":
        hosts.link(False)
        time.sleep(LINK_DOWN_S)
        hosts.link(True)
    elif fault == "verifier-restart":
        hosts.stop(verifier, signal.SIGKILL)
        hosts.start("server", verifier_argv, env, log)
    return {"kind": fault, "fault_start": t0, "fault_end": time.monotonic()}


def bag_seconds(bag: Path) -> float:
    from crossspec_ros.bagfile import any_reader

    with any_reader(bag) as reader:
        return ns_to_seconds(reader.end_time - reader.start_time)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):  # a last line cut off by the process's end
            rows.append(json.loads(line))
    return rows


# ------------------------------------------------------------ what the robot saw
def summarize(robot: list[dict[str, Any]], fault: dict[str, Any], hit: bool = True
              ) -> dict[str, Any]:
    """The run's numbers from a robot's monitor's records (see the module docstring);
    ``fault``: when it began and ended, ``hit``: whether it was this robot's (another
    robot's outage: the FINAL captions that reached this one meanwhile)."""
    captions = [r for r in robot if r["kind"] == "caption"]
    drafts = {r["window"]: r for r in robot if r["kind"] == "draft"}
    terminal: dict[int, list[dict[str, Any]]] = {}
    for c in captions:
        if c["status"] in (FINAL, UNVERIFIED):
            terminal.setdefault(c["window"], []).append(c)
    windows = sorted({c["window"] for c in captions} | set(drafts))
    finals = {w: cs[0] for w, cs in terminal.items() if cs[0]["status"] == FINAL}
    unverified = [cs[0] for cs in terminal.values() if cs[0]["status"] == UNVERIFIED]
    # the counts and latencies every command reports, from the run record's tally
    tally = tally_of(window_rows(windows, terminal, drafts)).summary()
    # at the robot: its own window close (the draft's arrival less its first-token latency,
    # on the robot's clock) to the FINAL caption's arrival: the link's delays both ways in it
    at_robot = {w: (c["t"] - drafts[w]["t"]) * 1e3 + drafts[w]["first_token_ms"]
                for w, c in finals.items()
                if w in drafts and drafts[w]["first_token_ms"] is not None}
    row: dict[str, Any] = {
        "windows": tally["windows"], "final": tally["final"],
        "unverified": tally["unverified"],
        "unverified_with_draft": sum(bool(c["draft_text"]) for c in unverified),
        "stuck": sum(1 for w in windows if w in drafts and w not in terminal),
        "uncaptioned": sum(1 for w in windows if w not in terminal),
        "published_twice": sum(1 for cs in terminal.values() if len(cs) > 1),
        "confirmed_ms_median": tally["confirmed_done_ms_median"],
        "confirmed_at_robot_ms_median": median_ms(list(at_robot.values())),
        "draft_ms_p95": tally["draft_first_token_ms_p95"],
        "drafted": len(drafts),
        # a window's first draft that reached the robot after its FINAL caption: the caption
        # crossed the link while the draft node had not heard it yet (issue 44's target: 0)
        "drafts_after_final": sum(1 for w, c in finals.items()
                                  if w in drafts and drafts[w]["t"] > c["t"]),
        "_finals": {w: (c["confirmed_text"], c.get("acceptance_rule", ""))
                    for w, c in finals.items()},
        "_frames": {r["window"]: r["stamps_ns"] for r in robot if r["kind"] == "frames"},
        "_at_robot": at_robot,  # per window, for the outage's effect on the other robots
        # each node's last emulation verdict (none when nothing is emulated)
        "emulation": {r["node"]: {"held": r["held"], "over_budget": r["over_budget"]}
                      for r in robot if r["kind"] == "emulation"},
    }
    if fault and not hit:
        row["final_during_fault"] = sum(
            1 for c in finals.values() if fault["fault_start"] <= c["t"] <= fault["fault_end"])
    elif fault:
        row.update(fault_numbers(fault, captions, drafts, terminal, finals, row["stuck"]))
    return row


def fault_numbers(fault: dict[str, Any], captions: list[dict[str, Any]],
                  drafts: dict[int, dict[str, Any]], terminal: dict[int, list[dict[str, Any]]],
                  finals: dict[int, dict[str, Any]], stuck: int) -> dict[str, Any]:
    """Around a robot's own fault: how long it lasted, when a caption came again, the windows
    drafted meanwhile, the FINAL ones after; a verifier's restart's uncaptioned windows apart
    from the stuck ones."""
    start, end = fault["fault_start"], fault["fault_end"]
    drafted_at = {w: d["t"] for w, d in drafts.items()}
    # the graph is whole again when the robot hears a caption after the fault
    back = min((c["t"] for c in captions if c["t"] > end), default=None)
    during = [w for w, t in drafted_at.items() if t >= start and (back is None or t < back)]
    out: dict[str, Any] = {}
    if fault.get("kind") == "verifier-restart":
        # no verifier, no caption protocol: windows drafted while it was down get no
        # caption from anyone (counted apart, not as stuck)
        down = {w for w in during if w not in terminal}
        out.update(stuck=stuck - len(down), uncaptioned_while_verifier_down=len(down))
    return {**out, "fault_s": round(end - start, 1),
            "fault_recovery_s": round(back - start, 1) if back is not None else None,
            "fault_windows_drafted": len(during),
            "fault_final_after": sum(1 for w in finals
                                     if back is not None and drafted_at.get(w, 0) >= back)}


def window_rows(windows: list[int], terminal: dict[int, list[dict[str, Any]]],
                drafts: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The robot's records as a run's rows (run_rows.py's fields), one per window: the status
    and confirmed latency of its first FINAL or UNVERIFIED caption (DRAFT where none came)
    and its first draft's first-token latency."""
    rows = []
    for window in windows:
        caption = terminal[window][0] if window in terminal else None
        draft = drafts.get(window)
        rows.append({"window": window,
                     "status": status_name(caption["status"]) if caption else "DRAFT",
                     "confirmed_done_ms": caption["confirmed_done_ms"] if caption else None,
                     "draft_first_token_ms": draft["first_token_ms"] if draft else None})
    return rows


class ReferenceVerifier:
    """The verifier alone on the frames the verifier node says it captioned, on the node's
    runtime (default parameters; eager with ``compile`` false, as ``--no-compile`` makes the
    nodes): what every FINAL caption must equal. Loaded at the first FINAL caption to check,
    so a run's hosts come up without waiting for it."""

    def __init__(self, compile: bool = True) -> None:
        self.params = verifier_defaults()
        self.compile = compile
        self._engine: Any = None

    @property
    def engine(self) -> Any:
        if self._engine is None:
            from crossspec_ros.models.pair import load_from_params
            from crossspec_ros.models.runtime_setup import prepare_runtime
            from crossspec_ros.process_tuning import tune_process_for_models
            from crossspec_ros.speculative.engine import SpeculativeEngine

            # the nodes' thread set-up: torch's default pool of one thread per core collapses
            # when anything else runs (18 s a window, not 0.5 s, on 2 busy cores)
            tune_process_for_models(self.params["device"])
            verifier, _ = load_from_params(self.params, drafter=False)
            prepare_runtime(verifier, {**self.params, "compile": self.params["compile"]
                                       and self.compile}, "verifier",
                            self.params["max_new_tokens"])
            self._engine = SpeculativeEngine(verifier)
        return self._engine

    def check(self, bag: Path, finals: dict[int, tuple[str, str]],
              frames: dict[int, list[int]]) -> dict[str, Any]:
        """Each FINAL caption (window id -> its text and acceptance rule) against the verifier
        alone on the window's frames as the verifier listed them (``frames``: window id ->
        stamps), read from ``bag``; counted as run_record's rule says (a caption under a
        relaxed rule apart)."""
        from crossspec_ros.bags.inputs import read_inputs
        from crossspec_ros.events.batch import EventBatch
        from crossspec_ros.sync.window import Window

        tally = LosslessTally()
        if not finals:
            return tally.summary()
        wanted = {stamp for wid in finals for stamp in frames.get(wid, ())}
        by_stamp = {item.frame.stamp_ns: item.frame for item in read_inputs(bag)
                    if item.frame is not None and item.frame.stamp_ns in wanted}
        length = seconds_to_ns(self.params["window_length_s"])
        tokenizer = self.engine.verifier.tokenizer
        for wid, (text, rule) in sorted(finals.items()):
            stamps = frames.get(wid)
            if not stamps or any(s not in by_stamp for s in stamps):
                continue
            # the window as the verifier node had it: its span, the frames it listed
            window = Window(wid, wid * length, (wid + 1) * length, EventBatch.empty(0, 0),
                            [by_stamp[s] for s in stamps], len(set(stamps)))
            alone = tokenizer.decode(self.engine.verifier_only(window), skip_special_tokens=True)
            tally.add({**verdict(alone == text, rule), "acceptance_rule": rule}, wid)
        return tally.summary()


def run_label(row: dict[str, Any]) -> str:
    """What the run was: "link 20 Mbit/s, compressed images, fault none" (", robot2 of 3
    hosts" with several robots)."""
    label = f"link {row['link_mbit']:g} Mbit/s, {row['images']} images, fault {row['fault']}"
    if "fault_here" in row:
        label += f", {row['robot']}" + (" (its link)" if row["fault_here"] and
                                        row["fault"] == "link-down" else "")
    return label


# why "after the robot's close" can be unmeasured: it is read off the robot's drafts
NO_ROBOT_CLOSE = "no draft reached the robot to time its close by"


def _ms(value: float | None, why_not: str) -> str:
    """``value`` ms, or "not measured (why)" (issue 53, item 7: a row printed "None ms")."""
    return f"{value} ms" if value is not None else f"not measured ({why_not})"


def row_line(row: dict[str, Any]) -> str:
    speed = "replay speed unknown (the player did not finish)" if row["realtime"] is None \
        else f"replay at {row['realtime']}x real time"
    line = (f"[EMULATED {row['emulated']}] " if row.get("emulated") else "") + (
            f"{run_label(row)}: {row['windows']} windows, {row['final']} FINAL, "
            f"{row['unverified']} UNVERIFIED "
            f"({row['unverified_with_draft']} with their draft), {row['stuck']} stuck, "
            f"{row['published_twice']} published twice, "
            f"{row.get('drafts_after_final', 0)} drafts after their caption"
            + (f", {row['wrong_robot']} windows of another robot"
               if "wrong_robot" in row else "") + "; lossless "
            f"{row['lossless']}/"
            f"{row['lossless_checked']}; confirmed median "
            f"{_ms(row['confirmed_ms_median'], 'no FINAL caption')} after the verifier's "
            f"close, {_ms(row['confirmed_at_robot_ms_median'], NO_ROBOT_CLOSE)} after the "
            f"robot's; draft first token p95 {_ms(row['draft_ms_p95'], 'no draft')}; link "
            f"{row['link_mb_per_s']} MB/s of bag time, {speed}")
    if row.get("lossy_windows"):
        line += "; " + lossy_words(row)
    if "fault_s" in row:
        line += (f"; from the fault until a caption came again ({row['fault_recovery_s']} s) "
                 f"the robot drafted {row['fault_windows_drafted']} windows; "
                 f"{row['fault_final_after']} FINAL after")
        if "uncaptioned_while_verifier_down" in row:
            line += (f"; {row['uncaptioned_while_verifier_down']} drafted windows got no "
                     "caption while no verifier ran")
    if "final_during_fault" in row:
        line += f"; {row['final_during_fault']} FINAL captions came during the fault"
    if row.get("emulated"):
        line += "; " + emulation_verdict(row.get("emulation") or {})
    return line


def emulation_verdict(nodes: dict[str, dict[str, Any]]) -> str:
    """Whether each node's emulation held, from what its /diagnostics said last."""
    if not nodes:
        return "the emulation's verdict never reached the robot (no node's /diagnostics)"
    over = {node: v["over_budget"] for node, v in sorted(nodes.items()) if not v["held"]}
    if not over:
        return f"the emulation held on {', '.join(sorted(nodes))}"
    return "the emulation did NOT hold: " + ", ".join(
        f"{node} {calls} calls over their cost" for node, calls in over.items())


def jpeg_bag(bag: Path, out: Path, duration_s: float | None = None, quality: int = 90
             ) -> Path:
    """``bag`` with every rgb8 Image re-encoded as a JPEG CompressedImage on
    ``<topic>/compressed`` (other messages copied as they are); with ``duration_s``, only
    what a replay of that long reads (and a second more)."""
    import io

    import numpy as np
    from PIL import Image as PilImage

    from crossspec_ros.bagfile import any_reader
    from crossspec_ros.bags.writer import BagWriter
    from crossspec_ros.images import image_to_rgb

    with any_reader(bag) as reader, BagWriter(out) as writer:
        last_ns = None if duration_s is None else \
            reader.start_time + seconds_to_ns(duration_s + 1.0)
        for conn, log_time, raw in reader.messages():
            if last_ns is not None and log_time > last_ns:  # log-time order: the rest too
                break
            if conn.msgtype != "sensor_msgs/msg/Image":
                writer.write_raw(conn.topic, conn.msgtype, raw, log_time)
                continue
            msg = reader.deserialize(raw, conn.msgtype)
            buffer = io.BytesIO()
            PilImage.fromarray(np.ascontiguousarray(image_to_rgb(msg))).save(
                buffer, format="JPEG", quality=quality)
            compressed = writer.store.types["sensor_msgs/msg/CompressedImage"](
                header=msg.header, format="jpeg",
                data=np.frombuffer(buffer.getvalue(), dtype=np.uint8))
            writer.write(conn.topic + "/compressed", "sensor_msgs/msg/CompressedImage",
                         compressed, log_time)
    return out
