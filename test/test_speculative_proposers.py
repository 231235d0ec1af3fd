"""Proposers: draft-stream agreement with the confirmed prefix and n-gram lookups."""

from crossspec_ros.speculative.proposers import DraftStreamProposer, NgramProposer


def test_draft_stream_proposes_its_continuation_of_the_confirmed_prefix():
    draft = DraftStreamProposer()
    draft.update([1, 2, 3, 4, 5])
    assert draft.propose([1, 2], 2) == [3, 4]
    assert draft.propose([1, 2], 10) == [3, 4, 5]
    assert draft.propose([1, 2, 3, 4, 5], 3) == []


def test_draft_stream_that_disagrees_with_the_confirmed_prefix_proposes_nothing():
    draft = DraftStreamProposer()
    draft.update([1, 2, 3, 4])
    assert draft.propose([1, 9], 3) == []


def test_resynced_draft_with_a_base_proposes_after_the_correction():
    draft = DraftStreamProposer()
    # the verifier confirmed [1, 9] (rejecting 2); the drafter redrafted from position 1
    draft.update([9, 7, 8], base=1, revision=1)
    assert draft.propose([1, 9], 2) == [7, 8]
    assert draft.propose([1], 2) == [9, 7]
    assert draft.propose([], 2) == []  # a draft starting beyond the confirmed prefix cannot
    assert draft.propose([1, 9, 7], 5) == [8]


def test_ngram_lookup_prefers_the_longest_match_and_the_latest_source():
    lookup = NgramProposer("history_ngram", max_ngram=3)
    lookup.add_source([5, 1, 2, 6, 6])
    lookup.add_source([1, 2, 3, 4])
    assert lookup.propose([0, 1, 2], 2) == [3, 4]
    # no source holds [9, 1, 2]: the 2-gram [1, 2] matches, the latest source first
    assert lookup.propose([9, 1, 2], 5) == [3, 4]
    assert lookup.propose([5, 1, 2], 5) == [6, 6]


def test_ngram_lookup_without_a_match_proposes_nothing():
    lookup = NgramProposer("draft_ngram")
    lookup.add_source([1, 2, 3])
    assert lookup.propose([7, 8], 4) == []
    assert lookup.propose([3], 4) == []  # the match at the very end has no continuation


def test_ngram_zero_proposes_the_start_of_the_last_caption_at_caption_start():
    lookup = NgramProposer("history_ngram", min_ngram=0)
    lookup.add_source([4, 5, 6])
    assert lookup.propose([], 2) == [4, 5]
    assert lookup.propose([8], 2) == []
