"""The static runtime's warm-up: it runs every shape a window steps in (drafter and verifier,
one-shot and live prefill, long proposals, re-syncs, pruned prompts), it runs alone in its
process (other threads' model work and other warm-ups wait), and after it nothing compiles: a
step no compiled graph takes runs eager, counted (``eager_steps``). Only the last test
compiles (two small shapes; marked slow)."""

from __future__ import annotations

import sys
import threading
from collections import Counter

import pytest
import torch
from synthetic_windows import random_window

from crossspec_ros.models.live_prefill import LivePrefill
from crossspec_ros.models.runtime_setup import prepare_runtime
from crossspec_ros.models.static_runtime import RuntimeOptions, StaticLM
from crossspec_ros.models.streams import inference
from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_llava_drafter, tiny_verifier
from crossspec_ros.process_tuning import SWITCH_INTERVAL_S
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine

NODE_PARAMS = {"runtime": "static", "compile": True, "step_rows": 32}  # config/drive.yaml's


def drive(verifier, drafter, window, max_new_tokens: int) -> None:
    """Step both models every way a drive does: the window captioned after its close
    (one-shot prefill; the verifier alone, ``--check-lossless``'s reference, steps in the
    same shapes) and from a live prefill begun while it was open, long proposals fed in
    several passes, pruned visual tokens."""
    engine = SpeculativeEngine(verifier, drafter, EngineConfig(max_new_tokens=max_new_tokens))
    assert engine.run_window(window).tokens
    live = LivePrefill(verifier)
    for frame in window.frames[:4]:  # the rest are added at the close
        live.add_frame(frame.image, frame.stamp_ns)
    assert engine.run_window(window, live=live).stats.live_prefill_frames == 4
    for config in (EngineConfig(max_new_tokens=max_new_tokens, adaptive=False,
                                max_proposal=40),
                   EngineConfig(max_new_tokens=max_new_tokens, visual_keep=0.5)):
        assert SpeculativeEngine(verifier, drafter, config).run_window(window).tokens


def test_every_shape_a_drive_steps_in_was_warmed_up():
    """As the nodes configure them (``prepare_runtime``; eager here): the bundled pair a
    drive runs, and a LLaVA drafter (another prompt layout)."""
    from crossspec_ros.models.pair import BUNDLED_PAIR

    if not (BUNDLED_PAIR / "verifier").is_dir():
        pytest.skip("no bundled pair (run crossspec train-tiny)")
    from crossspec_ros.bench.engine import bag_windows
    from crossspec_ros.paths import sample_bag
    from crossspec_ros.train.tiny_pair import load_pair

    pairs = [(load_pair(), bag_windows(sample_bag(), 1)[0], 48),
             ((tiny_verifier(seed=1), tiny_llava_drafter(seed=2)), random_window(1), 16)]
    for (verifier, drafter), window, max_new_tokens in pairs:
        prepare_runtime(drafter, NODE_PARAMS, "drafter", 48)
        prepare_runtime(verifier, NODE_PARAMS, "verifier", 48)
        drive(verifier, drafter, window, max_new_tokens)
        for model in (verifier, drafter):
            assert model.runtime.steps_not_warmed == Counter(), model.info.name
            assert model.runtime.counters() == {"steps_not_warmed": 0, "eager_steps": 0}


def small_runtime(compile: bool = False, name: str = "model", seed: int = 1) -> StaticLM:
    lm, head, config = tiny_eventgpt_drafter(seed=seed).language_model_parts()
    return StaticLM(lm, head, config, RuntimeOptions(compile=compile, step_rows=(2,)),
                    max_len=12, name=name)


def step(runtime: StaticLM, rows: int, pos: int = 0) -> torch.Tensor:
    """The logits of a step of ``rows`` random rows after ``pos`` positions (at 0 they
    depend on the rows alone)."""
    slot = runtime.acquire()
    try:
        with inference(runtime.device, None):
            embeds = torch.randn(1, rows, runtime.embed.weight.shape[1],
                                 generator=torch.Generator().manual_seed(rows))
            return runtime.chain(slot, pos, embeds, rows=rows)[1]
    finally:
        runtime.release(slot)


def test_a_step_in_a_shape_the_warm_up_did_not_run_is_counted():
    runtime = small_runtime()
    runtime.warm_up()
    assert runtime.warmed == {"rows 2"}
    step(runtime, 2)
    step(runtime, 3)
    assert runtime.steps_not_warmed == Counter({"rows 3": 1})
    assert runtime.counters() == {"steps_not_warmed": 1, "eager_steps": 0}  # eager anyway


