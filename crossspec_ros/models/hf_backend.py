"""Shared backend for transformers' LLaVA-family models (Video-LLaVA, LLaVA).

The prompt's placeholder token (``<video>``/``<image>``) is expanded to as many copies as the
vision tower yields features, exactly as the models' own processors do. Prefill runs the
vision tower first (timed separately). Two runtimes: eager (the model's own forward with a
``DynamicCache``, the vision output handed over through ``mm_encoder_outputs``; trees of
proposals verified in one pass) and static (``use_static_runtime``: the features merged into
the prompt's embeddings here, the prompt prefilled in the model's fixed chunks, then the
question's tail with the first proposal in one step of the runtime's shape:
``models/static_runtime.py``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache, GenerationConfig

from crossspec_ros.models.base import CaptionModel, ModelInfo, PrefillTiming
from crossspec_ros.models.hf_session import HFSession, session_after_prefill, tree_attention
from crossspec_ros.models.loading import resolve_device
from crossspec_ros.models.static_runtime import StaticSession
from crossspec_ros.models.streams import Stopwatch, inference, synchronize


@dataclass
class VisionTextInputs:
    """Model inputs of one window: prompt ids (placeholders expanded) and pixel values."""

    input_ids: torch.Tensor       # [1, L] int64
    pixel_values: torch.Tensor    # [1, F, 3, S, S] video frames, or [K, 3, S, S] images
    keep: torch.Tensor | None = None  # [F, tokens per frame] bool: the visual tokens the
    #                                   prompt holds (models/pruning.py; None: all of them)


def expand_placeholder(ids: list[int], token_id: int, copies: int) -> list[int]:
    """Each occurrence of ``token_id`` replaced by ``copies`` copies of it."""
    out: list[int] = []
    for t in ids:
        out.extend([t] * copies if t == token_id else [t])
    return out


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


class HFLlavaFamilyModel(CaptionModel):
    """CaptionModel over a transformers LLaVA-family ``...ForConditionalGeneration``."""

    modality: str = "image"            # key of mm_encoder_outputs
    template: str = "USER: {placeholder}\n{question} ASSISTANT:"
    default_question: str = "Describe the driving scene."

    def __init__(self, model: Any, tokenizer: Any, *, name: str, placeholder: str,
                 question: str | None = None, max_new_tokens: int = 64,
                 proposable_ids: int | None = None, stream: Any | None = None) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = _device_of(model)
        self.stream = stream
        self.question = self.default_question if question is None else question
        self.placeholder = placeholder
        self.placeholder_id = int(tokenizer.convert_tokens_to_ids(placeholder))
        if self.placeholder_id in (None, tokenizer.unk_token_id):
            raise ValueError(f"the tokenizer has no '{placeholder}' token")
        vocab = int(model.get_output_embeddings().weight.shape[0])
        special = [i for i in self._special_ids() if i is not None]
        self.info = ModelInfo(
            name=name, vocab_size=vocab,
            proposable_ids=proposable_ids if proposable_ids is not None else min(special),
            eos_token_id=int(tokenizer.eos_token_id), max_new_tokens=max_new_tokens,
        )

    def to(self, device: str | torch.device) -> HFLlavaFamilyModel:
        """Move the (unquantized) model to ``device``; returns self."""
        self.device = resolve_device(device)
        self.model.to(self.device)
        return self

    # -- what subclasses define ------------------------------------------------------------
    @abstractmethod
    def _special_ids(self) -> list[int | None]:
        """Ids of the model's multimodal special tokens (the lowest one bounds proposals)."""

    @abstractmethod
    def _encode(self, pixel_values: torch.Tensor) -> Any:
        """Vision tower + projector output for ``mm_encoder_outputs[self.modality]``."""

    @abstractmethod
    def _pixel_kwargs(self, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
        """Keyword arguments carrying the pixels to the model's ``generate``."""

    @property
    def vision_dtype(self) -> torch.dtype:
        """dtype of the vision tower's input (quantized models keep convs in float)."""
        for module in self.model.modules():
            if isinstance(module, torch.nn.Conv2d):
                return module.weight.dtype
        return torch.float32

    # -- prompt ----------------------------------------------------------------------------
    def prompt(self, question: str | None = None, placeholder: str | None = None) -> str:
        """The model's prompt text around one placeholder."""
        return self.template.format(placeholder=placeholder or self.placeholder,
                                    question=self.question if question is None else question)

    def prompt_ids(self, tokens_per_placeholder: int, question: str | None = None,
                   placeholder: str | None = None) -> torch.Tensor:
        """[1, L] prompt ids with each placeholder expanded to its feature count."""
        ids = self.tokenizer(self.prompt(question, placeholder)).input_ids
        if self.placeholder_id not in ids:
            raise ValueError(f"prompt has no {self.placeholder} token: {self.prompt(question)!r}")
        expanded = expand_placeholder(ids, self.placeholder_id, tokens_per_placeholder)
        return torch.tensor([expanded], dtype=torch.long)

    # -- decoding --------------------------------------------------------------------------
    def _step(self, ids: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        return self.model(input_ids=ids, past_key_values=cache, use_cache=True).logits[0]

    def _tree_step(self, ids: torch.Tensor, cache: DynamicCache, allowed: torch.Tensor,
                   positions: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, past_key_values=cache, use_cache=True,
                          **self.tree_inputs(allowed, positions)).logits[0]

    def tree_inputs(self, allowed: torch.Tensor, positions: torch.Tensor
                    ) -> dict[str, torch.Tensor]:
        """``attention_mask`` and ``position_ids`` for a forward over a tree
        (``hf_session.tree_attention``): an additive mask (0 = attend; the eager attention
        adds it, SDPA takes it as is)."""
        dtype = self.model.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        mask.masked_fill_(~allowed.to(self.device), torch.finfo(dtype).min)
        return {"attention_mask": mask[None, None],
                "position_ids": positions.to(self.device)[None]}

    def prefill(self, inputs: VisionTextInputs) -> HFSession:
        """Vision encoding, then the prompt prefill into a fresh DynamicCache."""
        return self.prefill_with_proposal(inputs, ())[0]

    @property
    def supports_tree_prefill(self) -> bool:
        return self.runtime is None  # the eager runtime masks a tree into the prefill

    def prefill_with_proposal(self, inputs: VisionTextInputs, proposal: Sequence[int],
                              parents: Sequence[int] | None = None
                              ) -> tuple[HFSession | StaticSession, torch.Tensor]:
        """The prefill with ``proposal`` appended to the prompt in the same forward pass: the
        causal mask makes row i exactly what feeding the proposal afterwards would give,
        and a few more tokens on a prompt of hundreds cost next to nothing. With
        ``parents`` the proposal is a draft tree (``speculative/tree.py``), checked in the
        same pass; the session then holds it for ``keep_path`` (eager runtime only)."""
        if self.runtime is not None:
            if parents is not None:
                raise ValueError("the static runtime checks chains, not trees")
            return self._static_prefill(inputs, proposal)
        if inputs.keep is not None:
            raise ValueError("pruned visual tokens (visual_keep < 1) need the static runtime "
                             "(node parameter runtime: static)")
        watch = Stopwatch(self.device, self.stream)
        with inference(self.device, self.stream):
            pixels = inputs.pixel_values.to(self.device, self.vision_dtype, non_blocking=True)
            ids = inputs.input_ids
            masks = {} if parents is None else self.tree_inputs(
                *tree_attention(0, ids.shape[1], parents))
            if proposal:
                ids = torch.cat([ids, torch.tensor([list(proposal)], dtype=ids.dtype)], dim=1)
            ids = ids.to(self.device, non_blocking=True)
            encoded = self._encode(pixels)
            vision_ms = watch.lap_ms()
            cache = DynamicCache(config=self.model.config)
            out = self.model(input_ids=ids, past_key_values=cache, use_cache=True,
                             mm_encoder_outputs={self.modality: encoded},
                             logits_to_keep=len(proposal) + 1, **masks)
            rows = out.logits[0].float()
            prefill_ms = watch.lap_ms()
        return session_after_prefill(self, cache, rows, PrefillTiming(vision_ms, prefill_ms),
                                     proposal, parents), rows

    # -- the static runtime -------------------------------------------------------------------
    def language_model_parts(self) -> tuple[Any, Any, Any]:
        return self.model.model.language_model, self.model.lm_head, self.model.config

    def prompt_layout(self) -> tuple[int, list[int]]:
        ids = self.prompt_ids(self.placeholder_tokens())[0].tolist()
        return len(ids), self.prompt_chunks(ids)

    def placeholder_tokens(self) -> int:
        """Feature tokens per placeholder in this model's prompt."""
        raise NotImplementedError

    def prompt_chunks(self, ids: list[int]) -> list[int]:
        """Sizes of the chunks the prompt is prefilled in, up to the question's tail (the ids
        after the last placeholder): here one chunk; Video-LLaVA one per frame."""
        return [self.question_tail_start(ids)]

    def question_tail_start(self, ids: list[int]) -> int:
        """Where the question's tail begins: right after the prompt's last placeholder."""
        return len(ids) - ids[::-1].index(self.placeholder_id)

    def first_proposal_room(self) -> int | None:
        if self.runtime is None:
            return None
        prompt_len, chunks = self.prompt_layout()
        return max(0, self.runtime.max_rows - (prompt_len - sum(chunks)))  # beside the tail

    def merged_embeds(self, ids: torch.Tensor, encoded: Any,
                      keep: torch.Tensor | None = None) -> torch.Tensor:
        """[1, L, d] prompt embeddings with the vision features in the placeholders' places,
        as the model's own forward merges them (masked_scatter); ``keep``: only those
        features (``VisionTextInputs.keep``)."""
        embeds = self.model.get_input_embeddings()(ids)
        features = encoded.pooler_output.to(embeds.device, embeds.dtype)
        if keep is not None:  # [F, T, d] -> the kept [K, d], frame by frame
            features = features[keep.to(features.device)]
        where = (ids == self.placeholder_id).unsqueeze(-1).expand_as(embeds)
        return embeds.masked_scatter(where, features)

    def static_finish(self, slot: Any, pos: int, tail: torch.Tensor, proposal: Sequence[int],
                      timing: PrefillTiming) -> tuple[StaticSession, torch.Tensor]:
        """After ``pos`` prompt positions in ``slot``: the question's ``tail`` embeddings
        [1, T, d] and as much of ``proposal`` as fits in one step of the runtime's shape, the
        rest fed after (a runtime whose steps are shorter than the tail runs it as a prompt
        chunk of its own). Returns the session and its rows (as ``prefill_with_proposal``)."""
        rt, size = self.runtime, tail.shape[1]
        if size < rt.max_rows:
            room = rt.max_rows - size
            first = [int(t) for t in proposal[:room]]
            embeds = torch.cat([tail, rt.embed_ids(first)], 1) if first else tail
            _, logits = rt.chain(slot, pos, embeds, rows=rt.bucket(embeds.shape[1]))
            rows = logits[size - 1:]
        else:
            first = []
            _, rows = rt.chain(slot, pos, tail, last_only=True)
        session = StaticSession(rt, slot, pos + size, rows, timing, first)
        rest = [int(t) for t in proposal[len(first):]]
        if rest:
            try:
                rows = torch.cat([rows, session.feed(rest)])
            except BaseException:
                session.close()
                raise
        return session, rows

    def _static_prefill(self, inputs: VisionTextInputs, proposal: Sequence[int]
                        ) -> tuple[StaticSession, torch.Tensor]:
        rt = self.runtime
        watch = Stopwatch(self.device, self.stream)
        slot = rt.acquire()
        lease = slot.lease
        try:
            with inference(self.device, self.stream):
                pixels = inputs.pixel_values.to(self.device, self.vision_dtype,
                                                non_blocking=True)
                ids = inputs.input_ids.to(self.device)
                if inputs.keep is None and getattr(rt, "batches_prompts", False):
                    pos, vision_ms = self._prefill_frames(slot, ids, pixels), 0.0
                    tail = self.model.get_input_embeddings()(ids[:, pos:])
                else:
                    embeds = self.merged_embeds(ids, self._encode(pixels), inputs.keep)
                    vision_ms = watch.lap_ms()
                    pos = self._prefill_chunks(slot, embeds, inputs)
                    tail = embeds[:, pos:]
                session, rows = self.static_finish(slot, pos, tail, proposal,
                                                   PrefillTiming(vision_ms, 0.0))
            session.timing.prefill_ms = watch.lap_ms()
        except BaseException:
            rt.release(slot, lease)
            raise
        synchronize(self.device, self.stream)
        return session, rows

    def _prefill_chunks(self, slot: Any, embeds: torch.Tensor, inputs: VisionTextInputs
                        ) -> int:
        """The prompt's merged ``embeds`` up to the question's tail, in the runtime's prompt
        chunks; returns the positions prefilled."""
        rt, pos = self.runtime, 0
        prompt = inputs.input_ids[0].tolist()
        if inputs.keep is None:
            for size in self.prompt_chunks(prompt):
                rt.chain(slot, pos, embeds[:, pos:pos + size], last_only=True)
                pos += size
            return pos
        end = self.question_tail_start(prompt)  # a pruned prompt's length varies: in the
        while pos < end:  # steps' own compiled shape
            size = min(rt.max_rows, end - pos)
            rt.chain(slot, pos, embeds[:, pos:pos + size], rows=rt.max_rows)
            pos += size
        return pos

    def _prefill_frames(self, slot: Any, ids: torch.Tensor, pixels: torch.Tensor) -> int:
        """The prompt's chunks, frame by frame, each encoded and prefilled in one step with
        the other streams' frames (a runtime that ``batches_prompts``: the steps a live
        prefill runs); returns the positions prefilled."""
        chunks = self.prompt_chunks(ids[0].tolist())
        if len(chunks) != pixels.shape[1]:
            raise ValueError(f"{self.info.name}: {len(chunks)} prompt chunks for "
                             f"{pixels.shape[1]} frames")
        pos = 0
        for frame, size in enumerate(chunks):
            self.runtime.prefill_frame(self, slot, pos, ids[:, pos:pos + size],
                                       pixels[:, frame:frame + 1])
            pos += size
        return pos

    def reference_generate(self, inputs: VisionTextInputs, max_new_tokens: int | None = None,
                           **generate_options: Any) -> list[int]:
        """Greedy decoding by the model's own ``generate``: the losslessness reference.

        A clean GenerationConfig (greedy, no penalties) so only the model's logits decide.
        ``generate_options`` go into it (e.g. ``prompt_lookup_num_tokens`` for the benchmark's
        prompt-lookup baseline).
        """
        limit = self.info.max_new_tokens if max_new_tokens is None else max_new_tokens
        eos = self.info.eos_token_id
        pad = self.tokenizer.pad_token_id
        config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=limit,
                                  eos_token_id=eos, pad_token_id=eos if pad is None else pad,
                                  **generate_options)
        with inference(self.device, self.stream):
            ids = inputs.input_ids.to(self.device)
            pixels = inputs.pixel_values.to(self.device, self.vision_dtype)
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                      generation_config=config, **self._pixel_kwargs(pixels))
        synchronize(self.device, self.stream)
        return [int(t) for t in out[0, ids.shape[1]:].tolist()]
