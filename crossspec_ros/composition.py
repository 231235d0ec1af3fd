"""The captioning graph, composed once from parameters: the speculative engine over a loaded
pair, the verifier's and the drafter's loops, and how they share one process. Pure (no rclpy):
the verifier and draft nodes, ``crossspec caption`` and the bench's live replay all build
through here, so a graph means the same wherever it runs.

    build_engine(p, verifier, drafter)  the engine: its config (checked against the
                                        verifier's vocabulary), draft head and caption corpus
    verifier_loop(p, ...)               the verifier's window decisions, with the caption
                                        book's patience (caption_patience_s)
    share_turns(verifier_first, loop)   composed in one process: the drafter pauses while the
                                        verifier works on a closed window, and hears at once
                                        when it finished one
    verifier_streams(p, verifier, n)    several camera streams on one verifier and device:
                                        one engine per stream, their decoding steps batched
                                        in lanes (or separate), device calls taking turns

Model loading (models/pair.py) stays with the caller: a node loads on configure, ``caption``
at its start, the bench once for all its graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any

from crossspec_ros.models.device_turns import StreamDue
from crossspec_ros.speculative.draft_loop import DraftLoop
from crossspec_ros.speculative.engine import SpeculativeEngine, WindowResult
from crossspec_ros.speculative.loop_clock import LoopClock
from crossspec_ros.speculative.verifier_first import VerifierFirst
from crossspec_ros.speculative.verifier_loop import CaptionsOut, ConfirmedOut, VerifierLoop

Say = Callable[[str], None]


def build_engine(p: Mapping[str, Any], verifier: Any, drafter: Any = None, *, where: str,
                 runtimes: Sequence[str] = ("verifier",),
                 corpus: Sequence[Sequence[int]] | None = None,
                 say: Say = lambda _line: None) -> SpeculativeEngine:
    """The speculative engine the verifier parameters ``p`` describe, over the loaded
    ``verifier`` (and ``drafter``: the vocabulary bridge and the engine's own drafter, when in
    this process). ``runtimes``: the roles whose runtime is prepared here, as the parameters
    say (a draft node prepares its own drafter; the bench has prepared both). ``corpus``: the
    caption corpus as token lists (None: the one ``caption_corpus`` names, loaded here). A
    parameter that does not fit the verifier raises ParameterError naming ``where``; a bad head
    or corpus file, ModelLoadError or CorpusError: each one line, and each before anything
    compiles. ``say``: what was loaded and prepared, for the log."""
    from crossspec_ros.models.runtime_setup import prepare_runtime
    from crossspec_ros.params import engine_config

    config = engine_config(dict(p), verifier, where=where)
    head = None
    if p["draft_head"]:
        from crossspec_ros.models.pair import load_draft_head

        head = load_draft_head(p["draft_head"])
        from_where = f" the draft node publishes on {p['draft_topic']}" if "draft_topic" in p \
            else " of the drafter"
        say(f"draft head {p['draft_head']}: proposes from the window state{from_where}")
    if corpus is None:
        from crossspec_ros.speculative.corpus import load_corpus

        loaded = load_corpus(p["caption_corpus"], verifier)
        if loaded is not None:
            say(f"caption corpus: {loaded.summary()}")
        corpus = loaded.captions if loaded is not None else ()
    for role in runtimes:  # last: whatever is wrong above is said before anything compiles
        model = verifier if role == "verifier" else drafter
        if model is not None:
            say(prepare_runtime(model, p, role, p["max_new_tokens"]))
    return SpeculativeEngine(verifier, drafter, config, head=head, corpus=corpus)


def caption_patience_s(p: Mapping[str, Any]) -> float:
    """How long the caption book waits for what a window still lacks (its RGB, a draft, the
    verifier): the lateness the synchronizer allows, one window, and half a second for the
    messages on their way."""
    return p["max_lateness_s"] + p["window_length_s"] + 0.5


def verifier_loop(p: Mapping[str, Any], *, on_captions: CaptionsOut,
                  on_confirmed: ConfirmedOut, clock: LoopClock, lock: AbstractContextManager,
                  warn: Say = lambda _t: None,
                  on_result: Callable[[Any, WindowResult], None] | None = None,
                  due: StreamDue | None = None) -> VerifierLoop:
    """The verifier's window decisions for the verifier parameters ``p`` (its engine comes
    with ``VerifierLoop.configure_from_params``; ``due``: when its device calls are due, where
    several streams share the device)."""
    return VerifierLoop(patience_s=caption_patience_s(p), max_queued=p["max_queued_windows"],
                        on_captions=on_captions, on_confirmed=on_confirmed, clock=clock,
                        lock=lock, warn=warn, on_result=on_result, due=due)


def share_turns(verifier_first: VerifierFirst, loop: DraftLoop) -> None:
    """The drafter of ``loop`` and the verifier in this process share the device: it pauses
    while the verifier works on a closed window, and hears at once when the verifier finished
    one (not only when its confirmed tokens come round)."""
    verifier_first.add_drafter(loop.hold, loop.release_hold, loop.on_finished)


STREAM_GRAPHS = ("batched", "separate")


@dataclass
class VerifierStreams:
    """Several camera streams on one verifier (issue 57): an engine per stream, each on the
    verifier it decodes with (``models``: a lane's twin when batched, the verifier itself when
    separate), when their device calls are due, and the lanes' step batcher (batched only)."""

    graph: str
    engines: list[SpeculativeEngine]
    models: list[Any]
    due: StreamDue
    batcher: Any = None
    prompt_batcher: Any = None  # the streams' prompt frames batched (stream_prompts)

    def counters(self) -> dict[str, Any]:
        """The lanes' counters (a node's diagnostics, the bench; none when separate)."""
        out: dict[str, Any] = {}
        if self.batcher is not None:
            c = self.batcher.counters
            out.update(lane_steps=c.steps, failed_lane_steps=c.failed_steps,
                       lanes_per_step=dict(sorted(c.lanes_per_step.items())),
                       gather_wait_ms=round(c.gather_wait_ms, 1),
                       lane_copies=self.batcher.laned.lane_copies,
                       lane_eager_steps=self.batcher.laned.eager_steps)
        if self.prompt_batcher is not None:
            c = self.prompt_batcher.counters
            out.update(self.prompt_batcher.laned.counters(), failed_prompt_steps=c.failed_steps,
                       prompt_gather_wait_ms=round(c.gather_wait_ms, 1))
        return out


