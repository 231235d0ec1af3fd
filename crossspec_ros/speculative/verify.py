"""Verification rules: pure functions of the proposals and the verifier's logits.

Given k proposed tokens and the verifier's logits for the k+1 positions they span (row i is
the verifier's distribution after the confirmed prefix plus the first i proposals), a rule
returns how many proposals are accepted and the verifier's own next token (the correction
after a rejection, or the bonus token when all k were accepted). Both rules are lossless:
greedy reproduces the verifier's argmax sequence exactly; speculative sampling reproduces
its sampling distribution exactly (Leviathan et al. 2023, Chen et al. 2023). The relaxed
rules (``AcceptanceRule``, ``verify_relaxed``) are not: opt-in, and their captions are marked.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Verdict:
    """Outcome of one verification round."""

    n_accepted: int   # leading proposals the verifier confirmed
    next_token: int   # the verifier's own token at position n_accepted

    def confirmed(self, proposals: Sequence[int]) -> list[int]:
        """Tokens this round adds to the confirmed caption."""
        return [*proposals[: self.n_accepted], self.next_token]


def verify_greedy(proposals: Sequence[int], target_logits: torch.Tensor) -> Verdict:
    """Accept the longest prefix equal to the verifier's argmax, then its own token.

    target_logits: [k+1, vocab] for k proposals.
    """
    _check_shapes(proposals, target_logits)
    argmax = torch.argmax(target_logits, dim=-1).tolist()
    n = 0
    while n < len(proposals) and proposals[n] == argmax[n]:
        n += 1
    return Verdict(n, int(argmax[n]))


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
        verifier of ``vocab_size`` tokens (None: not known yet), or None when it can: the one
        statement of these limits, asked by the parameters' validation (params.py), by
        EngineConfig and by the engine."""
        if not self.lossless and decoding != "greedy":
            return ("a relaxed rule widens greedy verification's argmax test and needs greedy "
                    "decoding (sampling keeps the verifier's distribution by a test of its own)")
        if self.kind == "top_k" and vocab_size is not None and self.k > vocab_size:
            return (f"{self.name} asks for the verifier's {self.k} likeliest tokens, but its "
                    f"vocabulary holds {vocab_size}")
        return None

    @property
    def lossless(self) -> bool:
        return self.kind == "exact"

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


def token_features(output_embedding: torch.Tensor) -> torch.Tensor:
    """[vocab, d] unit rows of a model's output embedding (float32): the features ``cosine``
    acceptance compares."""
    return torch.nn.functional.normalize(output_embedding.detach().float(), dim=-1)


def verify_relaxed(proposals: Sequence[int], target_logits: torch.Tensor,
                   rule: AcceptanceRule, stop_token: int | None = None,
                   features: torch.Tensor | None = None) -> Verdict:
    """Accept the longest prefix ``rule`` accepts, then the verifier's argmax (with
    ``AcceptanceRule()`` exactly ``verify_greedy``). Lossy unless the rule is exact."""
    _check_shapes(proposals, target_logits)
    accepted = rule.accepted(target_logits, stop_token, features)
    n = 0
    while n < len(proposals) and bool(accepted[n, int(proposals[n])]):
        n += 1
    return Verdict(n, int(torch.argmax(target_logits[n])))


def verify_sampling(proposals: Sequence[int], target_logits: torch.Tensor,
                    draft_probs: torch.Tensor | None = None, *, temperature: float = 1.0,
                    generator: torch.Generator | None = None) -> Verdict:
    """Speculative sampling: accept proposal i with min(1, p_i / q_i); on the first rejection
    resample from normalise(max(p - q, 0)); if all are accepted, sample the bonus from p.

    draft_probs: [k, vocab] distributions the proposals were sampled from, or None for
    deterministic proposals (n-gram lookups, greedy drafts): q is then a point mass, so a
    proposal is accepted with probability p(token) and the residual is p without that token.
    """
    _check_shapes(proposals, target_logits)
    if temperature <= 0:
        raise ValueError("temperature must be > 0 for sampling; use verify_greedy for greedy")
    p = torch.softmax(target_logits.double() / temperature, dim=-1)
    for i, token in enumerate(proposals):
        if draft_probs is None:
            q = torch.zeros_like(p[i])
            q[token] = 1.0
        else:
            q = draft_probs[i].double()
        accept_prob = 1.0 if q[token] <= 0 else min(1.0, float(p[i, token] / q[token]))
        if float(torch.rand((), generator=generator, dtype=torch.float64)) < accept_prob:
            continue
        residual = torch.clamp(p[i] - q, min=0.0)
        total = float(residual.sum())
        # total == 0 only when p == q exactly, where rejection has probability 0 anyway.
        dist = residual / total if total > 0 else p[i]
        return Verdict(i, int(torch.multinomial(dist, 1, generator=generator)))
    bonus = int(torch.multinomial(p[len(proposals)], 1, generator=generator))
    return Verdict(len(proposals), bonus)


def sample_token(logits: torch.Tensor, temperature: float,
                 generator: torch.Generator | None = None) -> int:
    """The verifier's own sampling step (what plain sampling decoding does)."""
    p = torch.softmax(logits.double() / temperature, dim=-1)
    return int(torch.multinomial(p, 1, generator=generator))


def _check_shapes(proposals: Sequence[int], target_logits: torch.Tensor) -> None:
    if target_logits.dim() != 2 or target_logits.shape[0] != len(proposals) + 1:
        raise ValueError(
            f"need logits for k+1 = {len(proposals) + 1} positions, "
            f"got {tuple(target_logits.shape)}"
        )


@dataclass(frozen=True)
class TreeVerdict:
    """Outcome of verifying a draft tree: the accepted nodes, root first, and the
    verifier's own token after the last of them."""

    path: tuple[int, ...]
    next_token: int

    @property
    def n_accepted(self) -> int:
        return len(self.path)

    def confirmed(self, tree_tokens: Sequence[int]) -> list[int]:
        """Tokens this round adds to the confirmed caption."""
        return [*(tree_tokens[n] for n in self.path), self.next_token]


def verify_greedy_tree(tokens: Sequence[int], parents: Sequence[int],
                       target_logits: torch.Tensor) -> TreeVerdict:
    """Greedy verification of a tree (see ``tree.py``): from the pending token, follow the
    child holding the verifier's argmax for as long as there is one. Exactly the tokens plain
    greedy decoding would produce, since each accepted node's row is the verifier's
    distribution after the confirmed prefix and that node's ancestors.

    target_logits: [1 + n_nodes, vocab]; row 0 after the pending token, row 1 + i after node i.
    """
    if target_logits.dim() != 2 or target_logits.shape[0] != len(tokens) + 1 \
            or len(parents) != len(tokens):
        raise ValueError(f"need logits for 1 + {len(tokens)} fed tokens and one parent per "
                         f"node, got {tuple(target_logits.shape)} and {len(parents)} parents")
    argmax = torch.argmax(target_logits, dim=-1).tolist()
    children: dict[tuple[int, int], int] = {}
    for node, (parent, token) in enumerate(zip(parents, tokens, strict=True)):
        children.setdefault((parent, int(token)), node)
    path: list[int] = []
    node = -1
    while True:
        wanted = int(argmax[node + 1])
        child = children.get((node, wanted))
        if child is None:
            return TreeVerdict(tuple(path), wanted)
        path.append(child)
        node = child
