"""Live prefill: the verifier's prefill built frame by frame equals the one-shot prefill (to
float rounding), and greedy decoding after it gives the verifier's own caption."""

from __future__ import annotations

import pytest
import torch
from synthetic_windows import random_window

from crossspec_ros.models.live_prefill import LivePrefill
from crossspec_ros.models.tiny import tiny_verifier
from crossspec_ros.speculative.engine import SpeculativeEngine


@pytest.fixture(scope="module")
def verifier():
    return tiny_verifier(seed=1)


def live_session(verifier, window, proposal=()):
    live = LivePrefill(verifier)
    for frame in window.frames:
        assert not live.complete
        live.add_frame(frame.image)
    assert live.complete
    return live.finish(proposal)


def greedy(session, first: torch.Tensor, limit: int, eos: int) -> list[int]:
    tokens, logits = [], first
    while len(tokens) < limit:
        tokens.append(int(torch.argmax(logits)))
        if tokens[-1] == eos:
            break
        logits = session.feed([tokens[-1]])[-1]
    return tokens


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_frame_by_frame_prefill_equals_the_one_shot_prefill(verifier, seed):
    window = random_window(seed)
    one_shot, rows = verifier.prefill_with_proposal(verifier.prepare(window), [7, 8])
    live, live_rows = live_session(verifier, window, [7, 8])
    assert live.seq_len == one_shot.seq_len and live.generated == [7, 8]
    torch.testing.assert_close(live_rows, rows, rtol=1e-5, atol=1e-5)
    assert live.timing.vision_ms > 0 and live.timing.prefill_ms > 0


def test_a_live_prefill_checks_a_tree_like_the_one_shot_prefill(verifier):
    window = random_window(3)
    tokens, parents = [7, 8, 9, 10], [-1, 0, -1, 2]
    one_shot, rows = verifier.prefill_with_proposal(verifier.prepare(window), tokens, parents)
    live = LivePrefill(verifier)
    live.extend_to(window.frames)
    session, live_rows = live.finish(tokens, parents)
    torch.testing.assert_close(live_rows, rows, rtol=1e-5, atol=1e-5)
    session.keep_path([2, 3])
    one_shot.keep_path([2, 3])
    assert session.generated == one_shot.generated == [9, 10]
    torch.testing.assert_close(session.feed([11]), one_shot.feed([11]), rtol=1e-5, atol=1e-5)


def test_greedy_decoding_after_live_prefill_is_the_verifiers_own_caption(verifier):
    engine = SpeculativeEngine(verifier)
    eos, limit = verifier.info.eos_token_id, engine.config.max_new_tokens
    for seed in range(8):
        window = random_window(seed)
        session, rows = live_session(verifier, window)
        assert greedy(session, rows[-1], limit, eos) == engine.verifier_only(window), seed


def test_frames_must_come_in_full_and_no_more(verifier):
    live = LivePrefill(verifier)
    with pytest.raises(ValueError, match="0 of 8 frames"):
        live.finish()
    frames = random_window(0).frames
    for frame in frames:
        live.add_frame(frame.image)
    with pytest.raises(ValueError, match="already in"):
        live.add_frame(frames[0].image)


@pytest.mark.parametrize("before_close", [0, 5, 8])
def test_the_engine_finishes_a_live_prefill_losslessly(verifier, before_close):
    engine = SpeculativeEngine(verifier)
    for seed in range(4):
        window = random_window(seed)
        live = LivePrefill(verifier)
        for frame in window.frames[:before_close]:
            live.add_frame(frame.image, frame.stamp_ns)
        result = engine.run_window(window, live=live)
        assert result.tokens == engine.verifier_only(window), seed
        assert result.stats.live_prefill_frames == before_close


def test_a_live_prefill_of_other_frames_is_set_aside_for_the_one_shot_prefill(verifier):
    engine = SpeculativeEngine(verifier)
    window, other = random_window(1), random_window(2)
    live = LivePrefill(verifier)
    live.add_frame(other.frames[0].image, other.frames[0].stamp_ns + 1)  # not this window's
    result = engine.run_window(window, live=live)
    assert result.stats.live_prefill_frames == -1
    assert result.tokens == engine.verifier_only(window)
