"""Generic LLaVA-family drafter: any transformers ``LlavaForConditionalGeneration`` on events.

Input choice: the window's events are rendered as EventGPT-style event images (white
background, polarity 0 blue, else red) and fed as ``n_images`` images, one ``<image>`` token
each. The default is ONE image of the whole window, because LLaVA-1.5-style models are
trained on single images; ``n_images=5`` gives EventGPT's five equal-count chunks instead.
Its tokenizer usually differs from the verifier's: the engine bridges through text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import LlavaForConditionalGeneration

from crossspec_ros.events.representations import event_image_chunks
from crossspec_ros.models.hf_backend import HFLlavaFamilyModel, VisionTextInputs
from crossspec_ros.models.loading import load_hf_model, load_tokenizer, resolve_source
from crossspec_ros.models.preprocess import ClipPreprocess

IMAGE_TOKEN = "<image>"


class LlavaEventDrafter(HFLlavaFamilyModel):
    """A drafter: a window's events -> event image(s) -> LLaVA decoding session."""

    modality = "image"

    def __init__(self, model: Any, tokenizer: Any, *, n_images: int = 1,
                 preprocess: ClipPreprocess | None = None, name: str = "llava-events",
                 **kwargs: Any) -> None:
        super().__init__(model, tokenizer, name=name, placeholder=IMAGE_TOKEN, **kwargs)
        if n_images < 1:
            raise ValueError(f"n_images must be >= 1, got {n_images}")
        cfg = model.config
        self.n_images = n_images
        self.preprocess = preprocess or ClipPreprocess(cfg.vision_config.image_size)
        side = (self.preprocess.crop or self.preprocess.size) // cfg.vision_config.patch_size
        # "default" drops CLS for images, "full" keeps it
        self.tokens_per_image = side * side + (cfg.vision_feature_select_strategy == "full")
        self.info.extra.update(n_images=n_images, tokens_per_image=self.tokens_per_image)

    @classmethod
    def load(cls, source: str | Path, *, dtype: str | torch.dtype = "bf16",
             quantization: str | None = None, device: str | torch.device = "cpu",
             allow_download: bool = False, **kwargs: Any) -> LlavaEventDrafter:
        """From a local directory or a cached hub id (e.g. llava-hf/llava-1.5-7b-hf)."""
        model = load_hf_model(LlavaForConditionalGeneration, source, dtype=dtype,
                              quantization=quantization, device=device,
                              allow_download=allow_download)
        where = resolve_source(source, allow_download)
        preprocess = ClipPreprocess.from_dir(where, model.config.vision_config.image_size) \
            if Path(where).is_dir() else None
        return cls(model, load_tokenizer(where, allow_download), preprocess=preprocess,
                   **kwargs)

    def _special_ids(self) -> list[int | None]:
        return [self.model.config.image_token_id]

    def placeholder_tokens(self) -> int:
        return self.tokens_per_image

    def prompt_layout(self) -> tuple[int, list[int]]:
        ids = self.prompt_ids(self.tokens_per_image,
                              placeholder=IMAGE_TOKEN * self.n_images)[0].tolist()
        return len(ids), self.prompt_chunks(ids)

    def _encode(self, pixel_values: torch.Tensor) -> Any:
        return self.model.model.get_image_features(pixel_values=pixel_values, return_dict=True)

    def _pixel_kwargs(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"pixel_values": pixel_values}

    def prepare(self, window: Any, question: str | None = None) -> VisionTextInputs:
        """A sync.Window's ``events`` (EventBatch) -> model inputs."""
        events = window.events
        if events.width == 0 or events.height == 0:
            raise ValueError("window events have no sensor size (no event seen yet)")
        images = event_image_chunks(events, self.n_images)
        ids = self.prompt_ids(self.tokens_per_image, question,
                              placeholder=IMAGE_TOKEN * self.n_images)
        return VisionTextInputs(ids, self.preprocess(images))
