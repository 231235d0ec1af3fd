"""Lanes: several streams' decoding steps run as one forward of shape [S lanes, B rows].

Issue 57, stage 1 (docs/design-streams.md, option A). Every stream (camera) owns a *lane*: one
slice along dim 0 of per-layer K/V tensors ``[S, H, M, D]`` (``LanedLM``). A decoding step of
the static runtime (``StaticLM.chain`` with ``rows=B``) becomes one lane's share of an
``[S, B]`` step: embeddings ``[S, B, d]``, positions ``[S, B]``, a boolean mask ``[S, 1, B, M]``
whose rows are cut from the one lower-triangular table at each lane's own position.
Transformers' ``StaticLayer`` writes every batch row at one position, so the lane cache's
layers are ``LaneLayer``s: each lane's B rows are scattered in at that lane's start.

- **Idle lanes are parked.** A lane with nothing to run in a step gets zero rows at positions
  ``[M - B, M)``: a tail of its own lane past every position a real step may write (the lane
  is B positions longer than the pool's caches), so no real row ever reads it.
- **The prompt stays in the pool.** Prompt chunks (``last_only``) run on the shared
  ``StaticLM``'s pool slots as today (live prefill, one-shot prefill); a window's first
  ``rows`` step *adopts* its slot: positions ``[0, pos)`` are copied into the lane bit for bit,
  and every later step of that session runs in the lane. The slot stays held until the
  session ends (its release frees the lane too), as it does today.
- **Unchanged callers.** ``LaneView`` is a runtime with the ``StaticLM`` surface that
  ``StaticSession``, ``LivePrefill`` and ``static_finish`` use, for one lane: each stream
  gets a twin of the verifier on its view (``CaptionModel.with_runtime``), ``use_lanes``.
- **The batcher.** ``StepBatcher.run`` blocks the calling stream's thread until a step carries
  its rows: a step runs when every *active* lane (adopted, not released) has submitted, or
  ``gather_s`` after the first submission, whichever comes first; a lane arriving during a
  step rides the next. The thread that finds the step ready runs it (no batcher thread); the
  clock is injectable.

**Exactness contract.** On one laned runtime (fixed S, B, dtype, device), a stream's rows
(hidden states, logits, so its greedy tokens and the tokens a verification pass accepts) are
bit-identical whatever the other lanes hold or do: idle, parked, other windows, random
content, added or removed mid-run, grouped into steps in any order. So a stream's caption
equals the greedy decoding of its twin with every other lane idle. Why: every op of a Llama
forward is per row (embeddings, RMSNorm, rotary, the GEMMs' rows ``x[r] @ W``, the head) or
reduces within one lane and head (SDPA over ``[lane, head]``, its mask cut from the one
table); the kernels are chosen from the shape, never from the values; the shape ``[S, B]`` is
fixed (idle lanes are padded, not dropped) and a stream's lane is pinned. **Not promised:**
equality with the one-stream runtime (``StaticLM``, steps ``[1, B]``: another GEMM M), with
another S or B, or with another lane index (measured and reported by the tests, not asserted).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.cache_utils import Cache, StaticLayer

from crossspec_ros.models.base import CaptionModel
from crossspec_ros.models.compile_gate import COMPILE_GATE, refused_by_compiled_graphs
from crossspec_ros.models.device_turns import turn_of
from crossspec_ros.models.static_runtime import (
    CUDA_GRAPH_REPLAY,
    RuntimeOptions,
    StaticLM,
    _compiled,
    _configure_compiler,
    use_compile_cache,
    use_static_runtime,
)
from crossspec_ros.models.streams import inference, synchronize

logger = logging.getLogger(__name__)

DEFAULT_GATHER_S = 0.005  # how long a submitted step waits for the other active lanes


class LaneLayer(StaticLayer):
    """A static cache layer whose batch rows are lanes: K/V ``[S, H, M, D]``, each lane's rows
    written from that lane's own start (``lane_start[S]``, shared by the layers, set by the
    step before the forward, as ``cumulative_length`` is for a ``StaticLayer``)."""

    def __init__(self, max_cache_len: int, lane_start: torch.Tensor, rows: int) -> None:
        super().__init__(max_cache_len=max_cache_len)
        self.lane_start = lane_start
        self.row_offsets = torch.arange(rows, device=lane_start.device)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        lanes, heads, rows, _ = key_states.shape
        where = (self.lane_start[:, None] + self.row_offsets[:rows])[:, None, :, None]
        # distinct positions per lane: a scatter without reduction, each value written once
        self.keys.scatter_(2, where.expand(lanes, heads, rows, key_states.shape[-1]),
                           key_states)
        self.values.scatter_(2, where.expand(lanes, heads, rows, value_states.shape[-1]),
                             value_states)
        return self.keys, self.values


@dataclass
class LaneRequest:
    """One lane's share of a step: ``rows`` real rows (embeddings ``[rows, d]``) from
    position ``pos`` on; the step pads them to B."""

    pos: int
    embeds: torch.Tensor

    @property
    def rows(self) -> int:
        return int(self.embeds.shape[0])


LaneRows = tuple[torch.Tensor, torch.Tensor]  # (hidden [q, d], logits [q, vocab]), float32


class LanedLM:
    """The lane caches of a ``StaticLM``'s language model and its ``[S, B]`` step."""

    def __init__(self, pool: StaticLM, lanes: int, *, rows: int | None = None,
                 last_only: bool = False, kind: str = "lane_pass") -> None:
        """``rows``: the step's rows per lane (default: the pool's decoding step);
        ``last_only``: a step returns each lane's last real row only (prompt chunks,
        models/prompt_lanes.py); ``kind``: what an emulated step is charged as
        (models/emulated.py: "lane_pass" or "lane_chunk")."""
        if not pool.options.exact:
            raise ValueError(f"lanes need one step shape, got step_rows {pool.step_rows}")
        if lanes < 1:
            raise ValueError(f"lanes must be >= 1, got {lanes}")
        self.pool, self.lanes = pool, lanes
        self.rows = pool.max_rows if rows is None else rows
        self.last_only, self.kind = last_only, kind
        self.device, self.dtype = pool.device, pool.dtype
        self.park_at = pool.max_len  # idle lanes write here: past every real step's rows
        self.max_len = pool.max_len + self.rows
        self.lane_start = torch.zeros(lanes, dtype=torch.long, device=self.device)
        self.cache = self._new_cache()
        self.tri = torch.ones(self.max_len, self.max_len, dtype=torch.bool,
                              device=self.device).tril_()
        self.row_offsets = torch.arange(self.rows, device=self.device)
        self.lane_index = torch.arange(lanes, device=self.device)
        self._eager_fn = self._lane_last_rows if last_only else self._lane_rows
        self._step_fn = self._eager_fn
        self.compiled = False
        self.compile_failed: str | None = None
        self.warmed = False
        self.eager_steps = 0  # steps of a compiled lane runtime that ran eager
        self.lane_copies = 0  # adoptions (a slot's prompt copied into a lane)
        # one forward or adoption copy at a time: a copy must not race a step on the tensors
        self.device_lock = threading.Lock()

    @property
    def shape(self) -> str:
        return f"{'prompt ' if self.last_only else ''}lanes {self.lanes}x{self.rows}"

    def _new_cache(self) -> Cache:
        config = self.pool._config
        layers = [LaneLayer(self.max_len, self.lane_start, self.rows)
                  for _ in range(config.num_hidden_layers)]
        cache = Cache(layers=layers)
        cache.lane_kind = self.kind  # what the emulation charges a step on it as
        head_dim = getattr(config, "head_dim", None) or \
            config.hidden_size // config.num_attention_heads
        cache.early_initialization(batch_size=self.lanes,
                                   num_heads=config.num_key_value_heads, head_dim=head_dim,
                                   dtype=self.dtype, device=self.device)
        torch._dynamo.mark_static_address(self.lane_start)
        return cache

    def _lane_rows(self, embeds: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                   cache: Cache) -> tuple[torch.Tensor, torch.Tensor]:
        """Every lane's rows: (hidden [S, B, d], logits [S, B, vocab])."""
        self.lane_start.copy_(positions[:, 0])  # in the graph, where compiled
        hidden = self.pool.lm(inputs_embeds=embeds, position_ids=positions,
                              attention_mask=mask, past_key_values=cache,
                              use_cache=True).last_hidden_state
        return hidden, self.pool.head(hidden)

    def _lane_last_rows(self, embeds: torch.Tensor, positions: torch.Tensor,
                        mask: torch.Tensor, last: torch.Tensor, cache: Cache
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Every lane's last real row (``last[S]``): (hidden [S, d], logits [S, vocab]): a
        prompt chunk reads one row, and the head runs on S rows, not S x rows."""
        self.lane_start.copy_(positions[:, 0])
        hidden = self.pool.lm(inputs_embeds=embeds, position_ids=positions,
                              attention_mask=mask, past_key_values=cache,
                              use_cache=True).last_hidden_state[self.lane_index, last]
        return hidden, self.pool.head(hidden)

    def step(self, requests: Mapping[int, LaneRequest]) -> dict[int, LaneRows]:
        """One ``[S, B]`` forward: each requesting lane's rows at its position, every other
        lane parked. Returns each requesting lane's real rows (float32 copies)."""
        one_at_a_time = self.compiled and self.device.type == "cuda"
        # as the pool's steps: inference tensors (another dispatch key set, another graph)
        with inference(self.device, self.pool.stream), turn_of(self.pool.lm), \
                self.device_lock, CUDA_GRAPH_REPLAY if one_at_a_time else contextlib.nullcontext():
            hidden, logits = self._run(*self._inputs(requests))
            # copies: a CUDA graph's outputs are written over by its next replay
            keep = (lambda lane, r: slice(lane, lane + 1)) if self.last_only else \
                (lambda lane, r: (lane, slice(0, r.rows)))
            out = {lane: (hidden[keep(lane, r)].to(torch.float32, copy=True),
                          logits[keep(lane, r)].to(torch.float32, copy=True))
                   for lane, r in requests.items()}
            synchronize(self.device, self.pool.stream)
        return out

    def _inputs(self, requests: Mapping[int, LaneRequest]) -> tuple[torch.Tensor, ...]:
        """The step's embeddings [S, B, d] (zero padding, zero parked lanes), positions
        [S, B] and mask [S, 1, B, M] (rows of the one table at each lane's positions), and
        with ``last_only`` each lane's last real row [S]."""
        embeds = torch.zeros(self.lanes, self.rows, self.pool.embed.weight.shape[1],
                             dtype=self.dtype, device=self.device)
        starts = [self.park_at] * self.lanes
        last = [0] * self.lanes
        for lane, request in requests.items():
            if not 0 <= request.pos <= self.park_at - self.rows or request.rows > self.rows:
                raise ValueError(f"{self.pool.name}: lane {lane}'s {request.rows} rows at "
                                 f"{request.pos} do not fit a step in its cache of "
                                 f"{self.park_at} positions")
            embeds[lane, :request.rows] = request.embeds.to(self.dtype)
            starts[lane], last[lane] = request.pos, request.rows - 1
        positions = torch.tensor(starts, device=self.device)[:, None] + self.row_offsets
        inputs = (embeds, positions, self.tri[positions][:, None])
        return (*inputs, torch.tensor(last, device=self.device)) if self.last_only else inputs

    def _run(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Compiled when the warm-up compiled it and a graph takes the call, else eager."""
        if not self.compiled:
            return self._eager_fn(*args, self.cache)
        try:
            return self._step_fn(*args, self.cache)
        except RuntimeError as err:
            if not refused_by_compiled_graphs(err):
                raise
            self.eager_steps += 1
            if self.eager_steps == 1:
                logger.warning("%s: a lane step runs eager (%s); counted in eager_steps",
                               self.pool.name, str(err).strip().splitlines()[-1])
            return self._eager_fn(*args, self.cache)

    def adopt(self, lane: int, slot: Any, n: int) -> None:
        """Copy a pool slot's first ``n`` positions into ``lane``, bit for bit (on an
        emulated target a "lane_copy" call: models/emulated.py)."""
        from crossspec_ros.models.emulated import emulated_call

        self.copy(lane, slot, 0, n, into_lane=True,
                  charged=emulated_call(self.pool.lm, "lane_copy"))
        self.lane_copies += 1

    def copy(self, lane: int, slot: Any, start: int, end: int, *, into_lane: bool,
             charged: contextlib.AbstractContextManager | None = None) -> None:
        """Copy positions ``[start, end)`` between a pool slot and ``lane``, bit for bit:
        into the lane, or out of it into the slot. ``charged``: the emulated call, entered
        inside the lock, as a step's forward takes the emulated device (the other order
        could deadlock with a step)."""
        with inference(self.device, self.pool.stream), self.device_lock, \
                charged or contextlib.nullcontext():
            for lane_layer, slot_layer in zip(self.cache.layers, slot.cache.layers,
                                              strict=True):
                for lane_t, slot_t in ((lane_layer.keys, slot_layer.keys),
                                       (lane_layer.values, slot_layer.values)):
                    source, target = (slot_t[0], lane_t[lane]) if into_lane else \
                        (lane_t[lane], slot_t[0])
                    target[:, start:end].copy_(source[:, start:end])
            synchronize(self.device, self.pool.stream)

    def warm_up(self, compile: bool | None = None) -> float:
        """Compile (``compile``; default: as the pool's options say) and run the ``[S, B]``
        step once, every lane parked; a compile that fails leaves the lane steps eager
        (logged). Returns seconds."""
        t0 = time.perf_counter()
        compile = self.pool.options.compile if compile is None else compile
        with COMPILE_GATE.warming_up():
            if compile and not self.compiled:
                use_compile_cache()
                _configure_compiler(self.device)
                self._step_fn = _compiled(self._eager_fn, self.device, self.pool.options.inductor)
                self.compiled = True
            try:
                self.step({})
            except Exception as err:
                if not self.compiled:
                    raise
                self.compile_failed = f"{type(err).__name__}: {err}"
                logger.warning("%s: compiling the lane step failed (%s); it runs eager",
                               self.pool.name, self.compile_failed)
                self._step_fn, self.compiled = self._eager_fn, False
                self.step({})
            COMPILE_GATE.compiled |= self.compiled
        self.warmed = True
        return round(time.perf_counter() - t0, 2)


@dataclass
class LaneTicket:
    """A submitted lane request, done when a step has carried it (or failed)."""

    lane: int
    request: LaneRequest
    submitted: float
    done: bool = False
    rows: LaneRows | None = None
    error: BaseException | None = None

    def outcome(self) -> LaneRows:
        if self.error is not None:  # one exception per rider: several threads raise it
            raise RuntimeError(f"the lane step carrying lane {self.lane} failed: "
                               f"{type(self.error).__name__}: {self.error}") from self.error
        assert self.rows is not None
        return self.rows


@dataclass
class BatcherCounters:
    """What the batcher did (a node's diagnostics, the bench)."""

    steps: int = 0
    lanes_per_step: Counter[int] = field(default_factory=Counter)
    gather_wait_ms: float = 0.0  # summed over steps, first submission -> step start
    failed_steps: int = 0


class StepBatcher:
    """Gathers the lanes' step requests into ``[S, B]`` steps (module docstring)."""

    def __init__(self, laned: Any, gather_s: float = DEFAULT_GATHER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.laned, self.gather_s, self.clock = laned, gather_s, clock
        self.counters = BatcherCounters()
        self._cond = threading.Condition()
        self._active: set[int] = set()
        # lanes about to submit (a stream whose prompt was just prefilled): lane -> when the
        # wait for it ends, by the clock
        self._expected: dict[int, float] = {}
        self._pending: dict[int, LaneTicket] = {}
        self._running = False  # a thread runs a step now (outside the lock)
        self._free_since = float("-inf")  # when the last step ended (by the clock)

    @property
    def active(self) -> frozenset[int]:
        return frozenset(self._active)

    def activate(self, lane: int) -> None:
        """``lane`` decodes a window: steps wait for it (up to ``gather_s``)."""
        with self._cond:
            self._active.add(lane)

    def deactivate(self, lane: int) -> None:
        """``lane``'s window ended: steps no longer wait for it."""
        with self._cond:
            self._active.discard(lane)
            self._expected.pop(lane, None)
            self._cond.notify_all()

    def expect(self, lane: int, for_s: float) -> None:
        """``lane`` is about to submit (its window's prompt is in, its first step comes):
        a step waits for it until it submits, or ``for_s`` from now, so the streams whose
        frames were prefilled together decode together."""
        with self._cond:
            self._expected[lane] = self.clock() + for_s

    def submit(self, lane: int, request: LaneRequest) -> LaneTicket:
        """Queue ``lane``'s rows for the next step (``result`` waits for them)."""
        with self._cond:
            if lane in self._pending:
                raise ValueError(f"lane {lane} already has rows waiting for a step")
            ticket = LaneTicket(lane, request, self.clock())
            self._pending[lane] = ticket
            self._cond.notify_all()
            return ticket

    def run(self, lane: int, request: LaneRequest) -> LaneRows:
        """Submit ``lane``'s rows and block until a step has carried them."""
        return self.result(self.submit(lane, request))

    def ready(self) -> bool:
        """A step may start now: rows wait, no step runs, and every active lane has
        submitted or the first submission has waited ``gather_s``."""
        with self._cond:
            return self._ready()

    def _ready(self) -> bool:
        if self._running or not self._pending:
            return False
        if self._awaited_expected():
            return False
        # the lanes the step waits for: the active ones, and those the laned object expects
        # (prompt lanes: the streams whose frame of this moment has not come yet)
        awaited = set(self._active)
        expected_lanes = getattr(self.laned, "expected_lanes", None)
        if expected_lanes is not None:
            awaited |= expected_lanes({k: t.request for k, t in self._pending.items()})
        return awaited <= self._pending.keys() or self._waited() >= self.gather_s

    def _awaited_expected(self) -> dict[int, float]:
        """The lanes ``expect``ed that have not submitted and whose wait has not ended."""
        now = self.clock()
        self._expected = {lane: until for lane, until in self._expected.items()
                          if until > now and lane not in self._pending}
        return self._expected

    def _waited(self) -> float:
        """How long the waiting rows could have run: since the first was submitted, or
        since the step that held them up ended (a wait behind a step is no gather wait)."""
        return self.clock() - max(min(t.submitted for t in self._pending.values()),
                                  self._free_since)

    def result(self, ticket: LaneTicket) -> LaneRows:
        """Wait for ``ticket``'s step; the waiting thread that finds a step ready runs it,
        once the device's turn is its (``turn_of``), with every lane waiting by then."""
        while True:
            with self._cond:
                while not ticket.done and not self._ready():
                    self._cond.wait(self._wait_s())
                if ticket.done:
                    return ticket.outcome()
                self._running = True
            # the device's turn first, the riders then: whoever submits while the step
            # waits for the device rides it
            with turn_of(getattr(getattr(self.laned, "pool", None), "lm", None)):
                with self._cond:
                    waited = self._waited()
                    batch, self._pending = self._pending, {}
                self._run_step(batch, waited)

    def _wait_s(self) -> float | None:
        """How long to wait before checking again: until notified while a step runs or
        nothing waits, else until the first expected lane's wait or the gather wait ends
        (by the injected clock)."""
        if self._running or not self._pending:
            return None
        expected = self._awaited_expected()
        if expected:
            return max(min(expected.values()) - self.clock(), 1e-4)
        return max(self.gather_s - self._waited(), 1e-4)

    def _run_step(self, batch: dict[int, LaneTicket], waited: float) -> None:
        """One step for ``batch``; its rows or its error go to every rider."""
        rows: dict[int, LaneRows] = {}
        error: BaseException | None = None
        try:
            rows = self.laned.step({lane: t.request for lane, t in batch.items()})
        except BaseException as err:  # shared fate: every rider's window sees it
            error = err
        with self._cond:
            for lane, ticket in batch.items():
                ticket.rows, ticket.error, ticket.done = rows.get(lane), error, True
            self._running = False
            self._free_since = self.clock()
            self.counters.steps += 1
            self.counters.failed_steps += error is not None
            self.counters.lanes_per_step[len(batch)] += 1
            self.counters.gather_wait_ms += waited * 1e3
            self._cond.notify_all()


@dataclass
class _Owner:
    """The session (its pool slot and that slot's lease) whose decoding lives in a lane."""

    slot: Any
    lease: int


class LaneView:
    """One lane as a runtime: the ``StaticLM`` surface its callers use (``acquire``,
    ``release``, ``chain``, ``bucket``, ``max_rows``, ``max_len``, ``embed_ids``, ``options``),
    prompt chunks on the shared pool, ``rows`` steps in the lane through the batcher."""

    def __init__(self, batcher: StepBatcher, lane: int,
                 prompt_batcher: StepBatcher | None = None) -> None:
        self.batcher, self.laned, self.lane = batcher, batcher.laned, lane
        # the streams' prompt work batched too (models/prompt_lanes.py), or None
        self.prompt_batcher = prompt_batcher
        self.pool: StaticLM = self.laned.pool
        self.name = f"{self.pool.name} lane {lane}"
        # reentrant: a session collected inside a locked region releases through here
        self._lock = threading.RLock()
        self._owner: _Owner | None = None
        self._evicted: dict[int, int] = {}  # id(slot) -> lease of a session a later took over

    # the StaticLM surface that StaticSession, LivePrefill and static_finish read
    @property
    def options(self) -> RuntimeOptions:
        return self.pool.options

    @property
    def device(self) -> torch.device:
        return self.pool.device

    @property
    def dtype(self) -> torch.dtype:
        return self.pool.dtype

    @property
    def stream(self) -> Any:
        return self.pool.stream

    @property
    def step_rows(self) -> tuple[int, ...]:
        return self.pool.step_rows

    @property
    def max_rows(self) -> int:
        return self.pool.max_rows

    @property
    def max_len(self) -> int:
        """The pool's: a session's room is as on the one-stream runtime."""
        return self.pool.max_len

    @property
    def compiled(self) -> bool:
        return self.laned.compiled

    @property
    def compile_failed(self) -> str | None:
        return self.laned.compile_failed

    @property
    def replays_one_at_a_time(self) -> bool:
        return False  # the lane step and the pool's chunks order their own CUDA replays

    @property
    def batches_prompts(self) -> bool:
        """Prompt frames go through ``prefill_frame`` (vision and chunk batched across the
        streams), not ``_encode`` and a ``last_only`` chain."""
        return self.prompt_batcher is not None

    def prefill_frame(self, verifier: Any, slot: Any, pos: int, ids: torch.Tensor,
                      pixels: torch.Tensor, stamp_ns: int | None = None) -> LaneRows:
        """Encode one frame (``pixels`` [1, 1, 3, H, W], captured at ``stamp_ns``; None: a
        one-shot prefill's) and prefill its chunk (``ids`` [1, q]) after ``pos`` positions of
        ``slot``, in one step with the other streams' frames of the same moment (waited for
        up to the prompt batcher's gather time). Returns the chunk's last row. When the
        prompt is in, this stream's first decoding step is expected: the streams whose
        prompts were prefilled together decode together."""
        from crossspec_ros.models.prompt_lanes import DECODE_COHORT_S, FrameRequest

        prompt = self.prompt_batcher
        if prompt is None:
            raise RuntimeError(f"{self.name}: its prompt work is not batched")
        rows = prompt.run(self.lane, FrameRequest(verifier, slot, pos, ids, pixels, stamp_ns))
        if pos + ids.shape[1] >= prompt.laned.prompt_end:
            self.batcher.expect(self.lane, DECODE_COHORT_S)
        return rows

    def acquire(self) -> Any:
        return self.pool.acquire()

    def bucket(self, q: int) -> int:
        return self.pool.bucket(q)

    def embed_ids(self, ids: Any) -> torch.Tensor:
        return self.pool.embed_ids(ids)

    def release(self, slot: Any, lease: int | None = None) -> None:
        """Give ``slot`` back to the pool; when it is this lane's session's, the lane is idle
        from now on (steps no longer wait for it)."""
        self.pool.release(slot, lease)
        with self._lock:
            owner = self._owner
            if owner is None or owner.slot is not slot or \
                    (lease is not None and lease != owner.lease):
                return
            self._owner = None
        self.batcher.deactivate(self.lane)

    def chain(self, slot: Any, pos: int, embeds: torch.Tensor, *, rows: int | None = None,
              last_only: bool = False) -> LaneRows:
        """As ``StaticLM.chain``: prompt chunks on the pool slot, ``rows`` steps in the lane
        (the slot adopted first, at the window's first such step)."""
        if last_only or rows is None:
            return self.pool.chain(slot, pos, embeds, rows=rows, last_only=last_only)
        q = embeds.shape[1]
        if rows != self.laned.rows or q > rows:
            raise ValueError(f"{self.name}: a lane step has {self.laned.rows} rows, got {q} "
                             f"in a step of {rows}")
        if pos + rows > self.pool.max_len:
            raise ValueError(f"{self.name}: {pos} + {rows} positions exceed its static cache "
                             f"of {self.pool.max_len}")
        self._own(slot, pos)
        return self.batcher.run(self.lane, LaneRequest(pos, embeds[0]))

    def _own(self, slot: Any, pos: int) -> None:
        """The lane holds ``slot``'s session: adopt its prompt at its first step. A later
        window takes the lane over from a session still alive (a stream decodes one window
        at a time): that one then refuses to step instead of reading the other's cache."""
        with self._lock:
            owner = self._owner
            if owner is not None and owner.slot is slot and owner.lease == slot.lease:
                return
            if self._evicted.get(id(slot)) == slot.lease:
                raise RuntimeError(f"{self.name}: this window's session lost its lane to a "
                                   "later window")
            if owner is not None:
                self._evicted[id(owner.slot)] = owner.lease
                logger.warning("%s: a new window takes the lane over from a session still "
                               "open", self.name)
            self.laned.adopt(self.lane, slot, pos)
            self._owner = _Owner(slot, slot.lease)
        self.batcher.activate(self.lane)

    def counters(self) -> dict[str, int]:
        c = self.batcher.counters
        prompt = self.prompt_batcher.laned.counters() if self.prompt_batcher else {}
        return {**self.pool.counters(), "lane_steps": c.steps, "lane_copies":
                self.laned.lane_copies, "lane_eager_steps": self.laned.eager_steps,
                **{k: v for k, v in prompt.items() if isinstance(v, int)}}

    def describe(self) -> str:
        mode = "compiled" if self.laned.compiled else "eager"
        prompt = "on the pool"
        if self.prompt_batcher is not None:
            chunks = self.prompt_batcher.laned.laned
            prompt = (f"batched across the streams (one vision call of {chunks.lanes} frames "
                      f"and one {chunks.lanes}x{chunks.rows} chunk step a frame, "
                      f"{'compiled' if chunks.compiled else 'eager'}) into")
        return (f"{self.name}: laned static runtime ({mode}, exact per lane), steps of "
                f"{self.laned.lanes}x{self.laned.rows} rows; prompt {prompt}: "
                f"{self.pool.describe()}")


def use_lanes(verifier: CaptionModel, options: RuntimeOptions, lanes: int, *,
              max_new_tokens: int | None = None, gather_s: float = DEFAULT_GATHER_S,
              batch_prompts: bool = False, prompt_gather_s: float | None = None,
              clock: Callable[[], float] = time.monotonic) -> list[CaptionModel]:
    """``lanes`` twins of ``verifier`` (shared weights), twin i decoding in lane i of one
    laned runtime; their prompts prefill on one shared pool of ``2 * lanes + 1`` caches (a
    live prefill and a decoding window per stream, one spare). ``verifier``'s own runtime is
    left as it is. Each twin's ``runtime`` is its ``LaneView`` (``.batcher``, ``.laned``).
    ``batch_prompts``: the streams' frames are encoded and prefilled together too
    (models/prompt_lanes.py; a verifier with one prompt chunk per frame)."""
    pool_options = dataclasses.replace(options, lanes=lanes,
                                       caches=max(options.caches, 2 * lanes + 1))
    host = copy.copy(verifier)  # the registry of runtimes stays shared with the verifier
    use_static_runtime(host, pool_options, max_new_tokens)
    laned = LanedLM(host.runtime, lanes)
    laned.warm_up()
    batcher = StepBatcher(laned, gather_s, clock)
    prompt = _prompt_batcher(host, lanes, clock, prompt_gather_s) if batch_prompts else None
    return [verifier.with_runtime(LaneView(batcher, lane, prompt)) for lane in range(lanes)]


def _prompt_batcher(host: Any, lanes: int, clock: Callable[[], float],
                    gather_s: float | None) -> StepBatcher:
    """The batcher of ``lanes`` streams' prompt frames on ``host``'s pool, warmed up."""
    from crossspec_ros.models.prompt_lanes import PROMPT_GATHER_S, PromptLanes

    _, chunks = host.prompt_layout()
    frames = getattr(host, "num_frames", None)
    if frames is None or len(chunks) != frames:
        raise ValueError(f"{host.info.name}: batching prompts needs one prompt chunk per "
                         f"frame, got chunks {chunks}")
    prompt = PromptLanes(host.runtime, host._encode, lanes, chunks)
    prompt.warm_up()
    return StepBatcher(prompt, PROMPT_GATHER_S if gather_s is None else gather_s, clock)
