"""Tiny random models of every backend architecture and their tokenizers (tests, training).

The tokenizers mirror the real pair: the EventGPT drafter and the Video-LLaVA verifier share
the ids of every ordinary token (like LLaMA ids 0-31999), and each puts its own special
tokens (``<image> <video> <pad>`` / ``<ev_patch> <ev_start> <ev_end>``) above that shared
range, so ``proposable_ids`` is the shared size. The generic LLaVA drafter's tokenizer orders
its words differently (a different tokenizer, bridged through text by the engine).
Builders take the tokenizer and the dimensions, and are deterministic from a seed; the
default init (0.02, as transformers) suits training, ``init_range=0.3`` gives random models
whose greedy outputs vary (better for tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    processors,
)
from transformers import (
    CLIPVisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaForConditionalGeneration,
    PreTrainedTokenizerFast,
    VideoLlavaConfig,
    VideoLlavaForConditionalGeneration,
)

from crossspec_ros.models.eventgpt import (
    EV_END_TOKEN,
    EV_START_TOKEN,
    EVENT_PATCH_TOKEN,
    EventGPTConfig,
    EventGPTModel,
)
from crossspec_ros.models.eventgpt_drafter import EventGPTDrafter
from crossspec_ros.models.llava_drafter import LlavaEventDrafter
from crossspec_ros.models.video_llava import VideoLlavaVerifier


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


BASE_SPECIALS = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2 as in LLaMA
ROLE_SPECIALS = {
    "video_llava": ("<image>", "<video>", "<pad>"),
    "eventgpt": (EVENT_PATCH_TOKEN, EV_START_TOKEN, EV_END_TOKEN),
    "llava": ("<image>", "<pad>"),
}
PROMPT_WORDS = _words(
    "A chat between a curious human and an artificial intelligence assistant . The gives "
    "helpful , detailed polite answers to the ' s questions USER : ASSISTANT Describe "
    "driving scene what is happening in this"
)
CAPTION_WORDS = _words(
    "the car cars truck bus van bicycle cyclist pedestrian pedestrians person people road "
    "street lane lanes highway intersection crossing crosswalk sidewalk traffic light lights "
    "sign signs red green yellow left right ahead front behind parked moving stopped slowly "
    "fast turning turns drives driving waits waiting crosses crossing ego vehicle vehicles "
    "on at of with near next to from into two three many few no empty busy wet dry night "
    "day sunny cloudy rain building buildings trees tree tunnel bridge roundabout city "
    "rural urban straight curve merges overtakes follows brakes accelerates"
)


def default_words() -> list[str]:
    """Ordinary (non-special) words of the tiny vocabulary: prompt + driving captions."""
    return list(dict.fromkeys([*PROMPT_WORDS, *CAPTION_WORDS]))


def tiny_tokenizer(role: str = "video_llava", words: Sequence[str] | None = None
                   ) -> PreTrainedTokenizerFast:
    """WordLevel tokenizer for ``role`` in {"video_llava", "eventgpt", "llava"}.

    Ids: <unk>=0, <s>=1, </s>=2, the words, then the role's special tokens. BOS is added.
    "video_llava" and "eventgpt" share ids below ``shared_size(words)``; "llava" reverses the
    word order so its ordinary ids differ.
    """
    if role not in ROLE_SPECIALS:
        raise ValueError(f"role must be one of {sorted(ROLE_SPECIALS)}, got {role!r}")
    ordinary = list(dict.fromkeys(default_words() if words is None else words))
    if role == "llava":
        ordinary.reverse()
    tokens = [*BASE_SPECIALS, *ordinary, *ROLE_SPECIALS[role]]
    backend = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    # words (hyphenated ones whole) and separate punctuation; decoding re-attaches the
    # punctuation, so captions read as written ("a left-hand bend." round-trips)
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Split(Regex(r"[.,:;!?'\"()]"), behavior="isolated")])
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", 1)])
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                for t in (*BASE_SPECIALS, *ROLE_SPECIALS[role])])
    pad = "<pad>" if "<pad>" in ROLE_SPECIALS[role] else "</s>"
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token=pad)


def shared_size(words: Sequence[str] | None = None) -> int:
    """Number of ids the tiny drafter and verifier share (their ``proposable_ids``)."""
    return len(BASE_SPECIALS) + len(dict.fromkeys(default_words() if words is None else words))


def _text_config(vocab_size: int, hidden: int, layers: int, heads: int,
                 init_range: float) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                       num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=heads, max_position_embeddings=4096,
                       initializer_range=init_range, tie_word_embeddings=False,
                       bos_token_id=1, eos_token_id=2, pad_token_id=None)


def _vision_config(hidden: int, layers: int, heads: int, image_size: int,
                   patch_size: int) -> CLIPVisionConfig:
    return CLIPVisionConfig(hidden_size=hidden, intermediate_size=2 * hidden,
                            num_hidden_layers=layers, num_attention_heads=heads,
                            image_size=image_size, patch_size=patch_size, projection_dim=hidden)


def _random(build: Any, seed: int) -> Any:
    with torch.random.fork_rng(devices=[]):  # deterministic without touching global RNG
        torch.manual_seed(seed)
        return build().eval()


def tiny_video_llava(tokenizer: Any, *, seed: int = 0, hidden: int = 32, layers: int = 2,
                     heads: int = 4, vision_hidden: int = 32, vision_layers: int = 2,
                     image_size: int = 28, patch_size: int = 14, init_range: float = 0.02
                     ) -> VideoLlavaForConditionalGeneration:
    """A random VideoLlavaForConditionalGeneration whose vocabulary is ``tokenizer``'s."""
    config = VideoLlavaConfig(
        vision_config=_vision_config(vision_hidden, vision_layers, heads, image_size,
                                     patch_size),
        text_config=_text_config(len(tokenizer), hidden, layers, heads, init_range),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        vision_feature_layer=-2, image_seq_length=(image_size // patch_size) ** 2,
        video_seq_length=8 * ((image_size // patch_size) ** 2 + 1),
    )
    return _random(lambda: VideoLlavaForConditionalGeneration(config), seed)


def tiny_llava(tokenizer: Any, *, seed: int = 0, hidden: int = 32, layers: int = 2,
               heads: int = 4, vision_hidden: int = 32, vision_layers: int = 2,
               image_size: int = 28, patch_size: int = 14, init_range: float = 0.02
               ) -> LlavaForConditionalGeneration:
    """A random LlavaForConditionalGeneration whose vocabulary is ``tokenizer``'s."""
    config = LlavaConfig(
        vision_config=_vision_config(vision_hidden, vision_layers, heads, image_size,
                                     patch_size),
        text_config=_text_config(len(tokenizer), hidden, layers, heads, init_range),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-2, image_seq_length=(image_size // patch_size) ** 2,
    )
    return _random(lambda: LlavaForConditionalGeneration(config), seed)


def tiny_eventgpt_config(tokenizer: Any, *, hidden: int = 32, layers: int = 2, heads: int = 4,
                         vision_hidden: int = 32, vision_layers: int = 2, image_size: int = 28,
                         patch_size: int = 14, init_range: float = 0.02) -> EventGPTConfig:
    """EventGPTConfig with tiny dims; ``<ev_start>``/``<ev_end>`` are tokens (start_end on)."""
    return EventGPTConfig(
        text=_text_config(len(tokenizer), hidden, layers, heads, init_range),
        vision=_vision_config(vision_hidden, vision_layers, heads, image_size, patch_size),
        mm_visual_tower="tiny-clip", mm_use_im_start_end=True, mm_use_im_patch_token=True,
    )


def tiny_eventgpt(tokenizer: Any, *, seed: int = 0, **dims: Any) -> EventGPTModel:
    """A random EventGPTModel (dims as in ``tiny_eventgpt_config``)."""
    config = tiny_eventgpt_config(tokenizer, **dims)
    return _random(lambda: EventGPTModel(config), seed)


def tiny_verifier(seed: int = 0, words: Sequence[str] | None = None, **dims: Any
                  ) -> VideoLlavaVerifier:
    """A tiny random Video-LLaVA verifier with its tiny tokenizer."""
    tokenizer = tiny_tokenizer("video_llava", words)
    return VideoLlavaVerifier(tiny_video_llava(tokenizer, seed=seed, **dims), tokenizer)


def tiny_eventgpt_drafter(seed: int = 0, words: Sequence[str] | None = None, **dims: Any
                          ) -> EventGPTDrafter:
    """A tiny random EventGPT drafter sharing ordinary ids with ``tiny_verifier``."""
    tokenizer = tiny_tokenizer("eventgpt", words)
    return EventGPTDrafter(tiny_eventgpt(tokenizer, seed=seed, **dims), tokenizer)


def tiny_llava_drafter(seed: int = 0, words: Sequence[str] | None = None, n_images: int = 1,
                       **dims: Any) -> LlavaEventDrafter:
    """A tiny random LLaVA event drafter (a tokenizer different from the verifier's)."""
    tokenizer = tiny_tokenizer("llava", words)
    return LlavaEventDrafter(tiny_llava(tokenizer, seed=seed, **dims), tokenizer,
                             n_images=n_images)