def hold_warm_up(monkeypatch, log: list, beside: threading.Event, started: threading.Event
                 ) -> None:
    """A warm-up of the runtime named "held" logs its start, waits (at most 1 s) for
    ``beside`` (what runs beside it sets it), then logs its end; others log both at once."""
    run = StaticLM._warm_up

    def warm_up(runtime, chunks):
        log.append(("start", runtime.name))
        if runtime.name == "held":
            started.set()
            beside.wait(1.0)
        else:
            beside.set()
        log.append(("end", runtime.name))
        return run(runtime, chunks)

    monkeypatch.setattr(StaticLM, "_warm_up", warm_up)


def test_two_warm_ups_in_one_process_run_one_after_the_other(monkeypatch):
    """Two nodes configured at once (a lifecycle manager, composed): the second warm-up
    starts once the first ended, never beside it (compiling is not thread-safe)."""
    log: list = []
    beside, started = threading.Event(), threading.Event()
    hold_warm_up(monkeypatch, log, beside, started)
    first, second = small_runtime(name="held"), small_runtime(name="second", seed=2)
    thread = threading.Thread(target=first.warm_up)
    thread.start()
    started.wait(5.0)
    second.warm_up()
    thread.join()
    assert log == [("start", "held"), ("end", "held"), ("start", "second"), ("end", "second")]
    assert first.warmed == second.warmed == {"rows 2"}


def test_model_work_on_another_thread_waits_while_a_model_warms_up(monkeypatch):
    """A drafter drafting (its worker started at activate) while the verifier warms up at
    its configure: its steps wait for the warm-up (a module called while inductor traces
    lands in its tracer)."""
    log: list = []
    worked, warming = threading.Event(), threading.Event()
    hold_warm_up(monkeypatch, log, worked, warming)
    runtime = small_runtime(name="held")
    thread = threading.Thread(target=runtime.warm_up)
    thread.start()
    warming.wait(5.0)
    with inference(torch.device("cpu"), None):
        log.append(("work", "drafter"))
        worked.set()
    thread.join()
    assert log == [("start", "held"), ("end", "held"), ("work", "drafter")]


@pytest.mark.slow
def test_after_its_warm_up_a_compiled_runtime_never_compiles():
    """Compiled (inductor, one small shape each): a drafter warmed up, then a model loaded
    and warmed up after it (the verifier, in a drive): the drafter's graph stays valid; both
    stepping at once on two threads run their graphs, every step; a shape the warm-up did not
    run runs eager (counted, the eager result); nothing compiles after the warm-ups."""
    from torch._dynamo.utils import counters
    from transformers import LlamaConfig, LlamaModel

    drafter = small_runtime(compile=True, name="drafter")
    drafter.warm_up()
    later_class = type("LoadedAfterTheWarmUp", (LlamaModel,), {})  # transformers registers it
    later_class(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16,
                            num_hidden_layers=1, num_attention_heads=2))
    lm, head, config = tiny_verifier(seed=2).language_model_parts()
    verifier = StaticLM(lm, head, config, RuntimeOptions(compile=True, step_rows=(4,)),
                        max_len=12, name="verifier")
    verifier.warm_up()
    assert drafter.compiled and verifier.compiled and not drafter.compile_failed
    graphs = counters["stats"]["unique_graphs"]
    eager = small_runtime(name="eager")
    eager.warm_up()
    assert torch.allclose(step(drafter, 2), step(eager, 2), atol=1e-4)
    assert drafter.eager_steps == 0  # every guard of the drafter's graph passed

    def steps(runtime: StaticLM, rows: int) -> None:
        for _ in range(1500):
            step(runtime, rows)

    workers = [threading.Thread(target=steps, args=(drafter, 2)),
               threading.Thread(target=steps, args=(verifier, 4))]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # the GIL handed over as often as in the nodes
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(switch)
    assert drafter.eager_steps == verifier.eager_steps == 0
    assert torch.equal(step(drafter, 3), step(eager, 3))  # not warmed: eager
    assert drafter.steps_not_warmed == Counter({"rows 3": 1}) and drafter.eager_steps == 1
    assert counters["stats"]["unique_graphs"] == graphs  # nothing compiled after the warm-ups
