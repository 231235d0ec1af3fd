"""Event images (EventGPT), polarity histograms and dv-processing frames."""

from __future__ import annotations

import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.events.representations import (
    dv_edge_map,
    dv_time_surface,
    event_image_chunks,
    polarity_histogram,
    to_dv_event_store,
)

WHITE, BLUE, RED = [255, 255, 255], [0, 0, 255], [255, 0, 0]


def random_batch(n: int, seed: int = 0, w: int = 64, h: int = 48) -> EventBatch:
    rng = np.random.default_rng(seed)
    return EventBatch(np.sort(rng.integers(0, 10**9, n)), rng.integers(0, w, n),
                      rng.integers(0, h, n), rng.integers(0, 2, n), w, h)


def test_event_image_chunks_match_a_hand_computed_case() -> None:
    # 7 events on a 3x2 sensor, given out of time order: chunks of 2, 2, 1, 1, 1 events.
    #        t  x  y  p
    rows = [(4, 2, 1, 1), (0, 0, 0, 0), (1, 0, 0, 1), (6, 1, 1, 0), (2, 2, 1, 0),
            (3, 1, 0, 1), (5, 0, 1, 0)]
    t, x, y, p = (np.array(c) for c in zip(*rows, strict=True))
    images = event_image_chunks(EventBatch(t, x, y, p, 3, 2))
    expected = np.full((5, 2, 3, 3), 255, np.uint8)
    expected[0, 0, 0] = RED   # e0 blue, then e1 red at the same pixel: the later wins
    expected[1, 1, 2] = BLUE  # e2
    expected[1, 0, 1] = RED   # e3
    expected[2, 1, 2] = RED   # e4
    expected[3, 1, 0] = BLUE  # e5
    expected[4, 1, 1] = BLUE  # e6
    assert images.dtype == np.uint8 and images.shape == (5, 2, 3, 3)
    assert np.array_equal(images, expected)


def test_same_timestamp_events_keep_input_order() -> None:
    batch = EventBatch([5, 5, 5, 5, 5], [1, 1, 1, 1, 1], [0] * 5, [0, 0, 0, 0, 1], 2, 1)
    images = event_image_chunks(batch, n_chunks=1)
    assert images[0, 0, 1].tolist() == RED and images[0, 0, 0].tolist() == WHITE


def test_no_events_or_fewer_than_five_give_white_chunks() -> None:
    empty = event_image_chunks(EventBatch.empty(4, 3))
    assert empty.shape == (5, 3, 4, 3) and (empty == 255).all()
    two = event_image_chunks(EventBatch([1, 2], [0, 3], [0, 2], [0, 1], 4, 3))
    assert two[0, 0, 0].tolist() == BLUE and two[1, 2, 3].tolist() == RED
    assert (two[0] != 255).any(axis=-1).sum() == 1 and (two[2:] == 255).all()


def test_chunk_sizes_follow_array_split() -> None:
    # Every event on its own pixel: painted pixels per chunk = events per chunk.
    n = 23
    batch = EventBatch(np.arange(n), np.arange(n), np.zeros(n), np.ones(n), n, 1)
    images = event_image_chunks(batch)
    painted = [(img != 255).any(axis=-1).sum() for img in images]
    assert painted == [len(c) for c in np.array_split(np.arange(n), 5)]


def test_polarity_histogram_counts_every_event() -> None:
    batch = random_batch(5000)
    hist = polarity_histogram(batch)
    expected = np.zeros((2, 48, 64), np.int64)
    for x, y, p in zip(batch.x, batch.y, batch.p, strict=True):
        expected[int(p != 0), y, x] += 1
    assert np.array_equal(hist, expected)


def test_out_of_bounds_events_are_ignored_by_representations() -> None:
    batch = EventBatch([1, 2], [1, 9], [1, 9], [1, 1], 4, 4)
    assert polarity_histogram(batch).sum() == 1
    assert (event_image_chunks(batch, 1) != 255).any(axis=-1).sum() == 1


def test_dv_event_store_holds_the_events_in_microseconds() -> None:
    batch = random_batch(1000, seed=1)
    store = to_dv_event_store(batch).numpy()
    assert store["timestamp"].tolist() == (batch.t // 1000).tolist()
    assert store["x"].tolist() == batch.x.tolist() and store["y"].tolist() == batch.y.tolist()
    assert store["polarity"].tolist() == batch.p.tolist()


def test_dv_frames_have_sensor_shape_and_react_to_events() -> None:
    batch = random_batch(3000, seed=2)
    empty = EventBatch.empty(64, 48)
    for render in (dv_edge_map, dv_time_surface):
        blank, frame = render(empty), render(batch)
        assert blank.shape == frame.shape == (48, 64)
        hit = np.zeros((48, 64), bool)
        hit[batch.y, batch.x] = True
        assert not frame[~hit].any()  # nothing where no event fell
        assert not np.array_equal(frame, blank) and frame[hit].any()


def test_time_surface_from_last_events_equals_the_full_push() -> None:
    import dv_processing as dv

    batch = random_batch(4000, seed=3, w=16, h=12)  # many events per pixel
    full = dv.TimeSurface((16, 12))
    full.accept(to_dv_event_store(batch))
    assert np.array_equal(dv_time_surface(batch), full.generateFrame().image)


def _painted_one_event_at_a_time(batch: EventBatch, n_chunks: int) -> np.ndarray:
    """EventGPT's event images the slow, obvious way: each event in time order (stable)
    paints its pixel, so the latest wins."""
    order = np.argsort(batch.t, kind="stable")
    inside = [i for i in order if batch.x[i] < batch.width and batch.y[i] < batch.height]
    images = np.full((n_chunks, batch.height, batch.width, 3), 255, dtype=np.uint8)
    for k, chunk in enumerate(np.array_split(np.array(inside, dtype=np.int64), n_chunks)):
        for i in chunk:
            images[k, batch.y[i], batch.x[i]] = (0, 0, 255) if batch.p[i] == 0 else (255, 0, 0)
    return images


def test_event_image_chunks_equal_painting_one_event_at_a_time() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        n, w, h = int(rng.integers(0, 80)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
        batch = EventBatch(rng.integers(0, 6, n),  # ties and disorder
                           rng.integers(0, w + 2, n).astype(np.uint16),  # some outside
                           rng.integers(0, h + 2, n).astype(np.uint16),
                           rng.integers(0, 3, n).astype(np.uint8), w, h)
        for n_chunks in (1, 5, 7):
            assert np.array_equal(event_image_chunks(batch, n_chunks),
                                  _painted_one_event_at_a_time(batch, n_chunks))
