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


# ---- the proposal policy and the drafter gate ------------------------------------------
from crossspec_ros.speculative.adaptive import DrafterGate, ProposalPolicy  # noqa: E402
from crossspec_ros.speculative.suffix import SuffixIndex  # noqa: E402


def test_the_policy_merges_every_proposer_into_one_tree():
    history = SuffixIndex()
    history.add_source([10, 11, 12, 13, 2])
    policy = ProposalPolicy(("draft_stream", "draft_ngram", "history_ngram"), max_depth=8,
                            max_nodes=32, adaptive=False)
    tree = policy.propose([10], [10, 11, 30, 31], 0, history, room=20)
    assert tree.child(-1, 11) is not None  # shared by the draft and the history: one node
    after_11 = {tree.tokens[n] for n in range(len(tree)) if tree.parents[n] == tree.child(-1, 11)}
    assert after_11 == {12, 30}


def test_the_policy_leaves_room_for_the_verifiers_own_token():
    history = SuffixIndex()
    history.add_source(list(range(10, 30)))
    policy = ProposalPolicy(("history_ngram",), max_depth=24, max_nodes=64, adaptive=False)
    tree = policy.propose([10], None, 0, history, room=4)
    assert max(tree.depth(n) for n in range(len(tree))) == 3
    assert len(policy.propose([10], None, 0, history, room=1)) == 0


def test_a_wrong_proposer_loses_its_share_of_the_tree():
    history = SuffixIndex()
    history.add_source([10, 11, 12, 13, 14, 2])
    policy = ProposalPolicy(("history_ngram",), max_depth=8, max_nodes=32)
    assert len(policy.propose([10], None, 0, history, room=20)) == 5  # untried: all of it
    for k in range(30):  # the history is always wrong; each fed token costs 0.5 ms
        policy.propose([10], None, 0, history, room=20)
        fed = 2 + k % 8
        policy.observe(fed=fed, seconds=0.002 + 0.0005 * fed, new=[99])
    assert policy.trackers["history_ngram"].rate < 0.1
    assert len(policy.propose([10], None, 0, history, room=20)) == 0


def test_the_first_proposal_is_the_last_caption_whole_stopping_before_a_placeholder():
    history = SuffixIndex()
    history.add_source([10, 11, 12, 13, 2])
    history.add_source([10, 11, 40, 41, 2])
    policy = ProposalPolicy(("history_ngram",), max_depth=24, max_nodes=64)
    first = policy.propose_first(None, 0, history, room=20, proposable=100)
    assert first.tokens == [10, 11, 40, 41, 2] and first.is_chain()
    assert first.sources == ["history_ngram"] * 5
    # ids from 40 on are the verifier's placeholders here: the prompt would take them for
    # visual slots
    assert policy.propose_first(None, 0, history, room=20, proposable=40).tokens == [10, 11]
    assert len(policy.propose_first(None, 0, history, room=1, proposable=100)) == 0


def test_the_first_proposal_takes_a_long_last_caption_whole_past_the_round_depth():
    caption = [*range(10, 40), 2]  # 31 tokens, deeper than a round's proposals may go
    history = SuffixIndex()
    history.add_source(caption)
    policy = ProposalPolicy(("history_ngram",), max_depth=8, max_nodes=64)
    assert len(policy.propose([], None, 0, history, room=48).best_chain()) == 8
    assert policy.propose_first(None, 0, history, room=48, proposable=100).tokens == caption
    # never past the room left for the caption
    assert len(policy.propose_first(None, 0, history, room=20, proposable=100)) == 19
    # a policy allowed no proposals (max_proposal 0: plain decoding) proposes none here
    plain = ProposalPolicy(("history_ngram",), max_depth=0, max_nodes=64)
    assert len(plain.propose_first(None, 0, history, room=48, proposable=100)) == 0


