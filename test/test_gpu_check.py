"""scripts/gpu_check.sh, the GPU kit, rehearsed on the CPU: one process runs every stage in
priority order against a time budget with the tiny random pair, a stage that fails or
overruns does not stop the next, a budget too small skips the later stages by name, the report
builds from whatever came back, and the kit imports nothing the GPU machine lacks (CI has no
GPU; a session with one runs the same kit there)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from crossspec_ros.bench.gpu_kit import STAGE_NAMES, Kit, Stage, run_kit
from crossspec_ros.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"

# Import names of what the GPU machine's image holds that crossspec may import (the device
# tool's KINDS.md, "Python packages already there", 2026-11-17; torch's wheel brings torch,
# torchgen and functorch)
DEVICE_IMAGE = {
    "torch", "torchgen", "functorch", "torchvision", "triton", "numpy", "PIL", "accelerate",
    "safetensors",
    "packaging", "yaml", "tqdm", "regex", "filelock", "fsspec", "jinja2", "markupsafe",
    "sympy", "mpmath", "networkx", "idna", "anyio", "h11", "psutil", "typing_extensions",
    "sentencepiece", "peft", "h5py", "matplotlib", "scipy", "certifi", "charset_normalizer",
    "requests", "urllib3", "hf_xet", "pytest", "_pytest", "pluggy", "iniconfig",
}
# imported here, not needed there: torch's optional compression (torch._utils.try_import)
# and the ROS wheels' bootstrap of this venv (a .pth file)
NOT_NEEDED_THERE = {"zstandard", "ros_wheels_bootstrapper"}
# pip names of the carried wheels -> their import names, where they differ
IMPORT_NAMES = {"backports.zstd": "backports", "ruamel.yaml": "ruamel"}


def carried_wheels() -> set[str]:
    text = SCRIPT.read_text()
    block = re.search(r"WHEELS=\((.*?)\)", text, re.S).group(1)
    names = {spec.split("==")[0] for spec in block.split()}
    return {IMPORT_NAMES.get(name, name) for name in names}


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    out = tmp_path_factory.mktemp("kit")
    result = subprocess.run([str(SCRIPT), "smoke", str(out)], capture_output=True, text=True,
                            timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result


@pytest.mark.slow
def test_the_rehearsal_runs_every_stage_in_priority_order_and_writes_each_ones_json(
        rehearsal):
    out, result = rehearsal
    stages = json.loads((out / "stages.json").read_text())
    assert [s["name"] for s in stages["stages"]] == list(STAGE_NAMES)
    assert {s["name"]: s["status"] for s in stages["stages"]} == \
        dict.fromkeys(STAGE_NAMES, "done")
    for name in ("env", "verifier", "exactness-bfloat16", "passes-bfloat16",
                 "engine-bfloat16", "fidelity-bfloat16", "drafter", "prefill-compiled",
                 "exactness-float32",
                 "exactness-4bit",
                 "passes-4bit", "sharing", "streams", "trace", "tuning", "tests", "profile"):
        assert (out / f"{name}.json").is_file(), name
    # progress: a line per stage as it starts and ends
    assert result.stderr.index("[env] running") < result.stderr.index("[verifier] done") \
        < result.stderr.index("[tests] done")
    exact = json.loads((out / "exactness-bfloat16.json").read_text())
    assert exact["exact"] and exact["runtimes"]["static"]["flips"] == 0
    assert exact["runtimes"]["static"]["flips_per_position"] == {}
    engine = json.loads((out / "engine-bfloat16.json").read_text())
    assert set(engine["modes"]) == {"verifier_alone_exact", "history_only", "crossspec",
                                    "oracle_free@a=0.5", "oracle_free@a=0.8",
                                    "after_close_alone", "live_alone", "text_only",
                                    "crossspec_live"}
    assert engine["lossless"]
    verifier = json.loads((out / "verifier.json").read_text())
    assert set(verifier["runtimes"]["exact"]["warm_up_s_per_shape"]) >= {"rows 32"}
    # the fidelity stage: every mode on every window, each window's device calls traced
    traced = json.loads((out / "fidelity-bfloat16.json").read_text())
    windows = traced["windows"]
    assert {w["mode"] for w in windows} == {"verifier_alone_exact", "crossspec",
                                            "oracle_free@a=0.8"}
    assert all(w["lossless"] for w in windows)
    for window in windows:
        kinds = [call[1] for call in window["calls"]]
        # a one-shot prefill after the close: its frames, its chunks (the last one may verify
        # a proposal too), then passes; plain decoding always passes
        assert kinds[0] == "vision" and kinds[1] == "prefill"
        assert "prefill" not in kinds[kinds.index("pass"):] if "pass" in kinds else True
        assert "pass" in kinds or window["mode"] != "verifier_alone_exact"
        assert sum(call[4] for call in window["calls"]) < window["ms"]


@pytest.mark.slow
def test_the_trace_stage_profiles_every_call_the_product_makes_on_the_device(rehearsal):
    out, _ = rehearsal
    trace = json.loads((out / "trace.json").read_text())
    assert list(trace["workloads"]) == ["verifier step, 1 row", "verifier step, 32 rows",
                                        "vision, 1 frame", "prompt chunk", "drafter step",
                                        "drafter prefill"]
    assert trace["peaks"] is None  # a CPU: no bound claimed
    for name, w in trace["workloads"].items():
        assert w["wall_ms"] > 0 and w["weight_gb"] > 0 and w["gflop"] > 0, name
        assert w["kernels_are"] == "leaf CPU operators"
        assert w["profiled_calls"] == trace["repeats"] and w["kernels_per_call"] > 0, name
        assert 0 < w["busy_share"] <= 1 and w["top_kernels"], name
        assert w["x_bound"] is None and w["achieved_gb_per_s"] > 0
    steps = trace["workloads"]
    assert steps["verifier step, 32 rows"]["gflop"] == pytest.approx(
        32 * steps["verifier step, 1 row"]["gflop"], rel=0.01)


@pytest.mark.slow
def test_the_tuning_stage_times_each_variant_beside_the_kits_runtime_and_checks_it(rehearsal):
    from crossspec_ros.bench.kit_tuning import report_lines, settings_of, tuning_variants

    out, _ = rehearsal
    tuning = json.loads((out / "tuning.json").read_text())
    # the rehearsal runs eager: the stage says its settings change nothing there
    assert tuning["compiled"] is False and "change nothing" in tuning["note"]
    # the CPU rehearsal's kit attends with SDPA (auto: split_kv compiled on a GPU only), so
    # the attention variant is split_kv, as on the H200 leases before it won
    variants = tuning_variants("sdpa")
    assert list(tuning["variants"]) == list(variants) and not tuning["skipped"]
    for name, variant in tuning["variants"].items():
        assert variant["settings"] == settings_of(variants[name])
        assert set(variant["ms_per_pass"]) == set(variant["kit_ms_per_pass"]) == {"1", "8", "32"}
        assert all(ms > 0 for ms in variant["ms_per_pass"].values())
        assert variant["x_kit"]["1"] == pytest.approx(
            variant["ms_per_pass"]["1"] / variant["kit_ms_per_pass"]["1"], abs=0.001)
        assert variant["exact"] and variant["exactness"]["flips"] == 0
        assert variant["exactness"]["rows_bit_identical"] == variant["exactness"]["positions"]
    # the split attention variant is a runtime of its own: its cache padded into the splits
    assert tuning["variants"]["split_kv"]["settings"] == {"attention": "split_kv"}
    assert "attention split over 8 blocks" in tuning["variants"]["split_kv"]["runtime"]
    assert tuning["variants"]["autotune_gemm"]["settings"] == {
        "inductor": {"coordinate_descent_tuning": True, "max_autotune_gemm": True},
        "attention": "sdpa"}
    lines = report_lines(tuning)
    assert lines[0].startswith("## The decoding step under other settings: attention, inductor")
    assert sum(line.startswith(("| split_kv |", "| autotune_gemm |")) for line in lines) == 2
    report = (out / "docs").glob("gpu-*.md")
    assert any("The decoding step under other settings" in p.read_text() for p in report)


def test_a_runtimes_inductor_settings_reach_torch_compile_for_every_compiled_step(
        monkeypatch):
    import torch

    from crossspec_ros.models.static_runtime import RuntimeOptions, use_static_runtime
    from crossspec_ros.models.tiny import tiny_verifier

    seen = []

    def compile_spy(fn, **kwargs):  # records the options; the step then runs eager
        seen.append(kwargs["options"])
        return fn

    from crossspec_ros.models.compile_gate import COMPILE_GATE

    monkeypatch.setattr(torch, "compile", compile_spy)
    # the runtimes below count as compiled: the gate and dynamo's stance go back afterwards
    monkeypatch.setattr(COMPILE_GATE, "compiled", COMPILE_GATE.compiled)
    if not COMPILE_GATE.compiled:
        monkeypatch.setattr(torch.compiler, "set_stance", lambda *a, **k: None)
    settings = (("coordinate_descent_tuning", True),)
    verifier = tiny_verifier()
    use_static_runtime(verifier, RuntimeOptions(step_rows=(32,), compile_vision=False,
                                                inductor=settings), 4)
    assert len(seen) == 2  # the decoding step and the prompt's chunks
    assert all(o["coordinate_descent_tuning"] is True and "guard_filter_fn" in o for o in seen)
    assert "coordinate_descent_tuning=True" in verifier.runtime.describe()
    seen.clear()
    plain = verifier.with_runtime(None)
    use_static_runtime(plain, RuntimeOptions(step_rows=(32,), compile_vision=False), 4)
    assert plain.runtime is not verifier.runtime  # runtimes are kept apart by their options
    assert len(seen) == 2 and all("coordinate_descent_tuning" not in o for o in seen)


@pytest.mark.slow
def test_the_sharing_stage_measures_the_verifier_beside_a_drafter_that_steps(rehearsal):
    # the stage ran after fp32's, which freed the drafter: its thread died at once and the
    # verifier's pass "beside the drafter" was timed beside nothing
    out, _ = rehearsal
    sharing = json.loads((out / "sharing.json").read_text())
    assert sharing["drafter_steps_meanwhile"] > 0
    assert sharing["verifier_pass_ms_beside_drafter_stream"] > 0
    assert "beside_drafter_stream_not_measured" not in sharing
    # the median alone can miss passes that met the drafter's work: the mean and the worst
    # come with it, and what the drafter in its own process did meanwhile
    for key in ("alone", "beside_drafter_stream", "beside_drafter_process"):
        spread = sharing[f"verifier_pass_ms_{key}_spread"]
        assert 0 < spread["median"] <= spread["worst"] and 0 < spread["mean"] <= spread["worst"]
    assert sharing["verifier_pass_ms_alone_spread"]["median"] == \
        sharing["verifier_pass_ms_alone"]
    assert sharing["drafter_process_windows_meanwhile"] >= 1
    assert sharing["drafter_process_tokens_per_window"] > 0
    assert sharing["drafter_process_error"] is None


@pytest.mark.slow
def test_the_rehearsal_imports_nothing_the_gpu_machine_lacks(rehearsal):
    out, _ = rehearsal
    imported = set(json.loads((out / "stages.json").read_text())["imported"])
    missing = imported - DEVICE_IMAGE - carried_wheels() - NOT_NEEDED_THERE
    assert not missing, f"the kit imports {sorted(missing)}: carry them in gpu_check.sh's " \
        "WHEELS or import them only where the GPU run does not go"


@pytest.mark.slow
def test_the_report_of_the_rehearsal_has_its_tables_and_the_cost_profile(rehearsal):
    out, _ = rehearsal
    [report] = (out / "docs").glob("gpu-*.md")
    text = report.read_text()
    for heading in ("## Stages", "## Loading and compiling", "## Two models on one device",
                    "## The verifier alone", "## One verifier pass",
                    "## Exactness: k-token verification", "## bench engine",
                    "## Fidelity: the cost profile against each window's trace",
                    "## Lane steps: several streams' steps as one forward",
                    "## Where each step's time goes"):
        assert heading in text, heading
    assert "Stages not done: none." in text
    # the sharing table: beside the median, the mean, the worst and what the drafter did
    sharing = text[text.index("## Two models on one device"):].split("\n\n")[2].splitlines()
    assert sharing[0].endswith("| mean | worst | the drafter meanwhile |")
    assert "steps |" in sharing[3] and "windows, " in sharing[4] and "tokens a window" in sharing[4]
    # the kit writes one file of costs, the profile the emulation reads, as it measured it
    from crossspec_ros.models.emulated import CostProfile

    assert not (out / "costs.json").exists()
    measured = CostProfile.load(out / "profile.json")
    passes = json.loads((out / "passes-bfloat16.json").read_text())
    exact = passes["runtimes"]["static_eager_exact_32"]["ms_per_pass"]
    assert set(exact) == {"1", "8", "32"}
    assert measured.kind == "measured" and measured.verifier.pass_ms(1) == exact["1"]
    assert measured.verifier.vision_ms_per_frame.ms > 0
    assert measured.verifier.prompt.chunks == tuple(
        c["tokens"] for c in passes["prefill"]["per_frame_chunk"])
    drafter = json.loads((out / "drafter.json").read_text())
    assert measured.drafter.pass_ms(1) == drafter["ms_per_pass"]["1"] > 0
    assert drafter["vision_frames"] == 5  # EventGPT's event images: the profile's cost is one's
    assert measured.drafter.vision_ms(5) == pytest.approx(drafter["vision_ms"], abs=0.01)
    # the streams stage's lane costs, measured
    lanes = measured.verifier.lane_pass_ms_by_lanes
    assert lanes is not None and sorted(lanes) == [1, 2, 4, 8]
    assert not any(c.filled for c in lanes.values()) and not measured.filled().get("verifier")
    # the report files that profile, named for the report: its numbers untouched
    [path] = (out / "profiles").glob("*.json")
    filed = CostProfile.load(path)
    assert filed.kind == "measured" and filed.report.endswith(report.name)
    assert (filed.verifier, filed.drafter) == (measured.verifier, measured.drafter)


@pytest.mark.slow
def test_the_rehearsal_packs_its_files_in_one_archive_that_a_report_reads_alone(rehearsal,
                                                                               tmp_path):
    """A device call returns at most 8 files and the kit writes more: the H200's first run
    lost its verifier, passes and stage list that way."""
    out, _ = rehearsal
    with tarfile.open(out / "kit.tar.gz") as archive:
        packed = set(archive.getnames())
    assert packed == {p.name for p in out.iterdir() if p.is_file() and p.name != "kit.tar.gz"}
    came_back = tmp_path / "came_back"
    came_back.mkdir()
    shutil.copy(out / "kit.tar.gz", came_back)
    assert main(["bench", "gpu-report", str(came_back), "--out", str(tmp_path / "docs"),
                 "--profiles", str(tmp_path / "profiles"),
                 "--date", "2026-11-27"]) == 0
    [report] = (tmp_path / "docs").glob("gpu-*.md")
    text = report.read_text()
    assert "Stages not done: none." in text and "## Exactness: k-token verification" in text


def _kit_args(out: Path, *extra: str) -> list[str]:
    return ["bench", "gpu-kit", str(out), "--device", "cpu", "--models", "tiny-random",
            "--windows", "3", "--max-new-tokens", "4", "--no-compile", "--repeats", "2",
            *extra]


def test_a_budget_too_small_for_the_later_stages_skips_them_by_name(tmp_path):
    # a process of its own: the budget's alarm may cut the env stage's imports (it reports
    # a cut import as missing), and a module cut mid-import breaks the later tests' imports
    result = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main",
                             *_kit_args(tmp_path, "--budget", "7")],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]  # env alone fits
    stages = json.loads((tmp_path / "stages.json").read_text())["stages"]
    assert [s["name"] for s in stages] == list(STAGE_NAMES)
    assert stages[0]["status"] == "done"
    for stage in stages[1:]:
        assert stage["status"] == "skipped", stage
        assert "budget" in stage["why"] or "needs verifier" in stage["why"], stage
    # the report builds from what came back, naming what did not
    assert main(["bench", "gpu-report", str(tmp_path), "--out", str(tmp_path / "docs"),
                 "--profiles", str(tmp_path / "profiles"),
                 "--date", "2026-11-27"]) == 0
    text = (tmp_path / "docs" / "gpu-gpu-2026-11-27.md").read_text()
    assert "Stages not done: verifier (skipped), exactness (skipped)" in text
    assert "| engine | skipped |" in text


def test_a_stage_that_fails_does_not_stop_the_next(tmp_path):
    code = main(_kit_args(tmp_path, "--stages", "exactness,passes",
                          "--rehearse-failure", "exactness"))
    assert code == 0
    stages = {s["name"]: s for s in json.loads((tmp_path / "stages.json").read_text())
              ["stages"]}
    assert list(stages) == ["verifier", "exactness", "passes"]  # verifier: what they need
    assert stages["exactness"]["status"] == "failed"
    assert "RehearsedFailureError" in stages["exactness"]["why"]
    assert "Traceback" in (tmp_path / "exactness.error.txt").read_text()
    assert stages["passes"]["status"] == "done"
    assert (tmp_path / "passes-bfloat16.json").is_file()
    assert not (tmp_path / "exactness-bfloat16.json").exists()


def test_the_streams_stage_times_lane_steps_and_the_profile_takes_them_as_measured(tmp_path):
    """Issue 57's GPU stage rehearsed: [S, 32] lane steps for S = 1, 2, 4, 8, the adoption
    copy and T1 on the tiny pair; profile.json's lane costs are those medians, not filled."""
    from crossspec_ros.models.emulated import CostProfile

    assert main(_kit_args(tmp_path, "--stages", "passes,drafter,streams")) == 0
    records = json.loads((tmp_path / "stages.json").read_text())["stages"]
    assert {r["name"]: r["status"] for r in records} == dict.fromkeys(
        ("verifier", "passes", "drafter", "streams"), "done")
    assert STAGE_NAMES.index("streams") > max(STAGE_NAMES.index(n) for n in (
        "verifier", "exactness", "passes", "engine", "fidelity", "drafter"))
    streams = json.loads((tmp_path / "streams.json").read_text())
    assert list(streams["lanes"]) == ["1", "2", "4", "8"] and streams["step_rows"] == 32
    assert all(len(r["ms_per_step_all"]) == 2 and r["ms_per_step"] > 0
               for r in streams["lanes"].values())
    assert streams["t1"]["bit_identical"] and streams["t1"]["lanes"] == 8
    profile = CostProfile.load(tmp_path / "profile.json")
    lanes = profile.verifier.lane_pass_ms_by_lanes
    assert lanes is not None and profile.verifier.lane_copy_ms is not None
    assert {s: c.ms for s, c in lanes.items()} == {
        int(s): r["ms_per_step"] for s, r in streams["lanes"].items()}
    assert profile.verifier.lane_copy_ms.ms == streams["adoption"]["ms"]
    assert all(not c.filled and c.source.startswith("streams.lanes[") for c in lanes.values())
    # the streams' prompt work batched: K frames' vision call and chunk step, measured
    prompt = streams["prompt"]
    assert list(prompt["frames"]) == ["1", "2", "4", "8"] and prompt["t1"]["bit_identical"]
    for key, field in (("chunk_ms_by_frames", "chunk_ms"), ("vision_ms_by_batch", "vision_ms")):
        table = getattr(profile.verifier, key)
        assert {k: c.ms for k, c in table.items()} == {
            int(k): r[field] for k, r in prompt["frames"].items()}
        assert all(not c.filled and c.source.startswith("streams.prompt.frames[")
                   for c in table.values())
    assert not profile.filled().get("verifier")
    assert main(["bench", "gpu-report", str(tmp_path), "--out", str(tmp_path / "docs"),
                 "--profiles", str(tmp_path / "profiles"), "--date", "2026-11-29"]) == 0
    text = (tmp_path / "docs" / "gpu-gpu-2026-11-29.md").read_text()
    assert "| 8 | " in text and "T1, 8 lanes" in text and ": bit-identical." in text
    assert "## Batched prompt work" in text and "T1, 8 lanes: lane 0's last row" in text


