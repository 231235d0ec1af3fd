"""The static runtime: caches allocated once, steps in one shape, rollback a counter; bit-exact
teacher-forced parity between verification passes and one-token decoding in float32 and
bfloat16; the prefill in fixed chunks, so a live prefill and a one-shot prefill match; the
engine's captions on it equal the same runtime's plain greedy decoding."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from decoding_rows import teacher_forced_rows

from crossspec_ros.models.static_runtime import RuntimeOptions, use_static_runtime
from crossspec_ros.models.tiny import tiny_verifier
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine

EAGER_8 = RuntimeOptions(compile=False, step_rows=(8,))
# attention split along the cache (models/split_kv.py): exact by the same construction
SPLIT_8 = RuntimeOptions(compile=False, step_rows=(8,), attention="split_kv")
ATTENTIONS = pytest.mark.parametrize("options", [EAGER_8, SPLIT_8], ids=["sdpa", "split_kv"])


def static_twin(verifier, options=EAGER_8, dtype=None):
    """The verifier (its own copy of the weights when ``dtype`` casts them) on ``options``."""
    twin = copy.copy(verifier)
    twin.__dict__.pop("_static_runtimes", None)
    twin.runtime = None
    if dtype is not None:
        twin.model = copy.deepcopy(verifier.model).to(dtype)
    use_static_runtime(twin, options, 48)
    return twin


@ATTENTIONS
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_verification_rows_are_bit_identical_to_one_token_decoding(bundled, windows, dtype,
                                                                   options):
    verifier = static_twin(bundled[0], options, dtype=dtype)
    for window in windows:
        for k in (3, 7):  # with the pending token: 4 and 8 rows of the 8-row shape
            single, chunked = teacher_forced_rows(verifier, window, k)
            assert len(single) == len(chunked)
            for i, (a, b) in enumerate(zip(single, chunked, strict=True)):
                assert torch.equal(a, b), (window.id, k, i, float((a - b).abs().max()))


@ATTENTIONS
def test_a_live_prefill_and_a_one_shot_prefill_give_the_same_cache_bit_for_bit(bundled, windows,
                                                                               options):
    from crossspec_ros.models.live_prefill import LivePrefill

    verifier = static_twin(bundled[0], options, dtype=torch.bfloat16)
    window = windows[1]
    one_shot = verifier.prefill(verifier.prepare(window))
    live = LivePrefill(verifier)
    for frame in window.frames:
        live.add_frame(frame.image, frame.stamp_ns)
    session, _ = live.finish(())
    assert torch.equal(one_shot.last_logits, session.last_logits)
    token = int(one_shot.last_logits.argmax())
    assert torch.equal(one_shot.feed([token]), session.feed([token]))


def test_a_one_shot_prefill_runs_the_live_prefills_chunks_on_the_same_embeddings(bundled,
                                                                                 monkeypatch):
    """Bit for bit, on a vision tower whose result depends on its batch: on an H200 in
    bfloat16 a batch of 8 frames rounds differently from 8 batches of one (the live graphs'
    captions then agreed with the one-shot prefill in 1 window of 6), and on a CPU with
    several threads it can too; so the one-shot prefill encodes frame by frame, as the live
    prefill must."""
    from crossspec_ros.models.live_prefill import LivePrefill

    verifier = static_twin(bundled[0])
    tower = verifier.model.model
    encode = tower.get_video_features

    def batch_dependent_encode(pixel_values_videos, **kwargs):  # as if a batch took other
        out = encode(pixel_values_videos=pixel_values_videos, **kwargs)  # kernels
        out.pooler_output = out.pooler_output + 1e-3 * (pixel_values_videos.shape[1] - 1)
        return out

    monkeypatch.setattr(tower, "get_video_features", batch_dependent_encode)
    images = list(np.random.default_rng(0).integers(0, 255, (verifier.num_frames, 48, 64, 3),
                                                    dtype=np.uint8))
    chunks: list[torch.Tensor] = []
    chain = verifier.runtime.chain

    def recording_chain(slot, pos, embeds, **kwargs):
        chunks.append(embeds.clone())
        return chain(slot, pos, embeds, **kwargs)

    verifier.runtime.chain = recording_chain
    verifier.prefill(verifier.prepare_frames(images)).close()
    one_shot, chunks[:] = list(chunks), []
    live = LivePrefill(verifier)
    for image in images:
        live.add_frame(image)
    live.finish(())[0].close()
    assert len(one_shot) == len(chunks) == verifier.num_frames + 1  # the frames, the question
    for i, (a, b) in enumerate(zip(one_shot, chunks, strict=True)):
        assert torch.equal(a, b), (i, float((a - b).abs().max()))


def test_compiled_cuda_steps_of_two_threads_run_one_at_a_time(bundled, windows, monkeypatch):
    """CUDA graphs of torch.compile's reduce-overhead mode share one pool per device: on an
    H200 a drafter thread stepping beside the verifier's thread broke both (a device-side
    assert). Steps that replay CUDA graphs take turns, each to its end; here a CPU runtime
    stands in for one that would replay them."""
    import threading
    import time

    from crossspec_ros.models.static_runtime import StaticLM

    monkeypatch.setattr(StaticLM, "replays_one_at_a_time", property(lambda self: True))
    models = [static_twin(bundled[0]), static_twin(bundled[0])]
    trace: list[str] = []
    for name, model in zip("ab", models, strict=True):
        step = model.runtime._step

        def traced_step(*args, _step=step, _name=name):
            trace.append(f"{_name}+")
            time.sleep(0.002)  # room for the other thread to come in, were it let
            out = _step(*args)
            trace.append(f"{_name}-")
            return out

        model.runtime._step = traced_step

    def caption(model):
        session = model.prefill(model.prepare(windows[0]))
        for _ in range(6):
            session.feed([int(session.last_logits.argmax())])
        session.close()

    threads = [threading.Thread(target=caption, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(trace) >= 4 * (models[0].num_frames + 1 + 6)
    assert all(trace[i][0] == trace[i + 1][0] and trace[i][1] == "+" and trace[i + 1][1] == "-"
               for i in range(0, len(trace), 2)), trace


def test_rollback_moves_the_counter_and_the_rows_after_it_are_computed_again(bundled, windows):
    verifier = static_twin(bundled[0])
    session = verifier.prefill(verifier.prepare(windows[0]))
    first = session.feed([5, 6, 7])
    session.rollback(1)
    assert session.generated == [5] and torch.equal(session.last_logits, first[0])
    again = session.feed([6, 9])
    assert torch.equal(again[0], first[1])  # the same token at the same place: the same row
    assert session.generated == [5, 6, 9]


def test_a_long_proposal_is_fed_in_passes_of_the_runtimes_shape(bundled, windows):
    verifier = static_twin(bundled[0])  # 8 rows per pass
    inputs = verifier.prepare(windows[0])
    reference = verifier.prefill(inputs)
    tokens = [int(reference.last_logits.argmax())]
    for _ in range(12):
        tokens.append(int(reference.feed([tokens[-1]])[-1].argmax()))
    session, rows = verifier.prefill_with_proposal(inputs, tokens)  # tail + 13: two passes
    assert rows.shape[0] == len(tokens) + 1 and session.generated == tokens
    plain = verifier.prefill(inputs)
    steps = [plain.last_logits] + [plain.feed([t])[-1] for t in tokens]
    assert all(torch.equal(a, b) for a, b in zip(rows, steps, strict=True))
    assert verifier.first_proposal_room() == 8 - 7  # beside the 7-token question tail


def test_caches_come_from_a_pool_and_go_back_when_a_session_is_dropped(bundled, windows):
    verifier = static_twin(bundled[0])
    runtime = verifier.runtime
    inputs = verifier.prepare(windows[0])
    sessions = [verifier.prefill(inputs) for _ in range(runtime.options.caches)]
    assert all(slot.in_use for slot in runtime._slots)
    extra = verifier.prefill(inputs)  # more windows at once than planned: one more, counted
    assert runtime.extra_caches == 1
    del sessions, extra
    assert not any(slot.in_use for slot in runtime._slots)


def test_the_engine_on_the_static_runtime_equals_its_plain_greedy_decoding(bundled, windows):
    from crossspec_ros.speculative.corpus import load_corpus

    verifier = static_twin(bundled[0], dtype=torch.bfloat16)
    corpus = load_corpus("", bundled[0])
    engine = SpeculativeEngine(verifier, None, EngineConfig(), corpus=corpus.captions)
    for window in [*windows, *windows]:  # the second time: the history proposes it whole
        result = engine.run_window(window)
        assert result.tokens == engine.verifier_only(window)
        assert result.stats.rounds <= result.stats.fed_tokens  # every pass within its shape


def test_a_runtime_built_before_with_the_same_options_is_taken_again():
    verifier = tiny_verifier(seed=3)
    assert use_static_runtime(verifier, EAGER_8, 16)  # warmed up: timings
    built = verifier.runtime
    use_static_runtime(verifier, None)
    assert verifier.runtime is None
    assert use_static_runtime(verifier, EAGER_8, 16) == {} and verifier.runtime is built


def test_step_rows_must_be_increasing_positive_sizes():
    for bad in [(), (0,), (8, 4), (4, 4)]:
        with pytest.raises(ValueError, match="step_rows"):
            RuntimeOptions(step_rows=bad)


@pytest.mark.slow
def test_compiled_steps_are_warmed_up_at_once_and_stay_bit_exact(bundled, windows,
                                                                  monkeypatch):
    """Compiled (inductor): every shape compiled in the warm-up, none later, the vision tower
    for one frame included (issue 55); verification rows bit-identical to one-token decoding
    in bfloat16; a live prefill the one-shot prefill's cache bit for bit; the engine's
    captions its own."""
    from torch._dynamo.utils import counters

    from crossspec_ros.models.live_prefill import LivePrefill

    monkeypatch.delenv("CROSSSPEC_NO_COMPILE", raising=False)
    verifier = static_twin(bundled[0], RuntimeOptions(compile=True, step_rows=(8,)),
                           dtype=torch.bfloat16)
    runtime = verifier.runtime
    assert runtime.compiled and runtime.compile_failed is None
    assert runtime.vision.compiled and "vision compiled" in runtime.describe()
    assert "vision 1x1x3x56x56" in runtime.compile_s  # one frame of the tiny tower
    graphs = counters["stats"]["unique_graphs"]
    single, chunked = teacher_forced_rows(verifier, windows[0], 7)
    assert all(torch.equal(a, b) for a, b in zip(single, chunked, strict=True))
    one_shot = verifier.prefill(verifier.prepare(windows[1]))
    live = LivePrefill(verifier)
    for frame in windows[1].frames:
        live.add_frame(frame.image, frame.stamp_ns)
    session, _ = live.finish(())
    assert torch.equal(one_shot.last_logits, session.last_logits)
    engine = SpeculativeEngine(verifier, None, EngineConfig())
    for window in [*windows, *windows]:
        assert engine.run_window(window).tokens == engine.verifier_only(window)
    assert counters["stats"]["unique_graphs"] == graphs  # nothing compiled mid-drive
    assert runtime.eager_steps == 0  # and every step ran compiled
    assert runtime.vision.calls["eager"] == 0 and runtime.vision.calls["compiled"] > 0


def test_with_prefill_left_eager_only_the_decoding_steps_compile_and_stay_bit_exact(
        bundled, windows, monkeypatch):
    """compile_prefill=False (the GPU kit's first stages): the prompt's chunks run eager,
    the decoding steps compiled; verification rows still bit-identical to one-token decoding,
    and live and one-shot prefill still the same chunks."""
    monkeypatch.delenv("CROSSSPEC_NO_COMPILE", raising=False)
    verifier = static_twin(bundled[0], RuntimeOptions(compile=True, step_rows=(8,),
                                                      compile_prefill=False),
                           dtype=torch.bfloat16)
    runtime = verifier.runtime
    assert runtime.compiled and "prefill eager" in runtime.describe()
    assert runtime.vision is None  # the prompt's work, vision included, stays eager
    assert runtime._last_fn == runtime._last_row and runtime._rows_fn != runtime._rows
    assert any(shape.startswith("chunk") for shape in runtime.warmed)
    single, chunked = teacher_forced_rows(verifier, windows[0], 7)
    assert all(torch.equal(a, b) for a, b in zip(single, chunked, strict=True))
    engine = SpeculativeEngine(verifier, None, EngineConfig())
    assert engine.run_window(windows[0]).tokens == engine.verifier_only(windows[0])
    assert runtime.eager_steps == 0 and not runtime.steps_not_warmed


def test_a_cache_allocated_beyond_the_pool_mid_drive_steps_compiled_and_bit_exact(
        bundled, windows, monkeypatch):
    """More windows at once than the pool's caches (several streams, a burst): the cache
    allocated then, inside a model call's inference mode, is taken by the compiled graphs
    like the pool's own (an inference tensor was not: its steps ran eager, other numerics).
    With several streams' device turns installed: a lock cannot live in a compiled graph, so
    each step takes its turn around the compiled call (models/device_turns.py)."""
    from crossspec_ros.models.device_turns import DeviceTurns

    monkeypatch.delenv("CROSSSPEC_NO_COMPILE", raising=False)
    twin = copy.copy(bundled[0])
    twin.__dict__.pop("_static_runtimes", None)
    twin.runtime = None
    turns = DeviceTurns()
    undo = turns.install(twin)  # on the fixture's modules: undone whatever happens
    try:
        # the steps' graphs are what this is about: the vision stays eager (fewer compiles)
        verifier = static_twin(twin, RuntimeOptions(compile=True, step_rows=(8,), caches=1,
                                                    compile_vision=False))
        assert verifier.runtime.compiled and verifier.runtime.compile_failed is None
        inputs = verifier.prepare(windows[0])
        before = turns.turns
        alone = verifier.prefill(inputs)
        first = alone.last_logits.clone()
        beside = verifier.prefill(inputs)  # the pool's one cache is held by ``alone``
        assert verifier.runtime.extra_caches == 1
        assert torch.equal(beside.last_logits, first)
        rows = beside.feed([int(first.argmax())])
        assert torch.equal(rows, alone.feed([int(first.argmax())]))
        assert verifier.runtime.eager_steps == 0
        chunks = len(verifier.prompt_layout()[1])
        assert turns.turns - before >= 2 * (chunks + 1)  # every chunk, vision and step its turn
    finally:
        undo()


@pytest.mark.slow
def test_the_drafters_event_encoder_is_compiled_once_and_every_prefill_runs_it(bundled,
                                                                               windows,
                                                                               monkeypatch):
    """Issue 55: the event drafter's vision (a window's 5 event images, one shape) compiled
    with its prompt; every prefill encodes through it, none eager, nothing compiled later, and
    the same window drafts the same tokens each time."""
    from torch._dynamo.utils import counters

    monkeypatch.delenv("CROSSSPEC_NO_COMPILE", raising=False)
    drafter = copy.copy(bundled[1])
    drafter.__dict__.pop("_static_runtimes", None)
    drafter.runtime = None
    # one-row steps only (greedy drafting): fewer shapes to compile than a node's (1, 16)
    timings = use_static_runtime(drafter, RuntimeOptions(compile=True, step_rows=(1,)), 24)
    vision = drafter.runtime.vision
    assert vision.compiled and any(k.startswith("vision 5x3x") for k in timings)
    graphs = counters["stats"]["unique_graphs"]
    drafts = [[drafter.generate_greedy(drafter.prepare(w), 12) for w in windows]
              for _ in range(2)]
    assert drafts[0] == drafts[1] and all(drafts[0])
    assert counters["stats"]["unique_graphs"] == graphs
    assert vision.calls == {"compiled": 2 * len(windows), "eager": 0}
