"""A run's record, one way for every command that captions windows (drive, caption, bench
engine's live graphs, bench split): caption status names, and the lossless check with its one
rule and its tally.

The rule: a FINAL caption made under exact acceptance must equal the verifier alone on the same
window (``lossless``); one made under a relaxed acceptance rule is lossy by choice, compared all
the same and counted apart (``lossy_same_as_verifier``), never as lossless; a sampled decoding
follows the verifier's distribution, not its tokens for one seed, so it is not compared (the
distribution is what test_speculative_* prove). Pure: no ROS, no models of its own.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from crossspec_ros.sync.captions import CaptionStatus, DraftState, UnverifiedReason

# Caption.msg's STATUS_* codes by name, and the two a window ends in
STATUS_NAMES: dict[int, str] = {int(status): status.name for status in CaptionStatus}
FINISHED: tuple[str, str] = (CaptionStatus.FINAL.name, CaptionStatus.UNVERIFIED.name)
# its REASON_* and DRAFT_* codes in the words the terminal, the JSON and the viz use
REASON_WORDS: dict[int, str] = {
    int(reason): "" if reason is UnverifiedReason.NONE
    else reason.name.lower().replace("_", " ").replace("rgb", "RGB")
    for reason in UnverifiedReason}
DRAFT_STATE_WORDS: dict[int, str] = {int(state): state.name.lower().replace("_", " ")
                                     for state in DraftState}

SAMPLED_NOT_CHECKED = (
    "the lossless check compares tokens, which only greedy decoding keeps; with sampling the "
    "confirmed caption follows the verifier's distribution (tested in test_speculative_*), "
    "not its tokens for one seed: not compared")


def status_name(code: int) -> str:
    """A Caption's status code as its name (an unknown code as ``STATUS n``)."""
    return STATUS_NAMES.get(int(code), f"STATUS {code}")


def checkable(engine: Any) -> bool:
    """Whether the engine's captions can be compared token for token (greedy decoding)."""
    return engine.config.mode == "greedy"


def verdict(same: bool, rule: str = "") -> dict[str, bool]:
    """The row field for one comparison with the verifier alone: ``lossless``, or under a
    relaxed acceptance ``rule`` ``lossy_same_as_verifier``."""
    return {"lossy_same_as_verifier" if rule else "lossless": bool(same)}


def lossless_verdict(engine: Any, window: Any, tokens: list[int], rule: str = ""
                     ) -> dict[str, Any]:
    """The verifier alone on ``window`` against the caption's ``tokens``, as row fields:
    ``verifier_only_ms``, ``verifier_only_text`` and the verdict (see :func:`verdict`)."""
    t0 = time.perf_counter()
    alone = engine.verifier_only(window)
    return {"verifier_only_ms": round((time.perf_counter() - t0) * 1e3, 2),
            "verifier_only_text": engine.verifier.tokenizer.decode(alone,
                                                                   skip_special_tokens=True),
            **verdict(alone == list(tokens), rule)}


class LosslessTally:
    """The lossless check's counts over a run's rows (``add``), in bounded memory: exact
    captions checked and equal, lossy ones (relaxed rules) checked and equal, apart, and the
    first ``keep`` windows that were not lossless."""

    def __init__(self, keep: int = 100) -> None:
        self.checked = self.lossless = 0
        self.lossy = self.lossy_same = 0
        self.rules: set[str] = set()
        self.not_lossless: list[Any] = []
        self.keep = keep

    def add(self, row: dict[str, Any], key: Any = None) -> None:
        if "lossless" in row:
            self.checked += 1
            self.lossless += bool(row["lossless"])
            if not row["lossless"] and len(self.not_lossless) < self.keep:
                self.not_lossless.append(key if key is not None else row.get("window"))
        if "lossy_same_as_verifier" in row:
            self.lossy += 1
            self.lossy_same += bool(row["lossy_same_as_verifier"])
            if row.get("acceptance_rule"):
                self.rules.add(row["acceptance_rule"])

    @property
    def all_lossless(self) -> bool:
        return self.lossless == self.checked

    def summary(self) -> dict[str, Any]:
        """``lossless``/``lossless_checked`` (and the windows that were not), and where any
        caption was lossy by choice ``lossy_windows``, ``lossy_same_as_verifier`` and
        ``acceptance_rules``."""
        out: dict[str, Any] = {"lossless": self.lossless, "lossless_checked": self.checked,
                               "not_lossless": list(self.not_lossless)}
        if self.lossy:
            out.update(lossy_windows=self.lossy, lossy_same_as_verifier=self.lossy_same,
                       acceptance_rules=sorted(self.rules))
        return out


def lossy_words(lossless: Mapping[str, Any]) -> str:
    """The captions made under a relaxed acceptance rule, in the words every command's summary
    line uses; ``lossless``: a summary with ``LosslessTally.summary``'s lossy keys."""
    return (f"LOSSY ({', '.join(lossless['acceptance_rules'])}): {lossless['lossy_windows']} "
            f"captions under a relaxed acceptance rule, {lossless['lossy_same_as_verifier']} "
            "of them the verifier's own")
