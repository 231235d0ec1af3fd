"""Which proposed tokens greedy verification accepts: ``AcceptanceRule`` (exact, or a relaxed,
lossy rule). The parameter's text is parsed into the rule once where a config is made
(``params.engine_config``) and the config carries the rule (``EngineConfig.acceptance``);
what a rule cannot run with is said in one place (``AcceptanceRule.refusal``). Parsing and
checking a rule needs no torch, so the parameter checks (params.py, a launch file's config
check) stay light; only ``accepted`` computes with it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

_INTEGER = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")


@dataclass(frozen=True)
class AcceptanceRule:
    """Which proposed tokens greedy verification accepts. ``exact`` (the default): only the
    verifier's argmax, so the caption is the verifier's own. The relaxed rules are lossy, for
    users who trade exactness for speed, and every caption they make is marked:

    - ``top_k:K``: a proposal within the verifier's K likeliest tokens at its position;
    - ``typical:EPS``: a proposal whose probability is at least min(EPS, sqrt(EPS) *
      exp(-entropy)) (typical acceptance, Cai et al. 2024, Medusa: a flat distribution lets
      more through than a peaked one);
    - ``cosine:T``: feature-level acceptance, a proposal whose feature in the verifier's own
      output space (its row of the output embedding, the vector that scores it) has cosine
      similarity at least T with the argmax's: a near-synonym passes (``token_features``).

    After the first proposal the rule rejects, the verifier's argmax follows, as in greedy.
    Where the verifier's argmax is the end of the caption (``stop_token``), only it is
    accepted: a relaxed rule never runs a caption on past where the verifier ends it (measured
    on the bundled pair: without this, typical:0.3 captions ran long and were slower than
    exact ones)."""

    kind: str = "exact"
    k: int = 1
    epsilon: float = 0.0
    threshold: float = 0.0

    @classmethod
    def parse(cls, text: str) -> AcceptanceRule:
        """``exact``, ``top_k:K`` (K >= 2), ``typical:EPS`` (0 < EPS < 1) or ``cosine:T``
        (0 < T < 1); K and the fractions plain ASCII decimals (``int`` and ``float`` alone
        would also take '٣', '2_0' and ' 3')."""
        kind, colon, value = text.strip().partition(":")
        if kind == "exact" and not colon:
            return cls()
        if kind == "top_k" and _INTEGER.fullmatch(value) and int(value) >= 2:
            return cls("top_k", k=int(value))
        fraction = float(value) if _DECIMAL.fullmatch(value) else 0.0
        if kind == "typical" and 0.0 < fraction < 1.0:
            return cls("typical", epsilon=fraction)
        if kind == "cosine" and 0.0 < fraction < 1.0:
            return cls("cosine", threshold=fraction)
        raise ValueError(f"acceptance must be 'exact', 'top_k:K' (K >= 2), 'typical:EPS' "
                         f"(0 < EPS < 1) or 'cosine:T' (0 < T < 1), numbers in ASCII digits, "
                         f"got '{text}'")

    def refusal(self, decoding: str = "greedy", vocab_size: int | None = None) -> str | None:
        """Why this rule cannot verify under ``decoding`` ("greedy" or "sampling") or for a
        verifier of ``vocab_size`` tokens (None: not known yet), in one line with what to do,
        or None when it can: the one statement of these limits, asked by the parameters'
        validation (``params.combination_problem``) and by the engine for every config it
        runs (``SpeculativeEngine``)."""
        if not self.lossless and decoding != "greedy":
            return (f"'acceptance' = '{self.text}' cannot run with 'decoding' = '{decoding}': "
                    "a relaxed rule widens greedy verification's argmax test and needs greedy "
                    "decoding (sampling keeps the verifier's distribution by a test of its "
                    "own); set decoding to greedy or acceptance to exact")
        if self.kind == "top_k" and vocab_size is not None and self.k > vocab_size:
            return (f"'acceptance' = '{self.text}' cannot run on this verifier: {self.name} "
                    f"asks for the verifier's {self.k} likeliest tokens, but its vocabulary "
                    f"holds {vocab_size}; take top_k:K with K <= {vocab_size}, or exact")
        return None

    @property
    def lossless(self) -> bool:
        return self.kind == "exact"

    @property
    def text(self) -> str:
        """The rule as the parameter writes it (``exact``, ``top_k:3``): ``parse`` reads it
        back to this rule."""
        return self.name or "exact"

    @property
    def name(self) -> str:
        """How captions are marked: "" for exact, else the rule (``top_k:3``)."""
        if self.kind == "top_k":
            return f"top_k:{self.k}"
        if self.kind == "cosine":
            return f"cosine:{self.threshold:g}"
        return f"typical:{self.epsilon:g}" if self.kind == "typical" else ""

    def accepted(self, logits: torch.Tensor, stop_token: int | None = None,
                 features: torch.Tensor | None = None) -> torch.Tensor:
        """[rows, vocab] logits -> [rows, vocab] bool: which tokens the rule accepts at each
        row (the argmax always; only it where it is ``stop_token``). ``features``: [vocab, d]
        unit vectors (``token_features``), for ``cosine``."""
        import torch

        best = logits.argmax(-1, keepdim=True)
        argmax = torch.zeros_like(logits, dtype=torch.bool)
        argmax.scatter_(-1, best, True)
        if self.kind == "top_k":
            relaxed = torch.zeros_like(argmax)
            relaxed.scatter_(-1, logits.topk(self.k, dim=-1).indices, True)
        elif self.kind == "typical":
            logp = torch.log_softmax(logits.double(), dim=-1)
            entropy = -(logp.exp() * logp).sum(-1, keepdim=True)
            floor = torch.minimum(torch.full_like(entropy, self.epsilon),
                                  self.epsilon ** 0.5 * torch.exp(-entropy))
            relaxed = logp.exp() >= floor
        elif self.kind == "cosine":
            if features is None:
                raise ValueError("cosine acceptance needs the verifier's token features")
            features = features.to(logits.device)
            relaxed = features[best[:, 0]] @ features.T >= self.threshold
        else:
            return argmax
        if stop_token is not None:
            relaxed &= best != stop_token
        return relaxed | argmax
