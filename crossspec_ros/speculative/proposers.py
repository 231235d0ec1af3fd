"""Proposers: where the tokens the verifier checks each round come from, one class each.

Every proposer adds its candidate continuations of the confirmed caption to the round's
draft tree and returns its best chain (what its acceptance is measured on). The policy
(``adaptive.ProposalPolicy``) asks each configured proposer in turn, then prunes the tree by
measured acceptance and cost. No model runs here: a proposer that needs one (the draft head)
gets its chain computed elsewhere and handed over in ``ProposalContext.chains``.

    DraftStream     the live draft's continuation of the confirmed caption (a chain)
    DraftNgram      suffix matches in this window's draft (re-aligns after a mismatch)
    HistoryNgram    suffix matches in the previous windows' confirmed captions
    CorpusNgram     suffix matches in a corpus of the verifier's captions of earlier drives
                    (``speculative/corpus.py``): phrases this drive has not shown yet
    ModelChain      a chain a model computed this round (draft_head: ``speculative/head.py``)

Each node's probability is the proposer's measured per-token acceptance to the power of its
depth, times the suffix trie's count ratios.

Example: the caption so far "the car", the draft "the car turns left". DraftStream adds
"turns left" as a chain at probabilities a, a^2; HistoryNgram, whose trie holds "the car
turns right" twice and "the car stops" once, adds "turns" -> "right" and "stops".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from crossspec_ros.speculative.suffix import SuffixIndex
from crossspec_ros.speculative.tree import DraftTree


@dataclass
class ProposalContext:
    """What every proposer may read in one round."""

    confirmed: Sequence[int]          # the caption so far (verifier ids)
    draft: Sequence[int] | None       # this window's draft from caption position draft_base
    draft_base: int
    history: SuffixIndex              # the previous windows' confirmed captions
    max_nodes: int
    chains: dict[str, list[int]] = field(default_factory=dict)  # by proposer name


class Proposer(ABC):
    """One source of proposals; ``name`` as in EngineConfig.proposers and the statistics;
    ``reads`` what it needs beyond the window's confirmed caption: "draft" (the drafter's
    stream: a drafter runs for it), "history" (earlier windows' captions), "corpus" (a caption
    corpus) or "head" (a draft head computes its chain each round)."""

    name: str
    reads: str = ""

    @classmethod
    def build(cls, corpus: SuffixIndex | None) -> Proposer:
        return cls()

    def propose(self, ctx: ProposalContext, tree: DraftTree, rate: float, depth: int
                ) -> list[int]:
        """Add this proposer's candidates (at most ``depth`` deep) to ``tree``; returns its
        best chain. A chain handed over in ``ctx.chains`` under this name is proposed as is
        (the first proposal's: the last caption whole)."""
        given = ctx.chains.get(self.name)
        if given:
            return add_chain(tree, given[:depth], self.name, rate)
        return self._propose(ctx, tree, rate, depth)

    @abstractmethod
    def _propose(self, ctx: ProposalContext, tree: DraftTree, rate: float, depth: int
                 ) -> list[int]:
        """The proposer's own candidates (no chain was handed over)."""


def add_chain(tree: DraftTree, chain: Sequence[int], source: str, rate: float) -> list[int]:
    """``chain`` under the pending token, node k at probability rate^(k+1)."""
    chain = list(chain)
    tree.add_chain(chain, source, [rate ** (k + 1) for k in range(len(chain))])
    return chain


class DraftStream(Proposer):
    name, reads = "draft_stream", "draft"

    def _propose(self, ctx: ProposalContext, tree: DraftTree, rate: float, depth: int
                 ) -> list[int]:
        if not ctx.draft:
            return []
        return add_chain(tree, draft_continuation(ctx.draft, ctx.draft_base, ctx.confirmed,
                                                  depth), self.name, rate)


class DraftNgram(Proposer):
    name, reads = "draft_ngram", "draft"

    def __init__(self) -> None:
        self._index: tuple[list[int], SuffixIndex] | None = None  # of the latest draft

    def _propose(self, ctx: ProposalContext, tree: DraftTree, rate: float, depth: int
                 ) -> list[int]:
        if not ctx.draft:
            return []
        if self._index is None or self._index[0] != list(ctx.draft):
            index = SuffixIndex(max_sources=1, recent_weight=1.0)
            index.add_source(ctx.draft)
            self._index = (list(ctx.draft), index)
        return self._index[1].propose(ctx.confirmed, tree, self.name, per_token=rate,
                                      max_nodes=ctx.max_nodes, max_depth=depth)


class HistoryNgram(Proposer):
    name, reads = "history_ngram", "history"

    def _propose(self, ctx: ProposalContext, tree: DraftTree, rate: float, depth: int
                 ) -> list[int]:
        return ctx.history.propose(ctx.confirmed, tree, self.name, per_token=rate,
                                   max_nodes=ctx.max_nodes, max_depth=depth)


class CorpusNgram(Proposer):
    name, reads = "corpus_ngram", "corpus"

    def __init__(self, corpus: SuffixIndex | None) -> None:
        self.corpus = corpus  # None or empty: it proposes nothing

    @classmethod
    def build(cls, corpus: SuffixIndex | None) -> Proposer:
        return cls(corpus)

    def _propose(self, ctx: ProposalContext, tree: DraftTree, rate: float, depth: int
                 ) -> list[int]:
        if self.corpus is None:
            return []
        return self.corpus.propose(ctx.confirmed, tree, self.name, per_token=rate,
                                   max_nodes=ctx.max_nodes, max_depth=depth)


class ModelChain(Proposer):
    """A chain computed by a model this round, handed over in ``ctx.chains``."""

    def _propose(self, ctx: ProposalContext, tree: DraftTree, rate: float, depth: int
                 ) -> list[int]:
        return []  # nothing handed over this round


class DraftHeadChain(ModelChain):
    """The draft head's chain (models/draft_head.py), computed by the engine each round."""

    name, reads = "draft_head", "head"


# Every proposer, by name, in the order they are asked by default (EngineConfig.proposers)
PROPOSER_TYPES: dict[str, type[Proposer]] = {
    kind.name: kind for kind in (DraftStream, DraftNgram, HistoryNgram, CorpusNgram,
                                 DraftHeadChain)}
PROPOSERS: tuple[str, ...] = tuple(PROPOSER_TYPES)
# asked unless configured otherwise: all but those that need a model loaded for them
DEFAULT_PROPOSERS: tuple[str, ...] = tuple(name for name, kind in PROPOSER_TYPES.items()
                                           if kind.reads != "head")


def reading(names: Sequence[str], what: str) -> list[str]:
    """Those of the proposers ``names`` that read ``what`` (see ``Proposer.reads``)."""
    return [name for name in names if PROPOSER_TYPES[name].reads == what]


def make_proposers(names: Sequence[str], corpus: SuffixIndex | None = None
                   ) -> list[Proposer]:
    """The proposers named (EngineConfig.proposers), in that order."""
    unknown = [n for n in names if n not in PROPOSER_TYPES]
    if unknown:
        raise ValueError(f"unknown proposers {unknown}; known: {', '.join(PROPOSERS)}")
    return [PROPOSER_TYPES[name].build(corpus) for name in names]


def draft_continuation(draft: Sequence[int], base: int, confirmed: Sequence[int],
                       limit: int) -> list[int]:
    """The draft's tokens (caption positions ``base``..) after the confirmed caption, if the
    draft agrees with the confirmed caption where they overlap."""
    n = len(confirmed)
    if base > n or list(draft[:n - base]) != list(confirmed[base:]):
        return []
    return list(draft[n - base:n - base + limit])