def test_a_stage_that_overruns_the_budget_is_cut_and_the_rest_named_skipped(tmp_path):
    def hang(_kit):
        while True:
            time.sleep(0.05)

    kit = Kit(out=tmp_path, device="cpu", models="tiny-random", dtype="bfloat16",
              budget_s=1.5, windows=[], max_new_tokens=4, step_rows=32, compile=False,
              repeats=1, log=lambda _line: None)
    stages = (Stage("hangs", hang, lambda _kit: 0.1),
              Stage("after", lambda _kit: {"ran": True}, lambda _kit: 0.1))
    t0 = time.monotonic()
    records = run_kit(kit, stages=stages)
    assert time.monotonic() - t0 < 30
    assert [(r.name, r.status) for r in records] == [("hangs", "failed"),
                                                     ("after", "skipped")]
    assert "StageTimeoutError" in records[0].why and "budget" in records[1].why


def test_an_unknown_stage_is_refused_in_one_line(tmp_path, capsys):
    assert main(_kit_args(tmp_path, "--stages", "exactnes")) == 2
    err = capsys.readouterr().err
    assert "unknown stage exactnes" in err and "exactness" in err
    assert not (tmp_path / "stages.json").exists()


def test_an_unknown_tuning_variant_is_refused_in_one_line_with_the_choices(tmp_path, capsys):
    assert main(_kit_args(tmp_path, "--tuning-variants", "autotune")) == 2
    err = capsys.readouterr().err
    assert "--tuning-variants autotune" in err and "autotune_gemm" in err
    assert not (tmp_path / "stages.json").exists()


