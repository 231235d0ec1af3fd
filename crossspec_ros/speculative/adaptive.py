"""The proposal policy: what the verifier checks each round, sized from measured acceptance
and measured verifier costs (``ProposalPolicy``), and whether a local drafter runs at all
(``DrafterGate``). The proposers themselves are ``speculative/proposers.py``.

With per-token acceptance a (the chance the verifier accepts the next proposal given it
accepted the previous ones), a round proposing g tokens confirms on average
E(g) = (1 - a^(g+1)) / (1 - a) tokens (the accepted ones plus the verifier's own token), and
costs one verifier forward over g + 1 tokens. crossspec keeps proposals while they add more
expected tokens than they cost; nothing proposed is plain decoding, chosen whenever
proposing cannot pay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from crossspec_ros.speculative.merge import Parting, merge, partings_decided
from crossspec_ros.speculative.proposers import (
    CorpusNgram,
    DraftNgram,
    DraftStream,
    HistoryNgram,
    ProposalContext,
    make_proposers,
)
from crossspec_ros.speculative.splice import substitution_branches
from crossspec_ros.speculative.suffix import SuffixIndex
from crossspec_ros.speculative.tree import ROOT, DraftTree


def expected_tokens(acceptance: float, proposal_len: int) -> float:
    """E(g): expected confirmed tokens per round with g proposals at per-token acceptance a."""
    a = min(max(acceptance, 0.0), 1.0)
    if a >= 1.0:
        return float(proposal_len + 1)
    return (1.0 - a ** (proposal_len + 1)) / (1.0 - a)


@dataclass
class AcceptanceTracker:
    """Per-token acceptance of one proposer: accepted / (accepted + rejections), decayed.

    A round with g proposals and n accepted contributes n acceptances and one rejection when
    n < g. ``prior`` acts as pseudo-counts so a new proposer is tried before it is judged.
    """

    decay: float = 0.9
    prior_accept: float = 1.0
    prior_reject: float = 1.0
    accepted: float = field(init=False)
    rejected: float = field(init=False)

    def __post_init__(self) -> None:
        self.accepted, self.rejected = self.prior_accept, self.prior_reject

    def observe(self, proposed: int, accepted: int) -> None:
        if proposed <= 0:
            return
        self.accepted = self.decay * self.accepted + accepted
        self.rejected = self.decay * self.rejected + (1.0 if accepted < proposed else 0.0)

    @property
    def rate(self) -> float:
        return self.accepted / (self.accepted + self.rejected)


@dataclass
class DivergenceTracker:
    """Which of the two whole-caption proposals, the last caption and this window's draft,
    the verifier followed where they part: decayed counts of each one's token confirmed at
    such partings (``prior``: each starts with one; the policy keeps one per level and one
    per level and preceding token, ``merge.py``). The prefill's pass checks one chain (the
    static runtime verifies chains only), and a per-token acceptance averaged over every
    round does not say who is right where the two disagree: on the emulated H200 (sample
    bag, 2026-11-29) taking the draft whole there when the last caption was right cost an
    extra round in 6 of 24 windows, crossspec 3.8 ms later than the same graph without the
    drafter."""

    decay: float = 0.9
    prior: float = 1.0
    wins: dict[str, float] = field(default_factory=dict)

    def observe(self, winner: str | None, names: Sequence[str]) -> None:
        """The verifier's token at the parting was ``winner``'s (None: neither's)."""
        for name in names:
            self.wins[name] = self.decay * self.wins.get(name, self.prior) + (name == winner)

    def favourite(self, names: Sequence[str]) -> str:
        """The one that won most often (the first of ``names`` on a tie)."""
        return max(names, key=lambda n: (self.wins.get(n, self.prior), -names.index(n)))


@dataclass
class CostModel:
    """Verifier forward time as a + b * n_tokens, fitted to recent measurements (seconds).

    Starts from a guess that favours trying proposals (a flat cost), then follows the data.
    """

    decay: float = 0.95
    _sw: float = 0.0
    _sx: float = 0.0
    _sy: float = 0.0
    _sxx: float = 0.0
    _sxy: float = 0.0

    def observe(self, n_tokens: int, seconds: float) -> None:
        d = self.decay
        self._sw = d * self._sw + 1.0
        self._sx = d * self._sx + n_tokens
        self._sy = d * self._sy + seconds
        self._sxx = d * self._sxx + n_tokens * n_tokens
        self._sxy = d * self._sxy + n_tokens * seconds

    def predict(self, n_tokens: int) -> float:
        """Predicted seconds for a forward over n_tokens (1.0 per pass before any data)."""
        if self._sw == 0.0:
            return 1.0
        mean_x, mean_y = self._sx / self._sw, self._sy / self._sw
        var_x = self._sxx / self._sw - mean_x * mean_x
        slope = (self._sxy / self._sw - mean_x * mean_y) / var_x if var_x > 1e-9 else 0.0
        slope = max(slope, 0.0)  # a forward never gets cheaper with more tokens
        return max(mean_y + slope * (n_tokens - mean_x), 1e-9)


def best_proposal_length(acceptance: float, cost: CostModel, max_len: int,
                         available: int | None = None) -> int:
    """The g in [0, min(max_len, available)] maximising E(g) / cost(g + 1)."""
    limit = max_len if available is None else min(max_len, available)
    best_g, best_rate = 0, expected_tokens(acceptance, 0) / cost.predict(1)
    for g in range(1, max(limit, 0) + 1):
        rate = expected_tokens(acceptance, g) / cost.predict(g + 1)
        if rate > best_rate * (1 + 1e-9):
            best_g, best_rate = g, rate
    return best_g


CORPUS_WEIGHT = 0.5          # the corpus's say next to this drive's captions (branches)
BRANCH_SOURCE = "history_branch"  # the source of the prefill's branches (speculative/splice)
MIN_DRAFT_ACCEPTANCE = 0.1   # below this per-token acceptance the live drafter pauses
LEAST_LOOKAHEAD = 2          # the drafter's shortest run ahead while it is worth anything


@dataclass
class BranchCalibration:
    """Branches taken per unit of offered branch probability, decayed (starts at 1: the
    tries' probabilities taken at their word until measured)."""

    decay: float = 0.9
    taken: float = 1.0
    offered: float = 1.0

    def observe(self, offered: float, taken: float) -> None:
        self.offered = self.decay * self.offered + offered
        self.taken = self.decay * self.taken + taken

    @property
    def rate(self) -> float:
        return min(1.0, self.taken / self.offered)


class ProposalPolicy:
    """What the verifier checks each round: one draft tree from every proposer at once
    (``proposers.py``: one class each, named as in ``EngineConfig.proposers``). The tree
    keeps the most probable nodes while one more node adds more expected tokens than it costs
    (the verifier's measured cost per fed token); with ``adaptive`` off it keeps them up to
    ``max_nodes``. Pure bookkeeping: no model runs here.
    """

    def __init__(self, proposers: tuple[str, ...], *, max_depth: int, max_nodes: int,
                 adaptive: bool = True, corpus: SuffixIndex | None = None) -> None:
        self.proposers = proposers
        self.corpus = corpus  # corpus_ngram's and the branches' index; None: nothing
        self._proposers = make_proposers(proposers, corpus)
        self.max_depth, self.max_nodes, self.adaptive = max_depth, max_nodes, adaptive
        # measured acceptance per change level (``set_level``; None: levels not told)
        self._trackers: dict[str | None, dict[str, AcceptanceTracker]] = {}
        self.level: str | None = None
        self.cost = CostModel()
        self.branch_calibration = BranchCalibration()
        self._branch_mass = 0.0  # the offered branches' summed probability, this window
        self._offered: dict[str, list[int]] = {}  # each proposer's best chain this round
        # the first proposal's choices where the last caption and the draft part (merge.py):
        # per level, and per level and the token before the parting
        self._divergence: dict[str | None, DivergenceTracker] = {}
        self._divergence_after: dict[tuple[str | None, int | None], DivergenceTracker] = {}
        self._first_chains: dict[str, list[int]] | None = None  # merged this window

    @property
    def trackers(self) -> dict[str, AcceptanceTracker]:
        """Each proposer's measured acceptance at the current change level."""
        if self.level not in self._trackers:
            self._trackers[self.level] = {name: AcceptanceTracker() for name in self.proposers}
        return self._trackers[self.level]

    def set_level(self, level: str | None) -> None:
        """The change level of the window about to be decoded (``events/change.py``): each
        level keeps its own measured acceptance, so history and the corpus, trusted where the
        scene stays, need not be trusted where it changed (None: one set for every window)."""
        self.level = level

    def propose(self, confirmed: Sequence[int], draft: Sequence[int] | None, draft_base: int,
                history: SuffixIndex, room: int,
                chains: dict[str, list[int]] | None = None) -> DraftTree:
        """The draft tree for this round (empty: decode plainly). ``draft``: this window's
        draft in verifier ids from caption position ``draft_base`` on, or None; ``room``:
        tokens the caption may still take; ``chains``: continuations of ``confirmed`` by
        proposers that run a model (``draft_head``), by proposer name."""
        tree = self._gather(confirmed, draft, draft_base, history, room, chains)
        return tree.pruned(self._worth_keeping(tree)).depth_first()

    def propose_first(self, draft: Sequence[int] | None, draft_base: int,
                      history: SuffixIndex, room: int, proposable: int,
                      chains: dict[str, list[int]] | None = None,
                      branches: bool = False) -> DraftTree:
        """The chain fed with the prompt in the prefill's own forward pass: the likeliest
        caption start (a chain, since the prefill's causal mask checks a chain as it is),
        history's candidate being the last window's caption whole (``SuffixIndex.newest``).
        Neither pruned by cost nor cut at ``max_depth``: next to a prompt of hundreds of
        tokens a few more cost next to nothing, and a window captioned like the last one is
        confirmed in that one pass, however long its caption (cut at 24 tokens, 4 of 48
        windows of a held-out drive needed another pass for their last tokens).
        It stops before an id >= ``proposable``: in a prompt, the model's image or video
        placeholder would be taken for a slot of visual features.
        With ``branches`` (a verifier that checks a tree in its prefill) the chain is the
        spine of a tree: the last caption with one phrase changed (``splice.py``), each
        branch kept while it saves more than it costs: its probability times a round's
        measured cost against its tokens times the measured cost of one more token."""
        chains = dict(chains or {})
        newest = history.newest()
        skip: tuple[str, ...] = ()
        if HistoryNgram.name in self.proposers and newest:
            chains.setdefault(HistoryNgram.name, newest)
            skip = (CorpusNgram.name,)  # the corpus's likeliest start only opens a drive
        if draft and DraftStream.name in self.proposers:
            # at the caption's start the draft's trie proposes the draft the stream already
            # does; building it cost ~60% of this call (~0.6 ms a window in a drive, where
            # the question's prefill waits for it)
            skip += (DraftNgram.name,)
        depth = room - 1 if self.max_depth > 0 else 0  # max_depth 0: plain decoding
        tree = self._gather((), draft, draft_base, history, room, chains, skip, depth=depth)
        path = self._arbitrated(depth) or tree.best_path()
        stop = next((i for i, t in enumerate(path.tokens) if t >= proposable), len(path))
        path = path.pruned(stop)
        if not branches or len(path) == 0 or HistoryNgram.name not in self.proposers:
            return path
        return self._with_branches(path, history, room, proposable)

    def _arbitrated(self, depth: int) -> DraftTree | None:
        """Where the last caption (history's chain) and this window's draft (the draft
        stream's) both propose and part, the two merged (``merge.py``): at each parting the
        one the verifier followed more often after the same token (``DivergenceTracker``;
        where that token never preceded a parting, after any token), the other taken up
        again where both go on alike; None where they do not part."""
        names = (HistoryNgram.name, DraftStream.name)
        self._first_chains = None
        chains = {n: self._offered.get(n) or [] for n in names}
        if not all(chains.values()):
            return None
        merged = merge(chains, lambda parting: self._favourite(parting, names), depth)
        if not merged.partings:
            return None
        self._first_chains = chains
        path, parent, prob = DraftTree(), ROOT, 1.0
        for token, source in zip(merged.tokens, merged.sources, strict=True):
            prob *= self.trackers[source].rate
            parent = path.add(parent, token, source, prob)
        return path

    def _favourite(self, parting: Parting, names: tuple[str, ...]) -> str:
        after = self._divergence_after.get((self.level, parting.after))
        return (after or self._level_divergence()).favourite(names)

    def _level_divergence(self) -> DivergenceTracker:
        return self._divergence.setdefault(self.level, DivergenceTracker())

    def observe_caption(self, caption: Sequence[int]) -> None:
        """The window's whole caption, once known: whose token the verifier took at each
        parting of the two chains its first proposal merged (as far as it followed one)."""
        chains, self._first_chains = self._first_chains, None
        if chains is None:
            return
        names = list(chains)
        for parting, winner in partings_decided(chains, caption):
            self._level_divergence().observe(winner, names)
            self._divergence_after.setdefault((self.level, parting.after),
                                              DivergenceTracker()).observe(winner, names)

    def _with_branches(self, spine: DraftTree, history: SuffixIndex, room: int,
                       proposable: int) -> DraftTree:
        """``spine`` (a chain) and the re-joining branches worth their tokens, depth first
        (the spine's nodes come first: keeping it only crops the cache)."""
        indexes = [(history, 1.0)] + ([(self.corpus, CORPUS_WEIGHT)] if self.corpus else [])
        # a branch's probability as the tries see it, times how often branches came true
        # for that probability (measured: the tries also count captions that repeated)
        round_s = self.cost.predict(1) * self.branch_calibration.rate
        token_s = self.cost.predict(2) - self.cost.predict(1)
        tree, budget = spine, len(spine) + self.max_nodes
        self._branch_mass = 0.0
        # below this a branch of a single token would not pay: not even built
        least = (token_s / round_s if round_s > 0 else math.inf) if self.adaptive else 0.0
        for branch in substitution_branches(spine.tokens, indexes, least):
            tokens = list(branch.tokens[:room - 1 - branch.at])
            if len(tree) + len(tokens) > budget or any(t >= proposable for t in tokens):
                continue
            if self.adaptive and branch.prob * round_s <= len(tokens) * token_s:
                continue
            parent = branch.at - 1 if branch.at else ROOT  # the spine's node i is index i
            tree.add_chain(tokens, BRANCH_SOURCE, [branch.prob] * len(tokens), parent)
            self._branch_mass += branch.prob
        return tree.depth_first()

    def observe_branches(self, taken: bool) -> None:
        """After a prefill with branches: whether the verifier took one of them."""
        if self._branch_mass > 0:
            self.branch_calibration.observe(self._branch_mass, float(taken))
        self._branch_mass = 0.0

    def _gather(self, confirmed: Sequence[int], draft: Sequence[int] | None, draft_base: int,
                history: SuffixIndex, room: int, chains: dict[str, list[int]] | None = None,
                skip: tuple[str, ...] = (), depth: int | None = None) -> DraftTree:
        """Every proposer's candidates (but ``skip``'s) after ``confirmed`` in one tree (not
        yet pruned), at most ``depth`` deep (default ``max_depth``; never past the room)."""
        depth = min(self.max_depth if depth is None else depth, room - 1)
        tree = DraftTree()
        self._offered = {}
        if depth <= 0 or self.max_nodes <= 0:
            return tree
        ctx = ProposalContext(confirmed, draft, draft_base, history, self.max_nodes,
                              dict(chains or {}))
        for proposer in self._proposers:
            if proposer.name not in skip:
                self._offered[proposer.name] = proposer.propose(
                    ctx, tree, self.trackers[proposer.name].rate, depth)
        return tree

    def _worth_keeping(self, tree: DraftTree) -> int:
        """How many of the most probable nodes to verify: while a node's probability beats
        what the round already yields per unit of cost."""
        if not self.adaptive:
            return self.max_nodes
        probs = sorted(tree.probs, reverse=True)[: self.max_nodes]
        expected, keep = 1.0, 0  # the verifier's own token comes with every round
        for p in probs:
            if (expected + p) / self.cost.predict(keep + 2) <= \
                    expected / self.cost.predict(keep + 1):
                break
            expected, keep = expected + p, keep + 1
        return keep

    def observe(self, fed: int, seconds: float, new: Sequence[int]) -> None:
        """After a round: its cost, and each proposer's best chain against what the verifier
        confirmed (``new``: this round's confirmed tokens, the verifier's own one last)."""
        self.cost.observe(fed, seconds)
        self.observe_acceptance(new)

    def observe_acceptance(self, new: Sequence[int]) -> None:
        """Each proposer's best chain of the latest proposal against ``new`` (as in
        ``observe``; alone after the prefill, whose cost is not a round's)."""
        for name, chain in self._offered.items():
            if not chain:
                continue
            matched = 0
            while matched < min(len(chain), len(new)) and chain[matched] == new[matched]:
                matched += 1
            self.trackers[name].observe(min(len(chain), len(new)), matched)

    def draft_lookahead(self) -> int:
        """Tokens worth drafting past the confirmed caption: 0 pauses the live drafter (it
        still re-syncs), when its draft is mostly wrong or no proposer reads it."""
        if DraftStream.name not in self.trackers:
            return 0
        if not self.adaptive:
            return self.max_depth
        rate = self.trackers[DraftStream.name].rate
        if rate < MIN_DRAFT_ACCEPTANCE:
            return 0
        return max(LEAST_LOOKAHEAD, best_proposal_length(rate, self.cost, self.max_depth))


class DrafterGate:
    """Whether a local drafter runs for the next window, from measured latency.

    The drafter pays where it runs beside the verifier (its own CUDA stream) and costs where
    it takes the verifier's compute (two Python threads on 2 CPU cores measured 2.7x slower
    prefill). The gate keeps, per choice, a decayed mean of the confirmed latency per caption
    token and takes the faster choice. Each choice is tried once first, drafting first; then
    the slower one is re-tried after ``explore_every`` windows, an interval that doubles
    (up to ``max_explore_every``) each time the re-try confirms the leader and starts over
    when the leader changes: a change (a freed GPU, a better drafter) is still noticed, and a
    drafter that keeps losing costs ever less.
    """

    def __init__(self, explore_every: int = 8, decay: float = 0.7,
                 max_explore_every: int = 128) -> None:
        if explore_every < 2 or max_explore_every < explore_every or not 0.0 <= decay < 1.0:
            raise ValueError("need 2 <= explore_every <= max_explore_every and 0 <= decay < 1")
        self.explore_every, self.decay = explore_every, decay
        self.max_explore_every = max_explore_every
        self.ms_per_token: dict[bool, float | None] = {True: None, False: None}
        self.interval = explore_every      # windows between re-tries of the slower choice
        self._since_retry = 0
        self._leader: bool | None = None

    def should_draft(self) -> bool:
        for choice in (True, False):
            if self.ms_per_token[choice] is None:
                return choice
        leader = self.ms_per_token[True] <= self.ms_per_token[False]
        if leader != self._leader:
            self._leader, self.interval, self._since_retry = leader, self.explore_every, 0
        self._since_retry += 1
        if self._since_retry < self.interval:
            return leader
        self._since_retry = 0
        self.interval = min(2 * self.interval, self.max_explore_every)
        return not leader

    def observe(self, drafted: bool, latency_ms: float, tokens: int) -> None:
        if tokens <= 0 or latency_ms != latency_ms:
            return
        value = latency_ms / tokens
        old = self.ms_per_token[drafted]
        self.ms_per_token[drafted] = value if old is None else \
            self.decay * old + (1.0 - self.decay) * value
