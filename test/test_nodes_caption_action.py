"""The crossspec/CaptionWindow action, through a real rclpy ActionClient: the next window's
captions stream as feedback and its FINAL caption is the result; a past window is answered at
once; a window that never comes times out with a message; a goal can be canceled."""

from __future__ import annotations

import time
import uuid

import pytest

rclpy = pytest.importorskip("rclpy")

from crossspec import msg as cs_msg  # noqa: E402
from crossspec.action import CaptionWindow  # noqa: E402
from rclpy.action import ActionClient  # noqa: E402
from synthetic_windows import random_window  # noqa: E402

from crossspec_ros.models.tiny import tiny_verifier  # noqa: E402
from crossspec_ros.nodes.graph import make_executor, spin_in_thread  # noqa: E402
from crossspec_ros.nodes.lifecycle import bring_up  # noqa: E402
from crossspec_ros.nodes.verifier_node import VerifierNode  # noqa: E402

pytestmark = pytest.mark.ros
Caption = cs_msg.Caption


@pytest.fixture()
def graph():
    # an action name of this test's own: a server or client of an earlier test (another
    # rclpy context of this process) can linger in discovery for a while on a loaded machine,
    # and would answer wait_for_server or count as the feedback topic's subscriber
    name = f"/crossspec/caption_window_{uuid.uuid4().hex[:8]}"
    rclpy.init()
    node = bring_up(VerifierNode(tiny_verifier(seed=1), parameter_overrides=[
        rclpy.parameter.Parameter("caption_action", value=name)]))
    client_node = rclpy.create_node("caption_action_client")
    client = ActionClient(client_node, CaptionWindow, name)
    executor = make_executor()
    executor.add_node(node)
    executor.add_node(client_node)
    stop = spin_in_thread(executor)
    assert client.wait_for_server(timeout_sec=10)
    # the goal services are there; feedback is a topic, matched by discovery of its own: a
    # feedback message published before that is lost (seen under load), so wait for it
    deadline = time.monotonic() + 10
    while node.count_subscribers(f"{name}/_action/feedback") < 1 and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield node, client
    finally:
        stop()
        executor.shutdown(timeout_sec=2.0)
        client.destroy()
        client_node.destroy_node()
        node.destroy_node()
        rclpy.shutdown()


