"""Per-window statistics of the speculative engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from crossspec_ros.summaries import rounded

NAN = float("nan")


@dataclass
class WindowStats:
    """Counts and latencies of one window (latencies: ms after the window closed)."""

    proposer_names: list[str] = field(default_factory=list)
    acceptance_rule: str = ""        # "" lossless; else the relaxed rule that made the caption
    change_level: str = ""           # event_aware: "steady" or "changed" (events/change.py)
    proposed: dict[str, int] = field(default_factory=dict)
    accepted: dict[str, int] = field(default_factory=dict)
    rounds: int = 0                  # verifier forwards after the prefill
    prefill_accepted: int = 0        # proposals accepted in the prefill's own pass
    prefill_fed: int = 0             # proposals the prefill fed (a chain, or a tree's nodes)
    plain_rounds: int = 0            # of those, without proposals
    fed_tokens: int = 0              # tokens those forwards fed (pending + proposals)
    tree_rounds: int = 0             # rounds that checked a branching draft tree
    live_prefill_frames: int = 0     # frames prefilled before the close (-1: a live prefill
    #                                  that did not match the window, redone in one shot)
    verifier_prepare_ms: float = NAN  # CPU preprocessing of the frames
    verifier_prefill_ms: float = NAN  # vision encoder + language prefill
    draft_first_token_ms: float = NAN
    draft_done_ms: float = NAN
    confirmed_first_ms: float = NAN
    confirmed_done_ms: float = NAN
    ready_before_close_ms: float = NAN  # early start: the caption was complete this long
    #                                     before the close (NaN: decoded after the close)

    def record_round(self, proposer: str | None, proposed: int, accepted: int) -> None:
        self.rounds += 1
        if proposer is None or proposed == 0:
            self.plain_rounds += 1
            return
        self.proposed[proposer] = self.proposed.get(proposer, 0) + proposed
        self.accepted[proposer] = self.accepted.get(proposer, 0) + accepted

    def record_tree_round(self, sources: list[str], accepted_nodes: list[int], fed: int,
                          branching: bool) -> None:
        """A round over a draft tree: ``sources[i]`` proposed node i; ``accepted_nodes`` is
        the path the verifier accepted. Per proposer: nodes proposed and accepted."""
        self.rounds += 1
        self.fed_tokens += fed
        self.tree_rounds += branching
        if not sources:
            self.plain_rounds += 1
            return
        self.record_proposals(sources, accepted_nodes)

    def record_proposals(self, sources: list[str], accepted_nodes: list[int]) -> None:
        """Per proposer, nodes proposed and accepted (a round's, or the prefill's chain)."""
        for name in set(sources):
            self.proposed[name] = self.proposed.get(name, 0) + sources.count(name)
            self.accepted[name] = self.accepted.get(name, 0) + sum(
                sources[n] == name for n in accepted_nodes)

    @property
    def total_proposed(self) -> int:
        return sum(self.proposed.values())

    @property
    def total_accepted(self) -> int:
        return sum(self.accepted.values())

    @property
    def acceptance(self) -> float:
        """Accepted / proposed tokens over all proposers (NaN when nothing was proposed)."""
        return self.total_accepted / self.total_proposed if self.total_proposed else NAN

    @property
    def mean_accepted_length(self) -> float:
        """Accepted proposal tokens per verifier round (0 when no round ran)."""
        return self.total_accepted / self.rounds if self.rounds else 0.0

    def as_dict(self) -> dict:
        def num(x: float) -> float | None:
            return rounded(x, 3) if isinstance(x, float) else x

        return {
            "acceptance_rule": self.acceptance_rule,
            "change_level": self.change_level,
            "rounds": self.rounds, "plain_rounds": self.plain_rounds,
            "prefill_accepted": self.prefill_accepted,
            "prefill_fed": self.prefill_fed,
            "fed_tokens": self.fed_tokens, "tree_rounds": self.tree_rounds,
            "live_prefill_frames": self.live_prefill_frames,
            "proposed": self.total_proposed, "accepted": self.total_accepted,
            "acceptance": num(self.acceptance), "mean_accepted_length": num(
                self.mean_accepted_length),
            "per_proposer": {name: {"proposed": self.proposed.get(name, 0),
                                    "accepted": self.accepted.get(name, 0)}
                             for name in self.proposer_names},
            "verifier_prepare_ms": num(self.verifier_prepare_ms),
            "verifier_prefill_ms": num(self.verifier_prefill_ms),
            "draft_first_token_ms": num(self.draft_first_token_ms),
            "draft_done_ms": num(self.draft_done_ms),
            "confirmed_first_ms": num(self.confirmed_first_ms),
            "confirmed_done_ms": num(self.confirmed_done_ms),
            "ready_before_close_ms": num(self.ready_before_close_ms),
        }