@pytest.mark.slow
def test_the_tuning_stage_runs_only_the_variants_asked_for_and_names_the_rest(tmp_path):
    # a second call on a warm machine can spend its time on the variant no lease reached
    result = subprocess.run([sys.executable, "-m", "crossspec_ros.cli.main", *_kit_args(
        tmp_path, "--stages", "tuning", "--tuning-variants", "autotune_gemm")],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    tuning = json.loads((tmp_path / "tuning.json").read_text())
    assert list(tuning["variants"]) == ["autotune_gemm"]
    assert tuning["skipped"] == {"split_kv": "not asked for (--tuning-variants)"}


def test_the_working_tree_and_the_carried_packages_fit_one_device_call():
    result = subprocess.run([str(SCRIPT), "check"], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "a device call carries at most 64 MiB" in result.stderr


def test_the_gpu_report_names_the_stages_that_did_not_come_back(tmp_path):
    (tmp_path / "env.json").write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3",
                                                   "torch": "2.11.0", "cuda": "13.0"}))
    assert main(["bench", "gpu-report", str(tmp_path), "--out", str(tmp_path / "docs"),
                 "--profiles", str(tmp_path / "profiles"),
                 "--date", "2026-11-25"]) == 0
    text = (tmp_path / "docs" / "gpu-h100-2026-11-25.md").read_text()
    assert "NVIDIA H100 80GB HBM3" in text and "Stages missing: stages, verifier, tests" in text
    assert main(["bench", "gpu-report", str(tmp_path / "empty")]) == 2


