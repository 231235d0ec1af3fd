"""A suffix trie over recent captions: zero-cost draft trees that re-align after a mismatch.

Consecutive windows of a drive are described nearly alike, so the verifier's next tokens are
very often the continuation of its latest tokens in an earlier caption. The trie holds every
suffix (up to ``max_depth`` tokens) of the last ``max_sources`` captions, each node counting
how many suffixes pass through it. To propose, take the longest suffix of the confirmed
caption that the trie holds (so after a rejected token the lookup simply finds wherever the
new context occurs: it re-aligns instead of stopping), then expand the continuations
best-first by their estimated probability (the count ratio along the path), as
SuffixDecoding does. Captions keep their EOS, so a proposal can end the caption, and start
with a ``START`` mark, so a short context is matched at captions' beginnings. A window's first
proposal is not the trie's but the newest caption whole (``newest``): the verifier repeated
the last window's caption exactly in 132 of 252 windows of six simulated drives, while the
trie's likeliest path from ``START`` (a blend of several captions) was right whole in 14.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from crossspec_ros.speculative.tree import ROOT, DraftTree

START = -1  # marks where each indexed caption begins (never a token id)


@dataclass
class _Node:
    count: float = 0.0
    children: dict[int, _Node] = field(default_factory=dict)


class SuffixIndex:
    """Suffix trie of the last ``max_sources`` token sequences (oldest dropped first).

    The newest source counts ``recent_weight`` times (the window before is the best single
    guess for this one), the others once.
    """

    def __init__(self, max_sources: int = 16, max_depth: int = 32, max_match: int = 8,
                 recent_weight: float = 3.0) -> None:
        if max_sources < 0 or max_depth < 1 or max_match < 1 or recent_weight < 1:
            raise ValueError("need max_sources >= 0, max_depth >= 1, max_match >= 1 and "
                             "recent_weight >= 1")
        self.max_sources, self.max_depth, self.max_match = max_sources, max_depth, max_match
        self.recent_weight = recent_weight
        self.root = _Node()
        self.sources: deque[list[int]] = deque()

    @classmethod
    def of_captions(cls, captions: Sequence[Sequence[int]], max_depth: int = 32,
                    max_match: int = 8) -> SuffixIndex:
        """A fixed trie over a corpus of captions, each counted as often as it occurs (no
        recency: ``add_source`` would drop all but the last ``max_sources``)."""
        counts = Counter(tuple(int(t) for t in caption) for caption in captions if caption)
        index = cls(max_sources=max(len(counts), 1), max_depth=max_depth,
                    max_match=max_match, recent_weight=1.0)
        for caption, n in counts.items():
            index.sources.append([START, *caption])
            index._count(index.sources[-1], float(n))
        return index

    def __len__(self) -> int:
        return len(self.sources)

    def newest(self) -> list[int]:
        """The newest indexed caption (without its ``START`` mark); [] when none."""
        return self.sources[-1][1:] if self.sources else []

    def add_source(self, tokens: Sequence[int]) -> None:
        """Index ``tokens``; the oldest source goes once more than ``max_sources`` are held."""
        if not tokens or self.max_sources == 0:
            return
        if self.sources:  # the previous newest now counts like the rest
            self._count(self.sources[-1], 1.0 - self.recent_weight)
        self.sources.append([START, *(int(t) for t in tokens)])
        self._count(self.sources[-1], self.recent_weight)
        while len(self.sources) > self.max_sources:
            self._count(self.sources.popleft(), -1.0)

    def _count(self, tokens: list[int], delta: float) -> None:
        for start in range(len(tokens)):
            node = self.root
            node.count += delta
            for token in tokens[start:start + self.max_depth]:
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node()
                child.count += delta
                if child.count < 1e-6:  # the last suffix through it went: prune
                    del node.children[token]
                    break
                node = child

    def followers(self, token: int) -> Collection[int]:
        """The tokens that followed ``token`` somewhere in the indexed captions."""
        node = self.root.children.get(int(token))
        return node.children.keys() if node is not None else ()

    def match(self, context: Sequence[int]) -> tuple[_Node, int]:
        """(trie node, length) of the longest suffix of ``context`` (the caption so far; at
        most ``max_match`` tokens, ``START`` before its first counting as one) found in the
        trie and followed by something; (root, 0) if none."""
        context = [START, *context]
        for n in range(min(self.max_match, len(context)), 0, -1):
            node: _Node | None = self.root
            for token in context[len(context) - n:]:
                node = node.children.get(token)
                if node is None:
                    break
            if node is not None and node.children:
                return node, n
        return self.root, 0

    def propose(self, context: Sequence[int], tree: DraftTree, source: str, *,
                max_nodes: int, max_depth: int, per_token: float = 1.0,
                parent: int = ROOT) -> list[int]:
        """Add up to ``max_nodes`` nodes continuing ``context`` to ``tree`` under ``parent``,
        most probable first. A node's probability is the product along its path of the
        count ratio and ``per_token`` (the proposer's measured per-token acceptance).
        Returns this proposer's best chain (the most probable child at each step), as tokens;
        [] when no suffix of the context is indexed."""
        start, matched = self.match(context)
        if matched == 0 or max_nodes <= 0 or max_depth <= 0:
            return []
        # (-probability, order, token, trie node, parent in the tree, depth)
        heap: list[tuple[float, int, int, _Node, int, int]] = []
        order = 0

        def push_children(node: _Node, tree_parent: int, prob: float, depth: int) -> None:
            nonlocal order
            total = sum(child.count for child in node.children.values())
            for token, child in node.children.items():
                order += 1
                heapq.heappush(heap, (-prob * per_token * child.count / total, order, token,
                                      child, tree_parent, depth))

        push_children(start, parent, 1.0, 1)
        added = 0
        while heap and added < max_nodes:
            neg_prob, _, token, node, tree_parent, depth = heapq.heappop(heap)
            before = len(tree)
            index = tree.add(tree_parent, token, source, -neg_prob)
            added += len(tree) - before
            if depth < max_depth and node.children:
                push_children(node, index, -neg_prob, depth + 1)
        return _best_chain(start, max_depth)


def _best_chain(node: _Node, max_depth: int) -> list[int]:
    chain: list[int] = []
    while node.children and len(chain) < max_depth:
        token, node = max(node.children.items(), key=lambda item: item[1].count)
        chain.append(token)
    return chain
