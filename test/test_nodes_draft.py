"""The draft node tells the verifier when it leaves a window unfinished (a newer window
preempted it, or it dropped the window unstarted), so no caption passes a fragment or nothing
off as the draft."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.parameter import Parameter  # noqa: E402
from recording_publisher import RecordingPublisher  # noqa: E402

from crossspec_ros.models.tiny import tiny_eventgpt_drafter  # noqa: E402
from crossspec_ros.nodes.draft_node import DraftNode  # noqa: E402
from crossspec_ros.nodes.lifecycle import bring_up  # noqa: E402
from crossspec_ros.sim.dataset import make_window  # noqa: E402

pytestmark = pytest.mark.ros


class HeldDrafter:
    """The drafter, held after each drafted token until the test sets ``release``: a newer
    window comes mid-draft because the test says so, not because the drafter is slow."""

    def __init__(self, inner):
        self.inner = inner
        self.release = threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def prefill(self, inputs):
        session = self.inner.prefill(inputs)
        feed = session.feed

        def held_feed(tokens):  # the drafter feeds each token it drafted to draft the next
            assert self.release.wait(30.0), "the test never released the drafter"
            return feed(tokens)

        session.feed = held_feed
        return session


@pytest.fixture()
def node():
    rclpy.init()
    node = bring_up(DraftNode(HeldDrafter(tiny_eventgpt_drafter(seed=1)), parameter_overrides=[
        Parameter("max_queued_windows", value=1),
        Parameter("step_aside_ms", value=0.0)]))  # drafted at the close, no wait for a verifier
    node.worker.stop()  # the test runs the worker's steps itself
    node.pub_draft = RecordingPublisher()
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown()


def windows(n: int):
    first = make_window(23, 1, image_size=(64, 48), event_size=(64, 48)).as_window()
    return [replace(first, id=first.id + k, t0=first.t0 + k * 10**9, t1=first.t1 + k * 10**9)
            for k in range(n)]


def test_a_preempted_draft_ends_with_a_cut_short_notice_carrying_what_it_drafted(node):
    older, newer = windows(2)
    node.loop.enqueue([older])
    step = threading.Thread(target=node.loop.step)
    step.start()
    deadline = time.monotonic() + 30
    while not node.pub_draft.sent and time.monotonic() < deadline:
        time.sleep(0.01)
    node.loop.enqueue([newer])  # the drafter leaves the older window for it
    node.drafter.release.set()  # held after its first token until now
    step.join(timeout=30)
    assert not step.is_alive()
    sent = [m for m in node.pub_draft.sent if m.window_id == older.id]
    *drafts, notice = sent
    assert drafts and not any(m.cut_short or m.done for m in drafts)
    assert notice.cut_short and not notice.done
    assert (notice.text, list(notice.token_ids)) == (drafts[-1].text, list(drafts[-1].token_ids))
    assert node.loop.windows_cut_short == 1


def test_a_window_the_busy_drafter_drops_gets_an_empty_cut_short_notice(node):
    first, second = windows(2)
    node.loop.enqueue([first, second])  # a queue of one: the first is dropped unstarted
    [notice] = node.pub_draft.sent
    assert (notice.window_id, notice.cut_short, notice.text, list(notice.token_ids)) == (
        first.id, True, "", [])


def test_packets_that_come_during_the_verifiers_turn_are_decoded_after_it(node):
    from event_camera_msgs.msg import EventPacket

    from crossspec_ros.events.encode import Evt3PacketEncoder

    def message(packet):
        msg = EventPacket(height=packet.height, width=packet.width, seq=packet.seq,
                          time_base=packet.time_base, encoding=packet.encoding,
                          events=bytes(packet.events))
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(packet.stamp_ns, 10**9)
        return msg

    window = windows(1)[0]
    encoder = Evt3PacketEncoder(window.events.width, window.events.height,
                                packet_period_ns=2_000_000, epoch_ns=window.t0)
    packets = [message(p) for p in encoder.encode(window.events)][:20]
    node.loop.hold()  # the verifier in this process works on a closed window
    for msg in packets[:10]:
        node._on_events(msg)
    assert node.decoder.stats.packets == 0 and len(node.loop.held_packets) == 10
    node.loop.release_hold()
    node._on_events(packets[10])  # the first after the turn decodes the rest first, in order
    assert node.decoder.stats.packets == 11 and not node.loop.held_packets


def test_packets_ignored_while_inactive_are_not_reported_missing_after_activation(node):
    # issue 53, item 14: "packets missing ... lost on the way" for packets dropped on purpose
    from event_camera_msgs.msg import EventPacket

    from crossspec_ros.events.encode import Evt3PacketEncoder
    from crossspec_ros.nodes.lifecycle import SUCCESS

    window = windows(1)[0]
    encoder = Evt3PacketEncoder(window.events.width, window.events.height,
                                packet_period_ns=2_000_000, epoch_ns=window.t0)
    packets = []
    for p in list(encoder.encode(window.events))[:12]:
        msg = EventPacket(height=p.height, width=p.width, seq=p.seq, time_base=p.time_base,
                          encoding=p.encoding, events=bytes(p.events))
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(p.stamp_ns, 10**9)
        packets.append(msg)
    for msg in packets[:3]:
        node._on_events(msg)
    assert node.trigger_deactivate() == SUCCESS
    for msg in packets[3:9]:  # ignored: the node is inactive
        node._on_events(msg)
    assert node.trigger_activate() == SUCCESS
    for msg in packets[9:]:
        node._on_events(msg)
    assert node.decoder.stats.packets == 6 and node.decoder.stats.missing_packets == 0
