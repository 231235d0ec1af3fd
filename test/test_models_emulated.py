"""The emulated target (models/emulated.py): cost profiles whose every number says where it
comes from, model calls that last what the profile says (a lower bound: the machine may be
slower, which is counted, never hidden), one device shared serially, and bench engine's
--emulate saying so in everything it writes."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

from crossspec_ros.models.emulated import (
    PROFILE_DIR,
    CostProfile,
    EmulatedDevice,
    ProfileError,
    available,
    emulate,
    emulation_of,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_bundled_profiles_trace_every_number_and_say_what_they_are():
    assert {"h100-bf16-eager-2026-11-24", "h100-bf16-limit",
            "h200-bf16-static-2026-11-27"} <= set(available())
    eager = CostProfile.load("h100-bf16-eager-2026-11-24")
    limit = CostProfile.load("h100-bf16-limit")
    static = CostProfile.load("h200-bf16-static-2026-11-27")
    assert eager.kind == static.kind == "measured" and limit.kind == "bound"
    assert "emulated" in eager.label and "a bound, not measured" in limit.label
    for profile in (eager, limit, static):
        assert (ROOT / profile.report.split()[0]).is_file(), profile.report
        for costs in (profile.verifier, profile.drafter):
            for cost in (costs.vision_ms_per_frame, costs.prefill_ms_per_token,
                         *costs.pass_ms_by_rows.values()):
                assert cost.source and cost.ms >= 0
    # the measured profile's decoding step is the report's; the bound's is the report's limit
    assert eager.verifier.pass_ms(1) == 32.0 and limit.verifier.pass_ms(1) == 4.4
    # the H200 profile, as gpu-report wrote it, is the report's numbers
    report = json.loads((ROOT / "docs" / "gpu-h200-2026-11-27.json").read_text())
    exact = report["passes-bfloat16"]["runtimes"]["static_compiled_exact_32"]["ms_per_pass"]
    assert [static.verifier.pass_ms(r) for r in (1, 8, 32)] == \
        [exact["1"], exact["8"], exact["32"]]
    assert static.drafter.pass_ms(1) == report["drafter"]["ms_per_pass"]["1"]
    # a window's 5 event images took the report's drafter vision_ms together
    assert static.drafter.vision_ms(5) == pytest.approx(report["drafter"]["vision_ms"], abs=0.01)


def test_a_pass_costs_by_its_rows_and_a_long_one_costs_a_prefill():
    costs = CostProfile.load("h100-bf16-eager-2026-11-24").verifier
    assert costs.pass_ms(1) == 32.0 and costs.pass_ms(25) == 41.3
    assert 32.0 < costs.pass_ms(13) < 41.3  # linear between the profile's row counts
    assert costs.pass_ms(2000) == pytest.approx(2000 * 0.0393)


def test_an_unknown_or_broken_profile_is_one_line_naming_what_there_is(tmp_path):
    with pytest.raises(ProfileError, match="h100-bf16-limit"):
        CostProfile.load("a100-nonexistent")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"name": "broken"}))
    with pytest.raises(ProfileError, match="not a cost profile"):
        CostProfile.load(broken)


def _profile_file(tmp_path, step_ms: float) -> Path:
    """A profile whose every step costs ``step_ms`` (a file of its own per cost: a process has
    one emulated device per profile)."""
    data = json.loads((PROFILE_DIR / "h100-bf16-limit.json").read_text())
    for role in ("verifier", "drafter"):
        data[role]["pass_ms_by_rows"] = {"1": {"ms": step_ms, "from": "this test"}}
        data[role]["vision_ms_per_frame"] = {"ms": 0.0, "from": "this test"}
    path = tmp_path / f"test-profile-{step_ms:g}.json"
    path.write_text(json.dumps(data))
    return path


def _profile(tmp_path, step_ms: float) -> CostProfile:
    return CostProfile.load(_profile_file(tmp_path, step_ms))


def test_an_emulated_models_step_lasts_at_least_its_cost_and_an_overrun_is_counted(tmp_path):
    from crossspec_ros.models.tiny import tiny_verifier

    verifier = tiny_verifier(seed=0)
    slow = emulate(verifier, "verifier", _profile_file(tmp_path, step_ms=250.0))
    lm = verifier.language_model_parts()[0]
    embeds = torch.zeros(1, 1, lm.config.hidden_size)
    # a decoding step: its position is past the prompt (one at 0 would be a prefill)
    after_prompt = torch.tensor([[verifier.prompt_layout()[0]]])
    t0 = time.monotonic()
    with torch.inference_mode():
        lm(inputs_embeds=embeds, position_ids=after_prompt)
    assert time.monotonic() - t0 >= 0.25
    assert slow.calls["verifier_pass"] == 1 and slow.held

    free_verifier = tiny_verifier(seed=0)
    free = emulate(free_verifier, "verifier", _profile_file(tmp_path, step_ms=0.0))  # nothing
    lm_free = free_verifier.language_model_parts()[0]  # computes in 0 ms
    with torch.inference_mode():
        lm_free(inputs_embeds=embeds, position_ids=after_prompt)
    assert free.over_budget["verifier_pass"] == 1 and not free.held
    assert free.over_budget_ms["verifier_pass"] > 0
    assert free.overruns().startswith("verifier_pass 1 of 1 calls, +")
    assert free.report()["held"] is False and free.report()["emulated"] is True


def test_emulation_is_turned_on_by_one_door_and_read_back_by_one_function(tmp_path):
    # the house, item 4: emulate(model, role, profile) on the process's one device for the
    # profile; emulation_of(model) is what every report and diagnostics asks
    from crossspec_ros.models.runtime_setup import runtime_counters
    from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier

    profile = _profile_file(tmp_path, step_ms=0.0)
    verifier, drafter = tiny_verifier(seed=0), tiny_eventgpt_drafter(seed=0)
    assert emulation_of(verifier) is None and "emulated" not in runtime_counters(verifier)
    device = emulate(verifier, "verifier", profile)
    assert emulate(drafter, "drafter", str(profile)) is device  # one device per profile
    assert emulate(verifier, "verifier", profile) is device  # again: nothing changes
    assert emulation_of(verifier) is emulation_of(drafter) is device
    assert emulation_of(verifier.with_runtime(None)) is device  # its twins too
    counters = runtime_counters(verifier)
    assert counters["emulated"] == device.profile.label
    assert counters["emulation_held"] is device.held is True
    assert counters["emulation_over_budget"] == device.calls_over_budget == 0


def test_whoever_reads_a_nodes_diagnostics_takes_the_emulations_verdict_from_its_count():
    from crossspec_ros.bench.split_monitor import emulation_record
    from crossspec_ros.models.emulated import emulation_held

    # diagnostics print held for people; the count is what is read back
    record = emulation_record("v", {"emulated": "p", "emulation_held": "True",
                                    "emulation_over_budget": "2"})
    assert record["held"] is False and record["over_budget"] == 2
    assert emulation_held(0) and not emulation_held(1)


def test_two_models_on_one_emulated_device_take_turns(tmp_path):
    device = EmulatedDevice(_profile(tmp_path, step_ms=1.0))
    start = time.monotonic()
    threads = [threading.Thread(target=device.occupy, args=(kind, start, 200.0))
               for kind in ("verifier_pass", "drafter_pass")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # serial: the second call's 200 ms begin when the first's end
    assert time.monotonic() - start >= 0.4
    assert device.calls == {"verifier_pass": 1, "drafter_pass": 1}


def test_calls_while_paused_are_not_charged_but_counted_apart(tmp_path):
    device = EmulatedDevice(_profile(tmp_path, step_ms=1.0))
    with device.paused():
        device.occupy("verifier_pass", device.acquire(), 60_000.0)  # no minute's wait
    assert device.calls == {} and device.uncharged == {"verifier_pass": 1}
    device.occupy("verifier_pass", device.acquire(), 1.0)
    assert device.calls == {"verifier_pass": 1} and device.report()["uncharged"] == \
        {"verifier_pass": 1}


def test_bench_engine_emulated_says_so_and_stays_lossless(tmp_path, capsys):
    from crossspec_ros.cli.main import main

    out = tmp_path / "engine.json"
    code = main(["bench", "engine", "--models", "tiny-random", "--bag", "pattern",
                 "--windows", "2", "--warmup", "1", "--max-new-tokens", "4",
                 "--no-prompt-lookup", "--emulate", "h100-bf16-limit", "--json", str(out)])
    printed = capsys.readouterr()
    report = json.loads(out.read_text())
    assert code == 0 and report["lossless"] is True
    emulation = report["emulation"]
    assert emulation["profile"] == "h100-bf16-limit" and emulation["kind"] == "bound"
    assert emulation["calls"]["verifier_pass"] > 0 and emulation["calls"]["verifier_vision"] > 0
    assert emulation["checked_against_a_gpu"] is False
    assert "emulated: h100-bf16-limit" in report["models"]
    assert "**EMULATED**" in printed.out and "EMULATED (" in printed.out
    assert "emulated: h100-bf16-limit (a bound, not measured" in printed.err


def test_bench_engine_refuses_an_unknown_profile_in_one_line(capsys):
    from crossspec_ros.cli.main import main

    assert main(["bench", "engine", "--emulate", "nope"]) == 2
    assert capsys.readouterr().err.strip().startswith(
        "crossspec bench engine: --emulate: no cost profile 'nope'")


def test_the_emulate_parameter_takes_a_profile_and_refuses_a_drafter_process():
    from crossspec_ros.params import (
        DRAFT_NODE_PARAMS,
        ParameterError,
        combination_problem,
        validate,
    )

    assert validate({"emulate": "h100-bf16-limit"}, DRAFT_NODE_PARAMS)["emulate"] == \
        "h100-bf16-limit"
    with pytest.raises(ParameterError, match="emulate"):
        validate({"emulate": "a100-nonexistent"}, DRAFT_NODE_PARAMS)
    problem = combination_problem({"emulate": "h100-bf16-limit", "drafter_process": True})
    assert problem is not None and "set drafter_process false" in problem


def test_a_forward_over_the_prompt_costs_the_rows_it_stands_for_in_the_targets_prompt():
    from crossspec_ros.models.emulated import target_rows
    from crossspec_ros.models.tiny import tiny_verifier

    verifier = tiny_verifier(seed=0)
    own_tokens, own_chunks = verifier.prompt_layout()
    profile = CostProfile.load("h200-bf16-static-2026-11-27")
    layout = profile.verifier.prompt
    assert layout is not None and layout.tokens == 2066 and len(layout.chunks) == 8
    assert len(own_chunks) == len(layout.chunks) and own_tokens < layout.tokens
    rows_of = target_rows(verifier, profile.verifier)
    # the head's chunk, a frame's chunk, the question's tail: the target's own chunks
    assert rows_of(0, own_chunks[0]) == (260, "prefill")
    assert rows_of(own_chunks[0], own_chunks[1]) == (257, "prefill")
    tail = own_tokens - sum(own_chunks)
    assert rows_of(sum(own_chunks), tail) == (layout.tokens - sum(layout.chunks), "prefill")
    assert rows_of(0, own_tokens) == (2066, "prefill")  # a one-shot prefill
    # after the prompt a forward is a verification pass of its own rows
    assert rows_of(own_tokens + 3, 8) == (8, "pass")
    # a frame's chunk now costs what the 7B's 257-token chunk measured, not a short pass
    assert profile.call_ms("verifier", "prefill", 257) == pytest.approx(257 * 0.133)
    assert profile.call_ms("verifier", "prefill", 257) > 3 * profile.verifier.pass_ms(17)


def test_an_emulated_prefill_is_charged_at_the_targets_prompt_length(tmp_path):
    from crossspec_ros.models.tiny import tiny_verifier

    data = json.loads((PROFILE_DIR / "h200-bf16-static-2026-11-27.json").read_text())
    data["verifier"]["prefill_ms_per_token"]["ms"] = 0.001  # short waits: 2 ms a prefill
    path = tmp_path / "short.json"
    path.write_text(json.dumps(data))
    verifier = tiny_verifier(seed=0)
    device = emulate(verifier, "verifier", path)
    own_tokens = verifier.prompt_layout()[0]
    lm = verifier.language_model_parts()[0]
    with torch.inference_mode():
        lm(inputs_embeds=torch.zeros(1, own_tokens, lm.config.hidden_size))
    assert device.calls == {"verifier_prefill": 1}
    assert device.emulated_ms["verifier_prefill"] == pytest.approx(
        max(device.profile.verifier.pass_ms(32), 2066 * 0.001))


def test_the_profile_the_kit_measures_is_the_bundled_one_with_the_prompts_layout(tmp_path):
    from crossspec_ros.bench.kit_profile import measured_profile

    stages = json.loads((ROOT / "docs" / "gpu-h200-2026-11-27.json").read_text())
    written = measured_profile(stages, "h200-bf16-static-2026-11-27",
                               "docs/gpu-h200-2026-11-27.md")
    path = tmp_path / "written.json"
    path.write_text(json.dumps(written))
    again, bundled = CostProfile.load(path), CostProfile.load("h200-bf16-static-2026-11-27")
    for role in ("verifier", "drafter"):
        a, b = again.costs(role), bundled.costs(role)
        assert a.prompt is not None and b.prompt is not None
        assert (a.prompt.tokens, a.prompt.chunks) == (b.prompt.tokens, b.prompt.chunks)
        assert a.vision_ms_per_frame.ms == b.vision_ms_per_frame.ms
        assert {r: c.ms for r, c in a.pass_ms_by_rows.items()} == \
            {r: c.ms for r, c in b.pass_ms_by_rows.items()}


def test_a_call_computed_while_the_device_was_busy_overran_only_if_it_ended_after_its_end(
        tmp_path):
    device = EmulatedDevice(_profile(tmp_path, step_ms=1.0))
    device.occupy("drafter_pass", time.monotonic(), 300.0)  # the device busy 300 ms
    # a verifier call that computed 350 ms here, from before the device was free: there it
    # begins when the drafter's call ends, and ends 100 ms later; here it ended before that
    device.occupy("verifier_pass", time.monotonic() - 0.35, 100.0)
    assert device.held and device.calls["verifier_pass"] == 1
    # one that began on a free device and computed 50 ms against its 10 ms overran by ~40 ms
    time.sleep(0.2)
    device.occupy("verifier_pass", time.monotonic() - 0.05, 10.0)
    assert device.over_budget == {"verifier_pass": 1}
    assert device.over_budget_ms["verifier_pass"] >= 39.9  # at least 50 ms - 10 ms


def test_two_models_calls_compute_here_one_at_a_time_and_end_there_one_after_the_other(
        tmp_path):
    device = EmulatedDevice(_profile(tmp_path, step_ms=1.0))
    computing: list[str] = []
    most_at_once = []
    ends: dict[str, float] = {}
    inside = threading.Barrier(2, timeout=30)

    def call(kind: str) -> None:
        inside.wait()  # both threads ask for the device at once
        begun = device.acquire()
        computing.append(kind)
        most_at_once.append(len(computing))
        time.sleep(0.05)  # its compute here
        computing.remove(kind)
        device.occupy(kind, begun, 150.0)
        ends[kind] = time.monotonic()

    start = time.monotonic()
    threads = [threading.Thread(target=call, args=(kind,))
               for kind in ("verifier_pass", "drafter_pass")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert max(most_at_once) == 1  # never both computing here
    # there the second call begins when the first ends: 150 ms + 150 ms; its compute here
    # overlapped the first's emulated time, so nothing overran
    assert max(ends.values()) - start >= 0.3
    assert device.held and sum(device.calls.values()) == 2
    # a call within a call of the same thread does not wait for itself
    begun = device.acquire()
    inner = device.acquire()
    device.occupy("verifier_vision", inner, 0.0)
    device.occupy("verifier_pass", begun, 1.0)
    assert device._holder is None


# ------------------------------------------------------------------ lanes (issue 57)
def _lane_profile_file(tmp_path, name: str, lanes: dict[str, float] | None = None,
                       copy_ms: float | None = 0.5, chunks: dict[str, float] | None = None,
                       vision: dict[str, float] | None = None) -> Path:
    """The H200 profile with short waits: passes of 1 ms, lane steps of ``lanes`` (None: no
    lane_pass_ms_by_lanes), an adoption copy of ``copy_ms`` (None: no lane_copy_ms), batched
    prompt chunks and vision calls of ``chunks`` and ``vision`` (None: none)."""
    data = json.loads((PROFILE_DIR / "h200-bf16-static-2026-11-27.json").read_text())
    data["name"] = name
    verifier = data["verifier"]
    verifier["prefill_ms_per_token"]["ms"] = 0.0001
    verifier["vision_ms_per_frame"]["ms"] = 0.0
    verifier["pass_ms_by_rows"] = {"1": {"ms": 1.0, "from": "this test"},
                                   "8": {"ms": 1.5, "from": "this test"}}
    for key in ("lane_pass_ms_by_lanes", "lane_copy_ms", "chunk_ms_by_frames",
                "vision_ms_by_batch"):
        verifier.pop(key)
    for key, table in (("chunk_ms_by_frames", chunks), ("vision_ms_by_batch", vision)):
        if table is not None:
            verifier[key] = {k: {"ms": ms, "from": "this test"} for k, ms in table.items()}
    if lanes is not None:
        verifier["lane_pass_ms_by_lanes"] = {s: {"ms": ms, "from": "this test"}
                                             for s, ms in lanes.items()}
    if copy_ms is not None:
        verifier["lane_copy_ms"] = {"ms": copy_ms, "from": "this test", "filled": True}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


LANE_MS = {"1": 2.0, "2": 3.0, "4": 5.0, "8": 9.0}


def _emulated_lanes(tmp_path, name: str, streams: int, batch_prompts: bool = False,
                    **profile: Any):
    """``streams`` twins of an emulated tiny verifier (8-row eager steps) and its device."""
    from crossspec_ros.models.lanes import use_lanes
    from crossspec_ros.models.static_runtime import RuntimeOptions
    from crossspec_ros.models.tiny import tiny_verifier

    verifier = tiny_verifier(seed=0)
    device = emulate(verifier, "verifier",
                     _lane_profile_file(tmp_path, name, **{"lanes": LANE_MS, **profile}))
    options = RuntimeOptions(compile=False, step_rows=(8,))
    return use_lanes(verifier, options, streams, max_new_tokens=8,
                     batch_prompts=batch_prompts), device


def _rows(laned, rows: int = 8) -> torch.Tensor:
    return torch.randn(rows, laned.pool.embed.weight.shape[1], generator=torch.Generator()
                       .manual_seed(rows))


def test_a_lane_step_is_charged_the_profiles_cost_for_its_lanes_whatever_its_positions(
        tmp_path):
    from crossspec_ros.models.lanes import LaneRequest

    twins, device = _emulated_lanes(tmp_path, "lanes-3", 3)
    laned = twins[0].runtime.laned
    costs = device.profile.verifier
    # the warm-up's step, every lane parked: one [3, 8] forward
    assert device.calls["verifier_lane_pass"] == 1
    assert device.emulated_ms["verifier_lane_pass"] == costs.lane_pass_ms(3) == 4.0
    before = Counter(device.calls)
    # lane 0 at position 0 (as a forward of one lane it would be a prefill), lane 2 mid-cache,
    # lane 1 parked: still one lane step of 3 lanes, priced by its lanes, not its 24 rows
    laned.step({0: LaneRequest(0, _rows(laned)), 2: LaneRequest(20, _rows(laned, 3))})
    assert device.calls - before == Counter({"verifier_lane_pass": 1})
    assert device.emulated_ms["verifier_lane_pass"] == 2 * 4.0
    assert device.report()["calls"]["verifier_lane_pass"] == 2 and device._holder is None


def test_one_lane_steps_like_the_one_stream_runtime_and_is_charged_its_pass(tmp_path):
    from crossspec_ros.models.lanes import LaneRequest
    from crossspec_ros.models.static_runtime import RuntimeOptions, use_static_runtime

    twins, device = _emulated_lanes(tmp_path, "lanes-1", 1)
    laned, verifier = twins[0].runtime.laned, twins[0]
    after_prompt = verifier.prompt_layout()[0] + 2
    before = Counter(device.emulated_ms)
    laned.step({0: LaneRequest(after_prompt, _rows(laned))})
    lane_charge = Counter(device.emulated_ms) - before
    # a [1, 8] forward is a plain pass: what an 8-row step of the one-stream runtime costs
    plain = verifier.with_runtime(None)
    use_static_runtime(plain, RuntimeOptions(compile=False, step_rows=(8,)), 8)
    slot = plain.runtime.acquire()
    before = Counter(device.emulated_ms)
    with torch.inference_mode():
        plain.runtime.chain(slot, after_prompt, _rows(laned)[None], rows=8)
    plain_charge = Counter(device.emulated_ms) - before
    assert lane_charge == plain_charge == Counter({"verifier_pass": 1.5})
    assert device.calls["verifier_lane_pass"] == 0


def test_a_lane_steps_cost_is_linear_between_lane_counts_and_past_the_last_two():
    from crossspec_ros.models.emulated import Cost, ModelCosts

    def costs(table: dict[int, float]) -> ModelCosts:
        return ModelCosts(Cost(1, "t"), Cost(0.1, "t"), {1: Cost(1, "t")}, None,
                          {s: Cost(ms, "t") for s, ms in table.items()})

    grid = costs({1: 10.0, 2: 11.0, 4: 13.0, 8: 17.0})
    assert [grid.lane_pass_ms(s) for s in (1, 2, 3, 4, 6, 8)] == \
        [10.0, 11.0, 12.0, 13.0, 15.0, 17.0]
    assert grid.lane_pass_ms(16) == 17.0 + (17.0 - 13.0) * 8 / 4  # the last two's line
    assert costs({2: 11.0, 4: 13.0}).lane_pass_ms(1) == 11.0  # below: the first one's
    assert costs({4: 13.0, 8: 12.5}).lane_pass_ms(16) == 12.5  # never below the last
    assert costs({4: 13.0}).lane_pass_ms(16) == 13.0
    h200 = CostProfile.load("h200-bf16-static-2026-11-27")
    assert h200.call_ms("verifier", "lane_pass", 6) == h200.verifier.lane_pass_ms(6)


def test_a_lane_step_on_a_profile_without_lane_costs_is_one_line_saying_what_to_do(tmp_path):
    from crossspec_ros.models.lanes import LaneRequest

    with pytest.raises(ProfileError) as refused:  # at the warm-up's step of use_lanes
        _emulated_lanes(tmp_path, "no-lane-costs", 2, lanes=None)
    message = str(refused.value)
    assert "\n" not in message and "no-lane-costs" in message
    assert "verifier.lane_pass_ms_by_lanes" in message and "add it to the profile" in message
    device = CostProfile.load(tmp_path / "no-lane-costs.json")
    assert device.verifier.lane_pass_ms_by_lanes is None
    # one lane is a plain pass: no lane cost needed; the device was given back
    twins, emulated = _emulated_lanes(tmp_path, "one-lane-no-lane-costs", 1, lanes=None)
    laned = twins[0].runtime.laned
    laned.step({0: LaneRequest(3, _rows(laned))})
    assert emulated._holder is None and emulated.calls["verifier_lane_pass"] == 0
    # and the adoption copy without lane_copy_ms, before anything is copied
    twins, _ = _emulated_lanes(tmp_path, "no-copy-cost", 2, copy_ms=None)
    laned = twins[0].runtime.laned
    with pytest.raises(ProfileError, match=r"no-copy-cost: no verifier\.lane_copy_ms"):
        laned.adopt(0, laned.pool.acquire(), 5)
    assert laned.lane_copies == 0


def test_a_windows_adoption_into_its_lane_is_charged_the_profiles_copy(tmp_path, windows):
    twins, device = _emulated_lanes(tmp_path, "lane-copy", 2, copy_ms=0.75)
    laned = twins[1].runtime.laned
    laned.adopt(0, laned.pool.acquire(), 5)
    assert device.calls["verifier_lane_copy"] == 1
    assert device.emulated_ms["verifier_lane_copy"] == 0.75
    # a window decoded in its lane: its prompt adopted once, then lane steps
    steps = device.calls["verifier_lane_pass"]
    twins[1].generate_greedy(twins[1].prepare(windows[0]), 4)
    assert laned.lane_copies == 2 and device.calls["verifier_lane_copy"] == 2
    assert device.calls["verifier_lane_pass"] > steps
    assert device._holder is None


def test_lane_costs_in_a_profile_are_checked_when_it_loads(tmp_path):
    base = json.loads((PROFILE_DIR / "h200-bf16-static-2026-11-27.json").read_text())
    broken = {
        "not ascending": ("lane_pass_ms_by_lanes", {"2": {"ms": 1, "from": "t"},
                                                    "1": {"ms": 1, "from": "t"}}),
        "zero lanes": ("lane_pass_ms_by_lanes", {"0": {"ms": 1, "from": "t"}}),
        "not a number of lanes": ("lane_pass_ms_by_lanes", {"two": {"ms": 1, "from": "t"}}),
        "empty": ("lane_pass_ms_by_lanes", {}),
        "free": ("lane_pass_ms_by_lanes", {"1": {"ms": 0, "from": "t"}}),
        "no source": ("lane_pass_ms_by_lanes", {"1": {"ms": 1}}),
        "a free copy": ("lane_copy_ms", {"ms": 0.0, "from": "t"}),
        "a copy of no cost": ("lane_copy_ms", 0.5),
    }
    for case, (key, value) in broken.items():
        data = json.loads(json.dumps(base))
        data["verifier"][key] = value
        path = tmp_path / "lanes.json"
        path.write_text(json.dumps(data))
        with pytest.raises(ProfileError, match="not a cost profile") as refused:
            CostProfile.load(path)
        assert "\n" not in str(refused.value), case
        assert f"verifier.{key}" in str(refused.value), case


def test_the_bundled_profiles_lane_costs_are_their_32_row_pass_scaled_by_bytes_read():
    """docs/design-streams.md section 5: S lanes of 32 rows read 13.5 GB of weights and S x
    1.13 GB of KV; one lane is the 32-row pass; an adoption reads and writes 1.13 GB. A cost
    the kit's streams stage measured (H200, 2026-11-29) is that, not the arithmetic."""
    bandwidth_tb_s = {"NVIDIA H200": 4.8, "NVIDIA H100 80GB HBM3": 3.35}
    for name in available():
        profile = CostProfile.load(name)
        costs = profile.verifier
        assert costs.lane_pass_ms_by_lanes is not None and costs.lane_copy_ms is not None
        assert sorted(costs.lane_pass_ms_by_lanes) == [1, 2, 4, 8]
        one = costs.pass_ms(32)
        for lanes, cost in costs.lane_pass_ms_by_lanes.items():
            assert cost.source
            if not cost.filled:  # measured: a profile of a real run says where from
                assert profile.kind == "measured" and name.startswith("h200"), (name, lanes)
                assert lanes == 1 or cost.source.startswith("streams.lanes"), (name, lanes)
                continue
            assert cost.ms == pytest.approx(one * (13.5 + 1.13 * lanes) / 14.63, abs=1e-3)
            # one lane is the measured 32-row pass on an H200 profile
            assert lanes > 1 or not name.startswith("h200"), (name, lanes)
        if costs.lane_copy_ms.filled:
            assert costs.lane_copy_ms.ms == pytest.approx(
                2 * 1.13 / bandwidth_tb_s[profile.device], abs=1e-3)
        else:
            assert costs.lane_copy_ms.source.startswith("streams.adoption"), name
    # which numbers are filled: in the log line and the run's JSON
    static = CostProfile.load("h200-bf16-static-2026-11-27")
    assert static.verifier.lane_pass_ms(1) == static.verifier.pass_ms(32)
    filled = ["lane_pass_ms_by_lanes[2, 4, 8]", "lane_copy_ms", "chunk_ms_by_frames[2, 4, 8]",
              "vision_ms_by_batch[2, 4, 8]"]
    assert static.filled() == {"verifier": filled}
    assert static.describe().endswith("filled, not measured: verifier " + ", ".join(filled))
    assert EmulatedDevice(static).report()["filled"] == static.filled()
    assert CostProfile.load("h200-bf16-static-2026-11-29").filled() == {}


