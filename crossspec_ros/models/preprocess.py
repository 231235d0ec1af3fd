"""CLIP image preprocessing without torchvision (Pillow + numpy).

Same steps as transformers' CLIPImageProcessor / VideoLlavaImageProcessor: resize the
shortest edge with Pillow's bicubic filter (the longer edge is ``int(size * long / short)``),
center crop, rescale by 1/255, normalize with the OpenAI CLIP mean and std. The frames of a
window are resized by the calling thread and a few helpers at once (Pillow lets go of the GIL
while it resizes) and normalized together. Measured on 2 cores inside the engine (the
verifier's preparation of 8 frames, median of 48 windows): 4.4 ms, against 6.6 ms when the
caller only waited for a pool doing every frame and 5.9 ms on one thread.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from crossspec_ros.models.loading import read_json

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class ClipPreprocess:
    """Shortest-edge resize to ``size``, center crop to ``crop`` (default: size), normalize."""

    size: int
    crop: int | None = None
    mean: tuple[float, ...] = field(default=CLIP_MEAN)
    std: tuple[float, ...] = field(default=CLIP_STD)

    @classmethod
    def from_dir(cls, directory: str | Path, default_size: int) -> ClipPreprocess:
        """Settings from preprocessor_config.json, else CLIP defaults at ``default_size``."""
        file = Path(directory) / "preprocessor_config.json"
        if not file.is_file():
            return cls(default_size)
        cfg = read_json(file)
        size = cfg.get("size", default_size)
        size = size.get("shortest_edge", size.get("height", default_size)) if isinstance(
            size, dict) else size
        crop = cfg.get("crop_size", size)
        crop = crop.get("height", size) if isinstance(crop, dict) else crop
        return cls(int(size), int(crop), tuple(cfg.get("image_mean", CLIP_MEAN)),
                   tuple(cfg.get("image_std", CLIP_STD)))

    def __call__(self, images: Sequence[np.ndarray] | np.ndarray) -> torch.Tensor:
        """float32 [N, 3, crop, crop] from N H x W x 3 uint8 RGB images."""
        images = list(images)
        if not images:
            raise ValueError("no images to preprocess")
        helpers = min(len(images) - 1, _HELPERS)
        mine = -(-len(images) // (helpers + 1))
        # The helpers take the tail; this thread resizes the head instead of only waiting
        # (a caller that only waits loses turns on the GIL as the results come back).
        handed = [_pool().submit(self.cropped, image) for image in images[mine:]]
        crops = [self.cropped(image) for image in images[:mine]]
        crops += [future.result() for future in handed]
        return torch.from_numpy(self.normalized(np.stack(crops)))

    def one(self, image: np.ndarray) -> np.ndarray:
        """[3, crop, crop] float32 for one H x W x 3 uint8 RGB image."""
        return self.normalized(self.cropped(image)[None])[0]

    @property
    def crop_size(self) -> int:
        return self.size if self.crop is None else self.crop

    def cropped(self, image: np.ndarray) -> np.ndarray:
        """crop x crop x 3 uint8: the shortest edge resized to ``size``, center-cropped."""
        image = np.asarray(image)
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise ValueError(f"expected an H x W x 3 uint8 RGB image, got {image.shape} "
                             f"{image.dtype}")
        h, w = image.shape[:2]
        if h == 0 or w == 0:
            raise ValueError(f"cannot preprocess an empty {w}x{h} image")
        new_h, new_w = self.resized_size(h, w)
        resized = np.asarray(Image.fromarray(image).resize((new_w, new_h), Image.BICUBIC))
        return _center_crop(resized, self.crop_size)

    def resized_size(self, h: int, w: int) -> tuple[int, int]:
        """(height, width) of an h x w image after the shortest-edge resize."""
        short, long = (w, h) if w <= h else (h, w)
        new_long = int(self.size * long / short)
        return (new_long, self.size) if w <= h else (self.size, new_long)

    def normalized(self, crops: np.ndarray) -> np.ndarray:
        """[N, 3, crop, crop] float32 from N crop x crop x 3 uint8 crops (rescale, normalize),
        looked up per channel in a table of the 256 values (3x faster than the arithmetic,
        and the same numbers: each entry is computed as transformers computes a pixel)."""
        table = _normalization_table(tuple(self.mean), tuple(self.std))
        out = np.empty((crops.shape[0], 3, *crops.shape[1:3]), np.float32)
        for channel in range(3):
            np.take(table[channel], crops[..., channel], out=out[:, channel])
        return out


@functools.lru_cache(maxsize=8)
def _normalization_table(mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """[3, 256] float32: channel c's normalized value of each uint8 (rescale by 1/255 in
    float64 then float32, as transformers does, then (x - mean) / std in float32)."""
    x = (np.arange(256, dtype=np.float64) * (1 / 255)).astype(np.float32)
    mean_, std_ = np.asarray(mean, np.float32)[:, None], np.asarray(std, np.float32)[:, None]
    return (x[None, :] - mean_) / std_


_HELPERS = min(3, (os.cpu_count() or 1) - 1)
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=max(1, _HELPERS),
                                   thread_name_prefix="crossspec-preprocess")
    return _POOL


def _center_crop(image: np.ndarray, crop: int) -> np.ndarray:
    h, w = image.shape[:2]
    if h < crop or w < crop:  # only when crop > size: pad with zeros like transformers
        padded = np.zeros((max(h, crop), max(w, crop), 3), image.dtype)
        top, left = (padded.shape[0] - h + 1) // 2, (padded.shape[1] - w + 1) // 2
        padded[top:top + h, left:left + w] = image
        image, h, w = padded, padded.shape[0], padded.shape[1]
    top, left = (h - crop) // 2, (w - crop) // 2
    return image[top:top + crop, left:left + crop]


def uniform_indices(n_available: int, n_wanted: int) -> list[int]:
    """``n_wanted`` indices into ``n_available`` items, centred in equal bins (repeats if short)."""
    if n_available < 1 or n_wanted < 1:
        raise ValueError(f"need at least one item and one pick, got {n_available}, {n_wanted}")
    return [((2 * i + 1) * n_available) // (2 * n_wanted) for i in range(n_wanted)]
