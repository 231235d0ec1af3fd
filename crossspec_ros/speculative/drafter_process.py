"""The drafter in a process of its own, as the graph's draft node runs it.

On CPU, a drafter thread beside the verifier shares one Python interpreter: tiny models spend
most of their time in Python, so the two take turns instead of running side by side (the
verifier's prefill measured 1.1-1.4x slower, the draft arriving after the verifier had decoded
most of the caption plainly). A ``DrafterProcess`` loads the drafter in a child process and
serves one window at a time over a pipe: the window's events go in, the draft comes back
token by token into a ``DraftChannel`` the engine reads (``run_window(draft=...)``), and the
confirmed caption the engine pushes goes to the child so its drafter re-syncs, exactly the
protocol of the draft and verifier nodes.

Messages are a JSON header, then raw array bytes: nothing is unpickled.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from crossspec_ros.speculative.drafting import DraftChannel
from crossspec_ros.speculative.events import EventKind

_ARRAYS = ("t", "x", "y", "p")
READY_TIMEOUT_S = 120.0


def _send(conn: Any, header: dict, arrays: Sequence[np.ndarray] = ()) -> None:
    conn.send_bytes(json.dumps(header).encode())
    for array in arrays:
        conn.send_bytes(np.ascontiguousarray(array).tobytes())


def _recv(conn: Any) -> dict:
    return json.loads(conn.recv_bytes().decode())


class RemoteWindow:
    """What a drafter's ``prepare`` reads of a window: its id and its events."""

    def __init__(self, window_id: int, events: Any) -> None:
        self.id, self.events = window_id, events


class _ForwardingChannel(DraftChannel):
    """The engine's side of a window: confirmed tokens and the stop go to the child."""

    def __init__(self, owner: DrafterProcess, window_id: int, lookahead: int) -> None:
        super().__init__(lookahead)
        self.owner, self.window_id = owner, window_id

    def push_confirmed(self, confirmed_draft_ids: list[int], lookahead: int | None = None
                       ) -> None:
        super().push_confirmed(confirmed_draft_ids, lookahead)
        self.owner._post({"kind": "confirmed", "window": self.window_id,
                          "tokens": [int(t) for t in confirmed_draft_ids],
                          "lookahead": lookahead})

    def set_lookahead(self, lookahead: int) -> None:
        super().set_lookahead(lookahead)
        self.owner._post({"kind": "lookahead", "window": self.window_id,
                          "lookahead": lookahead})

    def stop(self) -> None:
        super().stop()
        self.owner._post({"kind": "stop", "window": self.window_id})


