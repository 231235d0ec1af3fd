"""The emulated target (models/emulated.py): cost profiles whose every number says where it
comes from, model calls that last what the profile says (a lower bound: the machine may be
slower, which is counted, never hidden), one device shared serially, and bench engine's
--emulate saying so in everything it writes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch

from crossspec_ros.models.emulated import (
    PROFILE_DIR,
    CostProfile,
    EmulatedDevice,
    ProfileError,
    available,
    emulate,
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


def _profile(tmp_path, step_ms: float) -> CostProfile:
    data = json.loads((PROFILE_DIR / "h100-bf16-limit.json").read_text())
    for role in ("verifier", "drafter"):
        data[role]["pass_ms_by_rows"] = {"1": {"ms": step_ms, "from": "this test"}}
        data[role]["vision_ms_per_frame"] = {"ms": 0.0, "from": "this test"}
    path = tmp_path / "test-profile.json"
    path.write_text(json.dumps(data))
    return CostProfile.load(path)


def test_an_emulated_models_step_lasts_at_least_its_cost_and_an_overrun_is_counted(tmp_path):
    from crossspec_ros.models.tiny import tiny_verifier

    slow = EmulatedDevice(_profile(tmp_path, step_ms=250.0))
    verifier = emulate(tiny_verifier(seed=0), "verifier", slow)
    lm = verifier.language_model_parts()[0]
    embeds = torch.zeros(1, 1, lm.config.hidden_size)
    t0 = time.monotonic()
    with torch.inference_mode():
        lm(inputs_embeds=embeds)
    assert time.monotonic() - t0 >= 0.25
    assert slow.calls["verifier_pass"] == 1 and slow.held

    free = EmulatedDevice(_profile(tmp_path, step_ms=0.0))  # nothing computes in 0 ms
    lm_free = emulate(tiny_verifier(seed=0), "verifier", free).language_model_parts()[0]
    with torch.inference_mode():
        lm_free(inputs_embeds=embeds)
    assert free.over_budget["verifier_pass"] == 1 and not free.held
    assert free.over_budget_ms["verifier_pass"] > 0
    assert free.overruns().startswith("verifier_pass 1 of 1 calls, +")
    assert free.report()["held"] is False and free.report()["emulated"] is True


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
