"""EventGPT as a crossspec drafter: a window's events -> EventGPT decoding session.

Prompt and tokenization follow the reference inference code: the conversation template
``eventgpt_v1`` with the event wrapped as ``<ev_start><event><ev_end>`` (its
``prepare_event_prompt`` always adds the wrapper; the two markers are single tokens only when
``mm_use_im_start_end`` added them to the tokenizer, else they are plain text), the prompt split
at ``<event>``, each piece tokenized on its own with the BOS kept only once, and -200 between.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache, GenerationConfig

from crossspec_ros.events.representations import event_image_chunks
from crossspec_ros.models.base import CaptionModel, ModelInfo, PrefillTiming
from crossspec_ros.models.eventgpt import (
    EV_END_TOKEN,
    EV_START_TOKEN,
    EVENT_PATCH_TOKEN,
    EVENT_TOKEN,
    EVENT_TOKEN_INDEX,
    NUM_EVENT_IMAGES,
    EventGPTModel,
)
from crossspec_ros.models.eventgpt_checkpoint import load_eventgpt
from crossspec_ros.models.hf_session import HFSession
from crossspec_ros.models.loading import load_tokenizer, resolve_device
from crossspec_ros.models.preprocess import ClipPreprocess
from crossspec_ros.models.static_runtime import StaticSession
from crossspec_ros.models.streams import Stopwatch, inference, synchronize

SYSTEM = ("A chat between a curious human and an artificial intelligence assistant. "
          "The assistant gives helpful, detailed, and polite answers to the human's questions.")
TEMPLATE = SYSTEM + " USER: " + EV_START_TOKEN + EVENT_TOKEN + EV_END_TOKEN + "\n{query} ASSISTANT:"
DEFAULT_QUERY = "Describe the driving scene."


@dataclass
class EventInputs:
    """Prompt ids (one -200 for the events) and the 5 preprocessed event images."""

    input_ids: torch.Tensor     # [L] int64 with one EVENT_TOKEN_INDEX
    pixel_values: torch.Tensor  # [5, 3, S, S] float32


def add_event_tokens(tokenizer: Any, mm_use_im_start_end: bool,
                     mm_use_im_patch_token: bool = True) -> None:
    """Add EventGPT's special tokens as its inference code does (no-op when present)."""
    wanted = ([EVENT_PATCH_TOKEN] if mm_use_im_patch_token else []) + (
        [EV_START_TOKEN, EV_END_TOKEN] if mm_use_im_start_end else [])
    missing = [t for t in wanted if t not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_tokens(missing, special_tokens=True)


class EventGPTDrafter(CaptionModel):
    """The drafter: a window's EventBatch -> 5 event images -> EventGPT session."""

    def __init__(self, model: EventGPTModel, tokenizer: Any, *, query: str = DEFAULT_QUERY,
                 max_new_tokens: int = 64, proposable_ids: int | None = None,
                 stream: Any | None = None, name: str = "eventgpt") -> None:
        self.model = model.eval()
        cfg = model.config
        add_event_tokens(tokenizer, cfg.mm_use_im_start_end, cfg.mm_use_im_patch_token)
        lm = model.language_model
        if len(tokenizer) > lm.get_input_embeddings().weight.shape[0]:
            lm.resize_token_embeddings(len(tokenizer))  # what the reference inference does
        self.tokenizer = tokenizer
        self.device = model.device
        self.stream = stream
        self.query = query
        self.preprocess = ClipPreprocess(cfg.vision.image_size)
        vocab = int(lm.get_output_embeddings().weight.shape[0])
        specials = [tokenizer.convert_tokens_to_ids(t) for t in
                    (EVENT_PATCH_TOKEN, EV_START_TOKEN, EV_END_TOKEN) if t in tokenizer.get_vocab()]
        self.info = ModelInfo(
            name=name, vocab_size=vocab,
            proposable_ids=proposable_ids if proposable_ids is not None else min(specials,
                                                                                  default=vocab),
            eos_token_id=int(tokenizer.eos_token_id), max_new_tokens=max_new_tokens,
            extra={"event_tokens": cfg.event_tokens},
        )

    @classmethod
    def load(cls, directory: str | Path, *, dtype: str | torch.dtype = "bf16",
             quantization: str | None = None, device: str | torch.device = "cpu",
             vision_tower_dir: str | Path | None = None, **kwargs: Any) -> EventGPTDrafter:
        """From a released-layout directory holding config.json, weights and the tokenizer."""
        model = load_eventgpt(directory, dtype=dtype, quantization=quantization, device=device,
                              vision_tower_dir=vision_tower_dir)
        return cls(model, load_tokenizer(directory), **kwargs)

    def to(self, device: str | torch.device) -> EventGPTDrafter:
        """Move the (unquantized) model to ``device``; returns self."""
        self.device = resolve_device(device)
        self.model.to(self.device)
        return self

    def prompt(self, query: str | None = None) -> str:
        """EventGPT's prompt text with the ``<event>`` placeholder."""
        return TEMPLATE.format(query=self.query if query is None else query)

    def prompt_ids(self, query: str | None = None) -> torch.Tensor:
        """[L] ids with one -200 where the event tokens go (reference tokenization)."""
        chunks = [self.tokenizer(c).input_ids for c in self.prompt(query).split(EVENT_TOKEN)]
        bos = self.tokenizer.bos_token_id
        offset = 1 if chunks and chunks[0] and chunks[0][0] == bos else 0
        ids: list[int] = [bos] if offset else []
        for i, chunk in enumerate(chunks):
            if i:
                ids.append(EVENT_TOKEN_INDEX)
            ids.extend(chunk[offset:])
        return torch.tensor(ids, dtype=torch.long)

    def prepare(self, window: Any, query: str | None = None) -> EventInputs:
        """A sync.Window's ``events`` (EventBatch) -> 5 event images + prompt ids."""
        events = window.events
        if events.width == 0 or events.height == 0:
            raise ValueError("window events have no sensor size (no event seen yet)")
        images = event_image_chunks(events, NUM_EVENT_IMAGES)
        return EventInputs(self.prompt_ids(query), self.preprocess(images))

    def _step(self, ids: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        return self.model.language_model(input_ids=ids, past_key_values=cache,
                                         use_cache=True).logits[0]

    def _embeds(self, inputs: EventInputs) -> torch.Tensor:
        pixels = inputs.pixel_values.to(self.device, self.model.vision_dtype, non_blocking=True)
        # compiled for the window's event images on a runtime that compiles the prompt's
        # work (vision_runtime.py)
        encode = getattr(self.runtime, "vision", None) or self.model.encode_events
        events = encode(pixels)
        return self.model.embed_prompt(inputs.input_ids.to(self.device), events)

    def vision_call(self) -> tuple[Any, torch.Tensor]:
        """The event encoder and an example of a window's event images (its one shape)."""
        side = self.preprocess.crop or self.preprocess.size
        return self.model.encode_events, torch.zeros(
            NUM_EVENT_IMAGES, 3, side, side, device=self.device, dtype=self.model.vision_dtype)

    # -- the static runtime ---------------------------------------------------------------
    def language_model_parts(self) -> tuple[Any, Any, Any]:
        lm = self.model.language_model
        return lm.model, lm.lm_head, self.model.config.text

    def prompt_layout(self) -> tuple[int, list[int]]:
        """The whole prompt (its event tokens in place of the one -200) in one chunk."""
        length = len(self.prompt_ids()) - 1 + self.model.config.event_tokens
        return length, [length]

    def prefill(self, inputs: EventInputs) -> HFSession | StaticSession:
        """Event encoding + pooling, then the prompt prefill into a fresh cache."""
        watch = Stopwatch(self.device, self.stream)
        if self.runtime is not None:
            return self._static_prefill(inputs, watch)
        with inference(self.device, self.stream):
            embeds = self._embeds(inputs)
            vision_ms = watch.lap_ms()
            cache = DynamicCache(config=self.model.config.text)
            # the base model, then the head on the last row (what logits_to_keep=1 does):
            # the same logits, and the window state a draft head reads comes for free
            lm = self.model.language_model
            hidden = lm.model(inputs_embeds=embeds, past_key_values=cache,
                              use_cache=True).last_hidden_state[:, -1:]
            first = lm.lm_head(hidden)[0, -1].float()
            prefill_ms = watch.lap_ms()
        session = HFSession(self._step, cache, first, PrefillTiming(vision_ms, prefill_ms),
                            self.device, self.stream)
        session.window_state = hidden[0, -1].float()
        return session

    def _static_prefill(self, inputs: EventInputs, watch: Stopwatch) -> StaticSession:
        rt = self.runtime
        slot = rt.acquire()
        lease = slot.lease
        try:
            with inference(self.device, self.stream):
                embeds = self._embeds(inputs)
                vision_ms = watch.lap_ms()
                hidden, logits = rt.chain(slot, 0, embeds, last_only=True)
                prefill_ms = watch.lap_ms()
        except BaseException:
            rt.release(slot, lease)
            raise
        session = StaticSession(rt, slot, embeds.shape[1], logits[-1],
                                PrefillTiming(vision_ms, prefill_ms))
        session.window_state = hidden[-1]
        return session

    def window_state(self, inputs: EventInputs) -> torch.Tensor:
        """What the drafter saw: its language model's last hidden state at the end of the
        prompt (after the final norm), float32 [hidden]; a draft head's input."""
        with inference(self.device, self.stream):
            out = self.model.language_model.model(inputs_embeds=self._embeds(inputs))
            state = out.last_hidden_state[0, -1].float()
        synchronize(self.device, self.stream)
        return state

    def reference_generate(self, inputs: EventInputs,
                           max_new_tokens: int | None = None) -> list[int]:
        """Greedy decoding by transformers' ``generate`` on the same prompt embeddings."""
        limit = self.info.max_new_tokens if max_new_tokens is None else max_new_tokens
        eos = self.info.eos_token_id
        config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=limit,
                                  eos_token_id=eos, pad_token_id=eos)
        with inference(self.device, self.stream):
            embeds = self._embeds(inputs)
            mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=self.device)
            out = self.model.language_model.generate(inputs_embeds=embeds, attention_mask=mask,
                                                     generation_config=config)
        synchronize(self.device, self.stream)
        return [int(t) for t in out[0].tolist()]
