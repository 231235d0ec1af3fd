"""The static runtime: a language model's KV caches allocated once, its steps in fixed shapes,
optionally compiled (``torch.compile``: inductor on CPU, CUDA graphs on a GPU).

gpt-fast's shape, over a transformers Llama-family language model: a ``StaticCache`` per
decoding window, taken from a pool allocated at configure; a position counter per session
(rolling back is moving it: the slots past it are masked for every later row and written over
by the next step); each step writes its rows at slots ``pos..pos+q-1`` and attends through a
boolean mask cut from one lower-triangular table. Every step takes input embeddings, so the
prompt (with its visual tokens merged in), decoding and verification share one function.

**Exact by construction.** A row's logits are a function of its inputs, the cache and the
shape of the step that computes it: within one shape a row does not depend on its index or on
the other rows, across shapes it does (one row vs eight rows run other matrix kernels and
round differently: in bfloat16 the argmax flips at near-ties; measured on this CPU and seen on
an H100). So with ``step_rows=(B,)`` every step after the prompt has B rows: a one-token
decoding step is that token and B-1 padding rows, a verification pass is the pending token,
the proposals and padding. Plain decoding and speculative decoding then compute every
position with the same arithmetic: the confirmed caption is bit for bit this runtime's own
greedy output, in every dtype (``ModelSession.exact``). The prompt is prefilled in one fixed
chunk layout (per frame for Video-LLaVA, as the live prefill does), so a one-shot prefill after
the close and a live prefill give the same cache. Drafters use several shapes (``(1, 16)``):
their tokens are proposals, checked anyway.

Shapes run compiled are compiled at ``warm_up`` (the lifecycle's configure), with inductor's
cache on disk (``TORCHINDUCTOR_CACHE_DIR``, default ~/.cache/crossspec/inductor): a second
start reuses the kernels. Nothing compiles after it (``compile_gate.py``: compiling on a
worker thread breaks the other threads' model work): a step in a shape the warm-up did not
run, or one its compiled graphs refuse, runs eager, logged once and counted
(``eager_steps``). The warm-up runs every shape a window steps in, so on the verifier that
never happens (``test_models_warm_up.py``): an eager step may round differently from the
compiled ones.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from crossspec_ros.models import split_kv
from crossspec_ros.models.base import CaptionModel, ModelSession, PrefillTiming
from crossspec_ros.models.compile_gate import COMPILE_GATE, refused_by_compiled_graphs
from crossspec_ros.models.device_turns import turn_of
from crossspec_ros.models.streams import inference, synchronize
from crossspec_ros.process_tuning import COMPILE_CACHE

logger = logging.getLogger(__name__)

# CUDA graphs compiled with mode reduce-overhead (cudagraph trees) share one memory pool per
# device and assume one thread replays them at a time: a drafter thread stepping beside the
# verifier's thread overwrote the other's buffers on an H200 (a device-side index assert,
# docs/gpu-h200-2026-11-27.md). Compiled CUDA steps of every runtime in a process therefore
# run one at a time, each to its end (its outputs copied, its stream synchronized).
CUDA_GRAPH_REPLAY = threading.Lock()


ATTENTIONS = ("sdpa", "split_kv")  # RuntimeOptions.attention


@dataclass(frozen=True)
class RuntimeOptions:
    """How a model's language model runs (node parameters ``runtime``, ``compile``,
    ``step_rows``). ``step_rows``: the row shapes of the steps after the prompt, smallest
    first; one shape makes the runtime exact (module docstring)."""

    compile: bool = True
    step_rows: tuple[int, ...] = (32,)
    caches: int = 3  # allocated at once: a live prefill, the decoding window, one spare
    # False: with compile, only the decoding steps are compiled and the prompt's chunks run
    # eager (fewer shapes to compile: the GPU kit's first stages, where a 7B's compile per
    # shape eats the lease). Exactness is unchanged: every prefill runs the same eager chunks
    compile_prefill: bool = True
    # with compile_prefill: the model's vision call compiled too (vision_runtime.py); False
    # keeps it eager (a test of the steps alone, or a vision that will not compile)
    compile_vision: bool = True
    # > 1: the decoding steps of that many streams run as one [lanes, rows] step
    # (models/lanes.py, use_lanes); 1 is this module's one-stream runtime, unchanged
    lanes: int = 1
    # more of inductor's settings for the compiled steps, as (name, value) pairs (hashable:
    # runtimes are kept by options), e.g. (("coordinate_descent_tuning", True),): the GPU
    # kit's tuning stage measures such settings against the default (issue 55). Exactness is
    # unchanged: every step of the runtime compiles under the same settings
    inductor: tuple[tuple[str, Any], ...] = ()
    # how every step attends over its cache: "sdpa" (PyTorch's fused kernels, through
    # transformers) or "split_kv" (models/split_kv.py: the cache split along its length, for
    # the bandwidth of a decoding step; issue 55). Exact either way; the captions are each
    # runtime's own
    attention: str = "sdpa"

    def __post_init__(self) -> None:
        rows = tuple(self.step_rows)
        if not rows or any(r < 1 for r in rows) or list(rows) != sorted(set(rows)):
            raise ValueError(f"step_rows must be increasing positive sizes, got {rows}")
        if self.caches < 1:
            raise ValueError("caches must be >= 1")
        if self.lanes < 1 or (self.lanes > 1 and len(rows) != 1):
            raise ValueError(f"lanes must be >= 1, and lanes > 1 needs one step shape, got "
                             f"lanes {self.lanes} with step_rows {rows}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, got "
                             f"{self.attention!r}")
        if self.attention != "sdpa" and self.lanes > 1:
            raise ValueError(f"attention {self.attention!r} is not built for lane steps "
                             "(lanes > 1) yet: use attention 'sdpa' there")

    @property
    def exact(self) -> bool:
        return len(self.step_rows) == 1


DRAFTER_STEP_ROWS = (1, 16)  # drafting one token, re-syncing to a confirmed correction
# set (to anything but "" or 0): the steps run eager whatever the parameter compile says (the
# test suite sets it: each compiled shape costs seconds the tests need not spend)
NO_COMPILE_ENV = "CROSSSPEC_NO_COMPILE"


def compile_allowed() -> bool:
    return os.environ.get(NO_COMPILE_ENV, "") in ("", "0")


# torch.compile's mode on a GPU: reduce-overhead replays each step as a CUDA graph (one launch
# instead of hundreds); CROSSSPEC_CUDA_COMPILE_MODE=default keeps inductor's kernels without
# graphs (scripts/gpu_check.sh measures both)
CUDA_COMPILE_MODE_ENV = "CROSSSPEC_CUDA_COMPILE_MODE"


def compile_mode(device: torch.device) -> str | None:
    """torch.compile's mode for steps on ``device`` (None: inductor's default)."""
    if device.type != "cuda":
        return None
    mode = os.environ.get(CUDA_COMPILE_MODE_ENV, "reduce-overhead")
    return None if mode == "default" else mode


def _kept_guards(guards: Sequence[Any]) -> list[bool]:
    """Every guard dynamo puts on a compiled step but those on transformers' registry of the
    model classes instantiated so far (``output_capturing._CAN_RECORD_REGISTRY``): it grows
    when a later model loads (the verifier after the drafter warmed up), which made every
    graph compiled before fail its guards in the middle of a drive. A step reads only its
    own class's entry there, fixed with the class."""
    return ["_CAN_RECORD_REGISTRY" not in guard.name for guard in guards]


