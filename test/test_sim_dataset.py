"""make_window: reproducible training windows with frames, events, captions and facts."""

from __future__ import annotations

import numpy as np

from crossspec_ros.sim.captions import parse_caption
from crossspec_ros.sim.dataset import (
    HELDOUT_SEED_START,
    TRAIN_SEEDS,
    VALIDATION_SEEDS,
    heldout_seeds,
    iter_windows,
    make_window,
)
from crossspec_ros.sim.stream import DRIVE_START_NS, WINDOW_NS

SMALL = {"image_size": 48, "event_size": (96, 72)}


def test_same_seed_and_index_give_bit_identical_windows():
    a, b = make_window(3, 5, **SMALL), make_window(3, 5, **SMALL)
    assert all(np.array_equal(x, y) for x, y in zip(a.frames, b.frames, strict=True))
    assert a.events.equals(b.events)
    assert (a.caption_verifier, a.caption_drafter, a.attributes) == (
        b.caption_verifier, b.caption_drafter, b.attributes)
    other = make_window(4, 5, **SMALL)
    assert not all(np.array_equal(x, y) for x, y in zip(a.frames, other.frames, strict=True))


def test_a_window_has_eight_frames_of_the_requested_size_and_its_events():
    w = make_window(1, 2, **SMALL)
    assert w.t0 == DRIVE_START_NS + 2 * WINDOW_NS and w.t1 == w.t0 + WINDOW_NS
    assert len(w.frames) == 8 and all(f.shape == (48, 64, 3) for f in w.frames)
    assert w.frame_stamps == sorted(w.frame_stamps) and w.t0 <= w.frame_stamps[0]
    assert w.frame_stamps[-1] < w.t1 and all((t - w.t0) % 50_000_000 == 0
                                              for t in w.frame_stamps)
    assert (w.events.width, w.events.height) == (96, 72)
    assert w.events.is_sorted() and w.t0 <= w.events.t_first and w.events.t_last < w.t1
    assert make_window(1, 2, image_size=(80, 40), events=False).frames[0].shape == (40, 80, 3)


def test_captions_and_attributes_describe_the_same_facts():
    for w in iter_windows([0, 1], windows_per_seed=6, events=False, image_size=32):
        assert parse_caption(w.caption_verifier) == w.attributes
        assert parse_caption(w.caption_drafter) == w.attributes
        assert "other_color" not in w.visible_attributes and "ego" in w.visible_attributes
        assert w.visible_attributes <= set(w.attributes)


def test_as_window_gives_the_synchronizer_window_id_and_frames():
    w = make_window(2, 7, events=False, image_size=32)
    window = w.as_window()
    assert window.id == (DRIVE_START_NS // WINDOW_NS) + 7
    assert [f.stamp_ns for f in window.frames] == w.frame_stamps
    assert window.frames[0].image is w.frames[0]


def test_held_out_seeds_never_overlap_training_or_validation_seeds():
    held = set(heldout_seeds(1000))
    assert min(held) == HELDOUT_SEED_START
    assert not held & set(TRAIN_SEEDS) and not held & set(VALIDATION_SEEDS)
    assert not set(TRAIN_SEEDS) & set(VALIDATION_SEEDS)
