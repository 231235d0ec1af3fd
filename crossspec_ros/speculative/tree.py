"""Draft trees: several candidate continuations checked by the verifier in one forward pass.

A proposer rarely knows which of a few continuations the verifier will pick ("drives" or
"slows down"; "a grey car" or "a cyclist"). A tree holds them all: node i is a token whose
parent is another node or the pending token (the last confirmed one, not yet in the
verifier's cache). Shared prefixes are stored once. The verifier feeds the pending token and
every node in one pass, each node attending to the confirmed prefix and its own ancestors
only (``HFSession.feed_tree`` builds that mask), at the position its depth gives; row 0
of the logits is the distribution after the pending token, row 1 + i the distribution after
node i. Greedy verification then walks down the tree (``verify.verify_greedy_tree``).

A chain (one candidate) is a tree whose every node's parent is the node before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

ROOT = -1  # the parent of first-level nodes: the pending token


@dataclass
class DraftTree:
    """Tokens with parents (``ROOT`` or an earlier node), their proposer and estimated
    probability of being accepted (the product along the path; used to trim the tree)."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    _children: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, parent: int, token: int, source: str, prob: float) -> int:
        """The node for ``token`` under ``parent`` (an existing one keeps its source and the
        higher probability); returns its index."""
        key = (parent, int(token))
        node = self._children.get(key)
        if node is not None:
            self.probs[node] = max(self.probs[node], prob)
            return node
        if parent != ROOT and not 0 <= parent < len(self.tokens):
            raise ValueError(f"parent {parent} is not a node of this tree")
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.sources.append(source)
        self.probs.append(prob)
        self._children[key] = len(self.tokens) - 1
        return len(self.tokens) - 1

    def add_chain(self, tokens: Sequence[int], source: str, probs: Sequence[float],
                  parent: int = ROOT) -> list[int]:
        """A chain of tokens under ``parent``; returns its nodes."""
        nodes = []
        for token, prob in zip(tokens, probs, strict=True):
            parent = self.add(parent, token, source, prob)
            nodes.append(parent)
        return nodes

    def child(self, parent: int, token: int) -> int | None:
        """The node holding ``token`` under ``parent``, if any."""
        return self._children.get((parent, int(token)))

    def depth(self, node: int) -> int:
        """1 for a child of the pending token."""
        d = 0
        while node != ROOT:
            node, d = self.parents[node], d + 1
        return d

    def path(self, node: int) -> list[int]:
        """Nodes from the first level down to ``node``."""
        out = []
        while node != ROOT:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def best_path(self) -> DraftTree:
        """The path with the most expected accepted tokens (the sum of its nodes'
        probabilities) as a chain of its own, sources and probabilities kept: for rules
        and backends that need a chain."""
        out = DraftTree()
        if not self.tokens:
            return out
        expected: list[float] = []
        for node, parent in enumerate(self.parents):  # parents come before their children
            expected.append(self.probs[node] + (expected[parent] if parent != ROOT else 0.0))
        best = max(range(len(self)), key=lambda n: (expected[n], -n))
        parent = ROOT
        for n in self.path(best):
            parent = out.add(parent, self.tokens[n], self.sources[n], self.probs[n])
        return out

    def chain_head(self, n: int) -> DraftTree:
        """A chain's first ``n`` nodes (a pass that holds no more)."""
        if not self.is_chain():
            raise ValueError("chain_head cuts a chain; take best_path() first")
        out = DraftTree()
        for node in range(min(n, len(self))):
            out.add(node - 1, self.tokens[node], self.sources[node], self.probs[node])
        return out

    def best_chain(self) -> list[int]:
        """Tokens of ``best_path``."""
        return self.best_path().tokens

    def depth_first(self) -> DraftTree:
        """The same tree with its nodes in depth-first order, the more probable child first:
        the likeliest path is then the first nodes, and a verifier that keeps it only crops
        its cache (``HFSession.keep_path``) instead of gathering the path's rows."""
        children: dict[int, list[int]] = {}
        for node, parent in enumerate(self.parents):
            children.setdefault(parent, []).append(node)
        out, stack = DraftTree(), [(ROOT, ROOT)]  # (node here, its parent in ``out``)
        while stack:
            node, parent = stack.pop()
            if node != ROOT:
                parent = out.add(parent, self.tokens[node], self.sources[node],
                                 self.probs[node])
            # pushed least probable first: popped most probable first (ties: added first)
            kids = sorted(children.get(node, ()), key=lambda n: (self.probs[n], -n))
            stack.extend((kid, parent) for kid in kids)
        return out

    def pruned(self, keep: int) -> DraftTree:
        """The ``keep`` most probable nodes (a node's ancestors are at least as probable, so
        the result stays a tree), in the order they were added."""
        if keep >= len(self):
            return self
        order = sorted(range(len(self)), key=lambda n: (-self.probs[n], self.depth(n), n))
        chosen = set(order[:max(keep, 0)])
        for n in list(chosen):  # probabilities may tie or be set out of order: keep paths whole
            chosen.update(self.path(n))
        out, index = DraftTree(), {ROOT: ROOT}
        for n in sorted(chosen):
            index[n] = out.add(index[self.parents[n]], self.tokens[n], self.sources[n],
                               self.probs[n])
        return out
