"""The caption protocol without ROS: statuses only move forward, one terminal caption per
(epoch, window), UNVERIFIED carries the draft, the draft tail keeps its word boundary."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crossspec_ros.sync.captions import (
    CaptionBook,
    CaptionStatus,
    DraftCursor,
    DraftState,
    UnverifiedReason,
    draft_tail,
)

DRAFT, PARTIAL, FINAL, UNVERIFIED = (CaptionStatus.DRAFT, CaptionStatus.PARTIAL,
                                     CaptionStatus.FINAL, CaptionStatus.UNVERIFIED)
BUSY, FAILED = UnverifiedReason.VERIFIER_BUSY, UnverifiedReason.VERIFIER_FAILED
PATIENCE = 2.0
KEY = (0, 7)


def book() -> CaptionBook:
    return CaptionBook(patience_s=PATIENCE, finished_memory_s=10.0)


def draft(b: CaptionBook, text: str, *, key=KEY, complete=False, now=0.0, cut_short=False):
    return b.on_draft(key, 0, 1, text, 12.0, complete, now, cut_short=cut_short)


# ---------------------------------------------------------------- the draft tail
def test_a_tail_that_starts_a_new_word_keeps_its_space():
    assert draft_tail("The car drives in one direction", "The car drives in one direction "
                      "oncoming") == " oncoming"
    assert "The car drives in one direction" + " oncoming" == "The car drives in one " \
        "direction oncoming"


def test_a_tail_that_finishes_a_word_has_no_space():
    assert draft_tail("drives o", "drives on a road") == "n a road"


def test_with_nothing_confirmed_the_tail_is_the_whole_draft():
    assert draft_tail("", "  a red   car ") == "a red car"


def test_a_draft_that_disagrees_or_adds_nothing_has_no_tail():
    assert draft_tail("a blue", "a red car") == ""
    assert draft_tail("a red car", "a red car") == ""


def test_confirmed_text_ending_in_a_space_gets_a_tail_without_one():
    assert draft_tail("a red ", "a red car") == "car"


@given(st.lists(st.sampled_from(["a", "car", "red", "turns", "on", "to"]), min_size=1,
                max_size=8), st.data())
def test_confirmed_plus_tail_reads_as_the_draft(words, data):
    text = " ".join(words)
    cut = data.draw(st.integers(0, len(text)))
    confirmed = text[:cut]
    assert " ".join((confirmed + draft_tail(confirmed, text)).split()) == text


# ---------------------------------------------------------------- the book
def test_a_draft_is_published_as_draft_then_partial_then_final():
    b = book()
    [c] = draft(b, "a red car")
    assert (c.status, c.unconfirmed_text, c.draft_text) == (DRAFT, "a red car", "a red car")
    assert b.on_verifier_start(KEY, 0, 1, 0.1)
    [c] = b.on_confirmed(KEY, "a red", False, 30.0, 1.0, 0.2)
    assert (c.status, c.confirmed_text, c.unconfirmed_text) == (PARTIAL, "a red", " car")
    assert c.confirmed_first_ms == 30.0
    [c] = b.on_confirmed(KEY, "a red bus", True, 50.0, 0.5, 0.3)
    assert (c.status, c.unconfirmed_text, c.confirmed_done_ms) == (FINAL, "", 50.0)
    assert c.draft_text == "a red car"  # the draft stays in the caption for consumers
    assert b.windows == {} and b.counters["windows_final"] == 1


def test_a_draft_after_the_final_caption_is_late_and_not_published():
    b = book()
    b.on_verifier_start(KEY, 0, 1, 0.0)
    b.on_confirmed(KEY, "a car", True, 40.0, 1.0, 0.1)
    assert draft(b, "a car turns", complete=True, now=0.2) == []
    assert b.counters["late_drafts"] == 1


def test_a_window_the_verifier_dropped_waits_for_its_draft_and_carries_it():
    b = book()
    draft(b, "a red", now=0.0)
    assert b.on_verifier_gave_up(KEY, 0, 1, 0.1, BUSY) == []  # the draft is still coming
    [c] = draft(b, "a red car", complete=True, now=0.3)
    assert (c.status, c.unconfirmed_text, c.draft_text) == (UNVERIFIED, "a red car",
                                                             "a red car")
    assert (c.unverified_reason, c.draft_state) == (BUSY, DraftState.COMPLETE)
    assert b.counters == {**b.counters, "windows_unverified": 1, "unverified_without_draft": 0}


def test_a_dropped_window_whose_draft_never_completes_finishes_after_the_patience():
    b = book()
    draft(b, "a red", now=0.0)
    b.on_verifier_gave_up(KEY, 0, 1, 0.0, BUSY)
    assert b.expire(PATIENCE - 0.1, set(), None) == []
    [c] = b.expire(PATIENCE + 0.1, set(), None)
    assert (c.status, c.draft_text) == (UNVERIFIED, "a red")
    # a fragment is never passed off as the draft: the caption says it is cut short
    assert c.draft_state is DraftState.CUT_SHORT and c.unverified_reason is BUSY


def test_a_dropped_window_whose_drafter_left_it_is_unverified_at_once_saying_so():
    b = book()
    draft(b, "The ego car", now=0.0)
    assert b.on_verifier_gave_up(KEY, 0, 1, 0.1, BUSY) == []
    [c] = draft(b, "The ego car", cut_short=True, now=0.2)  # preempted by a newer window
    assert (c.status, c.draft_text, c.draft_state) == (UNVERIFIED, "The ego car",
                                                        DraftState.CUT_SHORT)
    assert b.counters["unverified_draft_cut_short"] == 1


def test_a_window_the_drafter_never_drafted_is_unverified_without_a_draft_saying_so():
    b = book()
    assert draft(b, "", cut_short=True, now=0.0)[0].draft_state is DraftState.NONE
    [c] = b.on_verifier_gave_up(KEY, 0, 1, 0.1, BUSY)  # nothing to wait for
    assert (c.status, c.draft_text, c.draft_state, c.unverified_reason) == (
        UNVERIFIED, "", DraftState.NONE, BUSY)
    assert b.counters["unverified_without_draft"] == 1


def test_a_cut_short_notice_without_text_keeps_the_draft_so_far():
    b = book()
    draft(b, "a red", now=0.0)
    [c] = draft(b, "", cut_short=True, now=0.1)
    assert (c.draft_text, c.draft_state) == ("a red", DraftState.CUT_SHORT)


def test_a_final_caption_has_no_unverified_reason():
    b = book()
    draft(b, "a car", complete=True, now=0.0)
    b.on_verifier_start(KEY, 0, 1, 0.1)
    [c] = b.on_confirmed(KEY, "a car", True, 9.0, 1.0, 0.2)
    assert (c.status, c.unverified_reason) == (FINAL, UnverifiedReason.NONE)


def test_a_stopping_verifier_ends_every_open_window_unverified_at_once():
    b = book()
    draft(b, "a red", key=(0, 1), now=0.0)
    b.on_verifier_start((0, 2), 0, 1, 0.0)
    stopped = b.stop(0.1)
    assert sorted(c.key for c in stopped) == [(0, 1), (0, 2)] and b.windows == {}
    assert {c.unverified_reason for c in stopped} == {UnverifiedReason.VERIFIER_STOPPED}
    assert draft(b, "a red car", key=(0, 1), complete=True, now=0.2) == []  # late now


def test_a_drafted_window_the_rgb_synchronizer_closed_is_unverified_at_once():
    b = book()
    draft(b, "a car", complete=True, now=0.0)
    assert b.expire(0.1, set(), (0, 7)) == []  # ids below 7 closed: 7 may still get RGB
    [c] = b.expire(0.1, set(), (0, 8))
    assert c.status is UNVERIFIED and c.unconfirmed_text == "a car"
    assert c.unverified_reason is UnverifiedReason.NO_RGB


def test_a_window_the_verifier_still_has_queued_is_not_expired():
    b = book()
    draft(b, "a car", complete=True, now=0.0)
    assert b.expire(100.0, {KEY}, (0, 8)) == []


def test_a_window_from_an_older_epoch_has_no_rgb_coming():
    b = book()
    draft(b, "a car", complete=True, key=(0, 40), now=0.0)
    [c] = b.expire(0.1, set(), (1, 3))
    assert c.key == (0, 40) and c.status is UNVERIFIED


def test_a_bag_loop_reuses_ids_without_reopening_finished_windows():
    b = book()
    draft(b, "a car", complete=True, key=(0, 5), now=0.0)
    [old] = b.expire(0.1, set(), (0, 6))
    assert old.status is UNVERIFIED
    [new] = draft(b, "a bus", key=(1, 5), now=0.2)  # the same id in the new timeline
    assert (new.key, new.status) == ((1, 5), DRAFT)
    assert draft(b, "a car!", key=(0, 5), now=0.3) == []  # old timeline, still late
    assert b.counters["windows_unverified"] == 1


def test_rgb_for_a_window_that_finished_without_it_is_skipped():
    b = book()
    draft(b, "a car", complete=True, now=0.0)
    b.expire(PATIENCE + 1, set(), None)
    assert b.on_verifier_start(KEY, 0, 1, PATIENCE + 2) is False
    assert b.counters["late_windows"] == 1


def test_a_verifier_failure_mid_window_ends_unverified_with_the_draft():
    b = book()
    draft(b, "a red car", complete=True, now=0.0)
    b.on_verifier_start(KEY, 0, 1, 0.1)
    b.on_confirmed(KEY, "a red", False, 30.0, 1.0, 0.2)
    [c] = b.on_verifier_gave_up(KEY, 0, 1, 0.3, FAILED)
    assert (c.status, c.confirmed_text, c.unconfirmed_text) == (UNVERIFIED, "a red", " car")


def test_finished_windows_are_forgotten_after_the_memory():
    b = book()
    for wid in range(100):
        draft(b, "x", complete=True, key=(0, wid), now=0.0)
    b.expire(0.0, set(), (0, 1000))
    assert len(b._finished) == 100
    b.expire(11.0, set(), (0, 1000))
    assert b.windows == {} and b._finished == {}


OPS = st.lists(st.tuples(
    st.sampled_from(["draft", "draft_done", "draft_cut", "start", "confirm", "confirm_done",
                     "gave_up", "expire", "expire_closed", "stop"]),
    st.sampled_from([(0, 1), (0, 2), (1, 1)]),
    st.floats(0.0, 3.0)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_any_sequence_moves_forward_and_ends_each_window_once(ops):
    b, now = book(), 0.0
    published: dict = {}
    drafted: set = set()
    for op, key, dt in ops:
        now += dt
        if op.startswith("draft"):
            out = b.on_draft(key, 0, 1, "a red car", 5.0, op == "draft_done", now,
                             cut_short=op == "draft_cut")
            drafted.add(key)
        elif op == "start":
            b.on_verifier_start(key, 0, 1, now)
            out = []
        elif op.startswith("confirm"):
            out = b.on_confirmed(key, "a red", op == "confirm_done", 9.0, 1.0, now)
        elif op == "gave_up":
            out = b.on_verifier_gave_up(key, 0, 1, now, BUSY)
        elif op == "stop":
            out = b.stop(now)
        else:
            out = b.expire(now, set(), (1, 0) if op == "expire_closed" else None)
        for caption in out:
            history = published.setdefault(caption.key, [])
            assert not (history and history[-1].finished), "a caption after the last one"
            assert not history or caption.status >= history[-1].status
            if caption.status is UNVERIFIED and caption.key in drafted:
                assert caption.draft_text == "a red car"
                assert caption.unverified_reason is not UnverifiedReason.NONE
                assert caption.draft_state in (DraftState.COMPLETE, DraftState.CUT_SHORT)
            history.append(caption)
    for history in published.values():
        assert sum(c.finished for c in history) <= 1


# ---------------------------------------------------------------- the draft node's cursor
def test_the_cursor_assembles_confirmed_rounds_at_their_base_index():
    cursor, handle = DraftCursor(), object()
    cursor.begin((0, 3), handle)
    assert cursor.confirmed((0, 3), 0, [1, 2, 3], False) == (handle, [1, 2, 3])
    assert cursor.confirmed((0, 3), 2, [9, 8], False) == (handle, [1, 2, 9, 8])
    assert cursor.confirmed((0, 3), 4, [], True) == (handle, None)


def test_the_cursor_ignores_confirmations_for_other_windows_and_epochs():
    cursor = DraftCursor()
    cursor.begin((1, 3), "h")
    assert cursor.confirmed((0, 3), 0, [1], False) == (None, None)
    assert cursor.confirmed((1, 4), 0, [1], False) == (None, None)


def test_a_new_window_starts_from_an_empty_confirmed_prefix():
    cursor = DraftCursor()
    cursor.begin((0, 3), "a")
    cursor.confirmed((0, 3), 0, [1, 2], False)
    cursor.begin((0, 4), "b")
    assert cursor.confirmed((0, 4), 0, [7], False) == ("b", [7])


def test_a_completed_draft_lingers_then_is_let_go():
    cursor = DraftCursor()
    cursor.begin((0, 3), "h")
    assert cursor.lingering(100.0, 2.0) is None  # not completed yet
    cursor.completed((0, 3), 10.0)
    assert cursor.lingering(11.0, 2.0) is None
    assert cursor.lingering(12.5, 2.0) == "h"
    cursor.end((0, 3))
    assert cursor.current() is None and cursor.lingering(20.0, 2.0) is None


def test_a_very_late_draft_cannot_reopen_a_forgotten_window():
    b = book()
    draft(b, "a car", complete=True, key=(0, 5), now=0.0)
    b.expire(0.0, set(), (0, 6))
    b.expire(20.0, set(), (0, 6))  # forgotten
    assert draft(b, "a car", key=(0, 4), now=21.0) == []
    assert draft(b, "a car", key=(0, 5), now=21.0) == []
    assert [c.status for c in draft(b, "a bus", key=(0, 6), now=21.0)] == [DRAFT]
