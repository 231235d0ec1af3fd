"""A trace of a model's device calls, window by window: what a cost profile is checked against.

``CallTrace.install`` times every call of a model's vision encoder and language model (kind,
frames or rows, cached positions before it, milliseconds to the device's completion: the
device is synchronized before and after each call, so a call's time is its own and not the
host's). On the static runtime the calls are its steps (``StaticLM.chain``: on a GPU its
compiled CUDA-graph replays fire no module hooks), on the transformers runtime the language
model's forwards. ``window(key)`` files the calls made inside it under ``key``.

The kinds are the emulation's (``models/emulated.py``): "vision" (frames), "prefill" (a forward
that reaches into the prompt) and "pass" (a forward over generated tokens only), told apart by
the emulation's own rule (``emulated.forward_kind``), so ``CostProfile.call_ms(role, kind,
count)`` prices a traced call as the emulation would.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from crossspec_ros.models.emulated import (
    forward_kind,
    forward_position,
    forward_rows,
    wrap_vision,
)
from crossspec_ros.models.streams import synchronize


@dataclass(frozen=True)
class TracedCall:
    """One device call: ``count`` frames (vision) or rows (a forward), ``pos`` positions
    cached before it, ``ms`` from its start to the device's completion."""

    role: str
    kind: str
    count: int
    pos: int
    ms: float

    def as_list(self) -> list[Any]:
        return [self.role, self.kind, self.count, self.pos, round(self.ms, 4)]


@dataclass
class CallTrace:
    """The calls of the models it is installed on, filed by window (calls outside a window
    are counted, not kept)."""

    windows: dict[str, list[TracedCall]] = field(default_factory=dict)
    outside: int = 0
    _current: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextlib.contextmanager
    def window(self, key: str) -> Iterator[list[TracedCall]]:
        """File the calls made until the block ends under ``key`` (yields their list)."""
        if key in self.windows:
            raise ValueError(f"window {key!r} is traced already")
        calls = self.windows.setdefault(key, [])
        self._current = key
        try:
            yield calls
        finally:
            self._current = None

    def record(self, call: TracedCall) -> None:
        with self._lock:
            if self._current is None:
                self.outside += 1
            else:
                self.windows[self._current].append(call)

    def install(self, model: Any, role: str) -> Callable[[], None]:
        """Trace ``model``'s calls as ``role`` ("verifier" or "drafter"); returns the undo.
        Install on the model (twin) the runs use: twins taken before do not see it."""
        sync = functools.partial(synchronize, model.device, getattr(model, "stream", None))
        own_tokens = model.prompt_layout()[0]
        undo: list[Callable[[], None]] = []

        def timed(kind_of: Callable[..., tuple[str, int, int]], method: Any) -> Any:
            @functools.wraps(method)
            def call(*args: Any, **kwargs: Any) -> Any:
                kind, count, pos = kind_of(*args, **kwargs)
                sync()
                t0 = time.perf_counter()
                out = method(*args, **kwargs)
                sync()
                self.record(TracedCall(role, kind, count, pos,
                                       (time.perf_counter() - t0) * 1e3))
                return out
            return call

        def forward_call(pos: int, rows: int) -> tuple[str, int, int]:
            return forward_kind(pos, own_tokens), rows, pos

        runtime = getattr(model, "runtime", None)
        if runtime is not None:  # the static runtime's steps: (slot, pos, embeds [1, q, d])
            chain = runtime.chain
            runtime.chain = timed(
                lambda _slot, pos, embeds, **_kw: forward_call(int(pos), int(embeds.shape[1])),
                chain)
            undo.append(lambda: runtime.__dict__.pop("chain", None))
        else:
            lm = model.language_model_parts()[0]
            forward = lm.forward
            lm.forward = timed(
                lambda *a, **kw: forward_call(forward_position(kw), forward_rows(a, kw)), forward)
            undo.append(lambda: lm.__dict__.pop("forward", None))
        undo += wrap_vision(model, lambda method, frames_of: timed(
            lambda *a, **kw: ("vision", frames_of(a, kw), 0), method))

        def remove() -> None:
            for step in reversed(undo):
                step()
        return remove

    def to_json(self) -> dict[str, list[list[Any]]]:
        """key -> [[role, kind, count, pos, ms], ...]"""
        return {key: [call.as_list() for call in calls] for key, calls in self.windows.items()}


def calls_from_json(rows: list[list[Any]]) -> list[TracedCall]:
    return [TracedCall(str(r[0]), str(r[1]), int(r[2]), int(r[3]), float(r[4])) for r in rows]
