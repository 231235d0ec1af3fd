"""A static runtime's warm-up runs alone in its process; after it, nothing compiles.

``torch.compile`` is not thread-safe. While inductor traces a graph, ``torch.fx`` patches
``torch.nn.Module.__call__`` for the whole process, so a module called on another thread at
that moment lands in the tracer: in a drive, the verifier's frame encoding failed with
``NameError: module is not installed as a submodule`` while the drafter compiled a step on
its worker thread. So, process-wide:

- model work (every backend runs it inside ``streams.inference``) holds ``COMPILE_GATE``
  shared: the drafter and the verifier work side by side;
- a warm-up (``StaticLM.warm_up``, at configure: the only place that compiles) holds it
  alone: it waits for the work in progress, other threads' new work waits for it, and two
  warm-ups (two nodes configured at once) run one after the other;
- between warm-ups dynamo's stance is ``fail_on_recompile``, so a step no compiled graph
  takes raises instead of compiling on a worker thread, and ``StaticLM.chain`` runs it eager
  (counted). Every guard is evaluated: with ``skip_guard_eval_unsafe`` (only the guards that
  tell the compiled graphs apart; a compiled one-token step of the bundled verifier 0.59 ->
  0.52 ms) two threads stepping at once had calls refused that their graphs take (15 of
  6,000 steps of two tiny models on two threads; none of 16,000 with every guard).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import torch


class CompileGate:
    """Shared by model work, held alone by a warm-up (see the module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._working = 0                   # threads in model work now
        self._warming: int | None = None    # the thread warming up, if one is
        self._warm_ups_waiting = 0          # they go first: new work waits behind them
        self._held = threading.local()      # this thread's depth of model work
        self.compiled = False               # a runtime of this process compiled its steps

    @contextlib.contextmanager
    def model_work(self) -> Iterator[None]:
        """Model work on this thread: waits while a warm-up runs (nested work, and the
        warm-up's own steps, go on)."""
        depth = getattr(self._held, "depth", 0)
        if depth == 0 and self._warming != threading.get_ident():
            with self._cond:
                while self._warming is not None or self._warm_ups_waiting:
                    self._cond.wait()
                self._working += 1
        self._held.depth = depth + 1
        try:
            yield
        finally:
            self._held.depth = depth
            if depth == 0 and self._warming != threading.get_ident():
                with self._cond:
                    self._working -= 1
                    self._cond.notify_all()

    @contextlib.contextmanager
    def warming_up(self) -> Iterator[None]:
        """A warm-up: alone in the process, dynamo free to compile. ``compiled`` set inside
        makes the stance after it ``fail_on_recompile``."""
        me = threading.get_ident()
        if self._warming == me:  # a warm-up inside a warm-up
            yield
            return
        mine = 1 if getattr(self._held, "depth", 0) else 0  # warmed up from model work
        with self._cond:
            self._warm_ups_waiting += 1
            try:
                while self._warming is not None or self._working > mine:
                    self._cond.wait()
            finally:
                self._warm_ups_waiting -= 1
            self._warming = me
            torch.compiler.set_stance("default")
        try:
            yield
        finally:
            with self._cond:
                self._warming = None
                if self.compiled:
                    torch.compiler.set_stance("fail_on_recompile")
                self._cond.notify_all()


COMPILE_GATE = CompileGate()


def refused_by_compiled_graphs(err: BaseException) -> bool:
    """Whether ``err`` is dynamo refusing to compile a call after the warm-up (no compiled
    graph takes its inputs) rather than a failure of the step itself."""
    return isinstance(err, RuntimeError) and "fail_on_recompile" in str(err)
