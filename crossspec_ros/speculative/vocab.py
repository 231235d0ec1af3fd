"""Vocabulary bridging between a drafter and the verifier.

- Shared ids (EventGPT and Video-LLaVA share ids 0-31999): draft tokens are proposed as they
  are, cut before the first id outside the verifier's proposable range (special tokens above
  it differ between the models and must never be proposed).
- Different tokenizers (a generic LLaVA drafter): the draft is bridged through text. The
  draft text must extend the confirmed text; the whitespace-normalised text is re-tokenized
  with the verifier's tokenizer. While the draft is still growing, its last word may be
  incomplete (and would tokenize differently once complete), so it is held back until a
  space follows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class SharedVocabulary:
    """Draft ids are verifier ids below ``proposable_ids``."""

    def __init__(self, proposable_ids: int) -> None:
        self.proposable_ids = proposable_ids

    def to_target(self, draft_tokens: Sequence[int], confirmed: Sequence[int],
                  draft_done: bool) -> tuple[list[int], int]:
        """(tokens from caption start in verifier ids, base 0), cut at the first special id."""
        out: list[int] = []
        for token in draft_tokens:
            if not 0 <= token < self.proposable_ids:
                break
            out.append(int(token))
        return out, 0


class TextBridge:
    """Re-tokenizes draft text with the verifier's tokenizer, relative to the confirmed text."""

    def __init__(self, draft_tokenizer: Any, target_tokenizer: Any,
                 proposable_ids: int | None = None) -> None:
        self.draft_tokenizer = draft_tokenizer
        self.target_tokenizer = target_tokenizer
        self.proposable_ids = proposable_ids

    def to_target(self, draft_tokens: Sequence[int], confirmed: Sequence[int],
                  draft_done: bool) -> tuple[list[int], int]:
        """(proposal tokens in verifier ids, their caption position base).

        Returns ([], len(confirmed)) when the draft text does not extend the confirmed text.
        """
        base = len(confirmed)
        draft_text = self.draft_tokenizer.decode(list(draft_tokens), skip_special_tokens=True)
        confirmed_text = self.target_tokenizer.decode(list(confirmed), skip_special_tokens=True)
        if not _normalise(draft_text).startswith(_normalise(confirmed_text)):
            return [], base
        if not draft_done:
            # hold back a possibly incomplete last word
            cut = draft_text.rstrip().rfind(" ")
            draft_text = draft_text[:cut] if cut > 0 else ""
            if len(_normalise(draft_text)) <= len(_normalise(confirmed_text)):
                return [], base
        full = self.target_tokenizer.encode(_normalise(draft_text), add_special_tokens=False)
        if list(full[:base]) != list(confirmed):
            # The verifier's tokenizer splits this text differently from the confirmed tokens
            # (e.g. a merge across the boundary): no proposal this round. Proposals never
            # affect the output, only the speed, so skipping is always safe.
            return [], base
        proposal = [int(t) for t in full[base:]]
        if self.proposable_ids is not None:
            for i, token in enumerate(proposal):
                if not 0 <= token < self.proposable_ids:
                    proposal = proposal[:i]
                    break
        return proposal, base


def _normalise(text: str) -> str:
    return " ".join(text.split())
