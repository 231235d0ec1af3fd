"""The call trace (models/call_trace.py) and fidelity (bench/fidelity.py): every device call of
a model filed under its window with its kind, size and position, on both runtimes; a window's
prediction replaces each traced call's time by the profile's cost and nothing else."""

from __future__ import annotations

import pytest

from crossspec_ros.bench.fidelity import fidelity, markdown, predicted_ms
from crossspec_ros.models.call_trace import CallTrace, TracedCall, calls_from_json
from crossspec_ros.models.emulated import Cost, ModelCosts


@pytest.fixture(scope="module")
def verifier_and_window():
    from crossspec_ros.bench.engine import pattern_windows
    from crossspec_ros.models.tiny import tiny_verifier

    return tiny_verifier(seed=0), pattern_windows(1)[0]


def _decode(model, window, tokens: int) -> None:
    session = model.prefill(model.prepare(window))
    for token in range(tokens):
        session.feed([token + 5])


@pytest.mark.parametrize("static", [False, True], ids=["transformers", "static"])
def test_a_windows_calls_are_its_frames_its_prompt_chunks_then_its_passes(
        verifier_and_window, static):
    from crossspec_ros.models.static_runtime import RuntimeOptions, use_static_runtime

    base, window = verifier_and_window
    model = base.with_runtime(None)
    if static:
        use_static_runtime(model, RuntimeOptions(compile=False, step_rows=(8,)), 8)
    own_tokens, own_chunks = model.prompt_layout()
    trace = CallTrace()
    remove = trace.install(model, "verifier")
    with trace.window("w0") as calls:
        _decode(model, window, 3)
    kinds = [c.kind for c in calls]
    vision = [c for c in calls if c.kind == "vision"]
    prefill = [c for c in calls if c.kind == "prefill"]
    passes = [c for c in calls if c.kind == "pass"]
    assert sum(c.count for c in vision) == model.num_frames
    assert sum(c.count for c in prefill) == own_tokens and prefill[0].pos == 0
    if static:  # the runtime's chunks: the prompt's own layout, then its tail
        assert [c.count for c in prefill][:len(own_chunks)] == own_chunks
    assert kinds.index("pass") > max(i for i, k in enumerate(kinds) if k == "prefill")
    assert [c.pos for c in passes] == [own_tokens, own_tokens + 1, own_tokens + 2]
    assert all(c.count == 1 and c.ms >= 0 and c.role == "verifier" for c in passes)
    # round trip through the kit's JSON
    assert calls_from_json(trace.to_json()["w0"])[-1].pos == passes[-1].pos
    _decode(model, window, 1)  # outside a window: counted, not kept
    assert trace.outside > 0 and len(trace.windows["w0"]) == len(calls)
    remove()
    outside = trace.outside
    _decode(model, window, 1)
    assert trace.outside == outside  # removed: nothing traced any more
    with pytest.raises(ValueError, match="traced already"), trace.window("w0"):
        pass


def test_the_call_trace_and_the_emulation_tell_a_prefill_from_a_pass_by_one_rule(
        verifier_and_window, tmp_path):
    # the house, item 4: a forward that reaches into the prompt is a prefill, one over
    # generated tokens only a pass (emulated.forward_kind), for the trace and the emulation
    import json

    from crossspec_ros.models.emulated import PROFILE_DIR, emulate, forward_kind
    from crossspec_ros.models.tiny import tiny_verifier

    window = verifier_and_window[1]
    model = tiny_verifier(seed=0)  # its own modules: the hooks stay on them
    data = json.loads((PROFILE_DIR / "h100-bf16-limit.json").read_text())
    for role in ("verifier", "drafter"):  # no waits: only the kinds matter here
        data[role]["pass_ms_by_rows"] = {"1": {"ms": 0.0, "from": "this test"}}
        data[role]["prefill_ms_per_token"] = {"ms": 0.0, "from": "this test"}
        data[role]["vision_ms_per_frame"] = {"ms": 0.0, "from": "this test"}
        data[role].pop("prompt", None)
    profile = tmp_path / "free.json"
    profile.write_text(json.dumps(data))
    device = emulate(model, "verifier", profile)
    trace = CallTrace()
    remove = trace.install(model, "verifier")
    try:
        with trace.window("w0") as calls:
            _decode(model, window, 2)
    finally:
        remove()
    forwards = [c for c in calls if c.kind != "vision"]
    own_tokens = model.prompt_layout()[0]
    assert [c.kind for c in forwards] == [forward_kind(c.pos, own_tokens) for c in forwards]
    assert {f"verifier_{c.kind}" for c in forwards} == \
        {kind for kind in device.calls if kind != "verifier_vision"} == \
        {"verifier_prefill", "verifier_pass"}
    assert device.calls["verifier_pass"] == 2
    assert (forward_kind(own_tokens - 1, own_tokens), forward_kind(own_tokens, own_tokens)) \
        == ("prefill", "pass")


def _costs(vision: float, step: float) -> ModelCosts:
    return ModelCosts(Cost(vision, "test"), Cost(step / 100, "test"), {1: Cost(step, "test")})


def test_a_prediction_replaces_each_calls_time_by_its_cost_and_keeps_the_host_time():
    calls = [TracedCall("verifier", "vision", 2, 0, 3.0),
             TracedCall("verifier", "prefill", 200, 0, 10.0),
             TracedCall("verifier", "pass", 1, 200, 4.0)]
    costs = {"verifier": _costs(vision=1.5, step=4.0)}
    # 2 frames at 1.5, 200 rows at max(4.0, 200 * 0.04) = 8.0, a step at 4.0: 15 ms for 17 ms
    assert predicted_ms(30.0, calls, costs) == pytest.approx(30.0 - 17.0 + 15.0)


def test_fidelity_is_zero_where_the_profile_is_the_trace_and_names_the_worst_window():
    def window(mode, index, ms, step_ms, warmup=False):
        return {"mode": mode, "window": index, "ms": ms, "warmup": warmup,
                "calls": [["verifier", "pass", 1, 100 + i, step_ms] for i in range(5)]}

    windows = [window("alone", 0, 500.0, 90.0, warmup=True),  # left out: a warm-up
               window("alone", 1, 60.0, 10.0), window("alone", 2, 60.0, 10.0),
               window("fast", 1, 60.0, 10.0), window("fast", 2, 40.0, 6.0)]
    result = fidelity(windows, {"verifier": _costs(0.0, step=10.0)}, "test profile")
    alone, fast = result["modes"]["alone"], result["modes"]["fast"]
    assert alone["windows"] == 2 and alone["median_error"] == 0.0 and alone["worst_error"] == 0
    # window 2 of "fast": its 5 steps took 6 ms each, the profile says 10: +20 ms on 40
    assert fast["worst_error"] == pytest.approx(0.5) and fast["median_error"] == \
        pytest.approx(0.25)
    assert result["met"] is False and alone["calls"] == {"pass": 10}
    table = "\n".join(markdown(result))
    assert "| fast | 2 | 25.0% | +50.0% |" in table and "**NOT met**" in table