def test_a_report_of_two_calls_counts_a_stage_the_second_ran_as_done(tmp_path):
    # the second H200 lease (2026-11-29): call 1 skipped streams for time, call 2 ran it
    first, second = tmp_path / "call1", tmp_path / "call2"
    for directory, records in (
            (first, [{"name": "env", "status": "done", "seconds": 9.8},
                     {"name": "streams", "status": "skipped", "seconds": 0.0,
                      "why": "would need ~203 s"},
                     {"name": "4bit", "status": "skipped", "seconds": 0.0}]),
            (second, [{"name": "streams", "status": "done", "seconds": 209.4},
                      {"name": "4bit", "status": "skipped", "seconds": 0.0}])):
        directory.mkdir()
        (directory / "stages.json").write_text(json.dumps(
            {"budget_s": 480, "elapsed_s": 455, "stages": records}))
    (first / "env.json").write_text(json.dumps({"gpu": "NVIDIA H200"}))
    assert main(["bench", "gpu-report", str(first), str(second), "--out",
                 str(tmp_path / "docs"), "--profiles", str(tmp_path / "profiles"),
                 "--date", "2026-11-29"]) == 0
    text = (tmp_path / "docs" / "gpu-h200-2026-11-29.md").read_text()
    not_done = re.search(r"Stages not done: (.*)\.", text).group(1)
    assert "4bit (skipped)" in not_done and "streams" not in not_done
    assert "budget, call 1 of 2)" in text and "budget, call 2 of 2)" in text
    assert "| streams | done | 209.4 |" in text


