"""Live prefill in the verifier node: frames are prefilled as the synchronizer selects them,
and a frame that arrives later than the reorder slack and changes the selection makes the
window's prefill start over (counted), never a wrong caption."""

from __future__ import annotations

import math

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from sensor_msgs.msg import Image  # noqa: E402

from crossspec_ros.models.tiny import tiny_verifier  # noqa: E402
from crossspec_ros.nodes.lifecycle import bring_up  # noqa: E402
from crossspec_ros.nodes.verifier_node import VerifierNode  # noqa: E402

pytestmark = pytest.mark.ros
MS = 1_000_000


def image(stamp_ms: float, seed: int) -> Image:
    rgb = np.random.default_rng(seed).integers(0, 256, (36, 48, 3), dtype=np.uint8)
    msg = Image(height=36, width=48, encoding="rgb8", step=48 * 3, data=rgb.tobytes())
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ms * MS), 10**9)
    return msg


def steps_by_hand(node) -> None:
    """The worker stopped: the test runs the loop's steps itself, in this thread."""
    node.stream.worker.stop()


@pytest.fixture()
def node():
    rclpy.init()
    results = []
    node = bring_up(VerifierNode(tiny_verifier(seed=1),
                                 on_result=lambda w, r: results.append((w, r))))
    steps_by_hand(node)
    node.results = results
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown()


def run_worker(node, steps: int = 12) -> None:
    for _ in range(steps):
        node.loop.step()


def test_frames_are_prefilled_while_the_window_is_open(node):
    for k, t in enumerate(range(0, 700, 50)):
        node.stream._on_image(image(t, k))
    run_worker(node, 2)
    [live] = node.loop.live.live_windows()
    assert live.frames >= 4 and node.loop.live.counters["live_frames"] == live.frames
    for k, t in enumerate(range(700, 1100, 50)):
        node.stream._on_image(image(t, 100 + k))
    run_worker(node)
    [(window, result)] = node.results
    assert result.stats.live_prefill_frames >= 4
    assert result.tokens == node.loop.engine.verifier_only(window)


def test_a_frame_later_than_the_slack_that_changes_the_selection_is_redone(node):
    for k, t in enumerate([0, 50, 100, 150, 200, 250, 300, 350, 400]):
        node.stream._on_image(image(t, k))
    run_worker(node, 2)  # slot 1 (target 187.5 ms) took the frame at 200 ms
    node.stream._on_image(image(190, 99))  # nearer to 187.5 ms, 210 ms behind the newest frame
    for k, t in enumerate(range(450, 1100, 50)):
        node.stream._on_image(image(t, 10 + k))
    run_worker(node)
    [(window, result)] = node.results
    assert 190 * MS in [f.stamp_ns for f in window.frames]  # the closed window has it
    assert result.stats.live_prefill_frames == -1 and node.stream.counters["live_redone"] == 1
    assert result.tokens == node.loop.engine.verifier_only(window)


def test_a_timeline_reset_in_the_middle_of_a_window_stays_lossless(node):
    seed = 0
    for t in range(5000, 5600, 50):  # window 5, half way
        node.stream._on_image(image(t, seed))
        seed += 1
    run_worker(node, 2)
    assert node.loop.live.counters["live_frames"] >= 3
    for t in range(0, 1100, 50):  # the bag loops: time jumps back 5 s, a new epoch
        node.stream._on_image(image(t, seed))
        seed += 1
    run_worker(node)
    assert node.loop.sync.epoch == 1
    windows = {(w.epoch, w.id): (w, r) for w, r in node.results}
    assert set(windows) == {(0, 5), (1, 0)}  # the half window was flushed, then window 0
    for window, result in windows.values():
        assert result.tokens == node.loop.engine.verifier_only(window)
    assert len(node.loop.live.live_windows()) <= 2  # nothing piles up


