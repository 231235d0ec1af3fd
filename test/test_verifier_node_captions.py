"""The verifier node's Caption stream, driven through its callbacks (no executor, no bag), so
the orderings that happen only by chance under load in the graph tests happen every time.
The protocol itself is tested without ROS in test_caption_protocol.py; this proves the node
follows it: what it publishes, with which fields."""

from __future__ import annotations

import pytest

rclpy = pytest.importorskip("rclpy")

from crossspec import msg as cs_msg  # noqa: E402
from recording_publisher import RecordingPublisher  # noqa: E402
from synthetic_windows import random_window  # noqa: E402

from crossspec_ros.models.tiny import tiny_verifier  # noqa: E402
from crossspec_ros.nodes.lifecycle import bring_up  # noqa: E402
from crossspec_ros.nodes.verifier_node import VerifierNode  # noqa: E402

pytestmark = pytest.mark.ros
Caption = cs_msg.Caption


@pytest.fixture()
def node():
    rclpy.init()
    node = bring_up(VerifierNode(tiny_verifier(seed=1)))
    node.stream.worker.stop()  # the test runs the worker's step itself
    node.stream.pub_caption = RecordingPublisher()
    node.stream.pub_confirmed = RecordingPublisher()
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown()


def draft(window_id: int, tokens: list[int], text: str, done: bool = False, epoch: int = 0):
    msg = cs_msg.DraftTokens(window_id=window_id, epoch=epoch, token_ids=tokens, text=text,
                             done=done, first_token_latency_ms=12.0)
    msg.window_end.sec = 1
    return msg


def statuses(node) -> list[tuple[int, int]]:
    return [(c.window_id, c.status) for c in node.stream.pub_caption.sent]


def test_a_draft_for_a_new_window_is_published_as_a_draft_caption(node):
    node.stream._on_draft(draft(7, [5, 6], "a red car"))
    [caption] = node.stream.pub_caption.sent
    assert (caption.window_id, caption.status) == (7, Caption.STATUS_DRAFT)
    assert caption.unconfirmed_text == "a red car" and caption.confirmed_text == ""
    assert caption.draft_text == "a red car" and caption.draft_first_token_ms == 12.0


def test_a_verified_window_ends_with_one_final_caption_and_later_drafts_are_late(node):
    window = random_window(7)
    node.stream._on_draft(draft(7, [5, 6], "a red car"))
    node.loop.queue.put(window, 0.0)
    node.loop.step()
    assert statuses(node)[-1] == (7, Caption.STATUS_FINAL)
    assert [s for _, s in statuses(node)].count(Caption.STATUS_FINAL) == 1
    final = node.stream.pub_caption.sent[-1]
    assert final.confirmed_text and final.unconfirmed_text == ""
    assert final.draft_text == "a red car"
    assert node.stream.pub_confirmed.sent[-1].done
    sent = len(node.stream.pub_caption.sent)
    node.stream._on_draft(draft(7, [5, 6, 9], "a red car turns", done=True))
    assert len(node.stream.pub_caption.sent) == sent
    assert node.loop.book.counters["late_drafts"] == 1


def test_a_window_dropped_by_a_busy_verifier_is_unverified_with_its_draft(node):
    node.loop.queue.maxlen = 1
    node.stream._on_draft(draft(1, [5], "a red"))
    node.loop.enqueue([random_window(1), random_window(2)])  # window 1 dropped for window 2
    assert statuses(node) == [(1, Caption.STATUS_DRAFT)]  # its draft is still coming
    node.stream._on_draft(draft(1, [5, 6], "a red car", done=True))
    last = node.stream.pub_caption.sent[-1]
    assert (last.window_id, last.status) == (1, Caption.STATUS_UNVERIFIED)
    assert last.unconfirmed_text == "a red car" and last.draft_text == "a red car"


def test_a_verifier_failure_ends_the_window_unverified_with_its_draft(node, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(node.loop.engine, "run_window", fail)
    node.stream._on_draft(draft(3, [5, 6], "a red car", done=True))
    node.loop.queue.put(random_window(3), 0.0)
    with pytest.raises(RuntimeError):
        node.loop.step()  # the Worker counts and logs it
    assert statuses(node)[-1] == (3, Caption.STATUS_UNVERIFIED)
    assert node.stream.pub_caption.sent[-1].unconfirmed_text == "a red car"
    assert node.loop.channels == {}


def test_drafts_of_two_epochs_with_the_same_id_are_two_windows(node):
    node.stream._on_draft(draft(4, [5], "a car", epoch=0))
    node.stream._on_draft(draft(4, [6], "a bus", epoch=1))
    assert [(c.epoch, c.draft_text) for c in node.stream.pub_caption.sent] == [(0, "a car"),
                                                                          (1, "a bus")]
    assert set(node.loop.channels) == {(0, 4), (1, 4)}


def test_a_late_subscriber_gets_the_latest_finished_caption_at_once(node):
    from crossspec_ros.nodes.common import latched_qos
    from crossspec_ros.nodes.graph import make_executor, spin_in_thread

    node.stream._on_draft(draft(1, [5], "a red car", done=True))
    with node.loop.lock:  # the window ends UNVERIFIED (no RGB will come for it)
        node.loop.publish(node.loop.book.expire(1e9, set(), (0, 5)))
    got = []
    late = rclpy.create_node("late_subscriber")
    late.create_subscription(Caption, "/crossspec/caption/latest", got.append, latched_qos())
    executor = make_executor()
    executor.add_node(node)
    executor.add_node(late)
    stop = spin_in_thread(executor)
    try:
        import time

        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop()
        executor.shutdown(timeout_sec=2.0)
        late.destroy_node()
    assert [(c.window_id, c.status, c.draft_text) for c in got] == [
        (1, Caption.STATUS_UNVERIFIED, "a red car")]


def test_a_window_the_worker_has_taken_is_not_ended_unverified_before_it_starts(node,
                                                                                 monkeypatch):
    # The worker takes a window from the queue, then marks it started: a tick in between
    # (the executor thread) must not find it neither queued nor started and end it NO_RGB.
    node.stream._on_draft(draft(7, [5, 6], "a red car", done=True))
    node.loop.queue.put(random_window(7), 0.0)
    node.loop.book.patience_s = 0.0  # every window not waited for ends at the next tick
    claim = node.loop.held.claim

    def tick_first(window):
        node.loop.tick()
        return claim(window)

    monkeypatch.setattr(node.loop.held, "claim", tick_first)
    node.loop.step()
    assert Caption.STATUS_UNVERIFIED not in [s for _, s in statuses(node)]
    assert statuses(node)[-1] == (7, Caption.STATUS_FINAL)