def test_the_bundled_profiles_batched_prompt_costs_are_one_frames_cost_plus_compute():
    """docs/design-streams.md section 5: K frames' chunks in one step cost the one-frame
    chunk plus K - 1 chunks' compute (3.46 TFLOP at 60% of 989 TFLOP/s) plus copying each
    chunk's KV out of its lane; K frames in one vision call the one-frame call plus 0.3 ms a
    frame; on the bound profile K times the one-frame bound. One frame is the one-stream
    cost: measured on the H200 profiles, filled elsewhere; a profile whose streams stage ran
    (H200, 2026-11-29) has every K measured."""
    compute_ms = 257 * 2 * 6.74e9 / (0.6 * 989e12) * 1e3
    for name in available():
        profile = CostProfile.load(name)
        costs, bound = profile.verifier, profile.kind == "bound"
        if not any(c.filled for c in costs.chunk_ms_by_frames.values()):
            assert all(c.source.startswith("streams.prompt") for c in
                       (*costs.chunk_ms_by_frames.values(), *costs.vision_ms_by_batch.values()))
            continue
        bandwidth = 4.8 if name.startswith("h200") else 3.35
        copy_ms = 2 * 257 * 0.5 * 2**20 / (bandwidth * 1e12) * 1e3
        one_chunk = costs.chunk_ms_by_frames[1].ms
        assert one_chunk == pytest.approx(257 * costs.prefill_ms_per_token.ms, abs=1e-3)
        assert costs.vision_ms_by_batch[1].ms == costs.vision_ms_per_frame.ms
        for k in (2, 4, 8):
            chunk = k * (one_chunk + copy_ms) if bound else \
                one_chunk + (k - 1) * compute_ms + k * copy_ms
            vision = k * costs.vision_ms_per_frame.ms if bound else \
                costs.vision_ms_per_frame.ms + (k - 1) * 0.3
            assert costs.chunk_ms_by_frames[k].ms == pytest.approx(chunk, abs=2e-3), (name, k)
            assert costs.vision_ms_by_batch[k].ms == pytest.approx(vision, abs=2e-3), (name, k)
            assert costs.chunk_ms_by_frames[k].filled and costs.vision_ms_by_batch[k].filled
        measured_one = name.startswith("h200")
        assert costs.chunk_ms_by_frames[1].filled != measured_one
        assert costs.vision_ms_by_batch[1].filled != measured_one