def test_the_next_windows_frames_are_prefilled_between_the_rounds_of_this_one(node):
    for k, t in enumerate(range(0, 1700, 50)):  # window 0 closes; window 1 is half in
        node.stream._on_image(image(t, k))
    pending_next = sum(1 for job in node.loop.live._queued if job.window_id == 1)
    assert pending_next >= 3
    run_worker(node, 1)  # window 0 only: its own frames first, then one of window 1's per round
    [(first, result)] = node.results
    pipelined = node.loop.live.counters["live_frames_pipelined"]
    assert 1 <= pipelined <= min(pending_next, result.stats.rounds)  # never two in one round
    assert result.tokens == node.loop.engine.verifier_only(first)
    assert node.loop.live._live[(0, 1)].frames == pipelined
    for k, t in enumerate(range(1700, 2200, 50)):
        node.stream._on_image(image(t, 50 + k))
    run_worker(node)
    second, result = node.results[1]
    assert second.id == 1 and result.stats.live_prefill_frames >= pipelined
    assert result.tokens == node.loop.engine.verifier_only(second)


def idle_steps(node, steps: int = 3) -> None:
    """The worker with nothing closed: it prefills queued frames and starts early."""
    for _ in range(steps):
        node.loop.step()


def test_a_window_whose_frames_are_decided_is_captioned_before_it_closes_published_at_the_close(
        node):
    for k, t in enumerate(range(0, 1050, 50)):  # the frame at 1000 ms decides slot 7 (950)
        node.stream._on_image(image(t, k))
    idle_steps(node)
    assert node.loop.held._held and not node.results  # decoded, held, nothing published
    assert node.loop.book.counters["windows_final"] == 0
    node.stream._on_image(image(1050, 99))  # the watermark passes 1 s: the window closes
    run_worker(node, 1)
    [(window, result)] = node.results
    assert window.closed_by == "watermark" and node.loop.held.counters["early_published"] == 1
    assert node.loop.book.counters["windows_final"] == 1
    assert result.tokens == node.loop.engine.verifier_only(window)
    assert result.stats.ready_before_close_ms > 0  # it was complete before the close
    assert result.stats.confirmed_done_ms >= 0


def test_a_held_caption_whose_frames_a_late_frame_changed_is_discarded_and_redone(node):
    for k, t in enumerate(range(0, 1050, 50)):
        node.stream._on_image(image(t, k))
    idle_steps(node)
    assert node.loop.held._held
    node.stream._on_image(image(190, 99))  # nearer slot 1's target (187.5 ms), later than the slack
    node.stream._on_image(image(1050, 98))
    run_worker(node, 1)
    [(window, result)] = node.results
    assert 190 * MS in [f.stamp_ns for f in window.frames]
    assert node.loop.held.counters == {"early_published": 0, "early_discarded": 1,
                                  "early_dropped": 0}
    assert math.isnan(result.stats.ready_before_close_ms)  # captioned after the close
    assert result.tokens == node.loop.engine.verifier_only(window)


def test_without_early_start_a_window_is_captioned_at_its_close(node):
    node.params["early_start"] = False
    for k, t in enumerate(range(0, 1050, 50)):
        node.stream._on_image(image(t, k))
    idle_steps(node)
    assert not node.loop.held._held and node.loop.live.live_windows()[0].complete
    node.stream._on_image(image(1050, 99))
    run_worker(node, 1)
    [(window, result)] = node.results
    assert math.isnan(result.stats.ready_before_close_ms)
    assert result.stats.live_prefill_frames == 8
    assert result.tokens == node.loop.engine.verifier_only(window)


def test_captions_made_under_a_relaxed_acceptance_rule_name_it_in_the_message():
    from rclpy.parameter import Parameter

    rclpy.init()
    node = bring_up(VerifierNode(tiny_verifier(seed=1), parameter_overrides=[
        Parameter("acceptance", value="top_k:3")]))
    steps_by_hand(node)
    published, confirmed = [], []
    node.stream.pub_caption.publish = published.append
    node.stream.pub_confirmed.publish = confirmed.append
    try:
        for k, t in enumerate(range(0, 1100, 50)):
            node.stream._on_image(image(t, k))
        run_worker(node, 2)
        final = [m for m in published if m.status == 2]
        assert len(final) == 1 and final[0].acceptance_rule == "top_k:3"
        assert all(m.acceptance_rule == "top_k:3" for m in published if m.confirmed_text)
        # and the token stream UIs read (issue 45, fault 26), with its statistics
        assert confirmed and confirmed[-1].done
        assert {(m.acceptance_rule, m.stats.acceptance_rule) for m in confirmed} == {
            ("top_k:3", "top_k:3")}
    finally:
        node.destroy_node()
        rclpy.shutdown()


