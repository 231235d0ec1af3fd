"""The full-size architectures with random weights, for GPU benchmarks without downloads.

Video-LLaVA-7B-hf (Vicuna-7B + CLIP ViT-L/14 at 224 px, 8 frames x 257 tokens) and
EventGPT-7B (LLaMA-7B + CLIP ViT-L/14-336, 582 event tokens), with the dimensions of the
released checkpoints (DESIGN.md section 4). Weights are random, so captions are meaningless:
benchmarks pair them with oracle drafters of controlled acceptance. The tokenizers are
synthetic word-level ones with the real id layout (ordinary ids 0-31999, specials above).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import (
    CLIPVisionConfig,
    LlamaConfig,
    VideoLlavaConfig,
    VideoLlavaForConditionalGeneration,
)

from crossspec_ros.models.eventgpt import EventGPTConfig, EventGPTModel, clip_l14_336_config
from crossspec_ros.models.eventgpt_drafter import EventGPTDrafter
from crossspec_ros.models.tiny import BASE_SPECIALS, tiny_tokenizer
from crossspec_ros.models.video_llava import VideoLlavaVerifier

LLAMA_VOCAB = 32000


def llama_7b_config(vocab_size: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab_size, hidden_size=4096, intermediate_size=11008,
                       num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                       max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=1,
                       eos_token_id=2, pad_token_id=None, tie_word_embeddings=False)


def clip_l14_224_config() -> CLIPVisionConfig:
    return CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                            num_attention_heads=16, image_size=224, patch_size=14,
                            projection_dim=768, hidden_act="quick_gelu", layer_norm_eps=1e-5)


def synthetic_tokenizer(role: str) -> Any:
    """Word-level tokenizer with LLaMA's id layout: 32000 ordinary ids, role specials above."""
    words = [f"w{i}" for i in range(LLAMA_VOCAB - len(BASE_SPECIALS))]
    return tiny_tokenizer(role, words)


def video_llava_7b_config(tokenizer: Any) -> VideoLlavaConfig:
    return VideoLlavaConfig(
        vision_config=clip_l14_224_config(), text_config=llama_7b_config(32064),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        vision_feature_layer=-2, image_seq_length=256, video_seq_length=8 * 257)


def eventgpt_7b_config(tokenizer: Any) -> EventGPTConfig:
    return EventGPTConfig(text=llama_7b_config(len(tokenizer)), vision=clip_l14_336_config(),
                          mm_use_im_start_end=True, mm_use_im_patch_token=True)


def _build(make: Any, device: str | torch.device, dtype: torch.dtype) -> Any:
    """Construct directly on ``device`` in ``dtype`` (no 28 GB fp32 detour through the CPU)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return make().eval()
    finally:
        torch.set_default_dtype(previous)


def full_size_verifier(device: str = "cuda", dtype: torch.dtype = torch.bfloat16
                       ) -> VideoLlavaVerifier:
    tokenizer = synthetic_tokenizer("video_llava")
    model = _build(lambda: VideoLlavaForConditionalGeneration(video_llava_7b_config(tokenizer)),
                   device, dtype)
    return VideoLlavaVerifier(model, tokenizer, proposable_ids=LLAMA_VOCAB)


def full_size_eventgpt_drafter(device: str = "cuda", dtype: torch.dtype = torch.bfloat16
                               ) -> EventGPTDrafter:
    tokenizer = synthetic_tokenizer("eventgpt")
    model = _build(lambda: EventGPTModel(eventgpt_7b_config(tokenizer)), device, dtype)
    return EventGPTDrafter(model, tokenizer, proposable_ids=LLAMA_VOCAB)
