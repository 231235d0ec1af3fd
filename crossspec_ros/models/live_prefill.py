"""Live prefill: Video-LLaVA's prefill built frame by frame while the window is still open.

Video-LLaVA's prompt puts the video first (``USER: <video>\\n{question} ASSISTANT:``) and its
video tower encodes each frame on its own, so frame k's visual tokens and their causal prefill
into the KV cache depend only on the prompt's head and the frames before k. ``add_frame``
encodes one frame and prefills its tokens (the first call also the prompt's head);
``finish`` prefills the question (and a proposal, as ``prefill_with_proposal``) and returns
the session that ``prefill`` would have returned. On the static runtime the one-shot prefill
runs the same per-frame chunks, so both give the same cache bit for bit; on the eager runtime
chunked and one-shot prefill are the same computation in exact arithmetic, not in floating
point: greedy captions can differ where two logits are within rounding of each other
(measured, not assumed: see the tests and the bench).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from crossspec_ros.models.base import PrefillTiming
from crossspec_ros.models.hf_session import HFSession, session_after_prefill, tree_attention
from crossspec_ros.models.streams import Stopwatch, inference, synchronize


class LivePrefill:
    """One window's incremental prefill on a VideoLlavaVerifier; frames in slot order."""

    def __init__(self, verifier: Any, question: str | None = None) -> None:
        self.verifier = verifier
        ids = verifier.tokenizer(verifier.prompt(question)).input_ids
        at = ids.index(verifier.placeholder_id)
        if ids.count(verifier.placeholder_id) != 1 or at == 0:
            raise ValueError("live prefill needs one video placeholder after the prompt's head")
        self.head, self.tail = ids[:at], ids[at + 1:]
        self.runtime = verifier.runtime
        # static: a cache of the runtime's pool, given back with the session (or when this
        # prefill is dropped unfinished)
        self.slot = self.runtime.acquire() if self.runtime is not None else None
        self._give_back = weakref.finalize(self, self.runtime.release, self.slot,
                                           self.slot.lease) if self.slot is not None else None
        self.cache = DynamicCache(config=verifier.model.config) if self.slot is None else None
        self.pos = 0  # positions prefilled (static runtime)
        self.frames = 0
        self.stamps: list[int] = []  # of the frames in, slot by slot
        self.timing = PrefillTiming()

    @property
    def complete(self) -> bool:
        """All of the window's frames are in the cache."""
        return self.frames == self.verifier.num_frames

    def extend_to(self, frames: Sequence[Any]) -> bool:
        """Add whatever of the closed window's ``frames`` (sync StampedFrames, one per slot) is
        not in yet; False (nothing added) when the frames already in are not the window's
        leading frames: a frame later than the reorder slack changed the selection, and the
        caller prefills the window in one shot instead."""
        if len(frames) != self.verifier.num_frames or \
                self.stamps != [int(f.stamp_ns) for f in frames[:self.frames]]:
            return False
        for frame in frames[self.frames:]:
            self.add_frame(frame.image, int(frame.stamp_ns))
        return True

    def add_frame(self, image: np.ndarray, stamp_ns: int = -1) -> None:
        """Encode the next slot's frame (H x W x 3 uint8 RGB) and prefill its tokens."""
        v = self.verifier
        if self.complete:
            raise ValueError(f"all {v.num_frames} frames are already in")
        watch = Stopwatch(v.device, v.stream)
        with inference(v.device, v.stream):
            pixels = v.preprocess([image]).unsqueeze(0).to(v.device, v.vision_dtype)
            ids = (self.head if self.frames == 0 else []) + \
                [v.placeholder_id] * v.tokens_per_frame
            ids_t = torch.tensor([ids], device=v.device)
            if self.slot is not None and getattr(self.runtime, "batches_prompts", False):
                # vision and chunk in one step with the other streams' frames (its time is
                # prefill time): the step the one-shot static prefill runs too
                self.runtime.prefill_frame(v, self.slot, self.pos, ids_t, pixels,
                                           stamp_ns if stamp_ns >= 0 else None)
                self.pos += len(ids)
            else:
                self._encode_and_prefill(pixels, ids_t, watch)
            self.timing.prefill_ms += watch.lap_ms()
        self.frames += 1
        self.stamps.append(int(stamp_ns))

    def _encode_and_prefill(self, pixels: torch.Tensor, ids: torch.Tensor,
                            watch: Stopwatch) -> None:
        v = self.verifier
        encoded = v._encode(pixels)
        self.timing.vision_ms += watch.lap_ms()
        if self.slot is not None:  # the chunk the one-shot static prefill runs too
            self.runtime.chain(self.slot, self.pos, v.merged_embeds(ids, encoded),
                               last_only=True)
            self.pos += ids.shape[1]
        else:
            v.model(input_ids=ids, past_key_values=self.cache, use_cache=True,
                    mm_encoder_outputs={v.modality: encoded}, logits_to_keep=1)

    def finish(self, proposal: Sequence[int] = (), parents: Sequence[int] | None = None
               ) -> tuple[HFSession, torch.Tensor]:
        """The question (and ``proposal``, a chain or with ``parents`` a tree) after the
        frames: the session and its logits rows, as ``prefill_with_proposal`` returns them."""
        v = self.verifier
        if not self.complete:
            raise ValueError(f"{self.frames} of {v.num_frames} frames in: add the rest first")
        watch = Stopwatch(v.device, v.stream)
        if self.slot is not None:
            if parents is not None:
                raise ValueError("the static runtime checks chains, not trees")
            with inference(v.device, v.stream):
                tail = v.model.get_input_embeddings()(torch.tensor([self.tail], device=v.device))
                session, rows = v.static_finish(self.slot, self.pos, tail, proposal,
                                                self.timing)
                self._give_back.detach()  # the session gives the cache back from now on
            synchronize(v.device, v.stream)
            self.timing.prefill_ms += watch.lap_ms()
            return session, rows
        with inference(v.device, v.stream):
            masks = {} if parents is None else v.tree_inputs(*tree_attention(
                self.cache.get_seq_length(), len(self.tail), parents))
            ids = torch.tensor([self.tail + [int(t) for t in proposal]], device=v.device)
            out = v.model(input_ids=ids, past_key_values=self.cache, use_cache=True,
                          logits_to_keep=len(proposal) + 1, **masks)
            rows = out.logits[0].float()
            self.timing.prefill_ms += watch.lap_ms()
        return session_after_prefill(v, self.cache, rows, self.timing, proposal,
                                     parents), rows
