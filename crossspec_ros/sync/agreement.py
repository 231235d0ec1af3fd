"""How close a window's draft caption came to its final (confirmed) caption (no rclpy).

The draft is a product: a robot reads it within milliseconds of the window's close, before the
verifier has confirmed anything. Two numbers say how far it can be trusted:

- **token agreement**: the share of the final caption's tokens (the verifier's tokenizer) that
  the draft has, in the same order (their longest common subsequence over the final caption's
  length): 1.0 for a draft that says everything the final caption says, in order, whatever it
  adds;
- **word error rate** (WER): the word-level edit distance (substitutions, insertions,
  deletions) from the draft to the final caption over the final caption's word count, as
  speech recognition scores a transcript: 0.0 for the same words, above 1.0 for a draft much
  longer than the caption. Words are compared lower-cased, split at whitespace.

Example: final "a red car turns left", draft "a red car drives": WER 2/5 = 0.4 (one
substitution, one deletion); with one token per word, token agreement 3/5 = 0.6.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Tokenize = Callable[[str], Sequence[int]]


@dataclass(frozen=True)
class DraftAgreement:
    token_agreement: float  # NaN when it cannot be told (no tokenizer, an empty caption)
    word_error_rate: float  # NaN for an empty final caption


def edit_distance(a: Sequence, b: Sequence) -> int:
    """Levenshtein distance between two sequences (unit costs)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def common_subsequence(a: Sequence, b: Sequence) -> int:
    """Length of the longest common subsequence of ``a`` and ``b``."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, 1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def word_error_rate(draft: str, final: str) -> float:
    reference = final.lower().split()
    if not reference:
        return math.nan
    return edit_distance(draft.lower().split(), reference) / len(reference)


def token_agreement(draft: Sequence[int], final: Sequence[int]) -> float:
    if not final:
        return math.nan
    return common_subsequence(list(draft), list(final)) / len(final)


def draft_agreement(draft: str, final: str, tokenize: Tokenize | None = None
                    ) -> DraftAgreement:
    """Both numbers for one window; ``tokenize``: the verifier's text -> ids (without special
    tokens); without it token agreement is NaN."""
    tokens = math.nan
    if tokenize is not None:
        tokens = token_agreement(tokenize(draft), tokenize(final))
    return DraftAgreement(tokens, word_error_rate(draft, final))


class AgreementTally:
    """Agreement over the windows so far, for /diagnostics: ``add`` only queues the texts (it
    runs where a FINAL caption is published, which must not wait), ``summary`` scores what
    is queued and returns the running means."""

    def __init__(self, tokenize: Tokenize | None = None) -> None:
        self.tokenize = tokenize
        self._queued: list[tuple[str, str]] = []
        self.windows = 0
        self._token_sum, self._token_n, self._wer_sum = 0.0, 0, 0.0
        self.last: DraftAgreement | None = None

    def add(self, draft: str, final: str) -> None:
        if draft and final.strip():
            self._queued.append((draft, final))

    def summary(self) -> dict[str, float | int | None]:
        queued, self._queued = self._queued, []
        for draft, final in queued:
            self.last = draft_agreement(draft, final, self.tokenize)
            self.windows += 1
            self._wer_sum += self.last.word_error_rate
            if not math.isnan(self.last.token_agreement):
                self._token_sum += self.last.token_agreement
                self._token_n += 1

        def mean(total: float, n: int) -> float | None:
            return round(total / n, 3) if n else None

        return {"draft_agreement_windows": self.windows,
                "draft_token_agreement_mean": mean(self._token_sum, self._token_n),
                "draft_word_error_rate_mean": mean(self._wer_sum, self.windows)}


def text_to_ids(tokenizer: object) -> Tokenize:
    """A transformers tokenizer as ``Tokenize`` (no special tokens: captions only)."""
    return lambda text: tokenizer.encode(text, add_special_tokens=False)
