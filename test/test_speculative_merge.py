"""The first proposal's merge of two whole captions (speculative/merge.py)."""

from __future__ import annotations

import pytest

from crossspec_ros.speculative.merge import ANCHOR, Parting, merge, partings_decided

LAST = [1, 2, 3, 20, 4, 5, 30, 6, 99]
DRAFT = [1, 2, 3, 21, 22, 4, 5, 31, 6, 99]


def always(name):
    return lambda parting: name


def test_a_parting_follows_the_picked_chain_until_both_go_on_alike_again():
    picks = iter(["draft", "last"])
    merged = merge({"last": LAST, "draft": DRAFT}, lambda parting: next(picks))
    assert merged.tokens == [1, 2, 3, 21, 22, 4, 5, 30, 6, 99]
    assert merged.sources == ["last"] * 3 + ["draft"] * 2 + ["last"] * 5
    assert merged.partings == [Parting(3, 3, {"last": 20, "draft": 21}),
                               Parting(7, 5, {"last": 30, "draft": 31})]


def test_picking_one_chain_at_every_parting_gives_it_back_whole():
    assert merge({"last": LAST, "draft": DRAFT}, always("last")).tokens == LAST
    assert merge({"last": LAST, "draft": DRAFT}, always("draft")).tokens == DRAFT


def test_chains_that_never_part_are_walked_through_and_the_longer_goes_on():
    streaming = DRAFT[:4]  # a draft still streaming has not ended
    merged = merge({"last": DRAFT, "draft": streaming}, always("draft"))
    assert merged.tokens == DRAFT and merged.partings == []


def test_without_a_re_join_the_picked_chain_goes_on_alone():
    other = [1, 2, 7, 8, 9, 10]
    merged = merge({"last": LAST, "draft": other}, always("draft"))
    assert merged.tokens == other and merged.sources == ["last"] * 2 + ["draft"] * 4


def test_re_joining_needs_anchor_tokens_in_a_row():
    # the draft shares single tokens with the last caption (5, then 6) but never two in a row
    lone = [1, 2, 3, 40, 5, 41, 6, 42]
    assert ANCHOR == 2
    assert merge({"last": LAST, "draft": lone}, always("draft")).tokens == lone


def test_the_walk_stops_at_the_limit_or_where_pick_says_none():
    assert merge({"last": LAST, "draft": DRAFT}, always("draft"), limit=4).tokens == [1, 2, 3, 21]
    stopped = merge({"last": LAST, "draft": DRAFT}, lambda parting: None)
    assert stopped.tokens == [1, 2, 3] and stopped.partings == []


def test_merge_takes_two_chains():
    with pytest.raises(ValueError, match="two chains"):
        merge({"last": LAST}, always("last"))


def test_the_partings_a_caption_decided_are_those_along_it_with_their_winners():
    caption = [1, 2, 3, 21, 22, 4, 5, 30, 6, 99]
    decided = partings_decided({"last": LAST, "draft": DRAFT}, caption)
    assert [(p.at, p.after, winner) for p, winner in decided] == [(3, 3, "draft"),
                                                                   (7, 5, "last")]
    # neither chain's token at the first parting: nothing after it is decided
    assert partings_decided({"last": LAST, "draft": DRAFT}, [1, 2, 3, 50, 4]) == []
    # the draft's word, then a token of neither before the re-join: the second parting is
    # no longer along the caption
    decided = partings_decided({"last": LAST, "draft": DRAFT}, [1, 2, 3, 21, 60, 4, 5, 30])
    assert [winner for _, winner in decided] == ["draft"]
