"""Adaptive proposal length from measured acceptance and measured verifier costs.

With per-token acceptance a (the chance the verifier accepts the next proposal given it
accepted the previous ones), a round proposing g tokens confirms on average
E(g) = (1 - a^(g+1)) / (1 - a) tokens (the accepted ones plus the verifier's own token), and
costs one verifier forward over g + 1 tokens. crossspec picks the g that maximises
E(g) / cost(g + 1); g = 0 is plain decoding, chosen whenever proposing cannot pay.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
