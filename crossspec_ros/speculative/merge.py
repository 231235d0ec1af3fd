"""The first proposal from two whole captions, the last window's and this window's draft, merged.

The prefill's pass checks one chain. The last caption knows what the event camera cannot see
(colours, a road user that did not change) and the draft what moved (the ego car's action,
the road, a road user that came): where the scene changed, each is right in a different part
of the caption. Taking one of them whole loses the other's part. Measured on the EMULATED
H200 (profile h200-bf16-static-2026-11-29, sample bag, `crossspec drive --compare`): the
draft's first tokens were right further than the last caption's in 7 of 13 scene changes, in
6 of them from the ego car's action on, while the last caption was right further in the other
6 (where the second sentence, what another road user is and does, had changed) and in every
repeated caption the two parted on.

``merge`` walks both chains together. Where they part, ``pick`` names the one to follow (the
policy asks which of the two the verifier followed more often after the same token); the
walk takes the other one up again where both go on alike for ``ANCHOR`` tokens in a row.

    last caption  The ego car speeds up on a straight road . A grey car is ahead ...
    draft         The ego car turns left at an intersection . A blue car is ahead ...
    merged        The ego car turns left at an intersection . A grey car is ahead ...
                              ^ parting after "car": the draft    ^ after "A": the last caption

Pure: no model, no state; ``ProposalPolicy`` keeps what was learnt.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

ANCHOR = 2  # tokens in a row that both chains must share for the walk to re-join them


@dataclass(frozen=True)
class Parting:
    """Where two chains part: position ``at`` of the merged chain, the token before it
    (None at the caption's start) and each chain's token there, by name."""

    at: int
    after: int | None
    tokens: Mapping[str, int]


@dataclass
class Merged:
    """The merged chain, each token's source (the chain it was taken from; where both agree,
    the first chain's name) and the partings passed, in order."""

    tokens: list[int]
    sources: list[str]
    partings: list[Parting]


def merge(chains: Mapping[str, Sequence[int]], pick: Callable[[Parting], str | None],
          limit: int | None = None) -> Merged:
    """Walk the two ``chains`` (name -> tokens; the first name labels the tokens they share)
    together, at most ``limit`` tokens. Where one ends, the other goes on alone (a draft still
    streaming has not ended). ``pick(parting)`` returns the name to follow, or None to stop
    the walk there."""
    if len(chains) != 2:
        raise ValueError(f"merge takes two chains, not {len(chains)}")
    (name_a, a), (name_b, b) = ((n, [int(t) for t in c]) for n, c in chains.items())
    limit = max(len(a), len(b)) if limit is None else limit
    out = Merged([], [], [])
    i = j = 0
    while len(out.tokens) < limit and i < len(a) and j < len(b):
        if a[i] == b[j]:
            _emit(out, [a[i]], name_a)
            i, j = i + 1, j + 1
            continue
        parting = Parting(len(out.tokens), out.tokens[-1] if out.tokens else None,
                          {name_a: a[i], name_b: b[j]})
        name = pick(parting)
        if name is None:
            return out
        out.partings.append(parting)
        taken, other, at_taken, at_other = (a, b, i, j) if name == name_a else (b, a, j, i)
        rejoin = _rejoin(taken, at_taken, other, at_other)
        end = len(taken) if rejoin is None else rejoin[0]
        _emit(out, taken[at_taken:end], name)
        if rejoin is None:
            return _cut(out, limit)
        i, j = rejoin if name == name_a else rejoin[::-1]
    # one chain ended: the other goes on alone
    _emit(out, a[i:], name_a)
    _emit(out, b[j:], name_b)
    return _cut(out, limit)


def _rejoin(taken: list[int], at_taken: int, other: list[int], at_other: int
            ) -> tuple[int, int] | None:
    """The first position after ``at_taken`` from which ``taken`` goes on as ``other`` does
    somewhere from ``at_other`` on, for ANCHOR tokens: (position in taken, in other)."""
    for x in range(at_taken + 1, len(taken) - ANCHOR + 1):
        anchor = taken[x:x + ANCHOR]
        for y in range(at_other, len(other) - ANCHOR + 1):
            if other[y:y + ANCHOR] == anchor:
                return x, y
    return None


def _emit(out: Merged, tokens: Sequence[int], source: str) -> None:
    out.tokens.extend(tokens)
    out.sources.extend([source] * len(tokens))


def _cut(out: Merged, limit: int) -> Merged:
    del out.tokens[limit:], out.sources[limit:]
    return out


def partings_decided(chains: Mapping[str, Sequence[int]], caption: Sequence[int]
                     ) -> list[tuple[Parting, str]]:
    """The partings of ``chains`` the verifier's ``caption`` decided, each with the name of
    the chain whose token the caption has there: the walk follows the caption, and stops
    where neither chain has its token or the walk left it (a chain that went on unlike the
    caption before re-joining the other)."""
    caption = [int(t) for t in caption]

    def along_caption(parting: Parting) -> str | None:
        if parting.at >= len(caption):
            return None
        return next((name for name, token in parting.tokens.items()
                     if token == caption[parting.at]), None)

    merged = merge(chains, along_caption)
    decided = []
    for parting in merged.partings:
        if merged.tokens[:parting.at] != caption[:parting.at]:
            break
        decided.append((parting, along_caption(parting)))
    return decided
