"""Adaptive proposal length: expected tokens per round, acceptance and cost estimates."""

import pytest

from crossspec_ros.speculative.adaptive import (
    AcceptanceTracker,
    CostModel,
    best_proposal_length,
    expected_tokens,
)


def test_expected_tokens_follows_the_geometric_formula():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_acceptance_tracker_estimates_per_token_acceptance():
    tracker = AcceptanceTracker(decay=1.0, prior_accept=0.0, prior_reject=0.0)
    # geometric a = 0.75: three accepted then a rejection, on average
    for _ in range(10):
        tracker.observe(proposed=8, accepted=3)
    assert tracker.rate == pytest.approx(0.75)
    tracker.observe(proposed=0, accepted=0)  # no proposal: no evidence
    assert tracker.rate == pytest.approx(0.75)


def test_cost_model_fits_a_line_to_measured_forwards():
    cost = CostModel(decay=1.0)
    for n in (1, 2, 4, 8):
        cost.observe(n, 0.010 + 0.002 * n)
    assert cost.predict(16) == pytest.approx(0.010 + 0.032)


def test_no_proposals_when_acceptance_is_low_and_tokens_are_expensive():
    cost = CostModel(decay=1.0)
    for n in (1, 2, 3, 5):
        cost.observe(n, 0.01 * n)  # every token costs as much as a plain step
    assert best_proposal_length(0.2, cost, max_len=8) == 0


def test_long_proposals_when_forwards_are_flat_and_acceptance_high():
    cost = CostModel(decay=1.0)
    for n in (1, 4, 8, 12):
        cost.observe(n, 0.015)  # GPU-like: a pass costs the same for 1 or 12 tokens
    assert best_proposal_length(0.8, cost, max_len=10) == 10
    assert best_proposal_length(0.8, cost, max_len=10, available=3) == 3