def _compiled(fn: Any, device: torch.device, inductor: Sequence[tuple[str, Any]] = ()) -> Any:
    """``fn`` compiled for ``device`` (its mode given as options: torch.compile takes one of
    the two, and the guard filter is an option), with ``inductor``'s settings on top."""
    import torch._inductor

    options = dict(torch._inductor.list_mode_options(compile_mode(device) or "default"))
    return torch.compile(fn, dynamic=False, fullgraph=True,
                         options={**options, **dict(inductor), "guard_filter_fn": _kept_guards})


def use_static_runtime(model: CaptionModel, options: RuntimeOptions | None,
                       max_new_tokens: int | None = None) -> dict[str, float]:
    """Step ``model``'s language model through a static runtime from now on (None: back to
    the eager transformers path): caches allocated, shapes compiled and run once, through the
    model's hooks (``language_model_parts``, ``prompt_layout``). A runtime built before for
    the same weights with the same options (and room) is taken again, nothing compiled twice.
    Returns seconds per shape ({} when reused)."""
    if options is None:
        model.runtime = None
        return {}
    lm, head, config = model.language_model_parts()
    prompt_len, chunks = model.prompt_layout()
    limit = max(model.info.max_new_tokens, max_new_tokens or 0)
    built = _runtimes(model).get(options)
    if built is not None and built.max_len >= prompt_len + limit + 1 + built.max_rows:
        model.runtime = built
        return {}
    model.runtime = StaticLM(lm, head, config, options, max_len=prompt_len + limit + 1,
                             name=model.info.name, stream=model.stream)
    _runtimes(model)[options] = model.runtime
    tail = prompt_len - sum(chunks)
    if tail >= model.runtime.max_rows:  # a tail longer than a step is a chunk of its own
        chunks = [*chunks, tail]
    timings = model.runtime.warm_up(chunks)
    if model.runtime.compiled and options.compile_prefill and options.compile_vision:
        from crossspec_ros.models.vision_runtime import compile_vision

        with COMPILE_GATE.warming_up():
            timings.update(compile_vision(model, model.runtime))  # also its compile_s
    return timings


