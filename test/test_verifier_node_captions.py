"""The verifier node's Caption stream for one window: drafts before, nothing after FINAL.

Drives the node's callbacks directly (no executor, no bag) so the orderings that happen only
by chance under load in the graph tests are reproduced every time.
"""

from __future__ import annotations

import pytest

rclpy = pytest.importorskip("rclpy")

from crossspec import msg as cs_msg  # noqa: E402

from crossspec_ros.models.tiny import tiny_verifier  # noqa: E402
from crossspec_ros.nodes.verifier_node import VerifierNode, WindowState  # noqa: E402

pytestmark = pytest.mark.ros
Caption = cs_msg.Caption


class RecordingPublisher:
    def __init__(self) -> None:
        self.sent: list = []

    def publish(self, msg) -> None:
        self.sent.append(msg)


@pytest.fixture()
def node():
    rclpy.init()
    node = VerifierNode(tiny_verifier(seed=1))
    node.pub_caption = RecordingPublisher()
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown()


def draft(window_id: int, tokens: list[int], text: str, done: bool = False):
    msg = cs_msg.DraftTokens(window_id=window_id, token_ids=tokens, text=text, done=done)
    msg.window_end.sec = 1
    return msg


def test_a_draft_for_a_new_window_is_published_as_a_draft_caption(node):
    node._on_draft(draft(7, [5, 6], "a red car"))
    [caption] = node.pub_caption.sent
    assert (caption.window_id, caption.status) == (7, Caption.STATUS_DRAFT)
    assert caption.unconfirmed_text == "a red car" and caption.confirmed_text == ""


def test_a_draft_after_the_final_caption_does_not_repeat_it(node):
    # the worker has published FINAL but not yet moved the window to `finished`
    node.windows[7] = WindowState(7, status=Caption.STATUS_FINAL, confirmed_text="a red car")
    node._on_draft(draft(7, [5, 6, 9], "a red car turns", done=True))
    assert node.pub_caption.sent == []
    assert node.counters["late_drafts"] == 1


def test_a_draft_for_a_finished_window_is_counted_late_not_published(node):
    node.finished[7] = 0.0
    node._on_draft(draft(7, [5], "a"))
    assert node.pub_caption.sent == [] and node.counters["late_drafts"] == 1


def test_a_partially_confirmed_window_shows_the_drafts_unconfirmed_tail(node):
    node.windows[7] = WindowState(7, status=Caption.STATUS_PARTIAL, confirmed_text="a red")
    node._on_draft(draft(7, [5, 6, 9], "a red car turns"))
    [caption] = node.pub_caption.sent
    assert caption.status == Caption.STATUS_PARTIAL
    assert (caption.confirmed_text, caption.unconfirmed_text) == ("a red", "car turns")
