"""The measurement behind `crossspec bench engine` (modes and method: ``engine_cmd.py``):
runners for every mode, the shuffled paired loop, the summary, the table and the plot."""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from crossspec_ros import summaries
from crossspec_ros.bench.live_replay import (
    LIVE_GRAPHS,
    LiveReplay,
    ReplayedWindow,
    replay_messages,
    window_keys,
)
from crossspec_ros.comparison import ComparedGraph
from crossspec_ros.models.base import CaptionModel
from crossspec_ros.models.oracle import OracleDrafter
from crossspec_ros.params import VERIFIER_NODE_PARAMS, validate
from crossspec_ros.process_tuning import settle_heap
from crossspec_ros.speculative.drafter_process import DrafterProcess
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine
from crossspec_ros.speculative.stats import WindowStats
from crossspec_ros.stamps import SECOND_NS, seconds_to_ns

VERIFIER_DEFAULTS = validate({}, VERIFIER_NODE_PARAMS)
HEAD_PROPOSERS = ("history_ngram", "corpus_ngram", "draft_head")  # the crossspec_head modes
# paired baselines of every mode (those that ran): verifier_alone_compiled is the fastest plain
# decoder (what a user would run instead), verifier_alone today's eager one; live_alone is the
# live graph without speculation, so crossspec_live over it is what speculation adds there
BASELINES = ("verifier_alone_compiled", "verifier_alone", "hf_generate", "history_only",
             "live_alone", "crossspec")
# crossspec with EngineConfig.event_aware: both choices, then each alone (the ablation)
EVENT_MODES = {"crossspec_event": ("acceptance", "cascade"),
               "crossspec_event_acceptance": ("acceptance",),
               "crossspec_event_cascade": ("cascade",)}


@dataclass
class BenchRuntimes:
    """The models a run steps, per runtime: ``verifier``/``drafter`` are what the speculative
    modes run on (the static runtime, unless ``--runtime transformers``); ``eager_*`` the
    transformers runtime (hf_generate, verifier_alone and crossspec_live_transformers: today's
    path); ``plain`` the plain decoder of one-row steps on the static runtime (compiled as
    the run's options say; None on the transformers runtime), what the live baselines decode
    on (comparison.py's step-shape rule) and, compiled, the fastest plain decoder."""

    verifier: CaptionModel
    drafter: CaptionModel | None
    eager_verifier: CaptionModel
    eager_drafter: CaptionModel | None
    plain: CaptionModel | None = None
    compiled: bool = False  # the static runtimes compile their steps

    @property
    def static(self) -> bool:
        return self.verifier.runtime is not None


def bench_runtimes(verifier: CaptionModel, drafter: CaptionModel | None,
                   options: Any, max_new_tokens: int, log: Any = print) -> BenchRuntimes:
    """The runtimes of a run (``options``: static_runtime.RuntimeOptions of the verifier, or
    None: everything on the transformers runtime), built and warmed up (compiled) here, before
    any window is timed."""
    from crossspec_ros.models.static_runtime import (
        DRAFTER_STEP_ROWS,
        RuntimeOptions,
        use_static_runtime,
    )

    eager_verifier = verifier.with_runtime(None)
    eager_drafter = drafter.with_runtime(None) if drafter is not None else None
    if options is None:
        return BenchRuntimes(eager_verifier, eager_drafter, eager_verifier, eager_drafter)
    t0 = time.perf_counter()
    static = verifier.with_runtime(None)
    use_static_runtime(static, options, max_new_tokens)
    static_drafter = None
    if drafter is not None:
        static_drafter = drafter.with_runtime(None)
        use_static_runtime(static_drafter, RuntimeOptions(
            compile=options.compile, step_rows=DRAFTER_STEP_ROWS), max_new_tokens)
    plain = verifier.with_runtime(None)  # the fastest plain decoder: the same attention
    use_static_runtime(plain, RuntimeOptions(compile=options.compile, step_rows=(1,),
                                             attention=options.attention), max_new_tokens)
    log(f"runtimes ready in {time.perf_counter() - t0:.1f} s: {static.runtime.describe()}; "
        f"{plain.runtime.describe()}")
    return BenchRuntimes(static, static_drafter, eager_verifier, eager_drafter, plain,
                         compiled=options.compile)


@dataclass
class BenchWindow:
    id: int
    frames: list
    events: Any
    t0: int = 0  # [t0, t1): where the frames' stamps lie (live prefill replays them)
    t1: int = 0


def pattern_windows(n: int) -> list[BenchWindow]:
    """n one-second windows of the moving test pattern (8 RGB frames + events each)."""
    from crossspec_ros.bags.test_pattern import TestPattern
    from crossspec_ros.sync.window import StampedFrame

    pattern = TestPattern()
    windows = []
    for k in range(n):
        t0 = pattern.start_ns + k * SECOND_NS
        stamps = [t0 + (i * 2 + 1) * 62_500_000 for i in range(8)]
        frames = [StampedFrame(t, pattern.rgb(t)) for t in stamps]
        windows.append(BenchWindow(k, frames, pattern.events(t0, t0 + SECOND_NS),
                                   t0, t0 + SECOND_NS))
    return windows


def bag_windows(path: str | Path, n: int) -> list[Any]:
    """The first n windows with RGB of a bag, as the synchronizer emits them."""
    from crossspec_ros.bags.inputs import iter_bag_windows
    from crossspec_ros.sync.synchronizer import WindowSynchronizer

    windows = [w for w in iter_bag_windows(path, WindowSynchronizer()) if w.has_rgb]
    return windows[:n]


def bundled_pair(device: str) -> tuple[CaptionModel, CaptionModel, str]:
    """The pair the nodes load by default (``models/pair.py``): the bundled tiny verifier and
    the bundled drafter distilled on its captions."""
    from crossspec_ros.models.pair import load_from_params
    from crossspec_ros.params import MODEL_PARAMS

    verifier, drafter = load_from_params({**validate({}, MODEL_PARAMS), "device": device})
    return verifier, drafter, "bundled tiny pair (the nodes' default: distilled drafter): " \
        "EventGPT -> Video-LLaVA"


