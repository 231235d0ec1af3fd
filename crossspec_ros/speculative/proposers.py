"""Proposers: where the tokens the verifier checks in bulk come from.

1. ``DraftStreamProposer``: the live draft of this window from the event drafter, valid while
   it agrees with the confirmed prefix (the drafter re-syncs after a rejection).
2. ``NgramProposer`` over this window's draft caption, and 3. over the confirmed captions of
   previous windows: prompt-lookup style, free per proposal (no model runs), which is how
   crossspec escapes the "draft decodes as slowly as the target" trap.

All are pure: token lists in, token lists out; thread-safety is the scheduler's business.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence


class DraftStreamProposer:
    """Proposes the draft's continuation of the confirmed prefix, if the draft agrees with it.

    The draft is a token sequence from caption position ``base`` (0 = caption start) on; only
    drafts whose tokens match the confirmed caption where they overlap can propose.
    """

    name = "draft_stream"

    def __init__(self) -> None:
        self.base = 0
        self.tokens: list[int] = []
        self.revision = 0

    def update(self, tokens: Sequence[int], base: int = 0, revision: int = 0) -> None:
        """Replace the draft (a new revision) or extend it (same revision, longer tokens)."""
        self.base, self.tokens, self.revision = base, list(tokens), revision

    def propose(self, confirmed: Sequence[int], max_tokens: int) -> list[int]:
        n = len(confirmed)
        if max_tokens <= 0 or self.base > n:
            return []
        overlap = confirmed[self.base:]
        if list(self.tokens[: len(overlap)]) != list(overlap):
            return []
        start = n - self.base
        return list(self.tokens[start:start + max_tokens])


class NgramProposer:
    """Prompt-lookup proposals: find the confirmed context's last n tokens in the sources and
    propose what followed them there (longest n first, most recent source first).

    ``min_ngram=0`` with an empty context proposes the start of a source: consecutive windows
    of a drive tend to start their captions alike.
    """

    def __init__(self, name: str, max_ngram: int = 4, min_ngram: int = 1,
                 max_sources: int = 8) -> None:
        if not 0 <= min_ngram <= max_ngram:
            raise ValueError("need 0 <= min_ngram <= max_ngram")
        self.name = name
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.sources: deque[list[int]] = deque(maxlen=max_sources)

    def set_sources(self, sources: Iterable[Sequence[int]]) -> None:
        self.sources.clear()
        for source in sources:
            self.add_source(source)

    def add_source(self, tokens: Sequence[int]) -> None:
        """Add a source; the most recently added one is searched first."""
        if tokens:
            self.sources.appendleft(list(tokens))

    def propose(self, confirmed: Sequence[int], max_tokens: int) -> list[int]:
        if max_tokens <= 0:
            return []
        context = list(confirmed)
        for n in range(min(self.max_ngram, len(context)), self.min_ngram - 1, -1):
            if n == 0:
                return self._caption_start(context, max_tokens)
            pattern = context[-n:]
            for source in self.sources:
                continuation = _find_continuation(source, pattern, max_tokens)
                if continuation:
                    return continuation
        return []

    def _caption_start(self, context: list[int], max_tokens: int) -> list[int]:
        if context:  # n-gram 0 means "no context": only at the start of a caption
            return []
        return list(self.sources[0][:max_tokens]) if self.sources else []


def _find_continuation(source: list[int], pattern: list[int], max_tokens: int) -> list[int]:
    """Tokens after the last occurrence of ``pattern`` in ``source`` (not overlapping its end)."""
    n = len(pattern)
    for start in range(len(source) - n - 1, -1, -1):
        if source[start:start + n] == pattern:
            return source[start + n:start + n + max_tokens]
    return []