def _runtimes(model: CaptionModel) -> dict[Any, Any]:
    """The static runtimes built for ``model``'s weights, by options (shared by its twins:
    ``with_runtime`` copies the model's __dict__, this registry with it)."""
    registry = model.__dict__.get("_static_runtimes")
    if registry is None:
        registry = model._static_runtimes = {}
    return registry


def use_compile_cache(directory: str | Path | None = None) -> Path:
    """Point inductor's on-disk cache at ``directory`` (default COMPILE_CACHE) unless
    ``TORCHINDUCTOR_CACHE_DIR`` is set already; returns where it is."""
    where = Path(os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                                       str(directory or COMPILE_CACHE)))
    where.mkdir(parents=True, exist_ok=True)
    return where


def _configure_compiler(device: torch.device) -> None:
    import torch._dynamo
    import torch._inductor.config

    # every StaticLM compiles the same two functions: their shapes and models share dynamo's
    # per-code-object budget, which must not run out mid-drive (with fullgraph it raises)
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    torch._dynamo.config.accumulated_recompile_limit = max(
        torch._dynamo.config.accumulated_recompile_limit, 512)
    if device.type == "cpu":
        # the generated C++ calls the kernels without a Python wrapper: measured 0.54x -> 0.44x
        # of eager for a one-token step of the bundled verifier
        torch._inductor.config.cpp_wrapper = True


