"""Prompt lanes: several streams' frames encoded in one vision call and prefilled as one step.

Issue 57, stage 4 (docs/design-streams.md §2). On the H200 profile a window's prompt work (a
vision call and a 257-token chunk per frame, ~50 ms a frame) fills the device at two cameras,
not its decoding; camera rigs trigger their cameras together, so the streams' frames arrive
at the same moments. ``PromptLanes.step`` takes one frame of every stream that has one:

1. one vision call on a fixed batch of S frames ``[S, 1, 3, H, W]`` (zero frames for the
   streams without one), through the verifier's own ``_encode``;
2. each stream's chunk embeddings (its ids with its frame's features, ``merged_embeds``);
3. one ``[S, C]`` chunk step of a ``LanedLM`` (``last_only``; C: the longest prompt chunk,
   shorter chunks padded), lane i being stream i's working cache.

**The pool slot stays the prefill's cache.** A prefill (live or one-shot) owns a pool slot as
on every static runtime; its lane is scratch: after each step the chunk's new positions are
copied out of the lane into the slot (bit for bit), and before a step the slot's positions are
copied into the lane when another prefill of the stream ran there last (``swaps``: a window
prefilled after its close while the next one fills live). So ``static_finish`` and the
decoding lanes (models/lanes.py) take the slot as they do without prompt lanes.

**Exactness contract** (as the decoding lanes'): on one laned runtime (fixed S, C, dtype,
device) a stream's features, cache and rows are bit-identical whatever the other streams'
frames hold or whether they have one (idle lanes and absent frames are padded, not dropped),
because every op of the vision tower and of the chunk's forward is per image, per row, or
reduces within one lane, and the shapes are fixed. Every prefill of a stream, live or one-shot,
runs through its lane, so the live and the one-shot prefill give the same cache and
verification stays bit-identical to one-token decoding. Not promised: equality with the
unbatched vision call or the ``[1, C]`` chunk (other shapes; on an H200 a batch of 8 frames
rounds differently from a batch of 1 in bf16: docs/gpu-h200-2026-11-27.md).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from transformers.modeling_outputs import BaseModelOutputWithPooling

from crossspec_ros.models.lanes import LanedLM, LaneRequest, LaneRows
from crossspec_ros.models.static_runtime import StaticLM
from crossspec_ros.models.streams import inference

# how long a stream's frame waits for the other streams' frames of the same moment (a rig's
# cameras trigger together; a stream decoding a window submits its frames after it)
PROMPT_GATHER_S = 0.05
SAME_MOMENT_NS = 5_000_000  # frames this close are one moment of a triggered rig
RECENT_NS = 500_000_000  # a stream with no frame for this long is not waited for
# how long a stream's first decoding step waits for the streams whose prompts were
# prefilled in the same step (models/lanes.py StepBatcher.expect)
DECODE_COHORT_S = 0.03


@dataclass
class FrameRequest:
    """One stream's next prompt chunk: ``ids`` [1, q] (the prompt's head and the frame's
    placeholders, or the placeholders) and its frame ``pixels`` [1, 1, 3, H, W], prefilled
    after ``pos`` positions of the prefill's pool ``slot``; ``verifier``: the stream's model
    (its ``merged_embeds``)."""

    verifier: Any
    slot: Any
    pos: int
    ids: torch.Tensor
    pixels: torch.Tensor
    stamp_ns: int | None = None  # the frame's capture stamp (None: a one-shot prefill's)

    @property
    def rows(self) -> int:
        return int(self.ids.shape[1])


class PromptLanes:
    """The batched prompt work of ``lanes`` streams (module docstring): the ``laned`` object
    of a ``StepBatcher``, whose requests are ``FrameRequest``s."""

    def __init__(self, pool: StaticLM, encode: Callable[[torch.Tensor], Any], lanes: int,
                 chunks: list[int]) -> None:
        """``encode``: the verifier's vision call (pixels [B, F, 3, H, W] -> its
        ``pooler_output`` [B * F, T, d]); ``chunks``: the prompt's chunk sizes, one per
        frame (``prompt_layout``)."""
        self.pool, self.encode, self.lanes = pool, encode, lanes
        self.prompt_end = sum(chunks)  # a prefill's last chunk ends here
        self.laned = LanedLM(pool, lanes, rows=max(chunks), last_only=True, kind="lane_chunk")
        self._resident: list[tuple[int, int, int] | None] = [None] * lanes
        self._last_stamp: list[int | None] = [None] * lanes  # of each lane's last frame
        self._lock = threading.Lock()
        self.swaps = 0  # a prefill's positions copied back into its lane
        self.frames_per_step: Counter[int] = Counter()

    @property
    def device(self) -> torch.device:
        return self.pool.device

    def warm_up(self) -> float:
        """Compile (as the pool's options say) and run the chunk step once, every lane
        parked. Returns seconds."""
        return self.laned.warm_up()

    def step(self, requests: Mapping[int, FrameRequest]) -> dict[int, LaneRows]:
        """One vision call and one chunk step for every requesting lane; returns each lane's
        last row (hidden [1, d], logits [1, vocab], float32), as a prompt chunk's ``chain``."""
        with inference(self.device, self.pool.stream):
            chunks = self.chunk_requests(requests, self._features(requests))
            for lane, request in requests.items():
                self._make_resident(lane, request)
            rows = self.laned.step(chunks)
            for lane, request in requests.items():
                end = request.pos + request.rows
                self.laned.copy(lane, request.slot, request.pos, end, into_lane=False)
                with self._lock:
                    self._resident[lane] = (id(request.slot), request.slot.lease, end)
                    if request.stamp_ns is not None:
                        self._last_stamp[lane] = request.stamp_ns
        self.frames_per_step[len(requests)] += 1
        return rows

    def chunk_requests(self, requests: Mapping[int, FrameRequest], features: torch.Tensor
                       ) -> dict[int, LaneRequest]:
        """Each lane's chunk: its ids' embeddings with its frame's ``features`` (``[S, T, d]``
        from ``_features``) in the placeholders' places."""
        chunks = {}
        for lane, request in requests.items():
            encoded = BaseModelOutputWithPooling(pooler_output=features[lane:lane + 1])
            embeds = request.verifier.merged_embeds(request.ids.to(self.device), encoded)
            chunks[lane] = LaneRequest(request.pos, embeds[0])
        return chunks

    def expected_lanes(self, pending: Mapping[int, FrameRequest]) -> set[int]:
        """The lanes a step of ``pending`` waits for (up to the batcher's gather time): those
        whose stream sent a frame within ``RECENT_NS`` before the newest pending frame but
        none of that moment yet (a one-shot prefill's frames, unstamped, wait for none)."""
        stamps = [r.stamp_ns for r in pending.values() if r.stamp_ns is not None]
        if not stamps:
            return set()
        newest = max(stamps)
        with self._lock:
            last = list(self._last_stamp)
        return {lane for lane, at in enumerate(last) if at is not None
                and newest - RECENT_NS <= at < newest - SAME_MOMENT_NS}

    def _features(self, requests: Mapping[int, FrameRequest]) -> torch.Tensor:
        """Every lane's frame features [S, T, d] from one vision call of S frames (zero
        frames for the lanes without one)."""
        first = next(iter(requests.values())).pixels
        pixels = torch.zeros(self.lanes, *first.shape[1:], dtype=first.dtype,
                             device=self.device)
        for lane, request in requests.items():
            if request.pixels.shape[:2] != (1, 1):
                raise ValueError(f"lane {lane}: one frame [1, 1, 3, H, W] per request, got "
                                 f"pixels {tuple(request.pixels.shape)}")
            pixels[lane] = request.pixels[0].to(self.device, first.dtype)
        return self.encode(pixels).pooler_output

    def _make_resident(self, lane: int, request: FrameRequest) -> None:
        """Lane ``lane`` holds the request's prefill up to its position: copied in from its
        slot when another prefill ran in the lane since (a prefill's first chunk needs
        nothing)."""
        from crossspec_ros.models.emulated import emulated_call

        with self._lock:
            resident = self._resident[lane]
        if request.pos == 0 or resident == (id(request.slot), request.slot.lease, request.pos):
            return
        self.laned.copy(lane, request.slot, 0, request.pos, into_lane=True,
                        charged=emulated_call(self.pool.lm, "lane_copy"))
        self.swaps += 1

    def counters(self) -> dict[str, Any]:
        return {"prompt_steps": sum(self.frames_per_step.values()),
                "prompt_swaps": self.swaps,
                "frames_per_prompt_step": dict(sorted(self.frames_per_step.items())),
                "prompt_eager_steps": self.laned.eager_steps}
