"""A training run interrupted at a chosen step (resume tests)."""

from __future__ import annotations

from collections.abc import Callable


class SimulatedInterruptError(Exception):
    """Raised by ``interrupt_at``'s progress callback: the run stops as if killed."""


def interrupt_at(stop_step: int) -> Callable[[int, float], None]:
    """A training progress callback that interrupts the run when ``stop_step`` is reported."""
    def progress(step: int, _loss: float) -> None:
        if step == stop_step:
            raise SimulatedInterruptError
    return progress
