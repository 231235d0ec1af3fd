"""EventGPT's architecture (XduSyL/EventGPT, ``model/EventChatModel.py``), natively in torch.

Per event image: CLIP vision tower (final-layer ``last_hidden_state``, CLS kept: 577 x 1024
at 336 px) -> ``visual_projector`` (Linear -> GELU -> Linear) -> ``feature_adaptor``
(Linear). The 5 images' features [5, N, C] are pooled without parameters into 5 temporal
tokens (mean over each image's tokens) FOLLOWED BY N spatial tokens (mean over the images):
``torch.cat([temporal, spatial])`` as in the reference ``get_spatio_temporal_features``.
Those 5 + N tokens replace the prompt's single ``<event>`` placeholder (id -200) in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import CLIPVisionConfig, CLIPVisionModel, LlamaConfig, LlamaForCausalLM

EVENT_TOKEN_INDEX = -200
EVENT_TOKEN = "<event>"
EVENT_PATCH_TOKEN = "<ev_patch>"
EV_START_TOKEN = "<ev_start>"
EV_END_TOKEN = "<ev_end>"
NUM_EVENT_IMAGES = 5
CLIP_L14_336 = "openai/clip-vit-large-patch14-336"


def clip_l14_336_config() -> CLIPVisionConfig:
    """CLIP ViT-L/14 at 336 px, EventGPT's vision tower."""
    return CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                            num_attention_heads=16, image_size=336, patch_size=14,
                            projection_dim=768, hidden_act="quick_gelu", layer_norm_eps=1e-5)


@dataclass
class EventGPTConfig:
    """LM config, vision tower config and EventGPT's multimodal switches."""

    text: LlamaConfig
    vision: CLIPVisionConfig = field(default_factory=clip_l14_336_config)
    mm_visual_tower: str = CLIP_L14_336
    mm_use_im_start_end: bool = False
    mm_use_im_patch_token: bool = True
    feature_adaptor: bool = True  # config key ``event_feature_adaptor`` in the release

    @property
    def event_tokens(self) -> int:
        """Tokens that replace ``<event>``: 5 temporal + (patches + 1) spatial."""
        side = self.vision.image_size // self.vision.patch_size
        return NUM_EVENT_IMAGES + side * side + 1


def spatio_temporal_pool(features: torch.Tensor) -> torch.Tensor:
    """[T, N, C] per-image features -> [T + N, C]: T temporal tokens, then N spatial tokens."""
    if features.ndim != 3:
        raise ValueError(f"expected [images, tokens, channels], got {tuple(features.shape)}")
    temporal = features.mean(dim=1)  # one token per image: mean over its tokens
    spatial = features.mean(dim=0)   # one token per position: mean over the images
    return torch.cat([temporal, spatial], dim=0)


class EventGPTModel(nn.Module):
    """Vision tower + projector + adaptor + LLaMA LM (the parts of EventChatModel used to infer)."""

    def __init__(self, config: EventGPTConfig, language_model: LlamaForCausalLM | None = None,
                 visual_tower: CLIPVisionModel | None = None) -> None:
        super().__init__()
        self.config = config
        text_hidden = config.text.hidden_size
        self.language_model = language_model or LlamaForCausalLM(config.text)
        self.visual_tower = visual_tower or CLIPVisionModel(config.vision)
        self.visual_projector = nn.Sequential(
            nn.Linear(config.vision.hidden_size, text_hidden), nn.GELU(),
            nn.Linear(text_hidden, text_hidden))
        self.feature_adaptor = (nn.Linear(text_hidden, text_hidden) if config.feature_adaptor
                                else nn.Identity())

    @property
    def device(self) -> torch.device:
        return self.language_model.get_input_embeddings().weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The language model's (and the projector's) dtype. Read from the embeddings: a
        LoRA-wrapped projector (models/lora.py) cannot be indexed."""
        return self.language_model.get_input_embeddings().weight.dtype

    @property
    def vision_dtype(self) -> torch.dtype:
        return self.visual_tower.embeddings.patch_embedding.weight.dtype

    def encode_events(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """[T, 3, S, S] event images -> [T + N, hidden] event tokens."""
        features = self.visual_tower(pixel_values=pixel_values).last_hidden_state
        features = features.to(self.dtype)
        features = self.feature_adaptor(self.visual_projector(features))
        return spatio_temporal_pool(features)

    def embed_prompt(self, input_ids: torch.Tensor, event_tokens: torch.Tensor) -> torch.Tensor:
        """[1, L'] embeddings: text ids embedded, the one ``-200`` replaced by the event tokens."""
        ids = input_ids.reshape(-1)
        where = torch.nonzero(ids == EVENT_TOKEN_INDEX).flatten().tolist()
        if len(where) != 1:
            raise ValueError(f"the prompt must hold exactly one <event> ({EVENT_TOKEN_INDEX}), "
                             f"found {len(where)}")
        embed = self.language_model.get_input_embeddings()
        text = embed(ids.clamp(min=0))
        at = where[0]
        parts = [text[:at], event_tokens.to(text.dtype), text[at + 1:]]
        return torch.cat(parts, dim=0).unsqueeze(0)