def test_the_first_proposal_is_the_last_caption_even_where_older_ones_outnumber_it():
    history = SuffixIndex()
    for _ in range(5):
        history.add_source([10, 11, 12, 13, 2])
    history.add_source([10, 14, 15, 2])
    policy = ProposalPolicy(("history_ngram",), max_depth=24, max_nodes=64)
    # the trie's likeliest start follows the older captions; the window before wins here
    assert policy.propose([], None, 0, history, room=20).best_chain()[:2] == [10, 11]
    assert policy.propose_first(None, 0, history, room=20, proposable=100).tokens == [
        10, 14, 15, 2]


def test_the_gate_tries_both_choices_then_keeps_the_faster_and_retries_ever_less_often():
    gate = DrafterGate(explore_every=4)
    assert gate.should_draft() is True
    gate.observe(True, latency_ms=60.0, tokens=20)    # 3 ms per token with the drafter
    assert gate.should_draft() is False
    gate.observe(False, latency_ms=30.0, tokens=20)   # 1.5 ms per token without
    choices = []
    for _ in range(30):
        choices.append(gate.should_draft())
        gate.observe(choices[-1], 60.0 if choices[-1] else 30.0, 20)
    retries = [i + 1 for i, drafted in enumerate(choices) if drafted]
    assert retries == [4, 12, 28]  # after 4, then 8, then 16 windows


def test_the_gate_follows_a_drafter_that_starts_to_pay():
    gate = DrafterGate(explore_every=2, decay=0.0)
    gate.should_draft()
    gate.observe(True, 60.0, 20)
    gate.should_draft()
    gate.observe(False, 30.0, 20)
    # the drafter now takes 0.5 ms per token (say, the GPU was freed): the first re-try
    # shows it and the gate drafts from then on, re-trying plain decoding after 2 windows
    # (the interval starts over with a new leader)
    choices = []
    for _ in range(6):
        choices.append(gate.should_draft())
        gate.observe(choices[-1], 10.0 if choices[-1] else 30.0, 20)
    assert choices == [False, True, True, False, True, True]


def test_the_corpus_proposes_phrases_the_drive_has_not_shown_yet():
    history = SuffixIndex()
    history.add_source([10, 11, 12, 13, 2])
    corpus = SuffixIndex.of_captions([[10, 11, 20, 21, 22, 2]])
    policy = ProposalPolicy(("history_ngram", "corpus_ngram"), max_depth=8, max_nodes=32,
                            adaptive=False, corpus=corpus)
    # the verifier said 20 where the last caption had 12: only the corpus knows what follows
    assert policy.propose([10, 11, 20], None, 0, history, room=20).best_chain() == [21, 22, 2]
    without = ProposalPolicy(("history_ngram",), max_depth=8, max_nodes=32, adaptive=False)
    assert len(without.propose([10, 11, 20], None, 0, history, room=20)) == 0


def test_the_corpus_opens_a_drive_and_leaves_the_first_proposal_to_the_last_caption_after():
    corpus = SuffixIndex.of_captions([[10, 11, 20, 21, 2]] * 3)
    policy = ProposalPolicy(("history_ngram", "corpus_ngram"), max_depth=24, max_nodes=64,
                            corpus=corpus)
    history = SuffixIndex()
    assert policy.propose_first(None, 0, history, room=20, proposable=100).tokens == [
        10, 11, 20, 21, 2]  # no caption yet this drive: the corpus's likeliest
    history.add_source([10, 14, 2])
    assert policy.propose_first(None, 0, history, room=20, proposable=100).tokens == [
        10, 14, 2]


def test_each_change_level_keeps_its_own_measured_acceptance():
    policy = ProposalPolicy(("history_ngram",), max_depth=8, max_nodes=16)
    policy.set_level("changed")
    for _ in range(20):
        policy.trackers["history_ngram"].observe(8, 0)  # history wrong where scenes change
    policy.set_level("steady")
    assert policy.trackers["history_ngram"].rate == 0.5  # untouched: the prior
    policy.set_level("changed")
    assert policy.trackers["history_ngram"].rate < 0.1


