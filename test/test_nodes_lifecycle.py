"""The graph's nodes are lifecycle nodes: nothing loads in the constructor, models load on
configure, workers run only while active, inputs are ignored while inactive, cleanup lets go
of everything, and `ros2 lifecycle set` (the change_state service) drives the same
transitions."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from crossspec import msg as cs_msg  # noqa: E402
from lifecycle_msgs.msg import State, Transition  # noqa: E402
from lifecycle_msgs.srv import ChangeState, GetState  # noqa: E402
from rclpy.parameter import Parameter  # noqa: E402
from recording_publisher import RecordingPublisher  # noqa: E402

from crossspec_ros.models import pair as pair_module  # noqa: E402
from crossspec_ros.models.errors import ModelLoadError  # noqa: E402
from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier  # noqa: E402
from crossspec_ros.nodes.draft_node import DraftNode  # noqa: E402
from crossspec_ros.nodes.graph import make_executor, spin_in_thread  # noqa: E402
from crossspec_ros.nodes.lifecycle import SUCCESS, bring_up  # noqa: E402
from crossspec_ros.nodes.verifier_node import VerifierNode  # noqa: E402
from crossspec_ros.speculative.corpus import CorpusError  # noqa: E402
from crossspec_ros.sync.captions import UnverifiedReason  # noqa: E402

pytestmark = pytest.mark.ros


@pytest.fixture()
def ros():
    rclpy.init()
    yield
    rclpy.shutdown()


def draft(window_id: int):
    msg = cs_msg.DraftTokens(window_id=window_id, token_ids=[1], text="a car", done=True)
    msg.window_end.sec = 1
    return msg


def test_models_load_on_configure_not_in_the_constructor(ros, monkeypatch):
    loads = []

    def load(params, verifier=True, drafter=True):
        loads.append((verifier, drafter))
        return None, tiny_eventgpt_drafter(seed=1)

    monkeypatch.setattr(pair_module, "load_from_params", load)
    node = DraftNode()
    try:
        assert loads == [] and node.drafter is None
        assert node.trigger_configure() == SUCCESS
        assert loads == [(False, True)] and node.drafter is not None
        assert node.trigger_cleanup() == SUCCESS
        assert node.drafter is None  # a model the node loaded is let go
    finally:
        node.destroy_node()


def status_of(caption) -> tuple[int, int, int]:
    return caption.window_id, caption.status, caption.unverified_reason


STOPPED = (cs_msg.Caption.STATUS_UNVERIFIED, cs_msg.Caption.REASON_VERIFIER_STOPPED)
DRAFT = (cs_msg.Caption.STATUS_DRAFT, cs_msg.Caption.REASON_NONE)


def test_frames_are_ignored_until_active_drafts_meanwhile_end_unverified_and_workers_run_only_while_active(  # noqa: E501
        ros):
    node = bring_up(VerifierNode(tiny_verifier(seed=1)), activate=False)
    try:
        node.stream.pub_caption = RecordingPublisher()
        node.stream._on_image(image(3.5, 0))
        assert node.loop.sync.pending_ids() == [] and node.stream.worker is None
        # inactive, the verifier relays a draft as its window's caption: UNVERIFIED, stopped
        node.stream._on_draft(draft(3))
        assert [status_of(c) for c in node.stream.pub_caption.sent] == [(3, *DRAFT), (3, *STOPPED)]
        assert node.trigger_activate() == SUCCESS
        node.stream._on_draft(draft(4))
        assert status_of(node.stream.pub_caption.sent[-1]) == (4, *DRAFT)
        worker = node.stream.worker.thread
        assert worker.is_alive()
        assert node.trigger_deactivate() == SUCCESS
        assert not worker.is_alive() and not node.active
        # the window left open ends at once (its draft is complete), saying why
        assert status_of(node.stream.pub_caption.sent[-1]) == (4, *STOPPED)
        node.stream._on_draft(draft(4))  # late: its caption has ended
        assert status_of(node.stream.pub_caption.sent[-1]) == (4, *STOPPED)
        assert node.trigger_activate() == SUCCESS  # and back: a new worker
        assert node.stream.worker.thread.is_alive() and node.stream.worker.thread is not worker
    finally:
        node.destroy_node()


def test_cleanup_destroys_what_configure_made_and_configure_makes_it_again(ros, monkeypatch):
    monkeypatch.setattr(pair_module, "load_from_params",
                        lambda params, verifier=True, drafter=True: (tiny_verifier(seed=1), None))
    # a name of its own: looked up by name, the graph could answer with a node of an earlier
    # test (another rclpy context of this process) that discovery has not dropped yet
    node = VerifierNode(node_name=f"crossspec_verifier_{uuid.uuid4().hex[:8]}")
    try:
        def published() -> set[str]:
            return {name for name, _ in node.get_publisher_names_and_types_by_node(
                node.get_name(), node.get_namespace())}

        def shows(present: bool) -> bool:
            # the ROS graph learns of a node's own publishers through discovery: on a loaded
            # machine that takes a moment
            deadline = time.monotonic() + 10
            while ("/crossspec/caption" in published()) != present:
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.05)
            return True

        assert shows(False)
        bring_up(node, activate=False)
        assert shows(True) and node.loop.engine is not None
        assert node.trigger_cleanup() == SUCCESS
        assert shows(False) and node.loop.engine is None
        bring_up(node)
        assert shows(True) and node.active
    finally:
        node.destroy_node()


def test_a_model_that_does_not_load_fails_configure_with_its_message(ros):
    node = VerifierNode(parameter_overrides=[Parameter("verifier_model",
                                                       value="/nonexistent/model")])
    try:
        with pytest.raises(ModelLoadError, match="/nonexistent/model"):
            bring_up(node)
        assert node._state_machine.current_state[1] == "unconfigured"
    finally:
        node.destroy_node()


def test_a_caption_corpus_that_is_missing_fails_configure_saying_how_to_make_one(ros):
    node = VerifierNode(tiny_verifier(seed=0), parameter_overrides=[
        Parameter("caption_corpus", value="/nonexistent/captions.txt")])
    try:
        with pytest.raises(CorpusError, match="crossspec corpus"):
            bring_up(node)
        assert node._state_machine.current_state[1] == "unconfigured"
    finally:
        node.destroy_node()


def test_the_change_state_service_drives_the_transitions(ros):
    node = VerifierNode(tiny_verifier(seed=1))
    client_node = rclpy.create_node("lifecycle_client")
    executor = make_executor()
    executor.add_node(node)
    executor.add_node(client_node)
    stop = spin_in_thread(executor)
    try:
        change = client_node.create_client(ChangeState, "/crossspec_verifier/change_state")
        get = client_node.create_client(GetState, "/crossspec_verifier/get_state")
        assert change.wait_for_service(timeout_sec=10) and get.wait_for_service(timeout_sec=10)

        def call(client, request):
            future = client.call_async(request)
            deadline = time.monotonic() + 30
            while not future.done() and time.monotonic() < deadline:
                time.sleep(0.02)
            return future.result()

        for transition in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            assert call(change, ChangeState.Request(
                transition=Transition(id=transition))).success
        assert call(get, GetState.Request()).current_state.id == State.PRIMARY_STATE_ACTIVE
        assert node.active and node.stream.worker.thread.is_alive()
    finally:
        stop()
        executor.shutdown(timeout_sec=2.0)
        client_node.destroy_node()
        node.destroy_node()


def image(stamp_s: float, seed: int):
    from sensor_msgs.msg import Image

    rgb = np.random.default_rng(seed).integers(0, 256, (36, 48, 3), dtype=np.uint8)
    msg = Image(height=36, width=48, encoding="rgb8", step=48 * 3, data=rgb.tobytes())
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(round(stamp_s * 1e9), 10**9)
    return msg


def timeline_draft(epoch: int, window_id: int):
    msg = cs_msg.DraftTokens(window_id=window_id, epoch=epoch, token_ids=[1], text="a car",
                             done=True)
    msg.window_start.sec, msg.window_end.sec = window_id, window_id + 1
    return msg


def drive_windows(node, epoch: int, ids: range) -> None:
    """A draft and 8 frames for each window of ``ids``, then the worker runs them (its thread
    is stopped: the test runs its steps)."""
    for wid in ids:
        node.stream._on_draft(timeline_draft(epoch, wid))
        for k in range(8):
            node.stream._on_image(image(wid + k / 8, wid * 8 + k))
        for _ in range(3):  # the window before closed with this one's frames
            node.loop.step()
    node.stream._on_image(image(ids.stop + 0.01, 0))  # closes the last window
    for _ in range(3):
        node.loop.step()


def finals(node) -> set[tuple[int, int]]:
    return {(c.epoch, c.window_id) for c in node.stream.pub_caption.sent
            if c.status == cs_msg.Caption.STATUS_FINAL}


def test_after_a_bag_loop_a_reconfigured_verifier_verifies_the_windows_of_the_drafts_timeline(
        ros):
    node = bring_up(VerifierNode(tiny_verifier(seed=1)))
    try:
        node.stream.worker.stop()
        node.stream.pub_caption = RecordingPublisher()
        drive_windows(node, 0, range(100, 104))     # the bag's first pass
        drive_windows(node, 1, range(100, 102))     # it looped: epoch 1 on both nodes
        assert finals(node) >= {(0, 100), (0, 101), (0, 102), (1, 100)}
        for transition in ("deactivate", "cleanup", "configure", "activate"):
            assert getattr(node, f"trigger_{transition}")() == SUCCESS
        node.stream.worker.stop()
        node.stream.pub_caption = RecordingPublisher()
        drive_windows(node, 1, range(102, 105))     # the draft node still says epoch 1
        # window 102 was open at the deactivate: it ended UNVERIFIED then, never FINAL now
        assert (1, 103) in finals(node) and (1, 102) not in finals(node)
        # its draft came after the activate: 102's caption is that, UNVERIFIED (stopped)
        assert [status_of(c) for c in node.stream.pub_caption.sent
                if c.status == cs_msg.Caption.STATUS_UNVERIFIED] == [(102, *STOPPED)]
    finally:
        node.destroy_node()


def test_diagnostics_are_not_ok_while_windows_end_unverified_and_none_verified(ros):
    from diagnostic_msgs.msg import DiagnosticStatus

    node = bring_up(VerifierNode(tiny_verifier(seed=1)))
    try:
        node.stream.worker.stop()
        node.stream.pub_caption, node.pub_diag = RecordingPublisher(), RecordingPublisher()
        node._publish_diagnostics()
        assert node.pub_diag.sent[-1].status[0].level == DiagnosticStatus.OK
        node.stream._on_draft(timeline_draft(0, 5))
        node.loop.publish(node.loop.book.on_verifier_gave_up(
            (0, 5), 5 * 10**9, 6 * 10**9, time.monotonic(), UnverifiedReason.VERIFIER_FAILED))
        node._publish_diagnostics()
        status = node.pub_diag.sent[-1].status[0]
        assert status.level == DiagnosticStatus.WARN and "UNVERIFIED" in status.message
        drive_windows(node, 0, range(7, 8))  # verified again: ok
        node._publish_diagnostics()
        assert node.pub_diag.sent[-1].status[0].level == DiagnosticStatus.OK
    finally:
        node.destroy_node()


def test_a_deactivate_mid_window_ends_the_open_and_queued_windows_unverified_with_their_drafts_and_never_final_later(  # noqa: E501
        ros):
    # issue 45, faults 3 and 25: the window open at a deactivate was published FINAL after the
    # activate, and windows drafted while inactive got no caption at all
    node = bring_up(VerifierNode(tiny_verifier(seed=1)))
    try:
        node.stream.worker.stop()
        node.stream.pub_caption = RecordingPublisher()
        drive_windows(node, 0, range(10, 12))  # 10 FINAL; window 12 has begun
        for k in range(1, 4):
            node.stream._on_image(image(12 + k / 8, 120 + k))
        assert node.loop.sync.pending_ids() == [12] and node.loop.queue.keys() == [(0, 11)]
        node.stream._on_draft(cs_msg.DraftTokens(  # window 12's draft so far: not done yet
            window_id=12, token_ids=[1], text="a", done=False,
            window_start=timeline_draft(0, 12).window_start,
            window_end=timeline_draft(0, 12).window_end))
        assert node.trigger_deactivate() == SUCCESS
        assert not [c for c in node.stream.pub_caption.sent if c.window_id == 12
                    and c.status == cs_msg.Caption.STATUS_UNVERIFIED]  # it waits for its draft
        node.stream._on_draft(timeline_draft(0, 12))  # the draft completes while inactive
        node.stream._on_draft(timeline_draft(0, 13))  # a window drafted while inactive
        assert node.trigger_activate() == SUCCESS
        node.stream.worker.stop()
        for k in range(4, 8):  # the rest of window 12's frames come after the activate
            node.stream._on_image(image(12 + k / 8, 120 + k))
        drive_windows(node, 0, range(14, 16))
        terminal = {}
        for c in node.stream.pub_caption.sent:
            if c.status in (cs_msg.Caption.STATUS_FINAL, cs_msg.Caption.STATUS_UNVERIFIED):
                assert c.window_id not in terminal, f"window {c.window_id} ended twice"
                terminal[c.window_id] = c
        # 11 was queued, 12 open at the deactivate; 13 was drafted while inactive
        assert {w: status_of(c)[1:] for w, c in terminal.items() if w in (11, 12, 13)} == {
            11: STOPPED, 12: STOPPED, 13: STOPPED}
        assert {terminal[w].draft_text for w in (11, 12, 13)} == {"a car"}
        assert terminal[12].draft_state == cs_msg.Caption.DRAFT_COMPLETE
        final = cs_msg.Caption.STATUS_FINAL
        assert terminal[10].status == final and terminal[14].status == final
        assert node.loop.sync.stats.abandoned_windows == 1 and node.loop.sync.stats.late_frames >= 4
    finally:
        node.destroy_node()


def test_a_deactivated_verifier_ends_a_window_whose_draft_never_completes_after_its_patience(
        ros):
    node = bring_up(VerifierNode(tiny_verifier(seed=1)))
    try:
        node.stream.worker.stop()
        node.stream.pub_caption = RecordingPublisher()
        node.stream._on_draft(cs_msg.DraftTokens(
            window_id=7, token_ids=[1], text="a", done=False,
            window_start=timeline_draft(0, 7).window_start,
            window_end=timeline_draft(0, 7).window_end))
        assert node.trigger_deactivate() == SUCCESS
        node.loop.tick()
        assert status_of(node.stream.pub_caption.sent[-1]) == (7, *DRAFT)
        node.loop.book.patience_s = 0.0  # patience over: the draft it has is the caption
        node.loop.tick()
        last = node.stream.pub_caption.sent[-1]
        assert status_of(last) == (7, *STOPPED) and last.draft_text == "a"
        assert last.draft_state == cs_msg.Caption.DRAFT_CUT_SHORT
    finally:
        node.destroy_node()


def test_an_exception_in_a_callback_is_logged_and_counted_and_the_executor_spins_on(ros):
    # issue 45, fault 15: one odd message raised in a callback, the spin thread died and every
    # node of the process with it
    from std_msgs.msg import String

    from crossspec_ros.nodes.lifecycle import ManagedNode

    handled, ticks = [], []

    class Picky(ManagedNode):
        def configure_node(self) -> None:
            self.add_subscription(String, "picky_in", self._on, 10)
            self.add_timer(0.05, self._tick)

        def _on(self, msg) -> None:
            if msg.data == "odd":
                raise ValueError("an odd message")
            handled.append(msg.data)

        def _tick(self) -> None:
            ticks.append(1)
            if len(ticks) == 1:
                raise RuntimeError("a failing timer")

    node = bring_up(Picky(f"picky_{uuid.uuid4().hex[:8]}"))
    sender = rclpy.create_node(f"sender_{uuid.uuid4().hex[:8]}")
    pub = sender.create_publisher(String, "picky_in", 10)
    executor = make_executor()
    executor.add_node(node)
    stop = spin_in_thread(executor)
    try:
        deadline = time.monotonic() + 30
        while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        for data in ("odd", "fine"):
            pub.publish(String(data=data))
        while ("fine" not in handled or len(ticks) < 3) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert handled == ["fine"] and len(ticks) >= 3 and node.callback_errors == 2
    finally:
        stop()
        executor.shutdown(timeout_sec=2.0)
        sender.destroy_node()
        node.destroy_node()


def test_waiting_for_active_asks_again_when_a_get_state_request_goes_unanswered(monkeypatch):
    from crossspec_ros.nodes import lifecycle

    class Future:
        def __init__(self, answer):
            self.answer = answer

        def done(self):
            return self.answer is not None

        def result(self):
            return self.answer

    class Client:
        """The first request is lost (its future never completes), the second answered."""

        def __init__(self):
            self.asked, self.given_up = 0, []

        def service_is_ready(self):
            return True

        def call_async(self, _request):
            self.asked += 1
            active = GetState.Response()
            active.current_state.id = State.PRIMARY_STATE_ACTIVE
            return Future(None if self.asked == 1 else active)

        def remove_pending_request(self, future):
            self.given_up.append(future)

    client = Client()
    node = type("Node", (), {"create_client": lambda self, _type, _name: client,
                             "destroy_client": lambda self, _client: None})()
    monkeypatch.setattr(lifecycle, "ASK_AGAIN_S", 0.05)
    lifecycle.wait_until_active(node, ["crossspec_verifier"], time.sleep, timeout_s=30.0)
    assert client.asked == 2 and len(client.given_up) == 1


def test_a_node_stopped_before_its_constructor_finished_is_destroyed_without_an_error(ros):
    # a Ctrl-C between the node joining its context and __init__ setting its state: the
    # shutdown destroys the half-made node (a signal test's process exited 1 on AttributeError)
    from crossspec_ros.nodes.viz_node import VizNode

    node = VizNode()
    del node.active, node.configured  # as a node interrupted right after super().__init__
    node.destroy_node()


@pytest.mark.parametrize("from_state", ["active", "inactive"])
def test_a_shutdown_ends_every_open_window_unverified_at_once_and_finalizes_the_node(
        ros, from_state):
    # issue 53, item 11: shutdown mid-drive left the open windows without their UNVERIFIED
    # caption (they waited for drafts nothing would relay after it)
    node = bring_up(VerifierNode(tiny_verifier(seed=1)))
    try:
        node.stream.worker.stop()
        node.stream.pub_caption = RecordingPublisher()
        node.stream._on_draft(cs_msg.DraftTokens(  # a draft not complete: waits for the rest
            window_id=7, token_ids=[1], text="a", done=False,
            window_start=timeline_draft(0, 7).window_start,
            window_end=timeline_draft(0, 7).window_end))
        if from_state == "inactive":
            assert node.trigger_deactivate() == SUCCESS
            assert status_of(node.stream.pub_caption.sent[-1]) == (7, *DRAFT)  # still waiting
        sent = node.stream.pub_caption  # the publisher goes with the shutdown
        assert node.trigger_shutdown() == SUCCESS
        last = sent.sent[-1]
        assert status_of(last) == (7, *STOPPED) and last.draft_text == "a"
        assert node.finalized and not node.active
    finally:
        node.destroy_node()


def test_an_activate_that_fails_leaves_the_node_inactive_saying_why_and_its_process_ends(ros):
    # issue 53, item 12: an exception in activate became rclpy's silent ERROR (the node fell
    # back to unconfigured and its process ran on, doing nothing)
    from crossspec_ros.cli.node_cmd import _failed_start
    from crossspec_ros.nodes.lifecycle import NodeStartError

    node = DraftNode(tiny_eventgpt_drafter(seed=1))
    try:
        def no_worker() -> None:
            raise RuntimeError("cannot start a thread")

        node.start = no_worker
        with pytest.raises(NodeStartError, match="'crossspec_draft' could not be activated: "
                           "cannot start a thread"):
            bring_up(node)
        assert node._state_machine.current_state[1] == "inactive" and not node.active
        # what `crossspec node` says and exits 2 on when launch asked for the activate
        assert _failed_start([node]) == \
            "crossspec_draft could not be activated: cannot start a thread"
    finally:
        node.destroy_node()
