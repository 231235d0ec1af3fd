"""Every window the draft node drafted ends in a terminal caption on the robot, with real
rclpy on the sample bag (issue 53, item 11): with the verifier unconfigured the draft node
publishes each one UNVERIFIED (verifier absent) with its draft; a verifier that comes up
mid-run captions the windows after it FINAL, and no window ends twice except as documented
(a late answer of the verifier superseding the robot's caption, counted)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

rclpy = pytest.importorskip("rclpy")

from crossspec import msg as cs_msg  # noqa: E402
from lifecycle_msgs.msg import Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402

from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier  # noqa: E402
from crossspec_ros.nodes.draft_node import DraftNode  # noqa: E402
from crossspec_ros.nodes.graph import make_executor, spin_in_thread  # noqa: E402
from crossspec_ros.nodes.lifecycle import bring_up  # noqa: E402
from crossspec_ros.nodes.player import BagPlayer  # noqa: E402
from crossspec_ros.nodes.verifier_node import VerifierNode  # noqa: E402
from crossspec_ros.paths import sample_bag  # noqa: E402
from crossspec_ros.sync.captions import UnverifiedReason  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]
FINAL, UNVERIFIED = cs_msg.Caption.STATUS_FINAL, cs_msg.Caption.STATUS_UNVERIFIED
ABSENT = int(UnverifiedReason.VERIFIER_ABSENT)
TERMINAL = (FINAL, UNVERIFIED)


class Graph:
    """A draft node (active) and a verifier node (unconfigured) in one executor, as the
    robot and a server that has not come up yet; a probe hears drafts and captions."""

    def __init__(self, silence_s: float) -> None:
        rclpy.init()
        self.draft_node = bring_up(DraftNode(tiny_eventgpt_drafter(seed=1), parameter_overrides=[
            Parameter("step_aside_ms", value=0.0)]))  # drafted at the close
        self.draft_node.robot_captions.silence_s = silence_s  # sooner than the 7-s default
        self.verifier_node = VerifierNode(tiny_verifier(seed=1))  # not configured
        self.probe = rclpy.create_node("probe")
        self.drafts: dict[int, list] = {}
        self.captions: dict[int, list] = {}
        self.probe.create_subscription(
            cs_msg.Caption, "/crossspec/caption",
            lambda m: self.captions.setdefault(m.window_id, []).append(m), 500)
        self.probe.create_subscription(
            cs_msg.DraftTokens, "/crossspec/draft",
            lambda m: self.drafts.setdefault(m.window_id, []).append(m), 500)
        self.executor = make_executor()
        for node in (self.draft_node, self.verifier_node, self.probe):
            self.executor.add_node(node)
        self.stop_spinning = spin_in_thread(self.executor)
        self.player: BagPlayer | None = None

    def play(self, seconds: float, topics: list[str] | None = None) -> None:
        self.player = BagPlayer(sample_bag(), topics=topics, max_duration_s=seconds,
                                start_delay_s=1.0)
        self.executor.add_node(self.player)

    def terminal(self, wid: int) -> list:
        return [m for m in self.captions.get(wid, []) if m.status in TERMINAL]

    def wait(self, until: Callable[[], bool], timeout_s: float = 120.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def settled(self) -> bool:
        """The replay is over and every drafted window has its terminal caption here."""
        return self.player is not None and self.player.done.is_set() and \
            not self.draft_node.robot_captions.open_windows and \
            all(self.terminal(w) for w in self.drafts)

    def activate_verifier(self) -> None:
        """configure, then activate, through the change_state service (as launch does)."""
        client = self.probe.create_client(ChangeState, "/crossspec_verifier/change_state")
        assert client.wait_for_service(timeout_sec=30)
        for transition in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            future = client.call_async(ChangeState.Request(transition=Transition(id=transition)))
            assert self.wait(future.done, 60.0) and future.result().success

    def close(self) -> None:
        self.stop_spinning()
        self.executor.shutdown(timeout_sec=2)
        for node in (self.draft_node, self.verifier_node, self.probe, self.player):
            if node is not None:
                node.destroy_node()
        rclpy.shutdown()


def last_text(drafts: list) -> str:
    """The draft a caption carries: the last one with text (a cut-short notice without
    text keeps what came before)."""
    return next((m.text for m in reversed(drafts) if m.text), "")


def test_with_the_verifier_unconfigured_each_drafted_window_ends_unverified_absent_once():
    graph = Graph(silence_s=1.0)
    try:
        graph.play(3.5)  # events and frames: nobody verifies them
        assert graph.wait(graph.settled), (sorted(graph.drafts), sorted(graph.captions))
        time.sleep(1.0)  # a second terminal caption would come within this
        assert len(graph.drafts) >= 2, sorted(graph.drafts)
        for wid, drafts in graph.drafts.items():
            [caption] = graph.terminal(wid)
            assert (caption.status, caption.unverified_reason) == (UNVERIFIED, ABSENT), wid
            assert caption.draft_text == last_text(drafts) and not caption.confirmed_text
        assert set(graph.captions) == set(graph.drafts)  # nothing for windows not drafted
        book = graph.draft_node.robot_captions
        assert book.counters["windows_given_up"] == len(graph.drafts)
        assert book.counters["late_answers"] == 0
    finally:
        graph.close()


def test_a_verifier_that_comes_up_mid_run_captions_the_windows_after_it_final():
    graph = Graph(silence_s=2.0)
    try:
        graph.play(18.0)
        absent = lambda: [w for w in graph.captions  # noqa: E731
                          if any(m.unverified_reason == ABSENT for m in graph.terminal(w))]
        assert graph.wait(lambda: len(absent()) >= 2, 60.0), sorted(graph.captions)
        before = set(absent())
        graph.activate_verifier()
        drafted_before_activate = set(graph.drafts)
        assert graph.wait(graph.settled), (sorted(graph.drafts), sorted(graph.captions))
        time.sleep(1.0)
        last = {w: graph.terminal(w)[-1] for w in graph.captions if graph.terminal(w)}
        # the windows given up before the verifier came up stay so: it never heard of them
        assert all(len(graph.terminal(w)) == 1 for w in before)
        finals = sorted(w for w, m in last.items() if m.status == FINAL)
        # the windows begun after it, but the bag's last (no frame after it closes it; it
        # may end without RGB)
        after = [w for w in last if max(drafted_before_activate) + 1 < w < max(last)]
        assert len(after) >= 2 and all(last[w].status == FINAL for w in after), \
            {w: (m.status, m.unverified_reason) for w, m in last.items()}
        ended_absent = [w for w, m in last.items() if m.unverified_reason == ABSENT]
        assert max(ended_absent) < min(finals)  # absent first, then verified
        # one terminal caption per window, or the robot's then the verifier's late answer
        # superseding it (counted): never two of the verifier's, never the robot's after one
        twice = [w for w in last if len(graph.terminal(w)) > 1]
        for w in twice:
            first, second = graph.terminal(w)
            assert first.unverified_reason == ABSENT != second.unverified_reason, w
        assert graph.draft_node.robot_captions.counters["late_answers"] == len(twice)
        assert set(graph.drafts) <= set(last)  # every drafted window ended
    finally:
        graph.close()
