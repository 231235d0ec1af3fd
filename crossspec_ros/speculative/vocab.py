"""Vocabulary bridging between a drafter and the verifier, both ways.

``to_target`` turns the draft into proposals in verifier ids; ``to_drafter`` turns the
confirmed caption into drafter ids for the drafter's re-sync. ``make_bridge`` picks one.

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

from crossspec_ros.text import single_spaced


def make_bridge(verifier: Any, drafter: Any | None) -> SharedVocabulary | TextBridge:
    """The bridge between ``verifier`` and ``drafter`` (a model with ``tokenizer`` and
    ``info``). No drafter: drafts from elsewhere share the verifier's ids (the EventGPT
    family shares Video-LLaVA's)."""
    if drafter is None or same_vocabulary(drafter, verifier):
        return SharedVocabulary(verifier.info.proposable_ids,
                                (drafter or verifier).tokenizer)
    return TextBridge(drafter.tokenizer, verifier.tokenizer, verifier.info.proposable_ids)


def same_vocabulary(a: Any, b: Any) -> bool:
    """Whether two models' ordinary ids mean the same tokens."""
    shared = min(a.info.proposable_ids, b.info.proposable_ids)
    ids_a = {i: t for t, i in a.tokenizer.get_vocab().items() if i < shared}
    ids_b = {i: t for t, i in b.tokenizer.get_vocab().items() if i < shared}
    return ids_a == ids_b


class SharedVocabulary:
    """Draft ids are verifier ids below ``proposable_ids``."""

    def __init__(self, proposable_ids: int, draft_tokenizer: Any = None) -> None:
        self.proposable_ids = proposable_ids
        self.draft_tokenizer = draft_tokenizer

    def to_drafter(self, confirmed: Sequence[int], text: str) -> list[int]:
        """The confirmed caption in drafter ids: the same ids, up to the first one outside the
        shared range (the verifier's own specials, or the padding rows of its output head
        that random weights do emit, would index past the drafter's embedding)."""
        out: list[int] = []
        for token in confirmed:
            if not 0 <= token < self.proposable_ids:
                break
            out.append(int(token))
        return out

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

    def to_drafter(self, confirmed: Sequence[int], text: str) -> list[int]:
        """The confirmed caption (its text) re-tokenized with the drafter's tokenizer."""
        return list(self.draft_tokenizer.encode(text, add_special_tokens=False))

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


VocabularyBridge = SharedVocabulary | TextBridge


def confirmed_in_drafter_ids(drafter: Any, confirmed: list[int], text: str) -> list[int]:
    """A remote verifier's confirmed caption in a drafter's ids, when the verifier's
    tokenizer is not at hand (a draft node): the ids themselves when they decode to the
    confirmed text, else the text re-tokenized."""
    tokenizer = drafter.tokenizer
    if all(0 <= t < drafter.info.proposable_ids or t == drafter.info.eos_token_id
           for t in confirmed) \
            and _normalise(tokenizer.decode(confirmed, skip_special_tokens=True)) \
            == _normalise(text):
        return list(confirmed)
    return list(tokenizer.encode(text, add_special_tokens=False))


def _normalise(text: str) -> str:
    return single_spaced(text)
