"""The robot's side of the caption protocol without ROS (sync/robot_captions.py): every window
the draft node drafted ends in a terminal caption; the robot speaks only when the verifier
stays silent about a window, and a late answer of the verifier supersedes it, counted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from crossspec_ros.sync.captions import CaptionStatus, DraftState, UnverifiedReason
from crossspec_ros.sync.robot_captions import RobotCaptionBook, verifier_silence_s

DRAFT, PARTIAL, FINAL, UNVERIFIED = (CaptionStatus.DRAFT, CaptionStatus.PARTIAL,
                                     CaptionStatus.FINAL, CaptionStatus.UNVERIFIED)
NONE, NO_RGB, ABSENT = (UnverifiedReason.NONE, UnverifiedReason.NO_RGB,
                        UnverifiedReason.VERIFIER_ABSENT)
SILENCE = 7.0


def drafted(book: RobotCaptionBook, wid: int, now: float, text: str = "a red car",
            complete: bool = True) -> None:
    book.on_draft((0, wid), wid * 10**9, (wid + 1) * 10**9, text, 12.0, complete, now)


def test_the_silence_covers_the_verifiers_two_patiences_and_its_queue():
    p = {"max_queued_windows": 2, "window_length_s": 1.0}
    assert verifier_silence_s(p, caption_patience_s=2.5) == 7.0


def test_a_window_nobody_answers_ends_unverified_absent_with_its_draft_after_the_silence():
    book = RobotCaptionBook(SILENCE)
    drafted(book, 5, now=100.0)
    assert book.expire(100.0 + SILENCE) == []  # not yet: the verifier may still answer
    [caption] = book.expire(100.0 + SILENCE + 0.1)
    assert (caption.window_id, caption.status, caption.unverified_reason) == (5, UNVERIFIED,
                                                                              ABSENT)
    assert (caption.draft_text, caption.draft_state) == ("a red car", DraftState.COMPLETE)
    assert caption.unconfirmed_text == "a red car" and caption.confirmed_text == ""
    assert book.expire(200.0) == [] and book.open_windows == []
    assert book.counters["windows_given_up"] == 1


def test_a_draft_still_in_progress_is_published_as_cut_short_when_the_robot_gives_up():
    book = RobotCaptionBook(SILENCE)
    drafted(book, 5, now=0.0, text="a red", complete=False)
    [caption] = book.expire(SILENCE + 1)
    assert caption.draft_state == DraftState.CUT_SHORT and caption.draft_text == "a red"


def test_every_draft_revision_and_every_word_of_the_verifier_about_the_window_is_news():
    book = RobotCaptionBook(SILENCE)
    drafted(book, 5, now=0.0, text="a", complete=False)
    drafted(book, 5, now=5.0, text="a red car")
    assert book.expire(5.0 + SILENCE) == []
    book.on_caption((0, 5), DRAFT, NONE, now=10.0)     # the verifier has it
    book.on_verifier_word((0, 5), now=16.0)          # its confirmed tokens
    assert book.expire(16.0 + SILENCE) == []
    book.on_verifier_word((0, 6), now=20.0)          # about another window: no news of 5
    assert [c.window_id for c in book.expire(16.0 + SILENCE + 0.1)] == [5]


def test_the_verifiers_terminal_caption_ends_the_window_and_the_robot_never_speaks():
    book = RobotCaptionBook(SILENCE)
    drafted(book, 5, now=0.0)
    drafted(book, 6, now=1.0)
    book.on_caption((0, 5), FINAL, NONE, now=2.0)
    book.on_caption((0, 6), UNVERIFIED, NO_RGB, now=3.0)
    assert book.expire(100.0) == [] and book.open_windows == []
    assert book.counters["windows_answered"] == 2
    drafted(book, 5, now=4.0)  # a draft after its caption (a split's link): late, not tracked
    assert book.open_windows == [] and book.expire(200.0) == []
    assert book.diagnostics["late_drafts_after_caption"] == 1


def test_a_caption_before_the_robots_own_draft_keeps_that_draft_from_opening_the_window():
    book = RobotCaptionBook(SILENCE)
    book.on_caption((0, 5), FINAL, NONE, now=0.0)  # the verifier was first (early start)
    drafted(book, 5, now=0.5)
    assert book.open_windows == [] and book.expire(100.0) == []


def test_a_late_answer_of_the_verifier_supersedes_the_robots_caption_and_is_counted():
    book = RobotCaptionBook(SILENCE)
    drafted(book, 5, now=0.0)
    assert [c.window_id for c in book.expire(SILENCE + 1)] == [5]
    book.on_caption((0, 5), UNVERIFIED, ABSENT, now=SILENCE + 1.01)  # its own, heard back
    assert book.counters["late_answers"] == 0
    book.on_caption((0, 5), FINAL, NONE, now=SILENCE + 3)  # the link came back
    assert book.counters == {"windows_answered": 0, "windows_given_up": 1, "late_answers": 1}
    assert book.expire(100.0) == []  # nothing more is said about it


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["draft", "word", "final", "unverified", "tick"]),
                          st.integers(0, 4), st.floats(0.0, 4.0)), max_size=40))
def test_each_drafted_window_ends_once_here_and_only_when_the_verifier_did_not_end_it(events):
    book = RobotCaptionBook(silence_s=3.0, memory_s=1e6)
    now, drafted_ids, verifier_ended, robot_ended = 0.0, set(), set(), []
    for kind, wid, dt in events:
        now += dt
        if kind == "draft":
            if wid not in verifier_ended:
                drafted_ids.add(wid)
            drafted(book, wid, now)
        elif kind == "word":
            book.on_verifier_word((0, wid), now)
        elif kind in ("final", "unverified") and wid not in verifier_ended:
            verifier_ended.add(wid)
            book.on_caption((0, wid), FINAL if kind == "final" else UNVERIFIED, NONE, now)
        robot_ended += [c.window_id for c in book.expire(now)]
    robot_ended += [c.window_id for c in book.expire(now + 1e3)]
    assert len(robot_ended) == len(set(robot_ended))  # never twice
    ended_first_by_verifier = {w for w in verifier_ended if w not in robot_ended}
    assert set(robot_ended) | ended_first_by_verifier >= drafted_ids  # every drafted window
    assert set(robot_ended) <= drafted_ids
    assert book.counters["late_answers"] == len(set(robot_ended) & verifier_ended)