def test_a_prompt_step_of_several_streams_is_charged_its_frames_chunk_and_vision_costs(
        tmp_path, windows):
    """One prompt step of 3 streams (models/prompt_lanes.py): one vision call of 3 frames
    ("vision_batch") and one chunk step of 3 lanes ("lane_chunk"), whatever how many streams
    had a frame; a one-shot prefill's 8 frames are 8 such steps."""
    twins, device = _emulated_lanes(tmp_path, "prompt-3", 3, batch_prompts=True,
                                    chunks={"1": 3.0, "2": 4.0, "4": 6.0},
                                    vision={"1": 1.0, "2": 1.5, "4": 2.5})
    costs = device.profile.verifier
    assert costs.by_count("chunk_ms_by_frames", 3) == 5.0
    assert costs.by_count("vision_ms_by_batch", 3) == 2.0
    assert device.calls["verifier_lane_chunk"] == 1  # the warm-up's, every lane parked
    before = Counter(device.calls), Counter(device.emulated_ms)
    twins[1].prefill(twins[1].prepare(windows[0])).close()
    calls = Counter(device.calls) - before[0]
    charged = Counter(device.emulated_ms) - before[1]
    assert calls["verifier_lane_chunk"] == calls["verifier_vision_batch"] == 8
    assert charged["verifier_lane_chunk"] == pytest.approx(8 * 5.0)
    assert charged["verifier_vision_batch"] == pytest.approx(8 * 2.0)
    assert calls["verifier_vision"] == calls["verifier_prefill"] == 0
    assert device._holder is None


def test_batched_prompts_on_a_profile_without_their_costs_are_one_line_saying_what_to_do(
        tmp_path, windows):
    with pytest.raises(ProfileError) as refused:  # at the warm-up's chunk step
        _emulated_lanes(tmp_path, "no-chunk-costs", 2, batch_prompts=True,
                        vision={"1": 1.0, "2": 1.5})
    assert "\n" not in str(refused.value)
    assert "no-chunk-costs: no verifier.chunk_ms_by_frames" in str(refused.value)
    twins, device = _emulated_lanes(tmp_path, "no-vision-costs", 2, batch_prompts=True,
                                    chunks={"1": 3.0, "2": 4.0})
    # at the first frame's step, which carries the error to its riders (in one line)
    with pytest.raises(RuntimeError, match=r"ProfileError: cost profile no-vision-costs: no "
                       r"verifier\.vision_ms_by_batch, which an emulated vision_batch needs"):
        twins[0].prefill(twins[0].prepare(windows[0]))
    assert device._holder is None
