"""The bag player: pure replay/pacing helpers, the BagPlayer node over real rclpy, `play`.

ROS tests run a subscriber node and the player in one process on their own rclpy Context
(conftest.py keeps discovery on loopback and on a per-run domain). The player is built with
``autostart=False`` and started once its publishers have matched the subscriber, so "every
message arrives" is a property of the player, not of discovery timing.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from crossspec_ros.bags.replay import BagError, BagReplay, Pacer
from crossspec_ros.cli import play_cmd
from crossspec_ros.paths import sample_bag
from crossspec_ros.stamps import SECOND_NS as NS

SAMPLE = sample_bag()
EVENTS, IMAGES, TRUTH = "/event_camera/events", "/camera/image_raw", "/crossspec/ground_truth"


def bag_messages(path: Path, topics: list[str], duration_s: float, start_s: float = 0.0
                 ) -> dict[str, list[bytes]]:
    """What the bag holds per topic in [start, start + duration), read with rosbags alone."""
    out: dict[str, list[bytes]] = defaultdict(list)
    with Reader(path) as reader:
        t0 = reader.start_time + round(start_s * NS)
        conns = [c for c in reader.connections if c.topic in topics]
        for conn, _, raw in reader.messages(conns, start=t0, stop=t0 + round(duration_s * NS)):
            out[conn.topic].append(bytes(raw))
    return dict(out)


def wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


# -- pure helpers (no rclpy) -------------------------------------------------------------


def test_replay_yields_the_chosen_topics_in_log_time_order_within_the_window():
    replay = BagReplay(SAMPLE, topics=[IMAGES, EVENTS], start_s=2.0, max_duration_s=0.5)
    messages = list(replay.messages())
    times = [m.time_ns for m in messages]
    assert times == sorted(times)
    assert replay.start_ns <= times[0] and times[-1] < replay.start_ns + NS // 2
    assert {m.topic for m in messages} == {IMAGES, EVENTS}
    expected = bag_messages(SAMPLE, [IMAGES, EVENTS], 0.5, start_s=2.0)
    assert [m.data for m in messages if m.topic == IMAGES] == expected[IMAGES]
    assert {m.pass_index for m in messages} == {0}


def test_replay_loops_over_the_same_messages_with_a_growing_pass_index():
    replay = BagReplay(SAMPLE, topics=[IMAGES], max_duration_s=0.2, loop=True)
    taken = [m for _, m in zip(range(12), replay.messages(), strict=False)]
    assert [m.pass_index for m in taken] == [0] * 4 + [1] * 4 + [2] * 4
    assert [m.data for m in taken[4:8]] == [m.data for m in taken[:4]]


def test_replay_names_the_problem_for_a_missing_bag_a_wrong_topic_or_a_bad_window(tmp_path):
    with pytest.raises(BagError, match="no such bag"):
        BagReplay(tmp_path / "absent")
    with pytest.raises(BagError, match=r"no topic \['/nope'\].*/camera/image_raw"):
        BagReplay(SAMPLE, topics=["/nope"])
    with pytest.raises(BagError, match="past the bag's end"):
        BagReplay(SAMPLE, start_s=30.0)
    with pytest.raises(BagError, match="duration"):
        BagReplay(SAMPLE, max_duration_s=0)
    garbage = tmp_path / "garbage.mcap"
    garbage.write_bytes(b"not an mcap file at all")
    with pytest.raises(BagError, match="cannot open as a ROS 2 bag"):
        BagReplay(garbage)


def test_pacer_maps_bag_time_to_wall_time_at_the_rate():
    now = [100.0]
    pacer = Pacer(2.0, now=lambda: now[0])
    pacer.anchor(5 * NS)
    assert pacer.due(5 * NS) == 100.0
    assert pacer.due(7 * NS) == pytest.approx(101.0)  # 2 s of bag at rate 2: 1 s of wall
    now[0] = 100.5
    assert pacer.bag_now() == 6 * NS
    for rate in (0.0, math.inf):
        assert Pacer(rate).due(10**18) == -math.inf  # as fast as possible
    with pytest.raises(ValueError, match="rate"):
        Pacer(-1.0)


def test_a_wild_log_time_jump_is_not_waited_for_but_a_camera_pace_is():
    # one packet stored 400,000 s ahead held a drive for days (issue 53, item 3)
    now = [100.0]
    pacer = Pacer(1.0, now=lambda: now[0])
    pacer.anchor(5 * NS)
    assert [pacer.skip_gap(t) for t in (5 * NS, 5 * NS + NS // 50, 9 * NS)] == [0, 0, 0]
    assert pacer.due(9 * NS) == pytest.approx(104.0)  # 4 s: a pause a camera may have
    wild = 9 * NS + 400_000 * NS
    assert pacer.skip_gap(wild) == 400_000 * NS
    assert pacer.due(wild) == pytest.approx(104.0)  # due as the message before it
    assert pacer.skip_gap(wild + NS // 50) == 0  # the replay goes on at its pace from there
    assert pacer.due(wild + NS // 50) == pytest.approx(104.02)
    pacer.anchor(5 * NS)  # a loop's next pass: its first message is no jump
    assert pacer.skip_gap(5 * NS) == 0


def test_pacer_wait_returns_at_once_when_stopped():
    pacer = Pacer(1.0)
    pacer.anchor(0)
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    t0 = time.monotonic()
    assert pacer.wait(60 * NS, stop, tick_s=10.0) is False  # a 60 s gap, a 10 s tick
    assert time.monotonic() - t0 < 5.0  # neither the gap nor a tick: the stop ended it


class FakeStop:
    """A stop event never set, whose waits advance a fake clock instead of sleeping."""

    def __init__(self, now: list[float]) -> None:
        self.now = now

    def wait(self, timeout_s: float) -> bool:
        self.now[0] += timeout_s
        return False

    def is_set(self) -> bool:
        return False


def test_a_paced_replay_takes_the_bags_span_divided_by_the_rate():
    # the player's pacing (wait for each message's due time) on a fake clock: rate 2 takes
    # exactly half the wall time of rate 1, and rate 1 the bag's own span
    replay = BagReplay(SAMPLE, topics=[IMAGES, EVENTS], max_duration_s=1.0)
    times = [m.time_ns for m in replay.messages()]
    span_s = (times[-1] - replay.start_ns) / NS
    assert span_s > 0.9
    took = {}
    for rate in (1.0, 2.0):
        now = [100.0]
        pacer, stop = Pacer(rate, now=lambda now=now: now[0]), FakeStop(now)
        pacer.anchor(replay.start_ns)
        for t in times:
            assert pacer.wait(t, stop, tick_s=0.01)
            assert now[0] - 100.0 >= (t - replay.start_ns) / NS / rate - 1e-9  # never early
        took[rate] = now[0] - 100.0
    assert took[1.0] == pytest.approx(span_s, abs=1e-6)  # never late either
    assert took[2.0] == pytest.approx(span_s / 2, abs=1e-6)


# -- the node over real rclpy ------------------------------------------------------------


class Session:
    """One rclpy Context with a sink node (raw subscriptions) and an executor thread."""

    def __init__(self, rclpy, context, topics: dict[str, type]) -> None:
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from rosgraph_msgs.msg import Clock

        self.rclpy, self.context = rclpy, context
        self.node = rclpy.create_node("player_test_sink", context=context)
        self.received: dict[str, list[bytes]] = defaultdict(list)
        self.clock: list[int] = []
        # Deep reliable queues: the test counts every message, so none may be overwritten.
        qos = QoSProfile(depth=5000, reliability=ReliabilityPolicy.RELIABLE)
        for topic, cls in topics.items():
            self.node.create_subscription(
                cls, topic, lambda data, topic=topic: self.received[topic].append(data), qos,
                raw=True)
        self.node.create_subscription(
            Clock, "/clock", lambda m: self.clock.append(m.clock.sec * NS + m.clock.nanosec),
            qos)
        self.nodes = [self.node]
        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)
        self._running = True
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        from rclpy._rclpy_pybind11 import InvalidHandle
        from rclpy.executors import ExternalShutdownException

        # a test shuts the context down: this thread may be between spins, or in a wait whose
        # entities (a publisher's event handlers) the shutdown destroyed meanwhile
        with contextlib.suppress(ExternalShutdownException, InvalidHandle):
            while self._running and self.context.ok():
                self.executor.spin_once(timeout_sec=0.02)

    def player(self, **kwargs):
        """A BagPlayer on this context, started once every publisher has a subscriber."""
        from crossspec_ros.nodes.player import BagPlayer

        kwargs.setdefault("start_delay_s", 0.0)
        player = BagPlayer(kwargs.pop("bag", SAMPLE), autostart=False, context=self.context,
                           **kwargs)
        self.nodes.append(player)
        self.executor.add_node(player)
        wanted = [t for t in player.replay.topics if t in self.received or t in self._subs()]
        assert wait_for(lambda: all(player.subscription_count(t) for t in [*wanted, "/clock"]),
                        5.0), "the player's publishers never matched the test subscriber"
        player.start()
        return player

    def _subs(self) -> set[str]:
        return {s.topic_name for s in self.node.subscriptions}

    def close(self) -> None:
        self._running = False
        self._thread.join(5.0)
        for node in self.nodes:
            node.destroy_node()
        self.executor.shutdown(timeout_sec=1.0)
        if self.context.ok():
            self.rclpy.shutdown(context=self.context)


@contextlib.contextmanager
def ros_session(topics: list[str] | None = None) -> Iterator[Session]:
    rclpy = pytest.importorskip("rclpy")
    from event_camera_msgs.msg import EventPacket
    from sensor_msgs.msg import Image

    types = {EVENTS: EventPacket, IMAGES: Image}
    context = rclpy.Context()
    rclpy.init(context=context)
    session = None
    try:
        session = Session(rclpy, context, {t: types[t] for t in topics or ()})
        yield session
    finally:
        if session is not None:
            session.close()
        elif context.ok():
            rclpy.shutdown(context=context)


@pytest.mark.ros
def test_every_message_of_the_chosen_topics_arrives_with_the_bags_bytes():
    expected = bag_messages(SAMPLE, [EVENTS, IMAGES], 1.5)
    with ros_session([EVENTS, IMAGES]) as ros:
        player = ros.player(rate=0, topics=[EVENTS, IMAGES], max_duration_s=1.5)
        assert player.done.wait(20.0) and player.error is None
        assert wait_for(lambda: all(len(ros.received[t]) >= len(expected[t]) for t in expected),
                        10.0)
        assert player.published == {t: len(v) for t, v in expected.items()}
        assert len(expected[EVENTS]) == 750 and len(expected[IMAGES]) == 30
        for topic, messages in expected.items():
            assert ros.received[topic] == messages, topic


@pytest.mark.ros
def test_clock_follows_the_bag_time_without_going_back_within_a_pass():
    replay = BagReplay(SAMPLE, max_duration_s=1.0)
    with ros_session([EVENTS]) as ros:
        player = ros.player(rate=4.0, topics=[EVENTS], max_duration_s=1.0, clock_hz=200.0)
        assert player.done.wait(20.0) and player.error is None
        assert wait_for(lambda: len(ros.clock) == player.clock_published, 5.0)
        clock = list(ros.clock)
    assert len(clock) >= 5  # ~0.25 s at up to 200 Hz (fewer on a busy machine)
    assert clock[0] == replay.start_ns
    assert all(b >= a for a, b in itertools.pairwise(clock))
    assert replay.start_ns + 900_000_000 <= clock[-1] < replay.stop_ns


@pytest.mark.ros
def test_the_player_paces_its_replay_at_the_rate():
    # how much faster rate 2 is: the fake clock above; here that the node waits, for each
    # rate, at least (nearly) the bag's span over the rate (a busy machine only adds)
    replay = BagReplay(SAMPLE, topics=[IMAGES, EVENTS], max_duration_s=1.0)
    span_s = (max(m.time_ns for m in replay.messages()) - replay.start_ns) / NS
    elapsed = {}
    with ros_session([IMAGES]) as ros:
        for rate in (1.0, 2.0):
            player = ros.player(rate=rate, topics=[IMAGES, EVENTS], max_duration_s=1.0,
                                node_name=f"player_rate_{int(rate)}")
            assert player.done.wait(60.0) and player.error is None
            elapsed[rate] = player.elapsed_s
    assert elapsed[1.0] >= 0.9 * span_s, elapsed  # paced: the last message is due at span_s
    assert elapsed[2.0] >= 0.9 * span_s / 2, elapsed


@pytest.mark.ros
def test_loop_replays_the_window_again_with_the_clock_jumping_back():
    one_pass = bag_messages(SAMPLE, [IMAGES], 0.3)[IMAGES]
    start_ns = BagReplay(SAMPLE).start_ns
    with ros_session([IMAGES]) as ros:
        player = ros.player(rate=4.0, topics=[IMAGES], max_duration_s=0.3, loop=True)
        assert wait_for(lambda: player.passes >= 2, 20.0)
        player.stop(timeout_s=2.0)
        assert player.done.is_set() and player.error is None
        assert wait_for(lambda: len(ros.received[IMAGES]) >= 2 * len(one_pass), 5.0)
        images, clock = list(ros.received[IMAGES]), list(ros.clock)
    assert images[:2 * len(one_pass)] == one_pass * 2
    pass_starts = [i for i, t in enumerate(clock) if i == 0 or t < clock[i - 1]]
    assert len(pass_starts) >= 2 and all(clock[i] == start_ns for i in pass_starts)


@pytest.mark.ros
def test_a_topic_filter_publishes_only_those_topics():
    with ros_session([EVENTS, IMAGES]) as ros:
        player = ros.player(rate=0, topics=[IMAGES], max_duration_s=1.0)
        assert player.done.wait(20.0)
        assert wait_for(lambda: len(ros.received[IMAGES]) == 20, 5.0)
        time.sleep(0.1)
        assert ros.received[EVENTS] == []
        assert list(player.published) == [IMAGES]
        assert ros.node.count_publishers(EVENTS) == 0


@pytest.mark.ros
def test_stop_and_context_shutdown_end_a_long_replay_promptly():
    # "promptly": ended within 5 s, where the rest of the 24 s bag at rate 1 takes ~20 s more
    with ros_session() as ros:
        player = ros.player(rate=1.0)  # the whole 24 s bag
        assert wait_for(lambda: sum(player.published.values()) > 0, 30.0)
        player.stop()
        assert player.done.wait(5.0)
        assert 0 < sum(player.published.values()) < 12503
        second = ros.player(rate=1.0, node_name="player_shutdown")
        assert wait_for(lambda: sum(second.published.values()) > 0, 30.0)
        ros.rclpy.shutdown(context=ros.context)  # what Ctrl-C does to a ROS process
        assert second.done.wait(5.0)
        assert second.error is None and sum(second.published.values()) < 12503


@pytest.mark.ros
def test_messages_of_types_not_installed_are_skipped_and_counted(tmp_path):
    store = get_typestore(Stores.ROS2_KILTED)
    store.register(get_types_from_msg("int32 value\n", "not_installed_msgs/msg/Thing"))
    path = tmp_path / "mixed"
    with Writer(path, version=9, storage_plugin=StoragePlugin.SQLITE3) as writer:
        chatter = writer.add_connection("/chatter", "std_msgs/msg/String", typestore=store)
        thing = writer.add_connection("/thing", "not_installed_msgs/msg/Thing", typestore=store)
        for i in range(3):
            msg = store.types["std_msgs/msg/String"](data=f"hello {i}")
            writer.write(chatter, NS * (i + 1),
                         store.serialize_cdr(msg, "std_msgs/msg/String"))
            msg = store.types["not_installed_msgs/msg/Thing"](value=i)
            writer.write(thing, NS * (i + 1) + 1,
                         store.serialize_cdr(msg, "not_installed_msgs/msg/Thing"))
    with ros_session() as ros:
        player = ros.player(bag=path, rate=0)
        assert player.done.wait(10.0) and player.error is None  # sqlite3 read on its thread
        assert player.published == {"/chatter": 3, "/thing": 0}
        assert player.skipped == {"/thing": 3}
        assert "skipped 3" in player.summary()


@pytest.mark.ros
def test_a_message_stored_far_ahead_is_replayed_at_once_and_said(tmp_path):
    store = get_typestore(Stores.ROS2_KILTED)
    path = tmp_path / "wild"
    with Writer(path, version=9, storage_plugin=StoragePlugin.SQLITE3) as writer:
        chatter = writer.add_connection("/chatter", "std_msgs/msg/String", typestore=store)
        # three messages 0.1 s apart, then one stored 100,000 s ahead (a wild log time)
        for i, t_ns in enumerate([NS, NS + NS // 10, NS + NS // 5, NS + 100_000 * NS]):
            msg = store.types["std_msgs/msg/String"](data=f"hello {i}")
            writer.write(chatter, t_ns, store.serialize_cdr(msg, "std_msgs/msg/String"))
    with ros_session() as ros:
        player = ros.player(bag=path, rate=1.0)
        assert player.done.wait(60.0) and player.error is None  # not 100,000 s
        assert player.published == {"/chatter": 4}
        assert [(topic, gap) for topic, gap in player.gaps_skipped] == [
            ("/chatter", 100_000 * NS - NS // 5)]
        assert "1 log-time jumps not waited for (99,999.8 s)" in player.summary()


@pytest.mark.ros
def test_a_replay_that_ends_on_a_damaged_chunk_stops_drive_as_a_death_does(tmp_path):
    # issue 53, item 4: drive stopped the replay there and exited 0 with 12 of 20 windows
    from mcap_helpers import flipped_sample

    from crossspec_ros.nodes.drive_pass import _replay_failures

    with ros_session() as ros:
        player = ros.player(bag=flipped_sample(tmp_path), rate=0)
        assert player.done.wait(60.0)
        assert player.error is not None and "the bag is damaged after" in player.error
        assert sum(player.published.values()) > 0  # what came before the damage went out
        [failure] = _replay_failures([player])
    assert failure.startswith("the bag replay ended early: ") and "\n" not in failure


@pytest.mark.ros
@pytest.mark.parametrize(("extra", "clock"), [([], "/robot1/clock"),
                                              (["--global-clock"], "/clock")])
def test_a_namespaced_replay_keeps_its_clock_in_its_namespace(extra, clock):
    # issue 53, item 13: two robots replaying bags on one domain shared /clock
    rclpy = pytest.importorskip("rclpy")
    parser = argparse.ArgumentParser(prog="crossspec")
    play_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["play", str(SAMPLE), "--namespace", "robot1",
                              "--wait-active", "crossspec_draft", *extra])  # not started
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        player = play_cmd._make_player(args, context)
        try:
            assert player._clock_pub.topic_name == clock
            assert player._publishers_by_topic[IMAGES].topic_name == "/robot1" + IMAGES
        finally:
            player.destroy_node()
    finally:
        rclpy.shutdown(context=context)


# -- the `crossspec play` command --------------------------------------------------------


def play(argv: list[str]) -> int:
    """`crossspec play ...` through its own parser (the full CLI would import torch)."""
    parser = argparse.ArgumentParser(prog="crossspec")
    play_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["play", *argv])
    return args.func(args)


def test_play_reports_a_missing_or_malformed_bag_without_a_traceback(tmp_path, capsys):
    assert play([str(tmp_path / "absent")]) == 1
    err = capsys.readouterr().err
    assert "no such bag" in err and "Traceback" not in err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "metadata.yaml").write_text("rosbag2_bagfile_information: [oops\n")
    assert play([str(tmp_path / "broken")]) == 1
    err = capsys.readouterr().err
    assert "cannot open as a ROS 2 bag" in err and "Traceback" not in err


@pytest.mark.ros
def test_play_replays_and_prints_a_one_line_summary(capsys):
    assert play([str(SAMPLE), "--topics", IMAGES, "--duration", "0.5", "--rate", "0",
                 "--delay", "0"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and f"{IMAGES} 10" in out[0] and "10 messages in" in out[0]


PLAY_SCRIPT = ("import argparse, sys; from crossspec_ros.cli import play_cmd; "
               "p = argparse.ArgumentParser(prog='crossspec'); "
               "play_cmd.register(p.add_subparsers()); a = p.parse_args(sys.argv[1:]); "
               "sys.exit(a.func(a))")


@pytest.mark.ros
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_play_stopped_by_a_signal_exits_0_with_a_summary(signum):
    # Ctrl-C must reach it even where this test runs in the background (which ignores SIGINT)
    proc = subprocess.Popen([sys.executable, "-c", PLAY_SCRIPT, "play", str(SAMPLE), "--delay",
                             "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy(),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert "crossspec play:" in proc.stderr.readline()  # the player is running
        time.sleep(0.5)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err  # as ros2 bag play: launch logs no "process has died"
    assert "messages in" in out and "Traceback" not in err


@pytest.mark.ros
def test_play_waits_for_lifecycle_nodes_to_be_active_before_the_first_message():
    import rclpy

    from crossspec_ros.models.tiny import tiny_verifier
    from crossspec_ros.nodes.graph import make_executor, spin_in_thread
    from crossspec_ros.nodes.verifier_node import VerifierNode

    env = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    proc = subprocess.Popen([sys.executable, "-c", PLAY_SCRIPT, "play", str(SAMPLE), "--delay",
                             "0", "--duration", "0.5", "--wait-active", "crossspec_verifier",
                             "--wait-timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    rclpy.init()
    node = VerifierNode(tiny_verifier(seed=1))
    executor = make_executor()
    executor.add_node(node)
    stop = spin_in_thread(executor)
    try:
        waiting = proc.stderr.readline()
        assert "waiting for crossspec_verifier to become active" in waiting, waiting
        time.sleep(1.0)
        assert proc.poll() is None  # still waiting: the node is unconfigured
        node.trigger_configure()
        node.trigger_activate()
        out, err = proc.communicate(timeout=60)
    finally:
        stop()
        executor.shutdown(timeout_sec=2.0)
        node.destroy_node()
        rclpy.shutdown()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "messages in" in out
