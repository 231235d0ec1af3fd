"""Substitution branches: the last caption with one phrase changed, for a live prefill's tree.

Consecutive windows are mostly captioned alike but for one phrase ("A grey car" becomes "A
black car", "drives" becomes "slows down"). The prefill checks the last caption whole (the
spine); a branch hangs another token under the spine's prefix wherever the tries (earlier
captions, the corpus) have seen that prefix go on differently, and continues with the spine's
rest from the first token the tries have seen follow it: the caption re-joined. A window whose
caption changed one phrase is then confirmed in the prefill's single pass too. Which branches
are worth their tokens is the policy's decision (``adaptive.ProposalPolicy.propose_first``);
the engine asks for them only where the prefill's finish is short (a live prefill: the
question after the cached frames), not in a one-shot prefill, where the tree's mask costs
every prompt row its causal fast path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crossspec_ros.speculative.suffix import SuffixIndex


@dataclass(frozen=True)
class Branch:
    """``tokens`` in place of the spine's from position ``at`` on (under spine node at - 1),
    with ``prob``: the tries' share of that token after the spine's first ``at`` tokens."""

    at: int
    tokens: tuple[int, ...]
    prob: float


def substitution_branches(spine: Sequence[int],
                          indexes: Sequence[tuple[SuffixIndex, float]],
                          min_prob: float = 0.0) -> list[Branch]:
    """Every re-joining branch off ``spine`` of probability at least ``min_prob``, most
    probable first. ``indexes``: tries and their weights (a token's probability is the
    weighted mean of its count ratios in the tries that know the prefix)."""
    spine = [int(t) for t in spine]
    probs: dict[tuple[int, int], float] = {}
    for at in range(len(spine)):
        shares: dict[int, float] = {}
        weights = 0.0
        for index, weight in indexes:
            node, matched = index.match(spine[:at])
            if matched == 0:
                continue
            weights += weight
            total = sum(child.count for child in node.children.values())
            for token, child in node.children.items():
                shares[token] = shares.get(token, 0.0) + weight * child.count / total
        for token, share in shares.items():
            if token != spine[at]:
                probs[(at, token)] = share / weights
    branches = []
    for (at, token), prob in sorted(probs.items(), key=lambda item: (-item[1], item[0])):
        if prob < min_prob:
            break  # the rest are less probable still: not even searched for a re-join
        followers = [index.followers(token) for index, _ in indexes]
        rejoin = next((q for q in range(at + 1, len(spine))
                       if any(spine[q] in seen for seen in followers)), None)
        if rejoin is not None:
            branches.append(Branch(at, (token, *spine[rejoin:]), prob))
    return branches