def test_a_second_call_on_a_warm_machine_plans_the_verifiers_compile_from_its_cache(
        tmp_path, monkeypatch):
    # the second H200 lease: a call with a 270 s budget ran nothing, the verifier planned at
    # 300 s cold; it took 20 s with the first call's kernels in inductor's cache
    from types import SimpleNamespace

    from crossspec_ros.bench.gpu_kit import WARM_VERIFIER_S, _verifier_s

    kit = SimpleNamespace(full_size=True)
    cache = tmp_path / "inductor"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    assert _verifier_s(kit) == 300  # no cache yet
    cache.mkdir()
    assert _verifier_s(kit) == 300  # an empty one
    (cache / "fxgraph").mkdir()
    assert _verifier_s(kit) == WARM_VERIFIER_S < 270
    assert _verifier_s(SimpleNamespace(full_size=False)) == 10  # the tiny pair's prior


def test_a_kit_attending_split_kv_measures_sdpa_beside_it_and_autotunes_its_own_attention():
    from crossspec_ros.bench.kit_tuning import tuning_variants

    variants = tuning_variants("split_kv")
    assert variants == {"sdpa": {"attention": "sdpa"},
                        "autotune_gemm": {"inductor": variants["autotune_gemm"]["inductor"],
                                          "attention": "split_kv"}}