def test_exact_captions_carry_no_acceptance_rule(node):
    published = []
    node.stream.pub_caption.publish = published.append
    for k, t in enumerate(range(0, 1100, 50)):
        node.stream._on_image(image(t, k))
    run_worker(node, 2)
    final = [m for m in published if m.status == 2]
    assert len(final) == 1 and final[0].acceptance_rule == ""


def done_draft(window_id: int, text: str = "a red car"):
    from crossspec import msg as cs_msg

    msg = cs_msg.DraftTokens(window_id=window_id, token_ids=[5, 6], text=text, done=True,
                             first_token_latency_ms=12.0)
    msg.window_end.sec = window_id + 1
    return msg


def test_a_window_whose_live_prefill_fails_at_its_close_ends_unverified_verifier_failed(
        node, monkeypatch):
    """A frame's prefill that fails when the closed window is taken (seen in a drive: a
    NameError while another thread compiled) ends the window as the verifier's failure, with
    its draft, never as a window that got no RGB."""
    from crossspec import msg as cs_msg

    from crossspec_ros.models.live_prefill import LivePrefill

    published = []
    node.stream.pub_caption.publish = published.append
    node.stream._on_draft(done_draft(0))
    for k, t in enumerate(range(0, 1100, 50)):  # queued for live prefill; window 0 closes
        node.stream._on_image(image(t, k))

    def fail(*args, **kwargs):
        raise NameError("module is not installed as a submodule")

    monkeypatch.setattr(LivePrefill, "add_frame", fail)
    with pytest.raises(NameError):
        node.loop.step()  # the Worker logs and counts it
    node.loop.tick()
    [last] = [m for m in published if m.status == cs_msg.Caption.STATUS_UNVERIFIED]
    assert (last.window_id, last.unverified_reason) == (
        0, cs_msg.Caption.REASON_VERIFIER_FAILED)
    assert last.draft_text == "a red car"
    assert not node.results and node.loop.channels == {}


def test_a_window_whose_early_start_failed_is_captioned_again_at_its_close(node, monkeypatch):
    """The engine failing on an early-started window (the caption decoded before the close)
    publishes nothing then; at the close the window is captioned from its frames, and if the
    engine fails again it ends UNVERIFIED as the verifier's failure, with its draft."""
    from crossspec import msg as cs_msg

    published = []
    node.stream.pub_caption.publish = published.append
    run_window, tries = node.loop.engine.run_window, []

    def fail_early(window, **kwargs):
        tries.append(window.closed_by)
        if window.closed_by == "early":
            raise NameError("module is not installed as a submodule")
        return run_window(window, **kwargs)

    monkeypatch.setattr(node.loop.engine, "run_window", fail_early)
    node.stream._on_draft(done_draft(0))
    for k, t in enumerate(range(0, 1050, 50)):
        node.stream._on_image(image(t, k))
    with pytest.raises(NameError):
        idle_steps(node)
    assert tries == ["early"] and not node.loop.held._held
    assert all(m.status == cs_msg.Caption.STATUS_DRAFT for m in published)
    node.stream._on_image(image(1050, 99))  # the window closes
    run_worker(node, 1)
    [(window, result)] = node.results
    assert tries == ["early", "watermark"] and published[-1].status == 2  # FINAL
    assert result.tokens == node.loop.engine.verifier_only(window)

    def fail(*args, **kwargs):
        raise NameError("module is not installed as a submodule")

    monkeypatch.setattr(node.loop.engine, "run_window", fail)
    node.stream._on_draft(done_draft(1, "a blue car"))
    for k, t in enumerate(range(1100, 2050, 50)):
        node.stream._on_image(image(t, 200 + k))
    with pytest.raises(NameError):
        idle_steps(node)  # window 1 starts early and fails
    node.stream._on_image(image(2050, 299))
    with pytest.raises(NameError):
        run_worker(node, 1)  # and fails again at its close
    last = published[-1]
    assert (last.window_id, last.status, last.unverified_reason) == (
        1, cs_msg.Caption.STATUS_UNVERIFIED, cs_msg.Caption.REASON_VERIFIER_FAILED)
    assert last.draft_text == "a blue car"
