"""An oracle drafter with controlled acceptance, for tests and benchmarks.

It knows the verifier's own output for each window (set with ``set_reference``) and drafts
it, replacing each token by a wrong one with probability 1 - acceptance (a fixed coin per
window and position, so runs repeat). With ``backing`` (a real drafter model) every prefill
and feed also runs that model on the same tokens, so the oracle costs what the real drafter
costs and competes for the device like it; optional sleeps emulate a cost otherwise.
"""

from __future__ import annotations

import random
import time
from typing import Any

import torch

from crossspec_ros.models.base import CaptionModel, ModelInfo, ModelSession, PrefillTiming


class OracleSession(ModelSession):
    def __init__(self, drafter: OracleDrafter, window_id: int,
                 inner: ModelSession | None = None) -> None:
        self.drafter, self.window_id, self.inner = drafter, window_id, inner
        self.generated = []
        self.timing = inner.timing if inner else PrefillTiming(prefill_ms=drafter.prefill_s * 1e3)
        self.last_logits = drafter.logits_at(window_id, 0)

    def feed(self, token_ids: list[int]) -> torch.Tensor:
        if self.inner is not None:
            self.inner.feed(token_ids)  # the real drafter's work, its logits unused
        if self.drafter.token_s:
            time.sleep(self.drafter.token_s)
        rows = []
        for token in token_ids:
            self.generated.append(int(token))
            rows.append(self.drafter.logits_at(self.window_id, len(self.generated)))
        return torch.stack(rows)

    def rollback(self, n_generated: int) -> None:
        if self.inner is not None:
            self.inner.rollback(n_generated)
        del self.generated[n_generated:]


class OracleDrafter(CaptionModel):
    """Drafts the verifier's reference tokens, each right with probability ``acceptance``."""

    def __init__(self, verifier: CaptionModel, acceptance: float, seed: int = 0,
                 prefill_s: float = 0.0, token_s: float = 0.0, tokenizer: Any = None,
                 backing: CaptionModel | None = None) -> None:
        """``tokenizer``: draft in another tokenizer's ids (the reference is re-tokenized
        through text), to exercise cross-tokenizer bridging with a known acceptance."""
        if not 0.0 <= acceptance <= 1.0:
            raise ValueError(f"acceptance must be in [0, 1], got {acceptance}")
        info = verifier.info
        self.verifier_tokenizer = verifier.tokenizer
        self.tokenizer = tokenizer or verifier.tokenizer
        vocab = len(self.tokenizer.get_vocab()) if tokenizer is not None else info.vocab_size
        eos = self.tokenizer.eos_token_id if tokenizer is not None else info.eos_token_id
        proposable = vocab if tokenizer is not None else info.proposable_ids
        self.info = ModelInfo(f"oracle(a={acceptance})", vocab, proposable, eos,
                              info.max_new_tokens)
        self.backing = backing
        self.device = backing.device if backing is not None else torch.device("cpu")
        self.acceptance, self.seed = acceptance, seed
        self.prefill_s, self.token_s = prefill_s, token_s
        self.references: dict[int, list[int]] = {}

    @property
    def stream(self) -> Any:
        """The backing model's CUDA stream (so the engine's stream assignment reaches it)."""
        return getattr(self.backing, "stream", None)

    @stream.setter
    def stream(self, value: Any) -> None:
        if self.backing is not None:
            self.backing.stream = value

    def set_reference(self, window_id: int, tokens: list[int]) -> None:
        """The verifier's own tokens for this window (verifier ids)."""
        if self.tokenizer is not self.verifier_tokenizer:
            text = self.verifier_tokenizer.decode(tokens, skip_special_tokens=True)
            tokens = self.tokenizer.encode(text, add_special_tokens=False)
        self.references[window_id] = list(tokens)

    def logits_at(self, window_id: int, position: int) -> torch.Tensor:
        reference = self.references.get(window_id, [])
        logits = torch.full((self.info.vocab_size,), -1e4)
        if position >= len(reference):
            logits[self.info.eos_token_id] = 0.0
            return logits
        token = reference[position]
        if random.Random(hash((self.seed, window_id, position))).random() >= self.acceptance:
            # a wrong but plausible token: another ordinary id, never the right one
            token = (token + 1 + position) % self.info.proposable_ids
            if token == reference[position]:
                token = (token + 1) % self.info.proposable_ids
        logits[token] = 0.0
        return logits

    def prepare(self, window: Any) -> tuple[int, Any]:
        inner = self.backing.prepare(window) if self.backing is not None else None
        return int(getattr(window, "id", 0)), inner

    def prefill(self, inputs: tuple[int, Any]) -> OracleSession:
        window_id, inner_inputs = inputs
        inner = self.backing.prefill(inner_inputs) if self.backing is not None else None
        if self.prefill_s:
            time.sleep(self.prefill_s)
        return OracleSession(self, window_id, inner)
