"""Turns on one device for several streams' verifier calls, earliest deadline first.

Issue 57 (docs/design-streams.md §4): several camera streams' loops share one verifier and one
device. Every device call of the verifier (its language model's forward: prompt chunks, the
one-stream runtime's steps, the lanes' batched steps; its vision encoder) takes a *turn*: one
call at a time, and when several wait, the one whose window is due first goes next (ties in
the order they asked). A window's due time is what the calling thread says it is
(``due_by``): a closed window's close plus its budget; a window still open (its frames
prefilled live) is due a window length from now, so a closed window's decoding goes before any
open window's prefill. A thread that says nothing is due at once (FIFO with the others).

Why turns, and not N threads at once: on a GPU one call runs at a time anyway and the order
decides who is late; on the CPU N threads of torch work on the same cores oversubscribe them
(FACTS.md: two torch threads on 2 cores collapse). Turns never change what a call computes,
so every exactness contract stands.

Install after the emulation (``emulate``) and before taking the model's twins: the turn must
be the outer wrapper of a vision call (a thread holding the emulated device while it waits for
a turn would block the turn's holder), and twins copy the wrappers installed before them.
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from crossspec_ros.models.emulated import wrap_vision

_DUE: contextvars.ContextVar[float | None] = contextvars.ContextVar("crossspec_due", default=None)


@dataclass(frozen=True)
class StreamDue:
    """When a stream's calls are due: a closed window's ``budget_s`` after its close; a
    window still open (its live prefill, an early start) ``open_s`` from now. ``shed_s`` > 0:
    a closed window still waiting that long past its due time is given up (overload)."""

    budget_s: float = 0.1
    open_s: float = 1.0
    shed_s: float = 0.0


@contextlib.contextmanager
def due_by(deadline: float) -> Iterator[None]:
    """The device calls this thread makes inside are due at ``deadline`` (monotonic s)."""
    token = _DUE.set(deadline)
    try:
        yield
    finally:
        _DUE.reset(token)


def turn_of(lm: Any) -> contextlib.AbstractContextManager:
    """A turn on the device whose turns are installed on the language model ``lm`` (none
    installed: nothing to wait for): what a static runtime takes around each step."""
    turns = getattr(lm, "_device_turns", None)
    return turns.turn() if turns is not None else contextlib.nullcontext()


class DeviceTurns:
    """One device's turns (module docstring): ``turn()`` around a call, or ``install(model)``
    so every forward and vision call of the model (and of its twins, which share its modules)
    takes one. Reentrant per thread: a call within a call does not wait."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._cond = threading.Condition()
        self._waiting: list[tuple[float, int, int]] = []  # (due, order asked, thread)
        self._order = itertools.count()
        self._holder: int | None = None
        self._depth = 0
        self.turns = 0
        self.waited_turns = 0  # turns that waited for another call
        self.busy_s = 0.0  # the turns' held time, summed: the device's busy time
        self._held_since = 0.0

    def acquire(self) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._holder == me:
                self._depth += 1
                return
            due = _DUE.get()
            entry = (self.clock() if due is None else due, next(self._order), me)
            if self._holder is not None or self._waiting:
                self.waited_turns += 1
            heapq.heappush(self._waiting, entry)
            while self._holder is not None or self._waiting[0] is not entry:
                self._cond.wait()
            heapq.heappop(self._waiting)
            self._holder, self._depth = me, 1
            self._held_since = time.monotonic()
            self.turns += 1

    def release(self) -> None:
        with self._cond:
            if self._holder != threading.get_ident():
                return  # a hook's release after a forward whose pre-hook never ran
            self._depth -= 1
            if self._depth == 0:
                self._holder = None
                self.busy_s += time.monotonic() - self._held_since
                self._cond.notify_all()

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()

    def install(self, model: Any) -> Callable[[], None]:
        """Every language-model call and vision call of ``model`` (and its twins) takes a
        turn; returns the undo. The static runtimes take it around each step (``turn_of``
        their language model: outside a compiled step, whose graph cannot hold a lock); the
        transformers runtime's forwards take it in hooks, before any other pre-hook (the
        emulation's) and given back after every post-hook registered before it, so a call's
        emulated time is inside its turn; install after ``emulate``, so the vision turn wraps
        the emulated vision call too."""
        lm = model.language_model_parts()[0]
        lm._device_turns = self

        def before(*_: Any) -> None:
            if not torch.compiler.is_compiling():  # compiled: the runtime took the turn
                self.acquire()

        def after(*_: Any) -> None:
            if not torch.compiler.is_compiling():
                self.release()

        undo = [lm.register_forward_pre_hook(before, prepend=True).remove,
                lm.register_forward_hook(after, always_call=True).remove,
                lambda: lm.__dict__.pop("_device_turns", None)]

        def with_turn(method: Any, _frames_of: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                with self.turn():
                    return method(*args, **kwargs)
            return call

        undo += wrap_vision(model, with_turn)

        def uninstall() -> None:
            for step in undo:
                step()
        return uninstall

    def report(self) -> dict[str, Any]:
        return {"turns": self.turns, "waited_turns": self.waited_turns,
                "busy_s": round(self.busy_s, 3)}
