"""CUDA placement and streams (skipped without a GPU)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.models.streams import Stopwatch, on_stream, synchronize
from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier
from crossspec_ros.sync.window import StampedFrame, Window

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _frames(n: int = 8) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (36, 48, 3), dtype=np.uint8) for _ in range(n)]


def test_streams_are_ignored_on_cpu():
    cpu = torch.device("cpu")
    with on_stream(cpu, object()):  # any object: never touched on CPU
        x = torch.ones(2) * 2
    synchronize(cpu, object())
    assert x.sum() == 4 and Stopwatch(cpu, None).lap_ms() >= 0


@CUDA
@pytest.mark.gpu
def test_verifier_on_a_side_stream_matches_cpu_and_its_own_generate():
    cpu = tiny_verifier(seed=1, init_range=0.3)
    gpu = tiny_verifier(seed=1, init_range=0.3).to("cuda")
    assert gpu.device.type == "cuda"
    gpu.stream = torch.cuda.Stream()
    inputs = cpu.prepare_frames(_frames())
    tokens = gpu.generate_greedy(inputs, 8)
    assert tokens == gpu.reference_generate(inputs, 8)
    assert torch.allclose(gpu.prefill(inputs).last_logits.cpu(),
                          cpu.prefill(inputs).last_logits, atol=1e-3)
    assert gpu.prefill(inputs).timing.vision_ms > 0


@CUDA
@pytest.mark.gpu
def test_drafter_and_verifier_on_two_streams_give_their_sequential_results():
    verifier, drafter = tiny_verifier(seed=2, init_range=0.3), tiny_eventgpt_drafter(
        seed=3, init_range=0.3)
    verifier.to("cuda")
    drafter.to("cuda")
    v_in = verifier.prepare_frames(_frames())
    rng = np.random.default_rng(1)
    events = EventBatch(np.arange(300), rng.integers(0, 40, 300), rng.integers(0, 30, 300),
                        rng.integers(0, 2, 300), 40, 30)
    d_in = drafter.prepare(Window(0, 0, 1, events, [], 0))
    expected = (verifier.generate_greedy(v_in, 8), drafter.generate_greedy(d_in, 8))
    verifier.stream, drafter.stream = torch.cuda.Stream(), torch.cuda.Stream()
    results: dict[str, list[int]] = {}
    threads = [
        threading.Thread(target=lambda: results.update(v=verifier.generate_greedy(v_in, 8))),
        threading.Thread(target=lambda: results.update(d=drafter.generate_greedy(d_in, 8))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (results["v"], results["d"]) == expected


@CUDA
@pytest.mark.gpu
@pytest.mark.parametrize("attention", ["sdpa", "split_kv"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_the_static_runtime_on_cuda_is_bit_exact_and_the_engine_equals_its_plain_decoding(
        compiled, attention, monkeypatch):
    """On a GPU too (CUDA graphs when compiled): verification rows bit-identical to one-token
    decoding in bfloat16, and the engine's caption the runtime's own greedy caption; with
    either attention (split_kv: the default of a compiled verifier on a GPU)."""
    from crossspec_ros.models.static_runtime import RuntimeOptions, use_static_runtime
    from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine

    monkeypatch.delenv("CROSSSPEC_NO_COMPILE", raising=False)
    verifier = tiny_verifier(seed=4, init_range=0.3).to("cuda")
    verifier.model.to(torch.bfloat16)
    use_static_runtime(verifier, RuntimeOptions(compile=compiled, step_rows=(8,),
                                                attention=attention), 16)
    inputs = verifier.prepare_frames(_frames())
    session = verifier.prefill(inputs)
    single, tokens = [session.last_logits.clone()], []
    for _ in range(10):
        tokens.append(int(single[-1].argmax()))
        single.append(session.feed([tokens[-1]])[-1].clone())
    session = verifier.prefill(inputs)
    chunked = [session.last_logits.clone(), *session.feed(tokens[:5]), *session.feed(tokens[5:])]
    assert all(torch.equal(a, b) for a, b in zip(single, chunked, strict=True))
    window = Window(0, 0, 10**9, EventBatch.empty(8, 8),
                    [StampedFrame(i, f) for i, f in enumerate(_frames())], 0)
    engine = SpeculativeEngine(verifier, None, EngineConfig(max_new_tokens=12))
    for _ in range(2):
        assert engine.run_window(window).tokens == engine.verifier_only(window)
    if compiled:  # the vision tower too, one frame a CUDA graph (issue 55): live = one shot
        from crossspec_ros.models.live_prefill import LivePrefill

        vision = verifier.runtime.vision
        assert vision.compiled, vision.compile_failed
        live = LivePrefill(verifier)
        for frame in window.frames:
            live.add_frame(frame.image, frame.stamp_ns)
        one_shot = verifier.prefill(verifier.prepare(window))
        assert torch.equal(live.finish(())[0].last_logits, one_shot.last_logits)
        assert vision.calls["eager"] == 0 and vision.calls["compiled"] > 0
