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

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from crossspec_ros.speculative.acceptance import AcceptanceRule


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
