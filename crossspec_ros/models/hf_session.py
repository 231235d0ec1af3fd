"""The ModelSession shared by all backends: a transformers DynamicCache plus logits history.

``feed`` runs the language model on the new tokens only (the cache holds everything before),
so k proposals are checked in one pass. ``rollback`` crops the cache with
``DynamicCache.crop(-n)`` (in transformers 5 a positive argument raises) and restores
``last_logits`` from the rows kept for every generated position.

``feed_tree`` checks a tree of candidates in one pass: each fed token attends to the cached
prefix and to its ancestors among the fed tokens (a 4-D attention mask) at the position its
depth gives; ``keep_path`` then keeps one root-to-node path of them in the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from crossspec_ros.models.base import ModelSession, PrefillTiming
from crossspec_ros.models.streams import inference, synchronize

# (input ids [1, k], cache) -> logits [k, vocab] for those positions; must append k to cache
StepFn = Callable[[torch.Tensor, DynamicCache], torch.Tensor]
# (input ids [1, k], cache, allowed [k, cached + k] bool, positions [k]) -> logits [k, vocab]
TreeStepFn = Callable[[torch.Tensor, DynamicCache, torch.Tensor, torch.Tensor], torch.Tensor]


class HFSession(ModelSession):
    """A window's decoding state on one transformers language model."""

    def __init__(self, step: StepFn, cache: DynamicCache, first_logits: torch.Tensor,
                 timing: PrefillTiming, device: torch.device, stream: Any | None = None,
                 tree_step: TreeStepFn | None = None, proposal: Sequence[int] = ()) -> None:
        """``first_logits``: [vocab] after a plain prefill, or [len(proposal) + 1, vocab]
        when the prefill also fed ``proposal`` (then held as generated tokens)."""
        self._step = step
        self._tree_step = tree_step
        self._tree_fed: list[int] | None = None  # tokens of a feed_tree not yet kept
        self._tree_logits: torch.Tensor | None = None
        self.cache = cache
        self.device = device
        self.stream = stream
        self.timing = timing
        self.generated: list[int] = [int(t) for t in proposal]
        rows = first_logits.float()
        rows = rows[None] if rows.dim() == 1 else rows
        if rows.shape[0] != len(self.generated) + 1:
            raise ValueError(f"need {len(self.generated) + 1} rows of prefill logits, got "
                             f"{rows.shape[0]}")
        self.prompt_len = cache.get_seq_length() - len(self.generated)
        # _rows[i]: distribution of generated token i (row 0 comes from the prefill)
        self._rows: list[torch.Tensor] = list(rows.unbind(0))
        self.last_logits = self._rows[-1]
        # a drafter's view of the window (its language model's last hidden state after the
        # prompt), where its prefill keeps it: what a draft head reads
        self.window_state: torch.Tensor | None = None

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

    @property
    def supports_tree(self) -> bool:
        return self._tree_step is not None

    def feed_tree(self, token_ids: list[int], parents: list[int]) -> torch.Tensor:
        """Feed a tree of tokens in one pass: ``parents[i]`` is -1 (the token follows the
        generated tokens) or an earlier index. Returns float32 logits [len(token_ids),
        vocab], row i after token i and its ancestors. The cache holds all of them until
        ``keep_path`` chooses the ones to keep."""
        if self._tree_step is None:
            raise NotImplementedError("this session's model has no tree step")
        if self._tree_fed is not None:
            raise RuntimeError("keep_path must follow feed_tree before the next feed")
        if len(parents) != len(token_ids) or not token_ids:
            raise ValueError("need one parent per token, and at least one token")
        allowed, positions = tree_attention(self.seq_len, 0, parents)
        with inference(self.device, self.stream):
            ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self.device)
            logits = self._tree_step(ids, self.cache, allowed.to(self.device),
                                     positions.to(self.device)).float()
        synchronize(self.device, self.stream)
        self.hold_tree(token_ids, logits)
        return logits

    def hold_tree(self, token_ids: Sequence[int], logits: torch.Tensor) -> None:
        """The last ``len(token_ids)`` cached positions are a fed tree (``logits``: row i
        after token i) waiting for ``keep_path``: ``feed_tree``'s state, or a prefill's that
        fed a tree after the prompt."""
        self._tree_fed = [int(t) for t in token_ids]
        self._tree_logits = logits

    def keep_path(self, path: list[int]) -> None:
        """After ``feed_tree``: keep the fed tokens ``path`` (indices, a chain from a token
        whose parent is -1 down) as generated tokens; drop the others from the cache."""
        fed, logits = self._tree_fed, self._tree_logits
        if fed is None:
            raise RuntimeError("keep_path needs a feed_tree first")
        self._tree_fed = self._tree_logits = None
        start = self.seq_len - len(fed)
        if path != list(range(len(path))):  # not a prefix of the fed tokens: gather
            index = torch.tensor(path, dtype=torch.long, device=self.device) + start
            with inference(self.device, self.stream):
                for layer in self.cache.layers:
                    layer.keys = torch.cat([layer.keys[..., :start, :],
                                            layer.keys.index_select(-2, index)], dim=-2)
                    layer.values = torch.cat([layer.values[..., :start, :],
                                              layer.values.index_select(-2, index)], dim=-2)
            synchronize(self.device, self.stream)
        else:
            drop = len(fed) - len(path)
            if drop:
                self.cache.crop(-drop)
        self.generated.extend(fed[i] for i in path)
        self._rows.extend(logits[i] for i in path)
        self.last_logits = self._rows[-1]

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


def tree_attention(cached: int, causal: int, parents: Sequence[int]
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Who attends to whom when ``causal`` tokens (a chain: a prompt or its tail) and then a
    tree of ``len(parents)`` tokens are fed after ``cached`` positions. Returns allowed
    [causal + n, cached + causal + n] bool (the chain causally; tree node i the cache, the
    chain, itself and its ancestors) and positions [causal + n] (a node at its depth)."""
    n, before = len(parents), cached + causal
    # numpy: one torch op per node cost 0.3 ms a round
    allowed = np.zeros((causal + n, before + n), dtype=bool)
    allowed[:, :cached] = True
    allowed[:causal, cached:before] = np.tri(causal, dtype=bool)
    allowed[causal:, cached:before] = True
    depth = np.zeros(n, dtype=np.int64)
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"parent of token {i} must be -1 or an earlier token, got "
                             f"{parent}")
        if parent >= 0:
            depth[i] = depth[parent] + 1
            allowed[causal + i] = allowed[causal + parent]
        allowed[causal + i, before + i] = True
    positions = np.concatenate([np.arange(cached, before), depth + before])
    return torch.from_numpy(allowed), torch.from_numpy(positions)


def session_after_prefill(model: Any, cache: DynamicCache, rows: torch.Tensor,
                          timing: PrefillTiming, proposal: Sequence[int],
                          parents: Sequence[int] | None) -> HFSession:
    """The session of a prefill that fed ``proposal`` after the prompt (``rows``: logits
    after the prompt, then after each proposal token): a chain is held as generated tokens,
    a tree (``parents``) waits for ``keep_path``. ``model``: the HFLlavaFamilyModel."""
    tree = parents is not None
    session = HFSession(model._step, cache, rows[:1] if tree else rows, timing, model.device,
                        model.stream, tree_step=model._tree_step,
                        proposal=() if tree else proposal)
    if tree:
        session.hold_tree(proposal, rows[1:])
    return session
