"""How close a draft came to its final caption (sync/agreement.py), and where it is reported."""

import math
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossspec_ros.sync.agreement import (
    AgreementTally,
    common_subsequence,
    draft_agreement,
    edit_distance,
    token_agreement,
    word_error_rate,
)
from crossspec_ros.sync.captions import CaptionBook


def words_as_ids(text: str) -> list[int]:
    # crc32, not hash(): str hashes change per process, and mod 1000 two words could share
    # an id ("drives" as "left": token agreement 0.8, one fresh clone's CI in a few)
    return [zlib.crc32(w.encode()) for w in text.split()]


def test_the_docstrings_example_scores_wer_0_4_and_token_agreement_0_6():
    score = draft_agreement("a red car drives", "a red car turns left", words_as_ids)
    assert score.word_error_rate == pytest.approx(0.4)
    assert score.token_agreement == pytest.approx(0.6)


def test_a_draft_equal_to_the_caption_agrees_fully_whatever_the_case_and_spacing():
    score = draft_agreement("The  car stops", "the car stops", lambda t: list(t.lower()))
    assert score.word_error_rate == 0.0
    assert token_agreement([1, 2, 3], [1, 2, 3]) == 1.0


def test_a_draft_that_adds_words_keeps_full_token_agreement_but_pays_in_wer():
    assert token_agreement([1, 9, 2, 3, 9], [1, 2, 3]) == 1.0
    assert word_error_rate("a red big car", "a red car") == pytest.approx(1 / 3)


def test_an_empty_final_caption_cannot_be_scored_and_an_empty_draft_misses_everything():
    assert math.isnan(word_error_rate("a car", "  "))
    assert math.isnan(token_agreement([1], []))
    assert word_error_rate("", "a car") == 1.0 and token_agreement([], [1, 2]) == 0.0
    assert math.isnan(draft_agreement("a car", "a car").token_agreement)  # no tokenizer


@given(st.lists(st.integers(0, 4), max_size=12), st.lists(st.integers(0, 4), max_size=12))
def test_edit_distance_and_common_subsequence_bound_each_other(a, b):
    d, c = edit_distance(a, b), common_subsequence(a, b)
    assert edit_distance(b, a) == d and common_subsequence(b, a) == c
    assert abs(len(a) - len(b)) <= d <= max(len(a), len(b))
    assert c <= min(len(a), len(b))
    assert d <= len(a) + len(b) - 2 * c  # delete what is not common, insert the rest
    assert (d == 0) == (a == b)


def test_the_tally_scores_only_when_asked_and_keeps_running_means():
    tally = AgreementTally(words_as_ids)
    tally.add("a red car drives", "a red car turns left")
    tally.add("", "a car")        # no draft: nothing to score
    tally.add("a car", "")        # no caption: nothing to score
    assert tally.windows == 0     # add only queues
    first = tally.summary()
    assert first == {"draft_agreement_windows": 1, "draft_token_agreement_mean": 0.6,
                     "draft_word_error_rate_mean": 0.4}
    tally.add("the car stops", "the car stops")
    assert tally.summary() == {"draft_agreement_windows": 2,
                               "draft_token_agreement_mean": 0.8,
                               "draft_word_error_rate_mean": 0.2}


def test_the_book_keeps_the_draft_as_first_complete_when_a_revision_follows():
    book = CaptionBook(patience_s=1.0)
    key = (0, 7)
    book.on_draft(key, 0, 1, "a red", 5.0, complete=False, now=0.0)
    book.on_draft(key, 0, 1, "a red car stops", 5.0, complete=True, now=0.01)
    book.on_verifier_start(key, 0, 1, now=0.02)
    book.on_draft(key, 0, 1, "a red car turns left", 5.0, complete=True, now=0.03)  # re-sync
    (final,) = book.on_confirmed(key, "a red car turns left", True, 9.0, 0.5, now=0.04)
    assert final.draft_text == "a red car turns left"
    assert final.first_complete_draft == "a red car stops"