def verifier_streams(p: Mapping[str, Any], verifier: Any, streams: int, *, graph: str,
                     where: str,
                     corpus: Sequence[Sequence[int]] | None = None,
                     say: Say = lambda _line: None) -> VerifierStreams:
    """``streams`` engines over ``verifier`` for the verifier parameters ``p`` (their static
    runtime, their emulated target), sharing one device whose turns are installed on it: ``graph``
    "batched" decodes every stream in its own lane of one laned runtime (models/lanes.py:
    a stream's captions are exact per lane, whatever the other streams do), and with
    ``stream_prompts`` batched (auto) encodes and prefills the frames that arrive together in
    one step (models/prompt_lanes.py); "separate" runs
    the streams' engines on the one-stream runtime side by side, what N verifier nodes on one
    device do (without their N copies of the weights). Install the emulation ``p`` names, then
    the device's turns (``DeviceTurns.install``), on ``verifier`` before, in that order (the
    turn wraps the emulated call) and once for every graph of a process: the lanes' twins copy
    its hooks."""
    from crossspec_ros.models.emulated import emulation_of
    from crossspec_ros.models.lanes import use_lanes
    from crossspec_ros.models.runtime_setup import runtime_options
    from crossspec_ros.models.static_runtime import use_static_runtime
    from crossspec_ros.param_files import ParameterError
    from crossspec_ros.params import stream_prompts_batched

    if graph not in STREAM_GRAPHS:
        raise ValueError(f"{where}: graph {graph!r} is not one of {', '.join(STREAM_GRAPHS)}")
    if p.get("emulate") and emulation_of(verifier) is None:
        raise ValueError(f"{where}: emulate {p['emulate']} before the device's turns are "
                         "installed (models/device_turns.py)")
    options = runtime_options(dict(p), "verifier")
    try:
        prompts = stream_prompts_batched(p, graph)
    except ValueError as err:
        raise ParameterError(f"{where}: {err}") from err
    if graph == "separate":
        model = verifier.with_runtime(None)  # the transformers runtime, or the static one
        if options is not None:  # with a live prefill and a decoding window per stream
            use_static_runtime(model, replace(options, caches=max(options.caches,
                                                                  2 * streams + 1)),
                               p["max_new_tokens"])
        say(model.runtime.describe() if model.runtime is not None else
            f"{model.info.name}: transformers runtime")
        models = [model] * streams
        batcher = prompt_batcher = None
    else:
        if options is None:
            raise ParameterError(f"{where}: batched streams need the static runtime "
                                 "(runtime: static), got the transformers runtime")
        models = use_lanes(verifier, _lane_attention(options, p, where), streams,
                           max_new_tokens=p["max_new_tokens"], batch_prompts=prompts)
        batcher, prompt_batcher = models[0].runtime.batcher, models[0].runtime.prompt_batcher
        say(models[0].runtime.describe())
    if corpus is None:  # read once for every stream's engine
        from crossspec_ros.speculative.corpus import load_corpus

        loaded = load_corpus(p["caption_corpus"], verifier)
        corpus = loaded.captions if loaded is not None else ()
    engines = [build_engine(p, model, None, where=f"{where} stream {i}", runtimes=(),
                            corpus=corpus) for i, model in enumerate(models)]
    due = StreamDue(budget_s=p["stream_budget_ms"] / 1e3, open_s=p["window_length_s"],
                    shed_s=p["shed_late_ms"] / 1e3)
    return VerifierStreams(graph, engines, models, due, batcher, prompt_batcher)


def _lane_attention(options: Any, p: Mapping[str, Any], where: str) -> Any:
    """``options`` for lane steps, which attend through SDPA only (RuntimeOptions): "auto"
    falls back to it; split_kv asked for by name is refused, saying what to do."""
    if options.attention == "sdpa":
        return options
    if p.get("attention") == "split_kv":
        from crossspec_ros.param_files import ParameterError

        raise ParameterError(f"{where}: attention split_kv is not built for batched streams "
                             "(lane steps) yet: set attention to auto or sdpa, or "
                             "stream_steps to separate")
    return replace(options, attention="sdpa")