class DrafterProcess:
    """A drafter loaded from ``source`` (a directory ``models.pair.load_drafter`` reads) in a
    child process; ``start(window)`` gives the channel of one window's draft."""

    def __init__(self, source: str, *, device: str = "cpu", dtype: str = "fp32",
                 quantization: str = "none", runtime: Any = None,
                 max_new_tokens: int = 64) -> None:
        """``runtime``: the drafter's static_runtime.RuntimeOptions in the child (None: the
        transformers runtime)."""
        ctx = multiprocessing.get_context("spawn")  # no fork of a process with threads
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve,
                                    args=(child, source, device, dtype, quantization, runtime,
                                          max_new_tokens),
                                    name="crossspec-drafter", daemon=True)
        self._process.start()
        child.close()
        self._send_lock = threading.Lock()
        self._channel: _ForwardingChannel | None = None
        self._idle = threading.Event()
        self._idle.set()
        self.first_token_ms: float = float("nan")  # of the latest window, child's clock
        self.error: str | None = None
        self._on_draft: Callable[..., Any] | None = None
        self._looked = threading.Event()      # look(): the child's reply arrived
        self._look: tuple[int, Any] | None = None
        if not self._conn.poll(READY_TIMEOUT_S):
            self.close()
            raise RuntimeError(f"the drafter process did not start within {READY_TIMEOUT_S} s")
        hello = _recv(self._conn)
        if hello["kind"] != "ready":
            self.close()
            if hello.get("model_load_error"):  # said for the user: what, where, what to do
                from crossspec_ros.models.errors import ModelLoadError

                raise ModelLoadError(hello["text"])
            raise RuntimeError(f"the drafter process failed to load {source}: "
                               f"{hello.get('text')}")
        self._reader = threading.Thread(target=self._read, name="crossspec-drafter-reader",
                                        daemon=True)
        self._reader.start()

    def start(self, window: Any, lookahead: int, max_new_tokens: int,
              on_draft: Callable[..., Any] | None = None) -> DraftChannel:
        """Send ``window``'s events to the drafter; returns the channel its draft arrives on
        (hand it to ``SpeculativeEngine.run_window(draft=...)``). ``on_draft``: called on
        the reader thread like ``run_drafter``'s ``emit`` (``EventKind.DRAFT`` with tokens,
        revision, done, text and log_probs; ``EventKind.DRAFT_ERROR`` with text), after the
        channel has the draft (and, with the first one, the drafter's window state)."""
        if not self._idle.wait(timeout=10.0):
            raise RuntimeError("the drafter process did not finish its previous window")
        window_id = int(getattr(window, "id", 0))
        events = window.events
        channel = _ForwardingChannel(self, window_id, lookahead)
        self._channel, self.first_token_ms = channel, float("nan")
        self._on_draft = on_draft
        self._idle.clear()
        header = {"kind": "window", "window": window_id, "lookahead": lookahead,
                  "max_new_tokens": max_new_tokens, "width": events.width,
                  "height": events.height,
                  "dtypes": [str(getattr(events, name).dtype) for name in _ARRAYS]}
        with self._send_lock:
            _send(self._conn, header, [getattr(events, name) for name in _ARRAYS])
        return channel

    def look(self, window: Any, timeout: float = 10.0) -> Any:
        """What the drafter sees in ``window`` (``window_state``: a float32 tensor), computed
        in the child: a draft head's input at no cost to this process. Blocks until it is
        there (call it from a thread of its own)."""
        if not self._idle.wait(timeout=timeout):
            raise RuntimeError("the drafter process did not finish its previous window")
        window_id = int(getattr(window, "id", 0))
        events = window.events
        self._looked.clear()
        header = {"kind": "look", "window": window_id, "width": events.width,
                  "height": events.height,
                  "dtypes": [str(getattr(events, name).dtype) for name in _ARRAYS]}
        with self._send_lock:
            _send(self._conn, header, [getattr(events, name) for name in _ARRAYS])
        if not self._looked.wait(timeout=timeout) or self._look is None:
            raise RuntimeError("the drafter process did not answer")
        looked_id, state = self._look
        if isinstance(state, str):
            raise RuntimeError(state)
        if looked_id != window_id:
            raise RuntimeError("the drafter process answered for another window")
        return torch.from_numpy(state.copy())

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until the child has let go of its window (stopped, failed or gone)."""
        return self._idle.wait(timeout)

    def _post(self, message: dict) -> None:
        with self._send_lock:
            _send(self._conn, message)

    def _read(self) -> None:
        while True:
            try:
                message = _recv(self._conn)
            except (EOFError, OSError):
                self._idle.set()
                return
            channel = self._channel
            kind = message["kind"]
            if kind == "stopped":
                self._idle.set()
            elif kind == "state":
                payload = self._conn.recv_bytes()
                self._look = (message["window"], message.get("error") or
                              np.frombuffer(payload, dtype=np.float32))
                self._looked.set()
            elif kind == "draft" and message.get("state"):
                state = np.frombuffer(self._conn.recv_bytes(), dtype=np.float32)
                if channel is not None and message["window"] == channel.window_id:
                    channel.set_window_state(torch.from_numpy(state.copy()))
            if channel is None or message.get("window") != channel.window_id \
                    or kind not in ("draft", "error"):
                continue  # a late message of an earlier window, or handled above
            on_draft = self._on_draft
            if kind == "draft":
                if message["first_token_ms"] is not None:
                    self.first_token_ms = message["first_token_ms"]
                channel.set_draft(message["tokens"], message["revision"], message["done"])
                if on_draft is not None:
                    on_draft(EventKind.DRAFT, tokens=message["tokens"],
                             revision=message["revision"], done=message["done"],
                             text=message.get("text", ""),
                             log_probs=message.get("log_probs", []))
            else:
                self.error = message["text"]
                with channel.cond:
                    channel.done = True
                    channel.cond.notify_all()
                if on_draft is not None:
                    on_draft(EventKind.DRAFT_ERROR, text=message["text"])

    @property
    def alive(self) -> bool:
        """Whether the child process still runs (`crossspec drive` reports one that died)."""
        return self._process.is_alive()

    def close(self) -> None:
        """End the child process (also at exit: it is a daemon)."""
        try:
            with self._send_lock:
                _send(self._conn, {"kind": "quit"})
        except (OSError, ValueError, AttributeError):
            pass
        self._process.join(timeout=5.0)
        if self._process.is_alive():
            self._process.kill()
        self._conn.close()

    def __enter__(self) -> DrafterProcess:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


# -- the child --------------------------------------------------------------------------------
def _serve(conn: Any, source: str, device: str, dtype: str, quantization: str,
           runtime: Any = None, max_new_tokens: int = 64) -> None:
    """The child's loop: load the drafter, then draft one window at a time."""
    try:
        from crossspec_ros.models.pair import load_drafter
        from crossspec_ros.models.static_runtime import use_static_runtime
        from crossspec_ros.process_tuning import settle_heap, tune_process_for_models

        tune_process_for_models(device)
        drafter = load_drafter(source, device=device, dtype=dtype, quantization=quantization)
        if runtime is not None:
            use_static_runtime(drafter, runtime, max_new_tokens)
        settle_heap()
    except Exception as err:  # reported to the parent, which raises it
        from crossspec_ros.models.errors import ModelLoadError

        if isinstance(err, ModelLoadError):  # raised there as it is (a missing file, ...)
            _send(conn, {"kind": "error", "text": str(err), "model_load_error": True})
        else:
            _send(conn, {"kind": "error", "text": f"{type(err).__name__}: {err}"})
        return
    _send(conn, {"kind": "ready"})
    send_lock = threading.Lock()
    window: _ChildWindow | None = None
    while True:
        try:
            message = _recv(conn)
        except (EOFError, OSError):
            break
        kind = message["kind"]
        if kind == "quit":
            break
        if kind == "window":
            arrays = [np.frombuffer(conn.recv_bytes(), dtype=dt)
                      for dt in message["dtypes"]]
            window = _ChildWindow(drafter, message, arrays, conn, send_lock)
        elif kind == "look":
            arrays = [np.frombuffer(conn.recv_bytes(), dtype=dt)
                      for dt in message["dtypes"]]
            _answer_look(drafter, message, arrays, conn, send_lock)
        elif window is not None and message.get("window") == window.id:
            if kind == "confirmed":
                window.channel.push_confirmed(message["tokens"], message["lookahead"])
            elif kind == "lookahead":
                window.channel.set_lookahead(message["lookahead"])
            elif kind == "stop":
                window.finish()
                window = None
                with send_lock:
                    _send(conn, {"kind": "stopped"})
    if window is not None:
        window.finish()