def tiny_random_pair(device: str) -> tuple[CaptionModel, CaptionModel, str]:
    """Untrained tiny pair with a real cost asymmetry (verifier prefill several times the
    drafter's). Random weights: the drafter's real acceptance is near zero."""
    from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier

    # 8 frames x 65 visual tokens for the verifier vs 5 + 17 pooled event tokens for the
    # drafter: the asymmetry of the 7B pair (2056 vs 582 tokens), scaled down
    verifier = tiny_verifier(seed=0, hidden=128, layers=4, image_size=112,
                             init_range=0.3).to(device)
    drafter = tiny_eventgpt_drafter(seed=1, hidden=64, layers=2, image_size=56,
                                    init_range=0.3).to(device)
    return verifier, drafter, "tiny random (untrained) EventGPT -> Video-LLaVA"


def full_size_pair(device: str, dtype: torch.dtype = torch.bfloat16
                   ) -> tuple[CaptionModel, CaptionModel, str]:
    """Video-LLaVA-7B and EventGPT-7B architectures, random weights (GPU only)."""
    from crossspec_ros.models.full_size import full_size_eventgpt_drafter, full_size_verifier

    if not device.startswith("cuda"):
        raise SystemExit("crossspec bench engine: --models full-size needs --device cuda "
                         "(two 7B models in bf16 need ~28 GB of GPU memory)")
    verifier = full_size_verifier(device, dtype)
    drafter = full_size_eventgpt_drafter(device, dtype)
    name = {torch.bfloat16: "bf16", torch.float32: "fp32"}.get(dtype, str(dtype))
    return verifier, drafter, f"full-size random-weight EventGPT-7B -> Video-LLaVA-7B ({name})"


def quantized_4bit(verifier: CaptionModel, drafter: CaptionModel, label: str
                   ) -> tuple[CaptionModel, CaptionModel, str]:
    """The pair with its layers in NF4 (``models/quantize.py``), as 4-bit checkpoints load."""
    from crossspec_ros.models.quantize import quantize_caption_model_4bit

    for model in (verifier, drafter):
        quantize_caption_model_4bit(model)
    return verifier, drafter, label.replace(" (bf16)", "") + ", 4-bit NF4"


def prompt_lookup_generate(verifier: Any, inputs: Any, max_new_tokens: int, k: int) -> list[int]:
    """transformers' prompt-lookup decoding on the verifier, from merged prompt embeddings."""
    from transformers import GenerationConfig

    captured: dict[str, torch.Tensor] = {}

    def grab(_module: Any, _args: Any, kwargs: dict) -> None:
        captured.setdefault("embeds", kwargs.get("inputs_embeds"))

    model = verifier.model
    hook = model.model.language_model.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.inference_mode():
            ids = inputs.input_ids.to(verifier.device)
            pixels = inputs.pixel_values.to(verifier.device, verifier.vision_dtype)
            model.model(input_ids=ids, pixel_values_videos=pixels)
    finally:
        hook.remove()
    embeds = captured["embeds"]
    eos = verifier.info.eos_token_id
    config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=max_new_tokens,
                              eos_token_id=eos, pad_token_id=eos, prompt_lookup_num_tokens=k)
    with torch.inference_mode():
        out = model.generate(inputs_embeds=embeds, generation_config=config,
                             attention_mask=torch.ones(embeds.shape[:2], dtype=torch.long,
                                                       device=embeds.device))
    return out[0].tolist()


@dataclass
class ModeRun:
    """One mode's measurements, window by window (warm-up windows are not kept)."""

    latency_ms: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)         # caption length per window
    stats: list[WindowStats] = field(default_factory=list)
    lossless: list[bool] = field(default_factory=list)   # equal to its runtime's plain decoding
    same_as_hf: list[bool] = field(default_factory=list)  # equal to transformers' generate
    windows: list[int] = field(default_factory=list)  # which window each entry is (pairing)

    def add(self, tokens: list[int], latency_ms: float, stats: WindowStats | None,
            reference: list[int], hf_reference: list[int] | None = None,
            window: int | None = None) -> None:
        if window is not None:
            self.windows.append(window)
        self.latency_ms.append(latency_ms)
        self.tokens.append(len(tokens))
        self.lossless.append(tokens == reference)
        self.same_as_hf.append(tokens == (reference if hf_reference is None else hf_reference))
        if stats is not None:
            self.stats.append(stats)


Runner = Callable[[Any], tuple[list[int], float, WindowStats | None]]