@pytest.mark.slow
def test_the_engine_drafter_stage_runs_the_live_graph_with_its_event_drafter(rehearsal):
    # issue 55: a drafter-backed engine run was never reached on a GPU; the kit now runs one
    # after loading the drafter, offline and through the live graph's loops
    from crossspec_ros.bench.gpu_kit import ENGINE_DRAFTER_MODES

    out, _ = rehearsal
    engine = json.loads((out / "engine-drafter-bfloat16.json").read_text())
    assert list(engine["modes"]) == list(ENGINE_DRAFTER_MODES)
    assert engine["baseline"] == "verifier_alone_exact"
    for mode, run in engine["modes"].items():
        done, of = run["lossless_windows"].split("/")
        assert done == of and int(of) > 0, mode
    live = engine["live"]["graphs"]["crossspec_live"]
    assert live["drafter"]["windows_drafted"] > 0 and not live["errors"]
    assert live["lossless_windows"].split("/")[0] == live["lossless_windows"].split("/")[1]
    assert "event drafter" in engine["models"]
    [report] = (out / "docs").glob("gpu-*.md")
    assert "with the tiny-random event drafter" in report.read_text()


@pytest.mark.slow
def test_a_profile_without_lane_costs_is_written_beside_the_report_not_bundled(rehearsal,
                                                                               tmp_path):
    # the 2026-11-30 lease did not reach the streams stage: its profile, bundled, broke the
    # bundled profiles' promise that every one prices batched streams
    out, _ = rehearsal
    call = tmp_path / "call"
    call.mkdir()
    for path in out.glob("*.json"):
        if path.name != "streams.json":
            shutil.copy(path, call)
    assert main(["bench", "gpu-report", str(call), "--out", str(tmp_path / "docs"),
                 "--profiles", str(tmp_path / "profiles"), "--date", "2026-11-30"]) == 0
    assert not list((tmp_path / "profiles").glob("*.json"))
    [profile] = (tmp_path / "docs").glob("*-static-2026-11-30.json")
    assert "lane_pass_ms_by_lanes" not in json.loads(profile.read_text())["verifier"]
