"""What the engine streams out while it works on a window."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class EventKind(enum.Enum):
    DRAFT = "draft"                          # the draft grew (or restarted: new revision)
    DRAFT_ERROR = "draft_error"              # the drafter failed; the verifier goes on alone
    VERIFIER_PREFILL_DONE = "verifier_prefill_done"
    CONFIRMED = "confirmed"                  # new confirmed tokens (verifier's own output)
    FINAL = "final"                          # the window's caption is complete


@dataclass(frozen=True)
class EngineEvent:
    """One step of a window's life; ``t_ms`` is monotonic ms after the window closed.

    DRAFT: ``tokens`` is the whole draft (drafter ids) of ``revision``, ``text`` its text.
    CONFIRMED: ``tokens`` are the new tokens at caption position ``base``; ``text`` is the
    whole confirmed text so far. FINAL: ``tokens``/``text`` are the whole caption.
    """

    kind: EventKind
    window_id: int
    t_ms: float
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    base: int = 0
    revision: int = 0
    done: bool = False
    prefill_ms: float = float("nan")
    log_probs: list[float] = field(default_factory=list)  # DRAFT: per token, as ``tokens``