class CollectorPauses:
    """The cyclic garbage collector's pauses while installed (``with``): a full collection
    over loaded models' objects took 166 ms here, enough to spoil the window it lands in, so
    the report says how many ran and the longest (``process_tuning.settle_heap``)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, ms)
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((info["generation"], (time.perf_counter() - self._started) * 1e3))

    def __enter__(self) -> CollectorPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, float]:
        return {"collections": len(self.pauses),
                "full_collections": sum(gen == 2 for gen, _ in self.pauses),
                "longest_pause_ms": round(max((ms for _, ms in self.pauses), default=0.0), 2),
                "total_pause_ms": round(sum(ms for _, ms in self.pauses), 1)}


# the speculative modes, as engine configurations: name -> (which drafter, config changes,
# with the draft head); "drafter": the run's, "distilled": --distilled's, "head": the head's
DRAFT_ONLY = {"proposers": ("draft_stream", "draft_ngram"), "drafter_gate": False}
SPECULATIVE_MODES: dict[str, tuple[str, dict[str, Any], bool]] = {
    "draft_only": ("drafter", DRAFT_ONLY, False),
    "crossspec": ("drafter", {}, False),
    **{name: ("drafter", {"event_aware": choices}, False)
       for name, choices in EVENT_MODES.items()},
    "draft_only_distilled": ("distilled", DRAFT_ONLY, False),
    "crossspec_distilled": ("distilled", {}, False),
    "crossspec_head": ("head", {"proposers": HEAD_PROPOSERS}, True),
}
# without a drafter: crossspec on its history proposers, and the change level on acceptance
# only (there is nothing to cascade)
DRAFTERLESS_MODES: dict[str, tuple[str, dict[str, Any], bool]] = {
    "crossspec": ("", {}, False),
    "crossspec_event": ("", {"event_aware": ("acceptance",)}, False),
}


def make_runners(runtimes: BenchRuntimes, config: EngineConfig,
                 oracle_acceptances: tuple[float, ...], lookup_k: int, prompt_lookup: bool,
                 distilled: CaptionModel | None = None,
                 processes: dict[str, DrafterProcess] | None = None,
                 head: tuple[Any, CaptionModel] | None = None,
                 corpus: Sequence[Sequence[int]] = (), free_oracles: bool = False
                 ) -> tuple[dict[str, Runner], dict[str, OracleDrafter]]:
    """name -> runner(window) -> (tokens, latency ms, engine stats or None). The crossspec
    modes read ``corpus`` (the verifier's captions of other drives, proposer corpus_ngram);
    history_only, draft_only and the oracles do not. ``free_oracles`` adds oracles that run
    no drafter at all (their drafts are there at once): the acceptance alone, no pace.
    The speculative modes run on ``runtimes.verifier`` (see ``RUNTIME_REFERENCE``)."""
    runners = plain_runners(runtimes, config, lookup_k, prompt_lookup)
    runners["history_only"] = engine_runner(SpeculativeEngine(
        runtimes.verifier, None, replace(config, proposers=("history_ngram",))))
    drafters = {"drafter": runtimes.drafter, "distilled": distilled,
                "head": head[1] if head is not None else None, "": None}
    table = SPECULATIVE_MODES if runtimes.drafter is not None else DRAFTERLESS_MODES
    engines: dict[str, SpeculativeEngine] = {}
    for name, (which, changes, with_head) in table.items():
        if which and drafters[which] is None:
            continue  # its drafter is not part of this run
        engines[name] = SpeculativeEngine(
            runtimes.verifier, drafters[which], replace(config, **changes),
            head=head[0] if with_head else None, corpus=corpus)
        runners[name] = engine_runner(engines[name])
    if runtimes.drafter is not None:
        runners.update(process_runners(processes or {}, head, config, engines, corpus))
    oracles = oracle_runners(runtimes, config, oracle_acceptances, free_oracles, runners)
    return runners, oracles


def plain_runners(runtimes: BenchRuntimes, config: EngineConfig, lookup_k: int,
                  prompt_lookup: bool) -> dict[str, Runner]:
    """The plain decoders a user would run instead: transformers' generate, the engine's
    verifier alone on the eager runtime, compiled and on the exact static runtime, and
    transformers' prompt lookup."""
    eager, max_new = runtimes.eager_verifier, config.max_new_tokens
    runners: dict[str, Runner] = {
        "hf_generate": lambda w: timed_tokens(
            lambda: eager.reference_generate(eager.prepare(w), max_new)),
        "verifier_alone": engine_runner_alone(SpeculativeEngine(eager, None, config), max_new),
    }
    if runtimes.plain is not None and runtimes.compiled:
        runners["verifier_alone_compiled"] = engine_runner_alone(
            SpeculativeEngine(runtimes.plain, None, config), max_new)
    if runtimes.static:  # the plain greedy decoding the speculative modes equal bit for bit
        runners["verifier_alone_exact"] = engine_runner_alone(
            SpeculativeEngine(runtimes.verifier, None, config), max_new)
    if prompt_lookup:
        runners["prompt_lookup"] = lambda w: timed_tokens(
            lambda: prompt_lookup_generate(eager, eager.prepare(w), max_new, lookup_k))
    return runners


def process_runners(processes: dict[str, DrafterProcess], head: tuple[Any, CaptionModel] | None,
                    config: EngineConfig, engines: dict[str, SpeculativeEngine],
                    corpus: Sequence[Sequence[int]]) -> dict[str, Runner]:
    """crossspec with its drafter (or the distilled one, or the head's) in a child process:
    ``processes`` by mode suffix ("", "_distilled", "_head")."""
    runners: dict[str, Runner] = {}
    if head is not None and "_head" in processes:
        process, head_engine = processes["_head"], SpeculativeEngine(
            engines["crossspec_head"].verifier, head[1], engines["crossspec_head"].config,
            head=head[0], corpus=corpus)

        def head_process(window: Any) -> tuple[list[int], float, WindowStats]:
            result = head_engine.run_window(window, look=lambda: process.look(window))
            return result.tokens, result.stats.confirmed_done_ms, result.stats

        runners["crossspec_head_process"] = head_process
    for suffix, process in processes.items():
        if suffix == "_head":
            continue
        local = engines["crossspec_distilled" if suffix == "_distilled" else "crossspec"]
        engine = SpeculativeEngine(local.verifier, local.drafter, config, corpus=corpus)
        runners[f"crossspec{suffix}_process"] = drafter_process_runner(engine, process, config)
    return runners


def oracle_runners(runtimes: BenchRuntimes, config: EngineConfig,
                   acceptances: tuple[float, ...], free_oracles: bool,
                   runners: dict[str, Runner]) -> dict[str, OracleDrafter]:
    """The oracle drafters at each acceptance, their runners added to ``runners``. An oracle
    runs the real drafter's compute too, so it competes like it; a free one runs none (and
    needs no drafter)."""
    kinds = {**({"oracle": runtimes.drafter} if runtimes.drafter is not None else {}),
             **({"oracle_free": None} if free_oracles else {})}
    oracles: dict[str, OracleDrafter] = {}
    for a in acceptances:
        for kind, backing in kinds.items():
            name = f"{kind}@a={a:g}"
            oracles[name] = OracleDrafter(runtimes.verifier, a, seed=7, backing=backing)
            runners[name] = engine_runner(SpeculativeEngine(
                runtimes.verifier, oracles[name],
                replace(config, proposers=("draft_stream",), drafter_gate=False)))
    return oracles


def timed_tokens(fn: Callable[[], list[int]]) -> tuple[list[int], float, None]:
    """A plain decoder's tokens and its wall time (ms); no engine stats."""
    t0 = time.perf_counter()
    tokens = fn()
    return tokens, (time.perf_counter() - t0) * 1e3, None


def engine_runner(engine: SpeculativeEngine) -> Runner:
    """The engine's speculative decoding of a window after its close."""
    def run(window: Any) -> tuple[list[int], float, WindowStats]:
        result = engine.run_window(window)
        return result.tokens, result.stats.confirmed_done_ms, result.stats
    return run


def drafter_process_runner(engine: SpeculativeEngine, process: DrafterProcess,
                           config: EngineConfig) -> Runner:
    """The engine with its draft from ``process`` (the drafter in a child process)."""
    def run(window: Any) -> tuple[list[int], float, WindowStats]:
        t_close = time.monotonic()  # handing the events over is part of the latency
        channel = process.start(window, config.draft_lookahead, config.max_new_tokens)
        result = engine.run_window(window, t_close=t_close, draft=channel)
        result.stats.draft_first_token_ms = process.first_token_ms
        # after the latency is taken: the child's wind-down would load the next mode
        process.wait_idle(timeout=10.0)
        return result.tokens, result.stats.confirmed_done_ms, result.stats
    return run


# which plain decoding a mode's caption must equal, token for token: the modes on the static
# runtime equal its own plain decoding (verifier_alone_exact) bit for bit; the others,
# transformers' generate
RUNTIME_REFERENCE = "verifier_alone_exact"
EAGER_MODES = ("hf_generate", "verifier_alone", "verifier_alone_compiled", "prompt_lookup",
               "crossspec_live_transformers")


def engine_runner_alone(engine: SpeculativeEngine, max_new: int) -> Runner:
    """The engine's verifier decoding plainly, one token per pass, on its runtime."""
    def run(window: Any) -> tuple[list[int], float, WindowStats]:
        stats = WindowStats()
        tokens = engine.verifier_only(window, max_new, stats)
        return tokens, stats.confirmed_done_ms, stats
    return run


def run_engine_bench(verifier: CaptionModel, drafter: CaptionModel | None,
                     windows: list[Any], *, max_new_tokens: int, max_proposal: int = 24,
                     runtime: Any = None,
                     oracle_acceptances: tuple[float, ...] = (), lookup_k: int = 4,
                     prompt_lookup: bool = True, warmup: int = 2,
                     log: Any = print, distilled: CaptionModel | None = None,
                     processes: dict[str, DrafterProcess] | None = None,
                     head: tuple[Any, CaptionModel] | None = None,
                     live: bool = False, corpus: Sequence[Sequence[int]] = (),
                     free_oracles: bool = False, settle: bool = False,
                     runtimes: BenchRuntimes | None = None,
                     modes: Sequence[str] | None = None, live_rounds: int = 2
                     ) -> dict[str, Any]:
    """Run every mode on every window, in a fresh order per window; returns the report dict.
    ``runtime``: the static_runtime.RuntimeOptions the speculative modes' verifier runs on
    (None: the transformers runtime; ``bench_runtimes``), or ``runtimes`` built before (the
    GPU kit compiles once for all its stages). ``modes``: only these (those that exist here;
    default every one).
    ``settle``: once every mode's engine is built, take the heap out of the collector's full
    walks (``process_tuning.settle_heap``), as the nodes do after configuring (the corpus
    tries alone once cost a full collection of 120-150 ms in a counted window).
    ``live`` (Video-LLaVA verifiers): the live graphs (``live_replay.LIVE_GRAPHS``, and
    crossspec_live_transformers) replay the windows through the product's loops after the
    shuffled windows, ``live_rounds`` rounds of one pass each, every other round reversed;
    a window's latency is its median over the rounds (report["live"]: what a user sees)."""
    if len(windows) <= warmup:
        raise ValueError(f"need more windows ({len(windows)}) than warm-up windows ({warmup})")
    if live and live_rounds < 1:
        raise ValueError(f"live_rounds must be >= 1, got {live_rounds}")
    config = EngineConfig(max_new_tokens=max_new_tokens, max_proposal=max_proposal)
    if runtimes is None:
        runtimes = bench_runtimes(verifier, drafter, runtime, max_new_tokens, log)
    runners, oracles = make_runners(runtimes, config, oracle_acceptances, lookup_k,
                                    prompt_lookup, distilled, processes, head, corpus,
                                    free_oracles)
    if modes is not None:
        runners = {name: run for name, run in runners.items() if name in modes}
        oracles = {name: oracle for name, oracle in oracles.items() if name in runners}
    if settle:
        settle_heap()
    with CollectorPauses() as collector:
        runs, references = run_shuffled(runners, oracles, runtimes, windows,
                                        max_new_tokens=max_new_tokens, warmup=warmup, log=log)
        live_report = None
        graphs = live_graphs(runtimes, modes) if live and getattr(
            runtimes.verifier, "tokens_per_frame", None) else {}
        if graphs:
            live_runs, live_report = run_live_graphs(
                graphs, windows, references, exact_verifier=runtimes.verifier,
                warmup=warmup, rounds=live_rounds,
                max_new_tokens=max_new_tokens, max_proposal=max_proposal, corpus=corpus,
                log=log)
            runs.update(live_runs)
    report = summarize(runs, max_new_tokens, len(windows) - warmup)
    if live_report is not None:
        report["live"] = live_report
    report["collector_pauses"] = collector.summary()
    report["runtime"] = runtimes.verifier.runtime.describe() if runtimes.static else \
        "transformers (eager, a DynamicCache per window)"
    return report


def run_shuffled(runners: dict[str, Runner], oracles: dict[str, OracleDrafter],
                 runtimes: BenchRuntimes, windows: list[Any], *, max_new_tokens: int,
                 warmup: int, log: Any = print
                 ) -> tuple[dict[str, ModeRun], list[tuple[list[int], list[int]]]]:
    """Every mode on every window, in a fresh order per window, each caption checked against
    its runtime's plain decoding; returns the runs and, per window, (transformers' caption,
    the exact runtime's) for the live graphs to check theirs."""
    modes = list(runners)
    runs = {mode: ModeRun() for mode in modes}
    references: list[tuple[list[int], list[int]]] = []  # per window: transformers', exact
    shuffle = random.Random(0)
    t_start = time.perf_counter()
    for index, window in enumerate(windows):
        eager = runtimes.eager_verifier
        reference = eager.reference_generate(eager.prepare(window), max_new_tokens)
        exact = runtimes.verifier.generate_greedy(runtimes.verifier.prepare(window),
                                                  max_new_tokens)
        references.append((reference, exact))
        for oracle in oracles.values():
            oracle.set_reference(int(window.id), exact)
        # Shuffled, not rotated: in a rotation a mode always follows the same one, and
        # the mode after a drafter's found the caches cold on every window (2-3 ms).
        results = {mode: runners[mode](window) for mode in shuffle.sample(modes, len(modes))}
        elapsed = time.perf_counter() - t_start
        if index < warmup:
            log(f"window {index + 1}/{len(windows)}: warm-up, not counted ({elapsed:.0f} s)")
            continue
        for mode, (tokens, latency, stats) in results.items():
            runs[mode].add(tokens, latency, stats,
                           reference if mode in EAGER_MODES else exact, reference,
                           window=index)
        log(f"window {index + 1}/{len(windows)}: " + ", ".join(
            f"{m} {results[m][1]:.0f}" for m in modes) + f" ms ({elapsed:.0f} s)")
    return runs, references


def live_graphs(runtimes: BenchRuntimes, wanted: Sequence[str] | None
                ) -> dict[str, tuple[ComparedGraph, CaptionModel, CaptionModel | None]]:
    """The live graphs of a run and the models each runs: every one of ``LIVE_GRAPHS`` as
    comparison.py's step-shape rule says (the baselines on the one-row runtime, the others on
    the speculative modes' runtime: the same verifier, with and without crossspec's parts;
    without a one-row runtime, the GPU kit's when its compile did not fit, every graph on the
    speculative one, which the report says), and crossspec_live on the transformers runtime
    (today's path) beside a static one."""
    one_row = runtimes.plain if runtimes.plain is not None else runtimes.verifier
    graphs = {name: (graph, one_row if graph.one_row_steps else runtimes.verifier,
                     runtimes.drafter)
              for name, graph in LIVE_GRAPHS.items()}
    if runtimes.static:
        graphs["crossspec_live_transformers"] = (
            replace(LIVE_GRAPHS["crossspec_live"], name="crossspec_live_transformers"),
            runtimes.eager_verifier, runtimes.eager_drafter)
    return {name: g for name, g in graphs.items() if wanted is None or name in wanted}


def run_live_graphs(graphs: dict[str, tuple[ComparedGraph, CaptionModel, CaptionModel | None]],
                    windows: list[Any], references: list[tuple[list[int], list[int]]], *,
                    exact_verifier: CaptionModel | None = None,
                    warmup: int, rounds: int, max_new_tokens: int, max_proposal: int,
                    corpus: Sequence[Sequence[int]] = (), log: Any = print
                    ) -> tuple[dict[str, ModeRun], dict[str, Any]]:
    """Replay ``windows`` through every live graph, ``rounds`` times, every other round in
    reverse order (a machine whose load drifts favours no graph). A window counts where it
    was FINAL in every round, at its median latency; its caption must equal the plain
    decoding of the window the loops made (``references`` when its frames are the bench
    window's). Returns the runs and report["live"]."""
    messages = replay_messages(windows)
    keys = list(window_keys(windows, seconds_to_ns(VERIFIER_DEFAULTS["window_length_s"])))
    names = list(graphs)
    outcomes: dict[str, list[dict]] = {name: [] for name in names}
    errors: dict[str, list[str]] = {name: [] for name in names}
    drafting: dict[str, dict[str, int]] = {name: {} for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            graph, verifier, drafter = graphs[name]
            t0 = time.perf_counter()
            replay = LiveReplay(graph, verifier, drafter, max_new_tokens=max_new_tokens,
                                max_proposal=max_proposal, corpus=corpus, log=log)
            settle_heap()  # as the nodes after configuring: its engine's tries are new
            out = replay.run(messages, set(keys))
            outcomes[name].append(out)
            errors[name] += replay.errors
            for counter, value in replay.draft_counters.items():
                drafting[name][counter] = drafting[name].get(counter, 0) + value
            final = sum(out.get(k, ReplayedWindow(k)).status == "FINAL" for k in keys)
            log(f"live round {r + 1}/{rounds}, {name}: {final}/{len(keys)} windows FINAL "
                f"({time.perf_counter() - t0:.0f} s)")
    runs: dict[str, ModeRun] = {}
    report: dict[str, Any] = {"rounds": rounds, "rate": 1.0, "graphs": {}}
    for name in names:
        graph, verifier, _ = graphs[name]
        runs[name], report["graphs"][name] = live_graph_report(
            graph, verifier, outcomes[name], keys, windows, references,
            own_reference=verifier is not exact_verifier, warmup=warmup,
            max_new_tokens=max_new_tokens)
        report["graphs"][name].update(drafter=drafting[name],  # every round, warm-up too
                                      errors=errors[name][:5])
    # the scene changes: windows whose caption (the exact runtime's) differs from the one before
    changes = {i for i in range(warmup + 1, len(windows))
               if references[i][1] != references[i - 1][1]}
    report["scene_changes"] = len(changes)
    for name, run in runs.items():
        report["graphs"][name]["changes"] = {
            "windows": sum(w in changes for w in run.windows),
            "confirmed_after_close_ms": summaries.spread(
                ms for w, ms in zip(run.windows, run.latency_ms, strict=True) if w in changes)}
    for base in ("live_alone", "text_only"):
        if base not in runs:
            continue
        for name, run in runs.items():
            report["graphs"][name][f"vs_{base}_ms"] = _minus(runs[base], run)
            report["graphs"][name]["changes"][f"vs_{base}_ms"] = _minus(runs[base], run,
                                                                        changes)
    return runs, report


def _minus(base: ModeRun, run: ModeRun, only: set[int] | None = None) -> dict[str, Any]:
    """``run``'s latency minus ``base``'s, window by window (``only`` those windows)."""
    pairs = [(b, m) for w, b, m in _by_window(base, run) if only is None or w in only]
    return summaries.spread(m - b for b, m in pairs)


def _by_window(base: ModeRun, run: ModeRun) -> list[tuple[int, float, float]]:
    """(window, base's latency, run's latency) for the windows both have."""
    by_window = dict(zip(base.windows, base.latency_ms, strict=True))
    return [(w, by_window[w], ms) for w, ms in zip(run.windows, run.latency_ms, strict=True)
            if w in by_window]


def live_graph_report(graph: ComparedGraph, verifier: CaptionModel, outcomes: list[dict],
                      keys: list[Any], windows: list[Any],
                      references: list[tuple[list[int], list[int]]], *,
                      own_reference: bool = False, warmup: int,
                      max_new_tokens: int) -> tuple[ModeRun, dict[str, Any]]:
    """One live graph's rounds (``outcomes``, window key -> ReplayedWindow each) as a run and
    its report: a window counts where it was FINAL in every round, at its median latency, and
    its caption must equal the plain decoding of the window the loops made."""
    eager = verifier.runtime is None
    run = ModeRun()
    rows_all, unverified = [], 0
    for index, key in enumerate(keys):
        rows = [out.get(key, ReplayedWindow(key)) for out in outcomes]
        if index < warmup:
            continue
        unverified += sum(row.status != "FINAL" for row in rows)
        if any(row.status != "FINAL" or row.tokens is None for row in rows):
            continue
        rows_all += rows
        bench_frames = tuple(f.stamp_ns for f in windows[index].frames)
        reference, exact = references[index]
        expected = reference if eager else exact
        # the loops made another window, or the graph decodes on another runtime than the
        # references' (a baseline's one-row steps): its own plain decoding
        if rows[0].frame_stamps != bench_frames or (own_reference and not eager):
            expected = verifier.reference_generate(verifier.prepare(rows[0].window),
                                                   max_new_tokens) if eager else \
                verifier.generate_greedy(verifier.prepare(rows[0].window), max_new_tokens)
        tokens = next((row.tokens for row in rows if row.tokens != expected), rows[0].tokens)
        run.add(tokens, summaries.median(row.confirmed_done_ms for row in rows),
                rows[0].stats, expected, reference, window=index)
    return run, {
        "about": graph.about, "windows": len(run.latency_ms), "not_final": unverified,
        # its verifier's step shape (None: the transformers runtime, one row a step)
        "step_rows": verifier.runtime.max_rows if not eager else None,
        "confirmed_after_close_ms": {**summaries.spread(run.latency_ms),
                                     "p95": summaries.percentile(run.latency_ms, 95)},
        "draft_first_token_ms_median": summaries.median(
            row.draft_first_token_ms for row in rows_all),
        # against the drafter's real close (its loop's timing): < 0 before it
        "draft_complete_ms_median": summaries.median(
            row.draft_complete_ms for row in rows_all),
        "draft_before_final": f"{sum(row.draft_first for row in rows_all)}/{len(rows_all)}",
        "lossless_windows": f"{sum(run.lossless)}/{len(run.lossless)}"}


def paired(baseline: list[float], mode: list[float]) -> dict[str, float | None]:
    """Median and interquartile range of the per-window ratios baseline / mode (None each
    when no window has both)."""
    return summaries.spread(b / m for b, m in zip(baseline, mode, strict=True) if m > 0)


def same_windows(baseline: ModeRun, run: ModeRun) -> tuple[list[float], list[float]]:
    """The two runs' latencies of the windows both have, in pairs (by window where both
    say which; a live graph can leave a window UNVERIFIED)."""
    if not (baseline.windows and run.windows):
        return baseline.latency_ms, run.latency_ms
    by_window = dict(zip(baseline.windows, baseline.latency_ms, strict=True))
    pairs = [(by_window[w], ms) for w, ms in zip(run.windows, run.latency_ms, strict=True)
             if w in by_window]
    return [b for b, _ in pairs], [m for _, m in pairs]


def summarize(runs: dict[str, ModeRun], max_new_tokens: int, windows: int) -> dict[str, Any]:
    # the paired speedups are against the fastest plain decoder that ran: the compiled one
    # when the run compiled (what a user would run instead), else today's eager one
    # (a run of chosen modes may have only the exact runtime's own plain decoding)
    main = next((b for b in ("verifier_alone_compiled", "verifier_alone",
                             "verifier_alone_exact") if b in runs), None)
    if main is None:
        raise ValueError("a bench engine run needs one of verifier_alone_compiled, "
                         "verifier_alone or verifier_alone_exact: the paired baseline")
    report: dict[str, Any] = {"windows": windows, "max_new_tokens": max_new_tokens,
                              "baseline": main, "modes": {}}
    alone = runs[main]  # prefill slowdowns and the ceiling: against the baseline
    alone_prefill = [s.verifier_prefill_ms for s in alone.stats]
    for mode, run in runs.items():
        entry: dict[str, Any] = {
            "latency_ms_median": _round(summaries.median(run.latency_ms)),
            "latency_ms_p95": _round(summaries.percentile(run.latency_ms, 95)),
            "tokens_per_s": round(sum(run.tokens) / (sum(run.latency_ms) / 1e3), 1)
            if sum(run.latency_ms) > 0 else None,
            "lossless": all(run.lossless),
            "lossless_windows": f"{sum(run.lossless)}/{len(run.lossless)}",
            "same_as_hf_generate": f"{sum(run.same_as_hf)}/{len(run.same_as_hf)}",
            "latency_ms_per_window": [round(x, 2) for x in run.latency_ms],
        }
        for baseline in (b for b in dict.fromkeys((main, *BASELINES)) if b in runs):
            entry[f"paired_speedup_vs_{baseline}"] = paired(*same_windows(runs[baseline], run))
        entry["paired_speedup_median"] = entry[f"paired_speedup_vs_{main}"]["median"]
        # kept for readers of earlier reports: the ratio of the medians (not paired)
        alone_ms = summaries.median(runs[main].latency_ms)
        mode_ms = summaries.median(run.latency_ms)
        entry["speedup_median"] = summaries.rounded(alone_ms / mode_ms, 3) \
            if alone_ms and mode_ms else None
        if run.stats:
            entry.update(_engine_summary(run.stats, alone_prefill))
        report["modes"][mode] = entry
    crossspec = report["modes"].get("crossspec", {})
    # Speculation only removes decoding: with every token confirmed for free a window would
    # still take the verifier's preparation and prefill. The most any mode could reach:
    ceiling = [s.confirmed_done_ms / (s.verifier_prepare_ms + s.verifier_prefill_ms)
               for s in alone.stats]
    report.update({
        "ceiling_speedup_median": _round(summaries.percentile(ceiling, 50)),
        "lossless": all(m["lossless"] for m in report["modes"].values()),
        "speedup_median": crossspec.get("speedup_median"),
        "paired_speedup_median": crossspec.get("paired_speedup_median"),
        "draft_first_token_ms_p95": crossspec.get("draft_first_token_ms_p95"),
        "acceptance": crossspec.get("acceptance"),
    })
    for name in (m for m in EVENT_MODES if m in runs and "crossspec" in runs):
        report["modes"][name]["by_change_level"] = by_change_level(
            runs["crossspec"].latency_ms, runs[name])
    live = report["modes"].get("crossspec_live", {}).get("paired_speedup_vs_live_alone")
    if live is not None:  # speculation's own share in the live graph (both prefill live)
        report["paired_speedup_live"] = live["median"]
    return report


def by_change_level(baseline: list[float], run: ModeRun) -> dict[str, dict[str, Any]]:
    """The event-aware mode's windows per change level ("" for a window with none: the
    first, or one without events): how many, and its paired speedup over ``baseline``'s
    latencies of the same windows."""
    levels: dict[str, list[int]] = {}
    for i, stats in enumerate(run.stats):
        levels.setdefault(stats.change_level, []).append(i)
    return {level: {"windows": len(idx), "paired_speedup": paired(
        [baseline[i] for i in idx], [run.latency_ms[i] for i in idx])}
        for level, idx in sorted(levels.items())}


def _engine_summary(stats: list[WindowStats], alone_prefill: list[float]) -> dict[str, Any]:
    proposed = sum(s.total_proposed for s in stats)
    accepted = sum(s.total_accepted for s in stats)
    passes = sum(s.rounds + 1 for s in stats)  # the prefill verifies a proposal too
    per: dict[str, dict[str, Any]] = {}
    for s in stats:
        for name in s.proposed:
            entry = per.setdefault(name, {"proposed": 0, "accepted": 0})
            entry["proposed"] += s.proposed.get(name, 0)
            entry["accepted"] += s.accepted.get(name, 0)
    for entry in per.values():
        entry["acceptance"] = (round(entry["accepted"] / entry["proposed"], 3)
                               if entry["proposed"] else None)
    prefill = [s.verifier_prefill_ms for s in stats]
    slowdown = [p / a for p, a in zip(prefill, alone_prefill, strict=True) if a > 0]
    # what one verifier pass after the prefill costs (for verifier_alone: ms per token)
    per_pass = [(s.confirmed_done_ms - s.verifier_prepare_ms - s.verifier_prefill_ms)
                / s.rounds for s in stats if s.rounds]
    return {
        "draft_first_token_ms_median": _round(summaries.percentile(
            [s.draft_first_token_ms for s in stats], 50)),
        "draft_first_token_ms_p95": _round(summaries.percentile(
            [s.draft_first_token_ms for s in stats], 95)),
        "acceptance": round(accepted / proposed, 3) if proposed else None,
        "accepted_per_pass": round(accepted / passes, 3),
        "passes_per_window": round(passes / len(stats), 2),
        "prefill_accepted_per_window": round(
            sum(s.prefill_accepted for s in stats) / len(stats), 2),
        "prefill_fed_per_window": round(sum(s.prefill_fed for s in stats) / len(stats), 2),
        "prefill_only_windows": sum(s.rounds == 0 for s in stats),
        "fed_tokens_per_round": round(sum(s.fed_tokens for s in stats)
                                      / max(1, passes - len(stats)), 2),
        "tree_rounds": sum(s.tree_rounds for s in stats),
        "per_proposer": per,
        "verifier_prepare_ms_median": _round(summaries.percentile(
            [s.verifier_prepare_ms for s in stats], 50)),
        "verifier_prefill_ms_median": _round(summaries.percentile(prefill, 50)),
        "decode_ms_per_pass_median": _round(summaries.percentile(per_pass, 50)),
        "prefill_slowdown_median": _round(summaries.percentile(slowdown, 50)),
    }


def _round(x: float | None) -> float | None:
    return summaries.rounded(x, 2)


def markdown_table(report: dict[str, Any]) -> str:
    """The report as the Markdown table the README quotes."""
    base = report.get("baseline", "verifier_alone")
    emulation = report.get("emulation")
    lines = [*([f"**EMULATED** ({emulation['label']}; "
                + ("held" if emulation["held"] else f"did NOT hold: over budget "
                   f"{emulation['over_budget']}") + "; not yet checked against a GPU): every "
                "latency below is the profile's, not this machine's", ""]
               if emulation else []),
        f"{report.get('models', '')}, {report.get('device', '')}, "
        f"{report['windows']} windows of {report.get('bag', '')}, max {report['max_new_tokens']}"
        f" new tokens, {report.get('torch_threads', '?')} torch thread(s), "
        f"{report.get('date', '')}, {report.get('machine', '')}",
        "",
        f"Runtime of the speculative modes: {report.get('runtime', '')}. lossless: the caption "
        "equals the plain greedy decoding on the mode's own runtime (verifier_alone_exact for "
        "the static runtime's modes, transformers' generate for the others).",
        "",
        f"Ceiling (verifier alone over its preparation + prefill, the speedup if every "
        f"caption token came free): median {_cell(report.get('ceiling_speedup_median'), 'x')}"
        f" per window.",
        "",
        *_verifier_costs(report),
        *_collector_line(report),
        *_against_history(report),
        *_live_graphs(report),
        f"| mode | median ms | p95 ms | paired speedup vs {base} (IQR) | vs verifier_alone "
        "| vs hf_generate | ms per pass | passes/window | accepted/pass | prefill slowdown "
        "| lossless | same as hf_generate |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for mode, r in report["modes"].items():
        main = r[f"paired_speedup_vs_{base}"]
        lines.append(
            f"| {mode} | {summaries.shown(r['latency_ms_median'])} "
            f"| {summaries.shown(r['latency_ms_p95'])} "
            f"| **{_ratio(main['median'])}** ({_ratio(main['q25'], '')}-"
            f"{_ratio(main['q75'], '')}) "
            f"| {_ratio(r['paired_speedup_vs_verifier_alone']['median'])} "
            f"| {_ratio(r['paired_speedup_vs_hf_generate']['median'])} "
            f"| {_cell(r.get('decode_ms_per_pass_median'))} "
            f"| {_cell(r.get('passes_per_window'))} "
            f"| {_cell(r.get('accepted_per_pass'))} "
            f"| {_cell(r.get('prefill_slowdown_median'), 'x')} | {r['lossless_windows']} "
            f"| {r.get('same_as_hf_generate', '')} |")
    return "\n".join(lines) + "\n"


def _verifier_costs(report: dict[str, Any]) -> list[str]:
    lines = []
    for mode, what in (("verifier_alone", "eager (transformers, DynamicCache)"),
                       ("verifier_alone_compiled", "compiled (static runtime, one-row steps)"),
                       ("verifier_alone_exact", "on the speculative modes' runtime")):
        alone = report["modes"].get(mode)
        if alone is None or alone.get("verifier_prefill_ms_median") is None:
            continue
        lines.append(f"Verifier alone, {what}, medians per window: preparation "
                     f"{_cell(alone['verifier_prepare_ms_median'], ' ms')}, prefill "
                     f"{_cell(alone['verifier_prefill_ms_median'], ' ms')}, then "
                     f"{_cell(alone['decode_ms_per_pass_median'], ' ms')} per decoded token.")
    return [*lines, ""] if lines else []


def _collector_line(report: dict[str, Any]) -> list[str]:
    pauses = report.get("collector_pauses")
    if not pauses:
        return []
    return [f"Garbage collector during the run (warm-up included): {pauses['collections']} "
            f"collections, {pauses['full_collections']} full, longest pause "
            f"{pauses['longest_pause_ms']:.1f} ms.", ""]


def _against_history(report: dict[str, Any]) -> list[str]:
    """crossspec's paired speedup over history_only (the target: never below it), and the
    event-aware modes' over crossspec."""
    lines = []
    for mode, baseline, why in (
            ("crossspec", "history_only", ""),
            *((name, "crossspec", _levels_text(report["modes"].get(name), choices))
              for name, choices in EVENT_MODES.items())):
        vs = report["modes"].get(mode, {}).get(f"paired_speedup_vs_{baseline}")
        if vs is not None:
            lines += [f"{mode} against {baseline}, paired: {_ratio(vs['median'])} "
                      f"(IQR {_ratio(vs['q25'], '')}-{_ratio(vs['q75'], '')}){why}.", ""]
    return lines


def _live_graphs(report: dict[str, Any]) -> list[str]:
    """The live graphs as a user sees them: latency after the close, in ms, and the draft."""
    live = report.get("live")
    if not live:
        return []
    lines = [f"Live graphs: the product's verifier and draft loops, the windows replayed at "
             f"their stamps, {live['rounds']} round(s), a window's median over them. Latency "
             "is the FINAL caption's after the verifier's synchronizer closed the window "
             "(early start can make it ~0); the draft's first token is after the drafter's.",
             "",
             "| graph | confirmed after the close, median ms (IQR) | p95 ms | minus live_alone, "
             "paired ms (IQR) | at the scene changes: median ms, minus text_only | draft "
             "complete, median ms after the close | draft complete before FINAL | windows | "
             "lossless |",
             "|---|---|---:|---|---|---:|---:|---:|---|"]
    for name, g in live["graphs"].items():
        after, vs = g["confirmed_after_close_ms"], g.get("vs_live_alone_ms", {})
        changes = g.get("changes", {})
        lines.append(
            f"| {name} | **{_cell(after['median'])}** ({_cell(after['q25'])}-"
            f"{_cell(after['q75'])}) | {_cell(after['p95'])} "
            f"| {_cell(vs.get('median'))} ({_cell(vs.get('q25'))}-{_cell(vs.get('q75'))}) "
            f"| {_cell(changes.get('confirmed_after_close_ms', {}).get('median'))}, "
            f"{_cell(changes.get('vs_text_only_ms', {}).get('median'))} "
            f"({changes.get('windows', 0)} windows) "
            f"| {_cell(g.get('draft_complete_ms_median'))} | {g['draft_before_final']} "
            f"| {g['windows']} ({g['not_final']} not FINAL) | {g['lossless_windows']} |")
    return [*lines, ""]


def _levels_text(entry: dict[str, Any] | None, choices: tuple[str, ...]) -> str:
    """An event-aware mode's choices and its windows per change level, for its line."""
    if not entry or not entry.get("by_change_level"):
        return ""
    parts = [f"{level or 'no level'} {v['windows']} windows "
             f"{_ratio(v['paired_speedup']['median'])}"
             for level, v in entry["by_change_level"].items()]
    return f" (event-aware: {' + '.join(choices)}; by level: " + ", ".join(parts) + ")"


def _cell(value: float | None, unit: str = "") -> str:
    return "" if value is None else f"{value:.2f}{unit}"


def _ratio(value: float | None, unit: str = "x") -> str:
    return summaries.shown(value, ".2f", unit)


def plot(report: dict[str, Any], runs_path: Path, title: str) -> None:
    """Latency (median, p95) and paired speedup (median with IQR) per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(report["modes"])
    r = report["modes"]
    xs = np.arange(len(modes))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(10, 1.9 * len(modes)), 4.2))
    ax1.bar(xs - 0.2, [_bar(r[m]["latency_ms_median"]) for m in modes], 0.4, label="median")
    ax1.bar(xs + 0.2, [_bar(r[m]["latency_ms_p95"]) for m in modes], 0.4, label="p95")
    ax1.set_xticks(xs, modes, rotation=30, ha="right")
    ax1.set_ylabel("confirmed caption latency [ms]")
    ax1.legend()
    key = f"paired_speedup_vs_{report.get('baseline', 'verifier_alone')}"
    med = [_bar(r[m][key]["median"]) for m in modes]
    low = [med[i] - _bar(r[m][key]["q25"]) for i, m in enumerate(modes)]
    high = [_bar(r[m][key]["q75"]) - med[i] for i, m in enumerate(modes)]
    ax2.bar(xs, med, 0.6, yerr=[low, high], capsize=4, color="tab:green")
    ax2.axhline(1.0, color="grey", lw=0.8)
    for x, v in zip(xs, med, strict=True):
        ax2.annotate(f"{v:.2f}x", (x, v), ha="center", va="bottom", fontsize=8)
    ax2.set_xticks(xs, modes, rotation=30, ha="right")
    ax2.set_ylabel(f"paired speedup vs {report.get('baseline', 'verifier_alone')} (IQR)")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(runs_path, dpi=110)
    plt.close(fig)


def _bar(value: float | None) -> float:
    return float("nan") if value is None else value  # no bar where nothing was measured
