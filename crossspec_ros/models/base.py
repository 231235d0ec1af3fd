"""The one small interface every caption model (drafter or verifier) implements.

A backend turns a window's visual input into a prompt prefill and then feeds tokens. Each
``prefill`` returns a ``ModelSession`` that owns its KV cache, so one model can hold several
windows (e.g. the speculative run and a verifier-alone reference) without interference.

Positions: after ``prefill`` the session holds the prompt (text + visual tokens) and
``last_logits`` is the distribution of generated token 0. ``feed([t0..tk])`` appends k+1
tokens and returns k+1 rows of logits: row i is the distribution of the token after t_i.
``rollback(n)`` keeps only the first n generated tokens (a no-op when n == generated).
``prefill_with_proposal(inputs, proposal)`` is a prefill followed by ``feed(proposal)``, in one
forward pass where the backend can (the engine's first verification rides on the prefill).
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class PrefillTiming:
    """Wall-clock parts of a prefill in milliseconds (vision encoder, language prefill)."""

    vision_ms: float = 0.0
    prefill_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        return self.vision_ms + self.prefill_ms


class ModelSession(ABC):
    """One window's decoding state on one model (its KV cache and generated tokens).

    What a session can do, declared here (the engine reads these, never guesses):
    ``supports_tree``: ``feed_tree``/``keep_path`` check a draft tree in one pass;
    ``max_rows``: the most tokens one pass may feed (None: any; the engine never proposes
    more than ``max_rows - 1`` after the pending token); ``exact``: every row is computed in
    the same shape whatever the pass holds, so verification is bit-exact against this
    runtime's own one-token decoding (models/static_runtime.py)."""

    last_logits: torch.Tensor  # [vocab] float32, distribution of the next token
    generated: list[int]
    timing: PrefillTiming
    supports_tree: bool = False
    max_rows: int | None = None
    exact: bool = False

    @abstractmethod
    def feed(self, token_ids: list[int]) -> torch.Tensor:
        """Append tokens; return float32 logits [len(token_ids), vocab] (row i: after t_i)."""

    @abstractmethod
    def rollback(self, n_generated: int) -> None:
        """Keep the first ``n_generated`` generated tokens; drop the rest from the cache."""

    def feed_tree(self, token_ids: list[int], parents: list[int]) -> torch.Tensor:
        """Feed a tree of tokens in one pass (``parents[i]``: -1 or an earlier index); float32
        logits [len(token_ids), vocab], row i after token i and its ancestors. Only where
        ``supports_tree``."""
        raise NotImplementedError(f"{type(self).__name__} has no tree step")

    def keep_path(self, path: list[int]) -> None:
        """After ``feed_tree``: keep the fed tokens ``path`` (a chain from a root down)."""
        raise NotImplementedError(f"{type(self).__name__} has no tree step")

    @property
    def n_generated(self) -> int:
        return len(self.generated)


@dataclass
class ModelInfo:
    """What the engine needs to know about a model besides its session API."""

    name: str
    vocab_size: int                  # rows of the logits
    proposable_ids: int              # ids [0, proposable_ids) may be proposed to / by it
    eos_token_id: int
    max_new_tokens: int = 64
    extra: dict[str, Any] = field(default_factory=dict)


class CaptionModel(ABC):
    """A drafter or verifier backend: inputs of one window -> a decoding session."""

    info: ModelInfo
    tokenizer: Any  # a transformers PreTrainedTokenizer(Fast)
    device: torch.device
    # CUDA stream for this model's kernels (None: the current stream; ignored on CPU)
    stream: Any = None
    # its language model's static runtime once static_runtime.use_static_runtime gave it one
    # (None: the eager transformers path with a DynamicCache per window)
    runtime: Any = None

    @property
    def supports_tree_prefill(self) -> bool:
        """``prefill_with_proposal`` takes ``parents`` (a draft tree after the prompt)."""
        return False

    def first_proposal_room(self) -> int | None:
        """How many proposal tokens ``prefill_with_proposal`` checks in the prefill's own
        last pass (None: any number); more are fed in further passes."""
        return None

    def language_model_parts(self) -> tuple[Any, Any, Any]:
        """(base language model, output head, its config): what a static runtime steps."""
        raise NotImplementedError(f"{type(self).__name__} has no static runtime")

    def prompt_layout(self) -> tuple[int, list[int]]:
        """(prompt length, the sizes of the chunks its prompt is prefilled in before the
        question's tail): fixed per model, so every prefill computes the same cache."""
        raise NotImplementedError(f"{type(self).__name__} has no static runtime")

    def generated_room(self) -> int | None:
        """Most tokens a session of this model can hold after the prompt (None: any)."""
        if self.runtime is None:
            return None
        prompt_len, _ = self.prompt_layout()
        return self.runtime.max_len - self.runtime.max_rows - prompt_len

    def with_runtime(self, runtime: Any) -> CaptionModel:
        """The same model (weights, tokenizer) stepping through ``runtime`` (a StaticLM, or
        None: eager): a benchmark compares runtimes on one set of weights."""
        twin = copy.copy(self)
        twin.runtime = runtime
        return twin

    @abstractmethod
    def prepare(self, window: Any) -> Any:
        """CPU-side preprocessing of a sync.Window (frames or events) into model inputs."""

    @abstractmethod
    def prefill(self, inputs: Any) -> ModelSession:
        """Vision encoding + prompt prefill; the session is ready to ``feed``."""

    def prefill_with_proposal(self, inputs: Any, proposal: Sequence[int]
                              ) -> tuple[ModelSession, torch.Tensor]:
        """Prefill with ``proposal`` fed after the prompt (held as generated tokens).
        Returns the session and float32 logits [len(proposal) + 1, vocab]: row 0 is the
        distribution of generated token 0, row i the one after proposal token i - 1.
        Here a prefill then a feed; backends that can append the proposal to the prompt's
        own forward pass override this (one pass instead of two)."""
        session = self.prefill(inputs)
        rows = session.last_logits[None]
        if proposal:
            rows = torch.cat([rows, session.feed(list(proposal))])
        return session, rows

    @torch.inference_mode()
    def generate_greedy(self, inputs: Any, max_new_tokens: int | None = None) -> list[int]:
        """Plain greedy decoding through the session API (the engine's reference loop)."""
        limit = self.info.max_new_tokens if max_new_tokens is None else max_new_tokens
        session = self.prefill(inputs)
        logits = session.last_logits
        out: list[int] = []
        while len(out) < limit:
            token = int(torch.argmax(logits))
            out.append(token)
            if token == self.info.eos_token_id:
                break
            logits = session.feed([token])[-1]
        return out

