"""Synthetic windows -> the tensors the tiny pair trains on (one preprocessing for both).

Frames and event images go through the models' own ``prepare`` (the exact inference path),
so training sees what the engine will feed. Pixel tensors are kept in float16 to halve memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

import numpy as np
import torch

# Frames and events are simulated at the sample bag's sizes, so the models train on exactly
# what they will see from a bag (the models' preprocessing then resizes both).
SIM_IMAGE_SIZE = (320, 240)


@dataclass
class PairData:
    """Aligned training tensors for both models (row i = window i)."""

    verifier_pixels: torch.Tensor   # [N, frames, 3, S, S] float16
    verifier_captions: list[list[int]]
    drafter_pixels: torch.Tensor    # [M, 5, 3, S', S'] float16 (M <= N: windows with events)
    drafter_captions: list[list[int]]
    attributes: list[dict]          # per verifier row

    def __len__(self) -> int:
        return len(self.attributes)


def training_keys(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """n (drive seed, window index) pairs from the training seeds, chosen by ``seed``: one
    window from each of n different drives (windows of one drive look alike, and a few hundred
    drives seen ten times each taught the pair their layouts by heart, not to look)."""
    from crossspec_ros.sim.dataset import TRAIN_SEEDS, WINDOWS_PER_DRIVE

    if n > len(TRAIN_SEEDS):
        raise ValueError(f"at most {len(TRAIN_SEEDS)} training windows (one per drive), got {n}")
    rng = np.random.default_rng(seed)
    drives = rng.choice(np.asarray(TRAIN_SEEDS), size=n, replace=False)
    return [(int(d), int(rng.integers(0, WINDOWS_PER_DRIVE))) for d in drives]


def heldout_keys(n: int, per_seed: int = 5) -> list[tuple[int, int]]:
    """n (seed, index) pairs from the held-out seeds (never used in training)."""
    from crossspec_ros.sim.dataset import WINDOWS_PER_DRIVE, heldout_seeds

    step = max(WINDOWS_PER_DRIVE // per_seed, 1)
    keys = [(seed, i * step) for seed in heldout_seeds(-(-n // per_seed))
            for i in range(per_seed)]
    return keys[:n]


def caption_ids(tokenizer: Any, text: str, eos: int) -> list[int]:
    """The tokens a model should generate for ``text``: its words, then EOS."""
    ids = tokenizer(text, add_special_tokens=False).input_ids
    if tokenizer.unk_token_id in ids:
        raise ValueError(f"caption has words outside the tokenizer's vocabulary: {text!r}")
    return [*ids, eos]


def tokenizer_words() -> list[str]:
    """Every word a caption or a prompt can contain (sentence starts capitalised)."""
    from crossspec_ros.models.tiny import PROMPT_WORDS
    from crossspec_ros.sim.captions import caption_vocabulary

    words = caption_vocabulary()
    return list(dict.fromkeys([*PROMPT_WORDS, *words, *(w.capitalize() for w in words)]))


def _make(args: tuple[int, int, Any, bool, float | None]) -> Any:
    from crossspec_ros.sim.dataset import make_window
    from crossspec_ros.sim.events import EventConfig

    seed, index, image_size, events, render_hz = args
    config = EventConfig(render_hz=render_hz) if render_hz else None
    return make_window(seed, index, image_size=image_size, events=events, config=config)


def generate_windows(keys: list[tuple[int, int]], image_size: int | tuple[int, int],
                     workers: int = 2, progress: Callable[[int], None] | None = None, *,
                     events: bool = True, event_render_hz: float | None = None
                     ) -> Iterator[Any]:
    """Simulated windows for (seed, index) keys, in order, from ``workers`` processes.

    A generator: windows are large (frames + events), so callers encode them as they come.
    ``events=False``: RGB only (~20x cheaper); ``event_render_hz``: the simulator's render
    rate (default: the sensor model's).
    """
    jobs = [(seed, index, image_size, events, event_render_hz) for seed, index in keys]
    if workers <= 1:
        for job in jobs:
            yield _make(job)
            if progress:
                progress(1)
        return
    with _one_thread_per_child(), get_context("spawn").Pool(workers) as pool:
        for window in pool.imap(_make, jobs, chunksize=4):
            yield window
            if progress:
                progress(1)


# Each simulation worker is meant to fill one core. With BLAS threads of their own (numpy's
# matmul in the renderer uses OpenBLAS) two workers oversubscribed the two cores here: each
# window took 2.4x longer than alone, so two workers were slower than one process.
ONE_THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@contextmanager
def _one_thread_per_child() -> Iterator[None]:
    """Environment for spawning workers (read by their fresh imports), then restored."""
    saved = {k: os.environ.get(k) for k in ONE_THREAD_ENV}
    os.environ.update(ONE_THREAD_ENV)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def encode_windows(windows: Iterable[Any], verifier: Any, drafter: Any,
                   rgb_only: Iterable[Any] = ()) -> PairData:
    """Preprocess simulated windows with both models' inference preprocessing; ``rgb_only``
    windows (simulated without events) train the verifier only."""
    v_pix, d_pix, v_cap, d_cap, attrs = [], [], [], [], []
    v_eos, d_eos = verifier.info.eos_token_id, drafter.info.eos_token_id

    def add_verifier(window: Any) -> None:
        frames = [getattr(f, "image", f) for f in window.frames]  # arrays or StampedFrames
        v_pix.append(verifier.prepare_frames(frames).pixel_values[0].half())
        v_cap.append(caption_ids(verifier.tokenizer, window.caption_verifier, v_eos))
        attrs.append(dict(window.attributes))

    for window in windows:
        add_verifier(window)
        d_pix.append(drafter.prepare(window).pixel_values.half())
        d_cap.append(caption_ids(drafter.tokenizer, window.caption_drafter, d_eos))
    for window in rgb_only:
        add_verifier(window)
    return PairData(torch.stack(v_pix), v_cap, torch.stack(d_pix), d_cap, attrs)