def test_where_the_last_caption_and_the_draft_part_the_first_proposal_follows_who_won_there():
    history = SuffixIndex()
    last = [10, 11, 12, 20, 13, 14, 30, 15, 99]        # ... speeds up ... . A grey car ...
    draft = [10, 11, 12, 21, 22, 13, 14, 31, 15, 99]   # ... turns left ... . A blue car ...
    history.add_source(last)
    policy = ProposalPolicy(("draft_stream", "history_ngram"), max_depth=16, max_nodes=16)
    first = policy.propose_first(draft, 0, history, 16, 100)
    assert first.tokens == last and set(first.sources) == {"history_ngram"}  # ties: history
    # the verifier took the draft's action and the last caption's colour
    caption = [10, 11, 12, 21, 22, 13, 14, 30, 15, 99]
    policy.observe_caption(caption)
    first = policy.propose_first(draft, 0, history, 16, 100)
    assert first.tokens == caption  # merged: each part from the one right there
    assert [s for t, s in zip(first.tokens, first.sources, strict=True) if t in (21, 22, 30)] \
        == ["draft_stream", "draft_stream", "history_ngram"]
    assert first.is_chain()
    # a caption that went elsewhere at the first parting teaches nothing about the second
    policy.observe_caption([10, 11, 12, 40, 41])
    for _ in range(2):  # but twice the last caption's action: it is followed there again
        policy.propose_first(draft, 0, history, 16, 100)
        policy.observe_caption(last)
    assert policy.propose_first(draft, 0, history, 16, 100).tokens == last


def test_a_parting_after_a_token_never_seen_there_follows_the_levels_favourite():
    history = SuffixIndex()
    history.add_source([10, 11, 20, 99])
    policy = ProposalPolicy(("draft_stream", "history_ngram"), max_depth=16, max_nodes=16)
    for _ in range(2):  # the draft won twice after token 11
        policy.propose_first([10, 11, 21, 99], 0, history, 16, 100)
        policy.observe_caption([10, 11, 21, 99])
    history.add_source([50, 20, 99])  # another caption, parting after a new token (50)
    assert policy.propose_first([50, 21, 99], 0, history, 16, 100).tokens == [50, 21, 99]


def test_a_draft_that_agrees_with_the_last_caption_as_far_as_it_goes_is_no_parting():
    history = SuffixIndex()
    history.add_source([5, 6, 7, 8, 9, 2])
    policy = ProposalPolicy(("draft_stream", "history_ngram"), max_depth=8, max_nodes=16)
    first = policy.propose_first([5, 6, 7], 0, history, 16, 100)  # a draft still streaming
    assert first.tokens == [5, 6, 7, 8, 9, 2]
    policy.observe_caption([5, 6, 7, 8, 9, 2])
    assert policy._divergence == {} and policy._divergence_after == {}  # nothing parted


def test_the_first_proposal_leaves_the_drafts_trie_to_later_rounds():
    # at the caption's start the draft's trie would propose the draft the stream proposes
    history = SuffixIndex()
    history.add_source([5, 6, 7, 2])
    policy = ProposalPolicy(("draft_stream", "draft_ngram", "history_ngram"), max_depth=8,
                            max_nodes=16)
    policy.propose_first([5, 8, 9, 2], 0, history, 16, 100)
    assert "draft_ngram" not in policy._offered and "draft_stream" in policy._offered
    trie_only = ProposalPolicy(("draft_ngram", "history_ngram"), max_depth=8, max_nodes=16)
    trie_only.propose_first([5, 8, 9, 2], 0, history, 16, 100)
    assert trie_only._offered["draft_ngram"] == [5, 8, 9, 2]  # no stream: the trie proposes
    tree = policy.propose([5, 8], [5, 8, 9, 2], 0, history, room=16)
    assert "draft_ngram" in policy._offered and len(tree) > 0  # later rounds ask it