def _answer_look(drafter: Any, header: dict, arrays: list[np.ndarray], conn: Any,
                 send_lock: threading.Lock) -> None:
    from crossspec_ros.events.batch import EventBatch

    reply: dict = {"kind": "state", "window": int(header["window"])}
    state = np.zeros(0, dtype=np.float32)
    try:
        events = EventBatch(*arrays, int(header["width"]), int(header["height"]))
        window = RemoteWindow(reply["window"], events)
        state = drafter.window_state(drafter.prepare(window)).numpy().astype(np.float32)
    except Exception as err:  # the parent raises it where it asked
        reply["error"] = f"{type(err).__name__}: {err}"
    with send_lock:
        _send(conn, reply, [state])


class _ChildWindow:
    """One window's drafting in the child: ``run_drafter`` on a thread, each draft sent."""

    def __init__(self, drafter: Any, header: dict, arrays: list[np.ndarray], conn: Any,
                 send_lock: threading.Lock) -> None:
        from crossspec_ros.events.batch import EventBatch
        from crossspec_ros.speculative.drafting import run_drafter
        from crossspec_ros.speculative.events import EngineEvent
        from crossspec_ros.speculative.stats import WindowStats

        self.id = int(header["window"])
        self.channel = DraftChannel(int(header["lookahead"]))
        events = EventBatch(*arrays, int(header["width"]), int(header["height"]))
        t0 = time.monotonic()
        first: list[float] = []

        def emit(kind: EventKind, **fields: Any) -> EngineEvent:
            event = EngineEvent(kind, self.id, (time.monotonic() - t0) * 1e3, **fields)
            arrays: list[np.ndarray] = []
            if kind is EventKind.DRAFT:
                reply = {"kind": "draft", "window": self.id, "tokens": event.tokens,
                         "revision": event.revision, "done": event.done,
                         "text": event.text, "log_probs": event.log_probs,
                         "first_token_ms": None if first else event.t_ms}
                state = self.channel.window_state
                if not first and state is not None:  # once, with the window's first draft
                    reply["state"] = True
                    arrays = [state.detach().float().cpu().numpy().reshape(-1)]
                first.append(event.t_ms)
            else:
                reply = {"kind": "error", "window": self.id, "text": event.text}
            if kind in (EventKind.DRAFT, EventKind.DRAFT_ERROR):
                with send_lock:
                    _send(conn, reply, arrays)
            return event

        self.thread = threading.Thread(
            target=run_drafter, name=f"crossspec-drafter-{self.id}", daemon=True,
            args=(drafter, RemoteWindow(self.id, events), self.channel, emit, WindowStats(),
                  int(header["max_new_tokens"])))
        self.thread.start()

    def finish(self) -> None:
        self.channel.stop()
        self.thread.join()
