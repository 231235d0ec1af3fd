"""The engine's loop on toy models: output equals plain decoding whatever the draft does."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from toy_models import ToyModel, ToyWindow

from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine
from crossspec_ros.speculative.events import EventKind


def plain_greedy(model: ToyModel, window: ToyWindow, limit: int) -> list[int]:
    session = model.prefill(model.prepare(window))
    out, logits = [], session.last_logits
    while len(out) < limit:
        out.append(int(torch.argmax(logits)))
        if out[-1] == model.info.eos_token_id:
            break
        logits = session.feed([out[-1]])[-1]
    return out


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), noise=st.sampled_from([0.0, 0.5, 2.0, 50.0]),
       max_proposal=st.integers(0, 6), adaptive=st.booleans(),
       max_new=st.integers(1, 20), with_drafter=st.booleans())
def test_greedy_engine_output_equals_plain_greedy_decoding(seed, noise, max_proposal, adaptive,
                                                           max_new, with_drafter):
    verifier = ToyModel()
    drafter = ToyModel(noise=noise) if with_drafter else None
    engine = SpeculativeEngine(verifier, drafter, EngineConfig(
        max_new_tokens=max_new, max_proposal=max_proposal, adaptive=adaptive))
    for window_id in range(3):  # later windows also use the history proposer
        window = ToyWindow(window_id, seed + window_id % 2)  # windows repeat: history helps
        result = engine.run_window(window)
        assert result.tokens == plain_greedy(verifier, window, max_new)
        assert result.tokens == engine.verifier_only(window)


def test_a_perfect_drafter_is_accepted_in_few_rounds():
    verifier, drafter = ToyModel(prefill_delay_s=0.05), ToyModel()
    engine = SpeculativeEngine(verifier, drafter, EngineConfig(max_new_tokens=20, adaptive=False))
    result = engine.run_window(ToyWindow(0, 7))
    assert result.tokens == plain_greedy(verifier, ToyWindow(0, 7), 20)
    stats = result.stats
    assert stats.total_proposed > 0 and stats.acceptance == 1.0
    assert stats.rounds < len(result.tokens) - 1  # several tokens confirmed per round


def test_a_drafter_that_is_always_wrong_changes_nothing_but_acceptance():
    verifier, drafter = ToyModel(), ToyModel(noise=1000.0)
    engine = SpeculativeEngine(verifier, drafter, EngineConfig(
        max_new_tokens=16, proposers=("draft_stream",), adaptive=False))
    result = engine.run_window(ToyWindow(0, 3))
    assert result.tokens == plain_greedy(verifier, ToyWindow(0, 3), 16)
    assert result.stats.total_accepted <= result.stats.total_proposed


def test_events_stream_draft_then_confirmed_then_final_in_time_order():
    verifier, drafter = ToyModel(prefill_delay_s=0.05), ToyModel(noise=0.5)
    engine = SpeculativeEngine(verifier, drafter, EngineConfig(max_new_tokens=12))
    events = list(engine.stream(ToyWindow(4, 11)))
    kinds = [e.kind for e in events]
    assert kinds[-1] is EventKind.FINAL
    assert EventKind.DRAFT in kinds and EventKind.CONFIRMED in kinds
    # the draft exists before the verifier finished its prefill (prefill hiding)
    first_draft = next(e for e in events if e.kind is EventKind.DRAFT)
    prefill = next(e for e in events if e.kind is EventKind.VERIFIER_PREFILL_DONE)
    assert first_draft.t_ms < prefill.t_ms
    times = [e.t_ms for e in events]
    assert times == sorted(times)
    confirmed = [t for e in events if e.kind is EventKind.CONFIRMED for t in e.tokens]
    assert confirmed == events[-1].tokens


def test_a_failing_drafter_leaves_the_verifier_output_intact():
    class BrokenDrafter(ToyModel):
        def prefill(self, inputs):
            raise RuntimeError("drafter exploded")

    verifier = ToyModel()
    engine = SpeculativeEngine(verifier, BrokenDrafter(), EngineConfig(max_new_tokens=10))
    result = engine.run_window(ToyWindow(0, 5))
    assert result.tokens == plain_greedy(verifier, ToyWindow(0, 5), 10)
    assert any(e.kind is EventKind.DRAFT_ERROR for e in result.events)


def test_sampling_mode_first_token_follows_the_verifier_distribution():
    verifier, drafter = ToyModel(), ToyModel(noise=1.0)
    window = ToyWindow(0, 21)
    p = torch.softmax(verifier.logits(21, []).double(), -1)
    # first two tokens jointly exercise the acceptance/residual path after token 0
    counts = torch.zeros(verifier.info.vocab_size, dtype=torch.float64)
    n = 1500
    for seed in range(n):
        engine = SpeculativeEngine(verifier, drafter, EngineConfig(
            max_new_tokens=2, mode="sampling", seed=seed * 7919, adaptive=False))
        counts[engine.run_window(window).tokens[0]] += 1
    # 1500 samples: per-token standard error <= 0.013; tolerance 0.06 is > 4 sigma
    assert torch.max(torch.abs(counts / n - p)).item() < 0.06


def test_invalid_config_is_rejected_with_a_clear_message():
    with pytest.raises(ValueError, match="mode must be"):
        EngineConfig(mode="beam")
    with pytest.raises(ValueError, match="unknown proposers"):
        EngineConfig(proposers=("oracle",))