def wait(future, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not future.done() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert future.done(), "no answer in time"
    return future.result()


def draft(window_id: int, text: str, done: bool = False):
    msg = cs_msg.DraftTokens(window_id=window_id, token_ids=[5, 6], text=text, done=done,
                             first_token_latency_ms=12.0)
    msg.window_end.sec = window_id + 1
    return msg


def send(client, feedback: list, **goal):
    handle = wait(client.send_goal_async(CaptionWindow.Goal(**goal),
                                         feedback_callback=feedback.append))
    assert handle.accepted
    return handle


def warm_feedback_path(node, client, window_id: int) -> None:
    """A whole goal for ``window_id`` whose draft is offered again until its feedback reaches
    the client: the graph showing the client's feedback subscription does not mean the
    server's writer is matched to it yet (a first DRAFT feedback was still lost under load,
    1 of 5 fresh-clone runs), a feedback received does."""
    got: list = []
    handle = send(client, got, timeout_s=30.0)
    deadline = time.monotonic() + 10
    k = 0
    while not got and time.monotonic() < deadline:
        node.stream._on_draft(draft(window_id, f"warm-up {k}"))
        k += 1
        time.sleep(0.1)
    assert got, "the feedback topic never matched"
    node.loop.queue.put(random_window(window_id), time.monotonic())
    assert wait(handle.get_result_async()).result.success


def test_the_next_window_streams_feedback_and_ends_with_its_final_caption(graph):
    node, client = graph
    warm_feedback_path(node, client, 6)
    feedback: list = []
    handle = send(client, feedback, timeout_s=30.0)
    node.stream._on_draft(draft(7, "a red car"))  # the next window to be captioned
    node.loop.queue.put(random_window(7), time.monotonic())
    result = wait(handle.get_result_async()).result
    assert result.success and result.caption.window_id == 7
    assert result.caption.status == Caption.STATUS_FINAL and result.caption.confirmed_text
    # feedback and the result travel apart: the result may be here before the feedback is
    deadline = time.monotonic() + 30
    while not feedback and time.monotonic() < deadline:
        time.sleep(0.02)
    statuses = [f.feedback.caption.status for f in feedback]
    assert statuses and statuses[0] == Caption.STATUS_DRAFT
    assert Caption.STATUS_FINAL not in statuses
    assert {f.feedback.caption.window_id for f in feedback} == {7}


def test_a_window_already_captioned_is_answered_at_once(graph):
    from builtin_interfaces.msg import Time

    node, client = graph
    node.loop.queue.put(random_window(3), time.monotonic())  # window id 3: [3 s, 4 s) by time
    deadline = time.monotonic() + 30
    while node.stream.counters["windows_verified"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    handle = send(client, [], stamp=Time(sec=3, nanosec=500_000_000), timeout_s=5.0)
    result = wait(handle.get_result_async()).result
    assert result.success and result.caption.window_id == 3  # answered (a time-out fails)
    assert result.caption.status == Caption.STATUS_FINAL


def test_a_window_that_never_comes_times_out_with_a_message(graph):
    _, client = graph
    handle = send(client, [], timeout_s=0.5)
    result = wait(handle.get_result_async()).result
    assert not result.success and "is the camera (or bag) publishing" in result.message


def test_a_goal_can_be_canceled(graph):
    _, client = graph
    handle = send(client, [], timeout_s=30.0)
    wait(handle.cancel_goal_async())
    result = wait(handle.get_result_async(), timeout=5.0)
    assert not result.result.success and result.result.message == "canceled"


def test_a_caption_published_between_acceptance_and_execution_reaches_the_goal(graph):
    # What made test_the_next_window_streams_feedback... flaky under load: the client hears
    # "accepted" before the goal executes, and a DRAFT published in between was lost. Here
    # the server's callbacks run in rclpy's order with the caption offered in between.
    from types import SimpleNamespace

    node, _ = graph
    server = node.stream.caption_action
    assert server._accept(CaptionWindow.Goal(timeout_s=5.0)).name == "ACCEPT"
    server.offer(Caption(window_id=9, status=Caption.STATUS_DRAFT, draft_text="a bus"))
    executed = []
    handle = SimpleNamespace(goal_id=SimpleNamespace(uuid=bytes(range(16))),
                             execute=lambda: executed.append(True))
    server._accepted(handle)
    watch = server._watches.pop(bytes(range(16)))
    assert executed and [c.draft_text for c in watch.captions] == ["a bus"]
    assert watch.target == 9


def _goal(server, goal_id: int, **goal):
    """A goal through the server's callbacks in rclpy's order; its watch."""
    from types import SimpleNamespace

    assert server._accept(CaptionWindow.Goal(**goal)).name == "ACCEPT"
    key = bytes([goal_id] * 16)
    server._accepted(SimpleNamespace(goal_id=SimpleNamespace(uuid=key),
                                     execute=lambda: None))
    return server._watches[key]


def test_a_second_pass_of_a_bag_repeating_the_window_ids_is_captioned_for_the_next_goal(
        graph):
    # issue 53, item 10: during a second replay the goal was ABORTED while FINAL captions came
    node, _ = graph
    server = node.stream.caption_action
    for wid in (3, 4, 5):  # the first pass
        server.offer(Caption(window_id=wid, epoch=0, status=Caption.STATUS_FINAL))
    watch = _goal(server, 1, timeout_s=5.0)
    server.offer(Caption(window_id=5, epoch=0, status=Caption.STATUS_FINAL))  # known before
    server.offer(Caption(window_id=3, epoch=1, status=Caption.STATUS_DRAFT, draft_text="b"))
    server.offer(Caption(window_id=4, epoch=1, status=Caption.STATUS_DRAFT))
    assert (watch.target, watch.epoch) == (3, 1)
    assert [c.draft_text for c in watch.captions] == ["b"]


def test_a_goal_for_a_stamp_gets_the_newest_pass_caption_not_an_earlier_one(graph):
    from builtin_interfaces.msg import Time

    node, _ = graph
    server = node.stream.caption_action
    server.offer(Caption(window_id=3, epoch=0, status=Caption.STATUS_FINAL,
                         confirmed_text="the first pass"))
    assert _goal(server, 2, stamp=Time(sec=3), timeout_s=5.0).done.confirmed_text == \
        "the first pass"  # finished: answered at once
    server.offer(Caption(window_id=1, epoch=1, status=Caption.STATUS_DRAFT))  # a new pass
    watch = _goal(server, 3, stamp=Time(sec=3), timeout_s=5.0)
    assert watch.done is None  # its window of this pass is not captioned yet
    server.offer(Caption(window_id=3, epoch=1, status=Caption.STATUS_FINAL,
                         confirmed_text="the second pass"))
    server.offer(Caption(window_id=3, epoch=2, status=Caption.STATUS_DRAFT))  # a third pass
    assert [c.confirmed_text for c in watch.captions] == ["the second pass"]
