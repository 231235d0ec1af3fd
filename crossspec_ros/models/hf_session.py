"""The ModelSession shared by all backends: a transformers DynamicCache plus logits history.

``feed`` runs the language model on the new tokens only (the cache holds everything before),
so k proposals are checked in one pass. ``rollback`` crops the cache with
``DynamicCache.crop(-n)`` (in transformers 5 a positive argument raises) and restores
``last_logits`` from the rows kept for every generated position.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import DynamicCache

from crossspec_ros.models.base import ModelSession, PrefillTiming
from crossspec_ros.models.streams import inference, synchronize

# (input ids [1, k], cache) -> logits [k, vocab] for those positions; must append k to cache
StepFn = Callable[[torch.Tensor, DynamicCache], torch.Tensor]


class HFSession(ModelSession):
    """A window's decoding state on one transformers language model."""

    def __init__(self, step: StepFn, cache: DynamicCache, first_logits: torch.Tensor,
                 timing: PrefillTiming, device: torch.device, stream: Any | None = None) -> None:
        self._step = step
        self.cache = cache
        self.device = device
        self.stream = stream
        self.timing = timing
        self.generated: list[int] = []
        self.prompt_len = cache.get_seq_length()
        # _rows[i]: distribution of generated token i (row 0 comes from the prefill)
        self._rows: list[torch.Tensor] = [first_logits.float()]
        self.last_logits = self._rows[0]

    @property
    def seq_len(self) -> int:
        """Positions held in the KV cache (prompt + generated)."""
        return self.cache.get_seq_length()

    def feed(self, token_ids: list[int]) -> torch.Tensor:
        """Append tokens; float32 logits [len(token_ids), vocab], row i after token i."""
        if not token_ids:
            return self.last_logits.new_empty((0, self.last_logits.shape[-1]))
        with inference(self.device, self.stream):
            ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self.device)
            logits = self._step(ids, self.cache).float()
        # the caller reads these on its own stream: finish ours first
        synchronize(self.device, self.stream)
        self.generated.extend(int(t) for t in token_ids)
        self._rows.extend(logits.unbind(0))
        self.last_logits = self._rows[-1]
        return logits

    def rollback(self, n_generated: int) -> None:
        """Keep the first ``n_generated`` generated tokens, cropping the KV cache."""
        if not 0 <= n_generated <= len(self.generated):
            raise ValueError(
                f"cannot roll back to {n_generated} generated tokens: the session holds "
                f"{len(self.generated)}"
            )
        drop = len(self.generated) - n_generated
        if drop:
            self.cache.crop(-drop)
            del self.generated[n_generated:]
            del self._rows[n_generated + 1:]
        self.last_logits = self._rows[n_generated]
