"""The graph's nodes are lifecycle nodes: nothing loads in the constructor, models load on
configure, workers run only while active, inputs are ignored while inactive, cleanup lets go
of everything, and `ros2 lifecycle set` (the change_state service) drives the same
transitions."""

from __future__ import annotations

import time

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


def test_inputs_are_ignored_until_active_and_workers_run_only_while_active(ros):
    node = bring_up(VerifierNode(tiny_verifier(seed=1)), activate=False)
    try:
        node.pub_caption = RecordingPublisher()
        node._on_draft(draft(3))
        assert node.pub_caption.sent == [] and node.worker is None
        assert node.trigger_activate() == SUCCESS
        node._on_draft(draft(4))
        assert [c.window_id for c in node.pub_caption.sent] == [4]
        worker = node.worker.thread
        assert worker.is_alive()
        assert node.trigger_deactivate() == SUCCESS
        assert not worker.is_alive() and not node.active
        node._on_draft(draft(5))
        assert len(node.pub_caption.sent) == 1
        assert node.trigger_activate() == SUCCESS  # and back: a new worker
        assert node.worker.thread.is_alive() and node.worker.thread is not worker
    finally:
        node.destroy_node()


def test_cleanup_destroys_what_configure_made_and_configure_makes_it_again(ros, monkeypatch):
    monkeypatch.setattr(pair_module, "load_from_params",
                        lambda params, verifier=True, drafter=True: (tiny_verifier(seed=1), None))
    node = VerifierNode()
    try:
        def published() -> set[str]:
            return {name for name, _ in node.get_publisher_names_and_types_by_node(
                node.get_name(), node.get_namespace())}

        assert "/crossspec/caption" not in published()
        bring_up(node, activate=False)
        assert "/crossspec/caption" in published() and node.engine is not None
        assert node.trigger_cleanup() == SUCCESS
        assert "/crossspec/caption" not in published() and node.engine is None
        bring_up(node)
        assert "/crossspec/caption" in published() and node.active
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
        assert node.active and node.worker.thread.is_alive()
    finally:
        stop()
        executor.shutdown(timeout_sec=2.0)
        client_node.destroy_node()
        node.destroy_node()
