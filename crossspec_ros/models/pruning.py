"""Event-guided pruning of the verifier's visual tokens (a lossy mode, opt-in).

Video-LLaVA turns each frame into a CLS token and a grid of patch tokens (16 x 16 for the 7B
model, 4 x 4 for the bundled tiny one), and its prefill reads every one of them. The event
camera says, for free, where the scene moved: this module keeps, per frame, the CLS token
and the ``keep`` share of patches where the most events fired in the time nearest that frame,
so the prefill shrinks by the rest. The caption is then no longer the verifier's own: the
engine marks it (``EngineConfig.visual_keep``, ``WindowStats.acceptance_rule``).

Geometry: the event sensor and the RGB camera are taken to see the same field of view (true
of ``crossspec make-sample`` drives; DSEC's rectified cameras nearly so), so an event at
(x, y) on a W_e x H_e sensor lands at (x / W_e, y / H_e) of the frame, and from there goes
through the verifier's own resize and centre crop (``ClipPreprocess``) onto the patch grid.
Pure numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.models.preprocess import ClipPreprocess


def kept_patches(fraction: float, patches: int) -> int:
    """How many of a frame's ``patches`` a ``fraction`` keeps (at least one)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"visual_keep must be in (0, 1], got {fraction}")
    return max(1, min(patches, math.ceil(fraction * patches)))


def frame_slices(times: np.ndarray, stamps: Sequence[int]) -> list[slice]:
    """The events (sorted ``times``) nearest each frame's stamp in time: the boundaries lie
    midway between consecutive stamps (the first and last slices run to the window's ends)."""
    cuts = [(a + b) // 2 for a, b in pairwise(stamps)]
    edges = [0, *np.searchsorted(times, cuts, side="left").tolist(), len(times)]
    return [slice(int(a), int(b)) for a, b in pairwise(edges)]


def patch_counts(events: EventBatch, part: slice, frame_hw: tuple[int, int],
                 preprocess: ClipPreprocess, side: int) -> np.ndarray:
    """[side * side] event counts per patch (row-major, as the vision tower orders them) of
    the events in ``part``, through the resize and centre crop of a ``frame_hw`` frame."""
    counts = np.zeros(side * side, np.int64)
    if events.width <= 0 or events.height <= 0 or part.stop <= part.start:
        return counts  # (``part`` may step: every k-th event)
    h, w = frame_hw
    scale = preprocess.size / min(h, w)
    new_h, new_w = preprocess.resized_size(h, w)
    crop = preprocess.crop_size
    left, top = (new_w - crop) // 2, (new_h - crop) // 2
    x = (events.x[part].astype(np.float64) + 0.5) / events.width * w * scale - left
    y = (events.y[part].astype(np.float64) + 0.5) / events.height * h * scale - top
    inside = (x >= 0) & (x < crop) & (y >= 0) & (y < crop)
    col = (x[inside] * side / crop).astype(np.int64)
    row = (y[inside] * side / crop).astype(np.int64)
    return np.bincount(row * side + col, minlength=side * side)


def keep_mask(counts: np.ndarray, keep: int) -> np.ndarray:
    """[F, 1 + P] bool from [F, P] per-patch event counts: each frame's CLS (column 0) and
    its ``keep`` patches with the most events, ties (no events at all, say) broken by spreading
    the kept patches evenly over the grid rather than taking the top rows."""
    frames, patches = counts.shape
    spread = np.argsort(np.argsort((np.arange(patches) * keep) % patches, kind="stable"))
    mask = np.zeros((frames, 1 + patches), bool)
    mask[:, 0] = True
    for f in range(frames):
        order = np.lexsort((spread, -counts[f]))  # most events first, then spread
        mask[f, 1 + order[:keep]] = True
    return mask


# Events counted per window at most (every k-th beyond): where they fire is what matters, and
# the sample bag's ~150 000 a window cost 1.4 ms to place, after the close; 20 000 cost 0.2
MAX_COUNTED_EVENTS = 20_000


def event_keep_mask(events: EventBatch, stamps: Sequence[int], frame_hw: tuple[int, int],
                    preprocess: ClipPreprocess, side: int, fraction: float) -> np.ndarray:
    """[F, 1 + side * side] bool: which of each frame's visual tokens the verifier reads (see
    the module docstring); F = len(stamps)."""
    keep = kept_patches(fraction, side * side)
    step = max(1, -(-len(events) // MAX_COUNTED_EVENTS))
    parts = frame_slices(np.asarray(events.t), stamps)
    counts = np.stack([patch_counts(events, slice(part.start, part.stop, step), frame_hw,
                                    preprocess, side) for part in parts])
    return keep_mask(counts, keep)
