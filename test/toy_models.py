"""Toy language models with the CaptionModel interface, for testing the engine's loop.

Logits are a pure function of (window, tokens so far), so feeding k tokens at once equals
feeding them one by one exactly: any mismatch in a test is a bug in the loop, not numerics.
A drafter with ``noise`` > 0 disagrees with the verifier on some tokens. A model with
``prefill_after`` (an Event) starts its prefill only once the test sets it: the order of what
the verifier and the drafter threads do is then the test's, never the scheduler's.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass

import torch

from crossspec_ros.models.base import CaptionModel, ModelInfo, ModelSession, PrefillTiming


class ToyTokenizer:
    def __init__(self, vocab: int, specials: dict[int, str]) -> None:
        self.vocab = {f"w{i}": i for i in range(vocab)}
        for i, name in specials.items():
            self.vocab[name] = i
        self.names = {i: t for t, i in self.vocab.items()}
        self.specials = set(specials)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return " ".join(self.names[int(i)] for i in ids
                        if not (skip_special_tokens and int(i) in self.specials))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.vocab[w] for w in text.split()]


PREFILL_WAIT_S = 30.0  # a bound for ``prefill_after``: a test that never sets it fails


@dataclass
class ToyWindow:
    id: int
    seed: int


class ToySession(ModelSession):
    def __init__(self, model: ToyModel, seed: int) -> None:
        self.model, self.seed = model, seed
        self.generated = []
        self.timing = PrefillTiming()
        self.last_logits = model.logits(seed, [])

    def feed(self, token_ids: list[int]) -> torch.Tensor:
        rows = []
        for token in token_ids:
            self.generated.append(int(token))
            rows.append(self.model.logits(self.seed, self.generated))
        if self.model.step_delay_s:
            time.sleep(self.model.step_delay_s)
        return torch.stack(rows)

    def rollback(self, n_generated: int) -> None:
        assert 0 <= n_generated <= len(self.generated), (n_generated, len(self.generated))
        del self.generated[n_generated:]


class ToyModel(CaptionModel):
    """vocab ids [0, shared) are ordinary; EOS = 1; ids >= shared are this model's specials."""

    def __init__(self, shared: int = 12, specials: int = 2, noise: float = 0.0,
                 noise_seed: int = 99, eos_bias: float = 0.0, step_delay_s: float = 0.0,
                 prefill_after: threading.Event | None = None) -> None:
        self.shared, self.noise, self.noise_seed = shared, noise, noise_seed
        self.eos_bias, self.step_delay_s = eos_bias, step_delay_s
        self.prefill_after = prefill_after
        vocab = shared + specials
        self.info = ModelInfo("toy", vocab, shared, eos_token_id=1, max_new_tokens=24)
        self.tokenizer = ToyTokenizer(shared, {shared + i: f"<s{i}>" for i in range(specials)})
        self.device = torch.device("cpu")

    def logits(self, seed: int, tokens: list[int]) -> torch.Tensor:
        key = hashlib.sha256(f"{seed}:{tokens}".encode()).digest()
        gen = torch.Generator().manual_seed(int.from_bytes(key[:8], "little"))
        base = torch.randn(self.info.vocab_size, generator=gen) * 2.0
        base[1] += self.eos_bias + 0.15 * len(tokens)  # captions end eventually
        base[self.shared:] -= 4.0  # specials are unlikely but possible for the drafter
        if self.noise:
            key = hashlib.sha256(f"{self.noise_seed}:{seed}:{tokens}".encode()).digest()
            gen = torch.Generator().manual_seed(int.from_bytes(key[:8], "little"))
            base = base + self.noise * torch.randn(self.info.vocab_size, generator=gen)
        return base

    def prepare(self, window: ToyWindow) -> int:
        return window.seed

    def prefill(self, inputs: int) -> ToySession:
        if self.prefill_after is not None and not self.prefill_after.wait(PREFILL_WAIT_S):
            raise TimeoutError(f"prefill_after was not set within {PREFILL_WAIT_S} s")
        return ToySession(self, inputs)
