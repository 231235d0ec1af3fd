"""One window's draft head (``models/draft_head.py``) as a proposer of the engine.

The drafter looks at the window once, on a thread of its own (events -> its window state);
from then on the head continues the confirmed caption in the verifier's ids for a few tens of
microseconds per token, in the verifier's thread, keeping its recurrent state between rounds.
Until the window state is there it proposes nothing; a failing drafter leaves it silent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from crossspec_ros.models.draft_head import DraftHead, HeadState


class HeadRun:
    """The head's proposals for one window."""

    def __init__(self, head: DraftHead, look: Callable[[], torch.Tensor | None]) -> None:
        """``look``: the drafter's window state of this window (run on a thread of its own:
        the drafter here, a ``DrafterProcess.look``, or ``DraftChannel.wait_window_state``
        for the state a draft node publishes; None: there is none, the head stays silent)."""
        self.head = head
        self.context: torch.Tensor | None = None
        self.error: str | None = None
        self._state: HeadState | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._look, args=(look,),
                                        name="crossspec-draft-head", daemon=True)
        self._thread.start()

    @staticmethod
    def local_look(drafter: Any, window: Any) -> Callable[[], torch.Tensor]:
        """The drafter in this process looks at the window."""
        return lambda: drafter.window_state(drafter.prepare(window))

    def _look(self, look: Callable[[], torch.Tensor | None]) -> None:
        try:
            state = look()
            if state is not None and state.numel() != self.head.config.context_dim:
                raise ValueError(
                    f"the drafter's window state has {state.numel()} values, the head reads "
                    f"{self.head.config.context_dim}: run the drafter the head was trained on "
                    "(its head.json names it)")
            self.context = None if state is None else \
                state.float().to(next(self.head.parameters()).device)
        except Exception as err:  # the verifier goes on without the head
            self.error = f"{type(err).__name__}: {err}"
        finally:
            self._ready.set()

    def chain(self, confirmed: list[int], limit: int) -> list[int]:
        """The head's greedy continuation of ``confirmed`` ([] until it has looked)."""
        if not self._ready.is_set() or self.context is None or limit <= 0:
            return []
        chain, self._state = self.head.propose(self.context, confirmed, limit, self._state)
        return chain

    def join(self) -> None:
        self._thread.join()
