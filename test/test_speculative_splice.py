"""The prefill's branches: the last caption with one phrase changed (pure, no models)."""

from crossspec_ros.speculative.adaptive import BRANCH_SOURCE, ProposalPolicy
from crossspec_ros.speculative.splice import substitution_branches
from crossspec_ros.speculative.suffix import SuffixIndex
from crossspec_ros.speculative.tree import ROOT

# "the car 30 is ahead EOS" / "the car 31 is ahead EOS" / a caption without the colour
GREY, BLACK, CYCLIST = 30, 31, 32
THE, CAR, IS, AHEAD, EOS = 10, 11, 12, 13, 2


def history_of(*captions: list[int]) -> SuffixIndex:
    history = SuffixIndex()
    for caption in captions:
        history.add_source(caption)
    return history


def test_a_branch_swaps_one_token_and_rejoins_the_last_caption():
    history = history_of([THE, BLACK, CAR, IS, AHEAD, EOS], [THE, CYCLIST, IS, AHEAD, EOS],
                         [THE, GREY, CAR, IS, AHEAD, EOS])
    spine = history.newest()
    branches = {(b.at, b.tokens) for b in substitution_branches(spine, [(history, 1.0)])}
    # "black" is followed by "car" somewhere: the rest of the spine from "car" on
    assert (1, (BLACK, CAR, IS, AHEAD, EOS)) in branches
    # "cyclist" never precedes "car" but precedes "is": the spine re-joined there
    assert (1, (CYCLIST, IS, AHEAD, EOS)) in branches
    assert all(tokens[0] != spine[at] for at, tokens in branches)


def test_a_least_probability_keeps_exactly_the_branches_at_or_above_it():
    history = history_of([THE, BLACK, CAR, IS, AHEAD, EOS], [THE, CYCLIST, IS, AHEAD, EOS],
                         [THE, GREY, CAR, IS, AHEAD, EOS], [THE, BLACK, CAR, IS, AHEAD, EOS],
                         [THE, GREY, CAR, IS, AHEAD, EOS])
    every = substitution_branches(history.newest(), [(history, 1.0)])
    probs = sorted({b.prob for b in every})
    assert len(probs) >= 2
    least = probs[1]
    kept = substitution_branches(history.newest(), [(history, 1.0)], least)
    assert kept == [b for b in every if b.prob >= least] and len(kept) < len(every)


def test_a_token_never_seen_before_any_of_the_rest_makes_no_branch():
    history = history_of([THE, 40, 41, EOS], [THE, GREY, CAR, EOS])
    assert all(b.tokens[0] != 40 for b in substitution_branches(history.newest(),
                                                                [(history, 1.0)]))


def test_the_first_proposal_carries_branches_only_when_asked_and_while_they_pay():
    history = history_of([THE, BLACK, CAR, IS, AHEAD, EOS], [THE, GREY, CAR, IS, AHEAD, EOS])
    policy = ProposalPolicy(("history_ngram",), max_depth=24, max_nodes=16)
    chain = policy.propose_first(None, 0, history, room=20, proposable=100)
    assert chain.is_chain() and chain.tokens == history.newest()
    tree = policy.propose_first(None, 0, history, room=20, proposable=100, branches=True)
    assert tree.tokens[:6] == history.newest()  # the spine first (depth first)
    black = tree.child(tree.child(ROOT, THE), BLACK)
    assert black is not None and tree.sources[black] == BRANCH_SOURCE
    # a round measured at 1 ms and each token at 1 ms more: no branch pays for its tokens
    for _ in range(5):
        policy.cost.observe(1, 1e-3)
        policy.cost.observe(11, 11e-3)
    assert policy.propose_first(None, 0, history, room=20, proposable=100,
                                branches=True).is_chain()


def test_branches_that_never_come_true_are_offered_ever_less():
    history = history_of([THE, BLACK, CAR, IS, AHEAD, EOS], [THE, GREY, CAR, IS, AHEAD, EOS])
    policy = ProposalPolicy(("history_ngram",), max_depth=24, max_nodes=16)
    for _ in range(5):  # rounds cost 2 ms, a token 0.04 ms more
        policy.cost.observe(1, 2e-3)
        policy.cost.observe(11, 2.4e-3)
    assert not policy.propose_first(None, 0, history, 20, 100, branches=True).is_chain()
    for _ in range(30):
        policy.propose_first(None, 0, history, 20, 100, branches=True)
        policy.observe_branches(taken=False)
    # once they stop paying they are no longer offered (and no longer measured)
    assert policy.branch_calibration.rate < 0.5
    assert policy.propose_first(None, 0, history, 20, 100, branches=True).is_chain()
