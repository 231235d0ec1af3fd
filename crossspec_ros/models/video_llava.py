"""Video-LLaVA verifier (transformers ``VideoLlavaForConditionalGeneration``) on RGB frames.

8 frames per window (fewer are repeated by uniform index sampling), CLIP-preprocessed without
torchvision; the video path keeps CLS, so ``<video>`` expands to frames x (patches + 1)
tokens (8 x 257 = 2056 for the 7B model); features from ``vision_feature_layer`` (-2).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import VideoLlavaForConditionalGeneration
from transformers.modeling_outputs import BaseModelOutputWithPooling

from crossspec_ros.models.hf_backend import HFLlavaFamilyModel, VisionTextInputs
from crossspec_ros.models.loading import load_hf_model, load_tokenizer, resolve_source
from crossspec_ros.models.preprocess import ClipPreprocess, uniform_indices
from crossspec_ros.models.pruning import event_keep_mask

HUB_ID = "LanguageBind/Video-LLaVA-7B-hf"
VIDEO_TOKEN = "<video>"


class VideoLlavaVerifier(HFLlavaFamilyModel):
    """The verifier: a window's RGB frames -> Video-LLaVA decoding session."""

    modality = "video"

    def __init__(self, model: Any, tokenizer: Any, *, num_frames: int = 8,
                 preprocess: ClipPreprocess | None = None, name: str = "video-llava",
                 **kwargs: Any) -> None:
        super().__init__(model, tokenizer, name=name, placeholder=VIDEO_TOKEN, **kwargs)
        vision = model.config.vision_config
        self.num_frames = num_frames
        self.preprocess = preprocess or ClipPreprocess(vision.image_size)
        side = (self.preprocess.crop or self.preprocess.size) // vision.patch_size
        self.patch_side = side
        self.tokens_per_frame = side * side + 1  # the video path keeps CLS
        self.info.extra.update(num_frames=num_frames, tokens_per_frame=self.tokens_per_frame)
        self.directory: Path | None = None  # where ``load`` found it (None: built in memory)

    @classmethod
    def load(cls, source: str | Path = HUB_ID, *, dtype: str | torch.dtype = "bf16",
             quantization: str | None = None, device: str | torch.device = "cpu",
             allow_download: bool = False, **kwargs: Any) -> VideoLlavaVerifier:
        """From a local directory or a hub id in the local cache (fp32/bf16/fp16, 4bit/8bit)."""
        model = load_hf_model(VideoLlavaForConditionalGeneration, source, dtype=dtype,
                              quantization=quantization, device=device,
                              allow_download=allow_download)
        where = resolve_source(source, allow_download)
        tokenizer = load_tokenizer(where, allow_download)
        preprocess = ClipPreprocess.from_dir(where, model.config.vision_config.image_size) \
            if Path(where).is_dir() else None
        verifier = cls(model, tokenizer, preprocess=preprocess, **kwargs)
        verifier.directory = Path(where) if Path(where).is_dir() else None
        return verifier

    def _special_ids(self) -> list[int | None]:
        cfg = self.model.config
        return [cfg.image_token_id, cfg.video_token_id]

    def placeholder_tokens(self) -> int:
        return self.num_frames * self.tokens_per_frame

    def prompt_chunks(self, ids: list[int]) -> list[int]:
        """One chunk per frame, the prompt's head with the first: the chunks a live prefill
        computes while the window is open, so a prefill after the close matches it."""
        head = ids.index(self.placeholder_id)
        return [head + self.tokens_per_frame] + [self.tokens_per_frame] * (self.num_frames - 1)

    def _encode(self, pixel_values: torch.Tensor) -> Any:
        """Frame by frame, in the batch of one the live prefill encodes each frame in: on a
        GPU a batch of 8 takes other kernels than a batch of 1 and rounds differently in
        bfloat16 (measured on an H200, docs/gpu-h200-2026-11-27.md: live graphs agreed with
        the one-shot prefill in 1 window of 6), so every prefill encodes alike."""
        # a static runtime that compiles the prompt's work holds this call compiled for one
        # frame (vision_runtime.py): every prefill on it encodes alike, live or one-shot
        encode = getattr(self.runtime, "vision", None) or self._frame_features
        frames = [encode(pixel_values[:, i:i + 1]) for i in range(pixel_values.shape[1])]
        return BaseModelOutputWithPooling(pooler_output=torch.cat(frames, 0))

    def _frame_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """One frame's features ([1, 1, 3, H, W] pixels), eager."""
        return self.model.model.get_video_features(pixel_values_videos=pixels,
                                                   return_dict=True).pooler_output

    def vision_call(self) -> tuple[Any, torch.Tensor]:
        """The per-frame vision call and an example of its pixels (the runtime compiles it for
        that shape: ``vision_runtime.compile_vision``)."""
        side = self.preprocess.crop or self.preprocess.size
        return self._frame_features, torch.zeros(1, 1, 3, side, side, device=self.device,
                                                 dtype=self.vision_dtype)

    def _pixel_kwargs(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"pixel_values_videos": pixel_values}

    def prepare(self, window: Any, question: str | None = None,
                visual_keep: float = 1.0) -> VisionTextInputs:
        """A sync.Window (its ``frames[i].image``: H x W x 3 uint8 RGB) -> model inputs.
        ``visual_keep`` < 1 (lossy): each frame's CLS and that share of its patches, where
        the window's events fired nearest the frame (``models/pruning.py``)."""
        if not window.frames:
            raise ValueError("window has no RGB frames; the verifier cannot caption it")
        inputs = self.prepare_frames([f.image for f in window.frames], question)
        if visual_keep >= 1.0:
            return inputs
        picked = [window.frames[i] for i in uniform_indices(len(window.frames),
                                                            self.num_frames)]
        keep = torch.from_numpy(event_keep_mask(
            window.events, [f.stamp_ns for f in picked], picked[0].image.shape[:2],
            self.preprocess, self.patch_side, visual_keep))
        return VisionTextInputs(self.prompt_ids(int(keep.sum()), question),
                                inputs.pixel_values, keep)

    def prepare_frames(self, frames: Sequence[np.ndarray],
                       question: str | None = None) -> VisionTextInputs:
        """``num_frames`` frames sampled uniformly from ``frames`` -> model inputs."""
        if len(frames) == 0:
            raise ValueError("no frames given; the verifier needs at least one RGB frame")
        picked = [frames[i] for i in uniform_indices(len(frames), self.num_frames)]
        pixels = self.preprocess(picked).unsqueeze(0)
        ids = self.prompt_ids(self.num_frames * self.tokens_per_frame, question)
        return VisionTextInputs(ids, pixels)
