"""Synthetic windows -> the tensors the tiny pair trains on (one preprocessing for both).

Frames and event images go through the models' own ``prepare`` (the exact inference path),
so training sees what the engine will feed. Pixel tensors are kept in float16 to halve memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

import numpy as np
import torch

# Frames and events are simulated at the sample bag's sizes, so the models train on exactly
# what they will see from a bag (the models' preprocessing then resizes both).
SIM_IMAGE_SIZE = (320, 240)
WINDOWS_PER_SEED = 10  # windows drawn from each training drive (consecutive ones correlate)


@dataclass
class PairData:
    """Aligned training tensors for both models (row i = window i)."""

    verifier_pixels: torch.Tensor   # [N, frames, 3, S, S] float16
    verifier_captions: list[list[int]]
    drafter_pixels: torch.Tensor    # [N, 5, 3, S', S'] float16
    drafter_captions: list[list[int]]
    attributes: list[dict]

    def __len__(self) -> int:
        return len(self.attributes)


def training_keys(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """n (drive seed, window index) pairs from the training seeds, chosen by ``seed``."""
    from crossspec_ros.sim.dataset import TRAIN_SEEDS, WINDOWS_PER_DRIVE

    rng = np.random.default_rng(seed)
    n_drives = -(-n // WINDOWS_PER_SEED)
    drives = rng.choice(np.asarray(TRAIN_SEEDS), size=n_drives, replace=False)
    keys = [(int(d), int(i)) for d in drives
            for i in sorted(rng.choice(WINDOWS_PER_DRIVE, WINDOWS_PER_SEED, replace=False))]
    return keys[:n]


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


def _make(args: tuple[int, int, Any]) -> Any:
    from crossspec_ros.sim.dataset import make_window

    seed, index, image_size = args
    return make_window(seed, index, image_size=image_size)


def generate_windows(keys: list[tuple[int, int]], image_size: int | tuple[int, int],
                     workers: int = 2, progress: Callable[[int], None] | None = None
                     ) -> Iterator[Any]:
    """Simulated windows for (seed, index) keys, in order, from ``workers`` processes.

    A generator: windows are large (frames + events), so callers encode them as they come.
    """
    jobs = [(seed, index, image_size) for seed, index in keys]
    if workers <= 1:
        for job in jobs:
            yield _make(job)
            if progress:
                progress(1)
        return
    with get_context("spawn").Pool(workers) as pool:
        for window in pool.imap(_make, jobs, chunksize=4):
            yield window
            if progress:
                progress(1)


def encode_windows(windows: Iterable[Any], verifier: Any, drafter: Any) -> PairData:
    """Preprocess simulated windows with both models' inference preprocessing."""
    v_pix, d_pix, v_cap, d_cap, attrs = [], [], [], [], []
    v_eos, d_eos = verifier.info.eos_token_id, drafter.info.eos_token_id
    for window in windows:
        frames = [getattr(f, "image", f) for f in window.frames]  # arrays or StampedFrames
        v_pix.append(verifier.prepare_frames(frames).pixel_values[0].half())
        d_pix.append(drafter.prepare(window).pixel_values.half())
        v_cap.append(caption_ids(verifier.tokenizer, window.caption_verifier, v_eos))
        d_cap.append(caption_ids(drafter.tokenizer, window.caption_drafter, d_eos))
        attrs.append(dict(window.attributes))
    return PairData(torch.stack(v_pix), v_cap, torch.stack(d_pix), d_cap, attrs)
