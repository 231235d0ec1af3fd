"""The proposers (speculative/proposers.py): one class each, each adding its own candidates."""

import pytest

from crossspec_ros.speculative.proposers import ProposalContext, make_proposers
from crossspec_ros.speculative.suffix import SuffixIndex
from crossspec_ros.speculative.tree import ROOT, DraftTree

THE, CAR, TURNS, LEFT, RIGHT, STOPS = range(1, 7)


def _context(draft=None, history=None, chains=None) -> ProposalContext:
    return ProposalContext(confirmed=[THE, CAR], draft=draft, draft_base=0,
                           history=history or SuffixIndex(), max_nodes=8,
                           chains=chains or {})


def test_the_draft_stream_proposes_the_drafts_continuation_at_falling_probabilities():
    (stream,) = make_proposers(["draft_stream"])
    tree = DraftTree()
    chain = stream.propose(_context(draft=[THE, CAR, TURNS, LEFT]), tree, 0.5, depth=4)
    assert chain == [TURNS, LEFT]
    assert tree.tokens == [TURNS, LEFT] and tree.probs == pytest.approx([0.5, 0.25])


def test_a_draft_that_disagrees_with_the_confirmed_caption_proposes_nothing():
    (stream,) = make_proposers(["draft_stream"])
    tree = DraftTree()
    assert stream.propose(_context(draft=[THE, STOPS, TURNS]), tree, 0.5, depth=4) == []
    assert len(tree) == 0


def test_the_history_proposes_every_continuation_it_has_seen_as_branches():
    history = SuffixIndex()
    for caption in ([THE, CAR, TURNS, RIGHT], [THE, CAR, TURNS, RIGHT], [THE, CAR, STOPS]):
        history.add_source(caption)
    (proposer,) = make_proposers(["history_ngram"])
    tree = DraftTree()
    proposer.propose(_context(history=history), tree, 0.9, depth=3)
    first_level = {tree.tokens[n] for n in range(len(tree)) if tree.parents[n] == ROOT}
    assert first_level == {TURNS, STOPS}
    assert tree.child(tree.child(ROOT, TURNS), RIGHT) is not None


def test_a_chain_handed_over_is_proposed_as_is_and_cut_to_the_depth():
    proposers = make_proposers(["draft_head", "corpus_ngram"])
    tree = DraftTree()
    ctx = _context(chains={"draft_head": [TURNS, LEFT, STOPS]})
    assert [p.propose(ctx, tree, 0.8, depth=2) for p in proposers] == [[TURNS, LEFT], []]


def test_an_unknown_proposer_name_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown proposers .*'draft_streem'.*draft_stream"):
        make_proposers(["draft_streem"])