class _CacheSlot:
    """One StaticCache of the pool (its K/V allocated once, at a fixed address)."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache
        self.in_use = False
        self.lease = 0  # +1 at each acquire: a release of an earlier lease does nothing


class StaticLM:
    """A language model (``lm``: a transformers ``LlamaModel``-like base, ``head``: its output
    projection) with a pool of static caches and steps in fixed shapes."""

    def __init__(self, lm: Any, head: Any, config: Any, options: RuntimeOptions, *,
                 max_len: int, name: str = "model", stream: Any = None) -> None:
        from transformers import StaticCache

        self.lm, self.head, self.options, self.name = lm, head, options, name
        self.embed = lm.get_input_embeddings()
        self.device = self.embed.weight.device
        self.dtype = self.embed.weight.dtype
        self.stream = stream
        self.step_rows = options.step_rows
        self.max_rows = options.step_rows[-1]
        # room for any step's padding past the last real position
        self.max_len = int(max_len) + self.max_rows
        split_kv.install()  # before anything compiles: graphs guard on the function traced
        self._attention_kwargs: dict[str, Any] = {}
        if options.attention == "split_kv":
            implementation = getattr(lm.config, "_attn_implementation", None)
            if implementation != "sdpa":
                raise ValueError(f"{name}: attention 'split_kv' needs the model's attention "
                                 f"implementation 'sdpa', it has {implementation!r}")
            self.max_len = split_kv.padded_length(self.max_len)
            self._attention_kwargs = {"kv_splits": split_kv.KV_SPLITS}
        self._config = config.get_text_config(decoder=True) if hasattr(
            config, "get_text_config") else config
        self._static_cache = StaticCache
        self._slots: list[_CacheSlot] = []
        self._lock = threading.Lock()
        self.extra_caches = 0  # allocated beyond the pool (more windows at once than planned)
        for _ in range(options.caches):
            self._slots.append(self._new_slot())
        self.tri = torch.ones(self.max_len, self.max_len, dtype=torch.bool,
                              device=self.device).tril_()
        self.positions = torch.arange(self.max_len, device=self.device)
        self._rows_fn = self._rows
        self._last_fn = self._last_row
        self.compiled = False
        self.compile_failed: str | None = None  # why compiling did not work, if it did not
        self.compile_s: dict[str, float] = {}
        # the model's per-frame vision compiled with the prompt's chunks (vision_runtime.py)
        self.vision: Any = None
        self.warmed: set[str] = set()  # the shapes the warm-up ran ("rows 32", "chunk 17")
        # steps in a shape the warm-up did not run, by shape (compiled: they ran eager)
        self.steps_not_warmed: Counter[str] = Counter()
        # steps of a compiled runtime that ran eager (shape not warmed, or refused by the
        # compiled graphs): nothing compiles after the warm-up
        self.eager_steps = 0
        self._told: set[str] = set()  # what was logged about eager steps (once each)

    # ------------------------------------------------------------ caches
    def _new_slot(self) -> _CacheSlot:
        # normal tensors, as the pool's first caches: one allocated later, inside a model
        # call's inference mode, would be an inference tensor that no compiled graph takes
        # (another dispatch key set): its steps would run eager, with other numerics
        with torch.inference_mode(False):
            return _CacheSlot(self._allocated_cache())

    def _allocated_cache(self) -> Any:
        cache = self._static_cache(config=self._config, max_cache_len=self.max_len)
        cache.early_initialization(batch_size=1, num_heads=self._config.num_key_value_heads,
                                   head_dim=getattr(self._config, "head_dim", None) or
                                   self._config.hidden_size // self._config.num_attention_heads,
                                   dtype=self.dtype, device=self.device)
        return cache

    def acquire(self) -> _CacheSlot:
        """A free cache of the pool (a new one when all are held: counted, logged once)."""
        with self._lock:
            for slot in self._slots:
                if not slot.in_use:
                    slot.in_use = True
                    slot.lease += 1
                    return slot
            slot = self._new_slot()
            slot.in_use = True
            slot.lease += 1
            self._slots.append(slot)
            self.extra_caches += 1
            if self.extra_caches == 1:
                logger.warning("%s: more windows at once than its %d static caches; one more "
                               "allocated (on a GPU with CUDA graphs each new cache is "
                               "captured once more)", self.name, self.options.caches)
            return slot

    def release(self, slot: _CacheSlot, lease: int | None = None) -> None:
        """Give ``slot`` back (only if ``lease`` is still its current one, when given)."""
        with self._lock:
            if lease is None or lease == slot.lease:
                slot.in_use = False

    # ------------------------------------------------------------ the steps
    def _forward(self, embeds: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                 cache: Any) -> torch.Tensor:
        # every layer writes its K/V from the step's first position on (in the graph, where
        # compiled: one fused copy instead of a launch per layer)
        start = positions[0, 0]
        for layer in cache.layers:
            layer.cumulative_length.copy_(start)
        return self.lm(inputs_embeds=embeds, position_ids=positions, attention_mask=mask,
                       past_key_values=cache, use_cache=True,
                       **self._attention_kwargs).last_hidden_state

    def _rows(self, embeds: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
              cache: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Every row: (last hidden states [q, d], logits [q, vocab])."""
        hidden = self._forward(embeds, positions, mask, cache)
        return hidden[0], self.head(hidden)[0]

    def _last_row(self, embeds: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                  cache: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """A prompt chunk: only its last row's hidden state and logits ([1, d], [1, vocab])."""
        hidden = self._forward(embeds, positions, mask, cache)[:, -1:]
        return hidden[0], self.head(hidden)[0]

    def bucket(self, q: int) -> int:
        """The step shape that holds ``q`` rows (q <= max_rows)."""
        for rows in self.step_rows:
            if q <= rows:
                return rows
        raise ValueError(f"{q} rows do not fit one step of {self.name} (at most "
                         f"{self.max_rows})")

    def chain(self, slot: _CacheSlot, pos: int, embeds: torch.Tensor, *, rows: int | None = None,
              last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Run ``embeds`` [1, q, d] as a causal chain after ``pos`` cached positions, padded to
        ``rows`` (default: q, a prompt chunk's own shape). Returns (hidden, logits) of the q
        real rows (of the last one with ``last_only``), float32."""
        q = embeds.shape[1]
        rows = q if rows is None else rows
        embeds = embeds[0][None]  # a slice of a longer prompt keeps its strides: normalize
        # them, as the compiled graph guards on them
        if pos + rows > self.max_len:
            raise ValueError(f"{self.name}: {pos} + {rows} positions exceed its static cache "
                             f"of {self.max_len}")
        if rows > q:  # padding rows: zero inputs, causal rows of their own (finite, unused)
            embeds = torch.cat([embeds, embeds.new_zeros(1, rows - q, embeds.shape[-1])], 1)
        positions = self.positions[pos:pos + rows][None]
        mask = self.tri[pos:pos + rows][None, None]
        args = (embeds.to(self.dtype), positions, mask, slot.cache)
        one_at_a_time = self.replays_one_at_a_time
        with turn_of(self.lm), CUDA_GRAPH_REPLAY if one_at_a_time else contextlib.nullcontext():
            hidden, logits = self._step(f"{'chunk' if last_only else 'rows'} {rows}",
                                        last_only, args)
            # copies: a CUDA graph's outputs are written over by its next replay
            if not last_only:
                hidden, logits = hidden[:q], logits[:q]
            out = hidden.to(torch.float32, copy=True), logits.to(torch.float32, copy=True)
            if one_at_a_time:
                synchronize(self.device, self.stream)
        return out

    @property
    def replays_one_at_a_time(self) -> bool:
        """Steps replay CUDA graphs (compiled on a GPU): ``CUDA_GRAPH_REPLAY`` orders them."""
        return self.compiled and self.device.type == "cuda"

    def _step(self, shape: str, last_only: bool, args: tuple[Any, ...]
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: compiled when its shape was warmed up and a compiled graph takes it,
        else eager (a compiled runtime never compiles after its warm-up)."""
        eager = self._last_row if last_only else self._rows
        if shape not in self.warmed:
            self.steps_not_warmed[shape] += 1
            if self.compiled:
                self._eager_step(shape, "its shape was not warmed up at configure")
            return eager(*args)
        try:
            return (self._last_fn if last_only else self._rows_fn)(*args)
        except RuntimeError as err:
            if not (self.compiled and refused_by_compiled_graphs(err)):
                raise
            self._eager_step(shape, "no compiled graph takes it: "
                             f"{str(err).strip().splitlines()[-1].strip()}")
            return eager(*args)

    def _eager_step(self, shape: str, why: str) -> None:
        self.eager_steps += 1
        if shape not in self._told:
            self._told.add(shape)
            logger.warning("%s: a step of %s runs eager (%s); nothing compiles after the "
                           "warm-up (counted in eager_steps)", self.name, shape, why)

    def counters(self) -> dict[str, int]:
        """For a node's diagnostics: steps in shapes the warm-up did not run, steps run eager
        on a compiled runtime."""
        return {"steps_not_warmed": sum(self.steps_not_warmed.values()),
                "eager_steps": self.eager_steps}

    def embed_ids(self, ids: Sequence[int]) -> torch.Tensor:
        return self.embed(torch.tensor([list(ids)], dtype=torch.long, device=self.device))

    # ------------------------------------------------------------ compile
    def warm_up(self, prompt_chunks: Sequence[int] = ()) -> dict[str, float]:
        """Compile (with ``options.compile``) and run once every shape this model steps in:
        each size of ``step_rows`` and each prompt chunk size. Returns seconds per shape; a
        compile that fails leaves that model's steps eager (logged). Alone in the process
        (``compile_gate.py``): other threads' model work waits, and so does another warm-up."""
        with COMPILE_GATE.warming_up():
            timings = self._warm_up(prompt_chunks)
            COMPILE_GATE.compiled |= self.compiled
        self.compile_s = timings
        return timings

    def _warm_up(self, prompt_chunks: Sequence[int]) -> dict[str, float]:
        if self.options.compile and not self.compiled and self.compile_failed is None:
            use_compile_cache()
            _configure_compiler(self.device)
            self._rows_fn = _compiled(self._rows, self.device, self.options.inductor)
            if self.options.compile_prefill:
                self._last_fn = _compiled(self._last_row, self.device, self.options.inductor)
            self.compiled = True
        shapes = [("rows", r) for r in self.step_rows] + [
            ("chunk", c) for c in sorted(set(prompt_chunks))]
        slot = self.acquire()
        timings: dict[str, float] = {}
        try:
            for kind, size in shapes:
                t0 = time.perf_counter()
                self.warmed.add(f"{kind} {size}")
                # as the real steps: inference tensors (another dispatch key set would be
                # another graph), at a position past 0 (views at an offset)
                with inference(self.device, self.stream):
                    embeds = torch.zeros(1, size, self.embed.weight.shape[1],
                                         device=self.device, dtype=self.dtype)
                    self.chain(slot, 1, embeds, rows=size, last_only=kind == "chunk")
                synchronize(self.device, self.stream)
                timings[f"{kind} {size}"] = round(time.perf_counter() - t0, 2)
        except Exception as err:
            if not self.compiled:
                raise
            self.compile_failed = f"{type(err).__name__}: {err}"
            logger.warning("%s: compiling its steps failed (%s); they run eager", self.name,
                           self.compile_failed)
            self._rows_fn, self._last_fn, self.compiled = self._rows, self._last_row, False
            self.release(slot)
            return self._warm_up(prompt_chunks)
        self.release(slot)
        return timings

    def describe(self) -> str:
        """One line for the node's log."""
        mode = "compiled" if self.compiled else "eager"
        if self.compiled and compile_mode(self.device):
            mode += f" {compile_mode(self.device)}"
        if self.compiled and self.options.inductor:
            mode += ", " + ", ".join(f"{k}={v}" for k, v in self.options.inductor)
        if self.compiled and not self.options.compile_prefill:
            mode += ", prefill eager"
        if self._attention_kwargs:
            mode += f", attention split over {self._attention_kwargs['kv_splits']} blocks"
        if self.vision is not None and self.vision.compiled:
            mode += ", vision compiled"
        exact = ", exact" if self.options.exact else ""
        return (f"{self.name}: static runtime ({mode}{exact}), {len(self._slots)} caches of "
                f"{self.max_len} positions, steps of {'/'.join(map(str, self.step_rows))} "
                f"rows")


class StaticSession(ModelSession):
    """A window's decoding state on a StaticLM: a cache from its pool and a position counter.

    ``prompt_len`` positions hold the prompt; generated tokens follow. ``rows``: logits
    [len(proposal) + 1, vocab] of the last prompt position and the proposal fed with it (held
    as generated tokens). The cache goes back to the pool when the session is closed or
    collected."""

    supports_tree = False  # a tree's side branches are not in the exact shape: chains only

    def __init__(self, lm: StaticLM, slot: _CacheSlot, prompt_len: int, rows: torch.Tensor,
                 timing: PrefillTiming, proposal: Sequence[int] = ()) -> None:
        self.lm, self.slot, self.timing = lm, slot, timing
        self.prompt_len = prompt_len
        self.generated = [int(t) for t in proposal]
        rows = rows[None] if rows.dim() == 1 else rows
        if rows.shape[0] != len(self.generated) + 1:
            raise ValueError(f"need {len(self.generated) + 1} rows of prefill logits, got "
                             f"{rows.shape[0]}")
        self._rows: list[torch.Tensor] = list(rows.unbind(0))
        self.last_logits = self._rows[-1]
        self.window_state: torch.Tensor | None = None
        self.max_rows = lm.max_rows
        self.exact = lm.options.exact
        self._release = weakref.finalize(self, lm.release, slot, slot.lease)

    @property
    def pos(self) -> int:
        """Positions held: the prompt and the generated tokens."""
        return self.prompt_len + len(self.generated)

    @property
    def seq_len(self) -> int:
        return self.pos

    def feed(self, token_ids: list[int]) -> torch.Tensor:
        """Append tokens (steps of at most ``max_rows``); float32 logits [k, vocab]."""
        if not token_ids:
            return self.last_logits.new_empty((0, self.last_logits.shape[-1]))
        out = []
        with inference(self.lm.device, self.lm.stream):
            for start in range(0, len(token_ids), self.max_rows):
                part = [int(t) for t in token_ids[start:start + self.max_rows]]
                _, logits = self.lm.chain(self.slot, self.pos, self.lm.embed_ids(part),
                                          rows=self.lm.bucket(len(part)))
                self.generated.extend(part)
                out.append(logits)
        synchronize(self.lm.device, self.lm.stream)
        logits = torch.cat(out) if len(out) > 1 else out[0]
        self._rows.extend(logits.unbind(0))
        self.last_logits = self._rows[-1]
        return logits

    def rollback(self, n_generated: int) -> None:
        """Keep the first ``n_generated`` generated tokens: the counter moves back."""
        if not 0 <= n_generated <= len(self.generated):
            raise ValueError(f"cannot roll back to {n_generated} generated tokens: the session "
                             f"holds {len(self.generated)}")
        del self.generated[n_generated:]
        del self._rows[n_generated + 1:]
        self.last_logits = self._rows[n_generated]

    def close(self) -> None:
        """Give the cache back to the pool now (else when the session is collected)."""
        self._release()
