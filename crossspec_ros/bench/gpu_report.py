"""`crossspec bench gpu-report DIR...`: the stages of ``scripts/gpu_check.sh`` as one dated
report, JSON and Markdown, under docs/ (the README's GPU section quotes it).

The kit (``crossspec bench gpu-kit``) leaves ``stages.json`` (every stage: done, skipped or
failed, and why), one JSON per stage (``env``, ``verifier``, ``exactness-*``, ``passes-*``,
``engine-*``, ``drafter``, ``streams``, ``trace``, ``tests``) and the run's cost profile
(``profile``: ``bench/kit_profile.py``); this reads whatever came back, names the stages
that were skipped, failed or never reached, files the kit's profile under the bundled ones
(named for this report) and writes the tables: the verifier's
costs per runtime against the physical limits (FACTS.md:
prefill >= ~30 ms, decode >= ~4.4 ms per token in bf16 and >= ~1.5 ms in 4-bit on an H100),
pass cost for 1/4/8/16 tokens, memory, exactness per runtime and float type, and the engine's
paired speedups. Nothing is computed that a stage did not measure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

from crossspec_ros.bench.kit_profile import (
    PROFILE_STAGE,
    device_tag,
    measured_profile,
    profile_name,
)
from crossspec_ros.bench.kit_trace import report_lines as trace_lines
from crossspec_ros.bench.kit_tuning import report_lines as tuning_lines
from crossspec_ros.models.emulated import PROFILE_DIR

STAGE_FILES = ("stages", "env", "verifier", "tests", "exactness-bfloat16", "exactness-float32",
               "exactness-4bit", "passes-bfloat16", "passes-4bit", "engine-bfloat16",
               "engine-4bit", "engine-drafter-bfloat16", "engine-drafter-float32",
               "fidelity-bfloat16", "fidelity-float32", "drafter",
               "prefill-compiled", "sharing", "streams", "trace", "tuning", PROFILE_STAGE)
# the verifier's physical limits on one H100 SXM (FACTS.md: arithmetic from public specs)
LIMITS_H100 = {"prefill_ms": 30.0, "decode_ms_bf16": 4.4, "decode_ms_4bit": 1.5}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "gpu-report", help="scripts/gpu_check.sh's stages as one dated report under docs/",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dirs", nargs="+", type=Path, help="directories of the stages' JSON")
    parser.add_argument("--out", type=Path, default=Path("docs"),
                        help="where gpu-<device>-<date>.md and .json go (default docs)")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--profiles", type=Path, default=PROFILE_DIR,
                        help="where the run's emulation profile goes (default the bundled "
                        "profiles: crossspec_ros/data/cost_profiles)")
    parser.set_defaults(func=run)


PACK = "kit.tar.gz"  # what scripts/gpu_check.sh run packs (a call returns at most 8 files)


def collect(dirs: list[Path]) -> dict[str, Any]:
    """Stage name -> its JSON, from the first directory that has it; a directory's
    ``kit.tar.gz`` (``gpu-kit --pack``) counts as its files, after the loose ones. Every
    directory's stage list is kept too (``calls``: one per kit call of the lease, in order),
    so that a stage one call skipped and a later one ran counts as done."""
    found: dict[str, Any] = {}
    calls: list[dict[str, Any]] = []
    for directory in dirs:
        here: dict[str, Any] = {}
        for name in STAGE_FILES:
            path = directory / f"{name}.json"
            if path.is_file():
                here[name] = json.loads(path.read_text())
        if (directory / PACK).is_file():
            for name, data in _packed(directory / PACK).items():
                here.setdefault(name, data)
        if "stages" in here:
            calls.append(here["stages"])
        for name, data in here.items():
            found.setdefault(name, data)
    if calls:
        found["calls"] = calls
    return found


def _packed(pack: Path) -> dict[str, Any]:
    """The stage JSONs in a kit's archive, read in memory (nothing extracted)."""
    stages: dict[str, Any] = {}
    with tarfile.open(pack, "r:gz") as archive:
        for member in archive.getmembers():
            name = member.name.removesuffix(".json")
            if member.isfile() and member.name.endswith(".json") and name in STAGE_FILES:
                stages[name] = json.loads(archive.extractfile(member).read())
    return stages


def fidelity_of(stages: dict[str, Any]) -> dict[str, Any] | None:
    """The fidelity stage's windows against the verifier's costs the same run measured (its
    profile: ``bench/fidelity.py``), or None when the run lacks either."""
    from crossspec_ros.bench.fidelity import fidelity
    from crossspec_ros.bench.kit_profile import verifier_costs
    from crossspec_ros.models.emulated import model_costs

    # the costs of the runtime the windows were traced on (the prompt's chunks eager), not
    # the node's runtime that the filed profile describes
    dtype, costs = verifier_costs(stages, compiled_prefill=False)
    traced = stages.get(f"fidelity-{dtype}")
    if not (traced and costs):
        return None
    return fidelity(traced["windows"], {"verifier": model_costs(costs)},
                    f"the verifier's costs measured in this run (passes-{dtype})")


def _f(value: Any, unit: str = "", places: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{places}f}{unit}"


def markdown(stages: dict[str, Any], date: str) -> str:
    env = stages.get("env", {})
    device = env.get("gpu", "no GPU recorded")
    lines = [f"# crossspec on {device}: scripts/gpu_check.sh ({date})", "",
             f"{device}; torch {env.get('torch', '?')}, CUDA {env.get('cuda', '?')}, "
             f"transformers {env.get('transformers', '?')}, bitsandbytes "
             f"{env.get('bitsandbytes', '?')}. " + _missing(stages), ""]
    calls = stages.get("calls") or [stages.get("stages")]
    for number, kit in enumerate(calls, 1):
        lines += _stages_table(kit, f"call {number} of {len(calls)}" if len(calls) > 1 else "")
    lines += _load_table(stages)
    tests = stages.get("tests")
    if tests:
        lines += [f"CUDA tests: {tests.get('summary', '?')}", ""]
    lines += _verifier_table(stages)
    lines += _passes_table(stages)
    lines += _exactness_table(stages)
    lines += _engine_table(stages)
    lines += _fidelity_table(stages)
    lines += _streams_table(stages.get("streams"))
    lines += trace_lines(stages.get("trace"))
    lines += tuning_lines(stages.get("tuning"))
    return "\n".join(lines) + "\n"


def _missing(stages: dict[str, Any]) -> str:
    """The stages that did not come back: from the kit's stage list when there is one (with
    why), else the files that are not there (reports of the separate-call kit)."""
    calls = stages.get("calls") or ([stages["stages"]] if stages.get("stages") else [])
    if not calls:
        return ("Stages missing: "
                f"{', '.join(n for n in STAGE_FILES if n not in stages) or 'none'}.")
    from crossspec_ros.bench.gpu_kit import STAGE_NAMES

    status: dict[str, str] = {}
    for record in (r for kit in calls for r in kit.get("stages", [])):
        if status.get(record["name"]) != "done":
            status[record["name"]] = record["status"]
    not_done = [f"{name} ({status[name]})" for name in STAGE_NAMES
                if name in status and status[name] != "done"]
    not_done += [f"{name} (not reached)" for name in STAGE_NAMES if name not in status]
    return f"Stages not done: {', '.join(not_done) or 'none'}."


def _stages_table(kit: dict[str, Any] | None, call: str = "") -> list[str]:
    """The kit's stage list: what ran, what was skipped or failed and why."""
    if not kit:
        return []
    call = f", {call}" if call else ""
    rows = [f"| {s['name']} | {s['status']} | {_f(s.get('seconds'))} | "
            f"{_f(s.get('estimate_s'), places=0)} | {s.get('why', '')} |"
            for s in kit.get("stages", [])]
    return [f"## Stages ({kit.get('elapsed_s', '?')} s of a {kit.get('budget_s', '?')} s "
            f"budget{call})", "", "| stage | status | seconds | expected | why |",
            "|---|---|---:|---:|---|", *rows, ""]


def _load_table(stages: dict[str, Any]) -> list[str]:
    """Loading and compiling: each model's load seconds and each step shape's warm-up."""
    rows = []
    verifier = stages.get("verifier") or {}
    for name, runtime in (verifier.get("runtimes") or {}).items():
        if runtime:
            rows.append(f"| verifier, {name} | {_f(verifier.get('load_s'))} | "
                        f"{runtime.get('describe', '?')} | "
                        + ", ".join(f"{shape} {sec} s" for shape, sec in
                                    runtime.get("warm_up_s_per_shape", {}).items()) + " |")
    compiled_prefill = (stages.get("prefill-compiled") or {}).get("runtime")
    if compiled_prefill:
        rows.append("| verifier, prompt chunks compiled too | | "
                    f"{compiled_prefill.get('describe', '?')} | " + ", ".join(
                        f"{shape} {sec} s" for shape, sec in
                        compiled_prefill.get("warm_up_s_per_shape", {}).items()) + " |")
    drafter = stages.get("drafter") or {}
    if drafter.get("runtime"):
        runtime = drafter["runtime"]
        rows.append(f"| drafter | {_f(drafter.get('load_s'))} | {runtime.get('describe', '?')} "
                    "| " + ", ".join(f"{shape} {sec} s" for shape, sec in
                                     runtime.get("warm_up_s_per_shape", {}).items()) + " |")
    if not rows:
        return []
    lines = ["## Loading and compiling", "", f"{verifier.get('compile', '')}", "",
             "| model | load s | runtime | warm-up per shape (compile + first run) |",
             "|---|---:|---|---|", *rows, ""]
    return lines + _sharing_table(stages.get("sharing") or drafter.get("sharing") or {})


def _sharing_table(sharing: dict[str, Any]) -> list[str]:
    """The verifier's pass alone and beside the drafter (the drafter stage's dict before
    2026-11-27); the mean, the worst and what the drafter did meanwhile since 2026-11-30."""
    if not sharing:
        return []

    def spread(key: str) -> str:
        numbers = sharing.get(f"verifier_pass_ms_{key}_spread") or {}
        return f"{_f(numbers.get('mean'), places=2)} | {_f(numbers.get('worst'), places=2)}"

    steps = sharing.get("drafter_steps_meanwhile")
    windows = sharing.get("drafter_process_windows_meanwhile")
    tokens = sharing.get("drafter_process_tokens_per_window")
    meanwhile = {"drafter_stream": f"{steps} steps" if steps is not None else "-",
                 "drafter_process": (f"{windows} windows" if windows is not None else "-")
                 + (f", {_f(tokens)} tokens a window" if tokens is not None else "")
                 + (f", failed: {sharing['drafter_process_error']}"
                    if sharing.get("drafter_process_error") else "")}
    lines = ["## Two models on one device", "",
             "The verifier's one-token pass (its exact runtime) alone and while the "
             "drafter steps without a pause (pass ms: the median, the mean and the worst):", "",
             "| where the drafter runs | verifier pass ms | x alone | mean | worst | the drafter "
             "meanwhile |", "|---|---:|---:|---:|---:|---|",
             f"| not running | {_f(sharing.get('verifier_pass_ms_alone'), places=2)} | 1 | "
             f"{spread('alone')} | - |"]
    for where, key in (("this process, its own CUDA stream", "drafter_stream"),
                       ("a process of its own", "drafter_process")):
        beside = sharing.get(f"verifier_pass_ms_beside_{key}")
        why_not = sharing.get(f"beside_{key}_not_measured")
        lines.append(f"| {where} | {_f(beside, places=2)} | "
                     f"{_f(sharing.get(f'slowdown_beside_{key}'), 'x', 2)}"
                     + (f" (not measured: {why_not})" if why_not else "")
                     + f" | {spread('beside_' + key)} | {meanwhile[key]} |")
    return [*lines, ""]


def _verifier_table(stages: dict[str, Any]) -> list[str]:
    rows = []
    for quant in ("bfloat16", "4bit"):
        engine = stages.get(f"engine-{quant}")
        if not engine:
            continue
        limit = LIMITS_H100["decode_ms_4bit" if quant == "4bit" else "decode_ms_bf16"]
        for mode in ("verifier_alone", "verifier_alone_compiled", "verifier_alone_exact"):
            m = engine["modes"].get(mode)
            if m is None:
                continue
            decode = m.get("decode_ms_per_pass_median")
            rows.append(f"| {quant} | {mode} | {_f(m.get('verifier_prefill_ms_median'))} | "
                        f"{_f(decode, places=2)} | "
                        f"{_f(decode / limit if decode else None, 'x', 2)} |")
    if not rows:
        return []
    return ["## The verifier alone", "",
            f"Limits on an H100 (FACTS.md): prefill >= ~{LIMITS_H100['prefill_ms']:.0f} ms, "
            f"decode >= ~{LIMITS_H100['decode_ms_bf16']} ms per token in bf16 and >= "
            f"~{LIMITS_H100['decode_ms_4bit']} ms in 4-bit (target: within 2x).", "",
            "| weights | mode | prefill ms | decode ms per token | x the limit |",
            "|---|---|---:|---:|---:|", *rows, ""]


def _prefill_lines(prefill: dict[str, Any] | None, how: str) -> list[str]:
    """A prefill's costs (``gpu_kit._prefill_costs``): one shot and live, per frame."""
    if not prefill:
        return []
    whole = prefill.get("whole", {})
    lines = ["", f"Prefill ({how}) of {prefill.get('prompt_tokens')} tokens in one shot: "
             f"vision {_f(whole.get('vision_ms'), ' ms', 2)}, prefill "
             f"{_f(whole.get('prefill_ms'), ' ms', 2)}; frame preparation "
             f"{_f(prefill.get('prepare_ms_per_frame'), ' ms', 2)} per frame."]
    chunks = prefill.get("per_frame_chunk")
    if chunks:
        lines.append("Live prefill, per frame (tokens: vision ms + prefill ms): "
                     + ", ".join(f"{c['tokens']}: {c['vision_ms']:.2f} + "
                                 f"{c['prefill_ms']:.2f}" for c in chunks) + ".")
    return lines


def _passes_table(stages: dict[str, Any]) -> list[str]:
    lines = []
    for quant in ("bfloat16", "4bit"):
        passes = stages.get(f"passes-{quant}")
        if not passes:
            continue
        counts = sorted({int(k) for r in passes["runtimes"].values()
                         for k in r["ms_per_pass"]})
        lines += [f"## One verifier pass, {passes.get('models', quant)}", "",
                  "| runtime | " + " | ".join(f"{k} tokens ms" for k in counts)
                  + " | 8 tokens x 1 token |", "|---|" + "---:|" * (len(counts) + 1)]
        for name, r in passes["runtimes"].items():
            ms, x = r["ms_per_pass"], r["x_one_token"]
            lines.append(f"| {name} | " + " | ".join(_f(ms.get(str(k)), places=2)
                                                     for k in counts)
                         + f" | {_f(x.get('8'), 'x', 2)} |")
        lines += _prefill_lines(passes.get("prefill"), "eager")
        if quant == "bfloat16":
            lines += _prefill_lines((stages.get("prefill-compiled") or {}).get("prefill"),
                                    "the prompt's chunks and the vision tower compiled")
        memory = passes.get("memory_gib")
        if memory:
            lines += ["", "Memory (GiB): " + ", ".join(f"{k} {v}" for k, v in memory.items())]
        lines.append("")
    return lines


def _exactness_table(stages: dict[str, Any]) -> list[str]:
    rows = []
    for name in ("exactness-bfloat16", "exactness-float32", "exactness-4bit"):
        report = stages.get(name)
        if not report:
            continue
        weights = report["dtype"] + (", 4-bit" if report.get("quantization") == "4bit" else "")
        for runtime, r in report["runtimes"].items():
            rows.append(f"| {weights} | {runtime} | {r['flips']}/{r['positions']} | "
                        f"{r['rows_bit_identical']}/{r['positions']} | "
                        f"{r['max_logit_difference']} |")
    if not rows:
        return []
    return ["## Exactness: k-token verification against one-token decoding", "",
            "| weights | runtime | argmax flips | rows bit-identical | largest logit difference |",
            "|---|---|---:|---:|---:|", *rows, ""]


def _engine_table(stages: dict[str, Any]) -> list[str]:
    lines = []
    for key in ("engine-bfloat16", "engine-4bit", "engine-drafter-bfloat16",
                "engine-drafter-float32"):
        engine = stages.get(key)
        if not engine:
            continue
        base = engine.get("baseline", "verifier_alone")
        lines += [f"## bench engine, {engine.get('models', key)}, {engine['windows']} windows",
                  "", f"Runtime: {engine.get('runtime', '?')}.", "",
                  f"| mode | median ms | paired speedup vs {base} (IQR) | passes/window "
                  "| accepted/pass | lossless |", "|---|---:|---|---:|---:|---|"]
        for mode, m in engine["modes"].items():
            vs = m[f"paired_speedup_vs_{base}"]
            lines.append(f"| {mode} | {_f(m['latency_ms_median'])} | "
                         f"{_f(vs['median'], 'x', 2)} ({_f(vs['q25'], '', 2)}-"
                         f"{_f(vs['q75'], '', 2)}) | {_f(m.get('passes_per_window'), '', 2)} | "
                         f"{_f(m.get('accepted_per_pass'), '', 2)} | {m['lossless_windows']} |")
        lines.append("")
    return lines


def _fidelity_table(stages: dict[str, Any]) -> list[str]:
    from crossspec_ros.bench.fidelity import markdown as fidelity_markdown

    result = fidelity_of(stages)
    if result is None:
        return []
    return ["## Fidelity: the cost profile against each window's trace", "",
            *fidelity_markdown(result), ""]


def _streams_table(streams: dict[str, Any] | None) -> list[str]:
    """The streams stage: a lane step's cost per lane count (issue 57), the adoption copy and
    T1 (a lane's rows whatever the other lanes hold)."""
    if not streams or not streams.get("lanes"):
        return []
    lanes = streams["lanes"]
    one = lanes.get("1", {}).get("ms_per_step")
    rows = [f"| {s} | {_f(r['ms_per_step'], places=3)} | "
            f"{_f(r['ms_per_step'] / one if one else None, 'x', 2)} | "
            f"{_f(r['ms_per_step'] / int(s), places=3)} | "
            f"{'compiled' if r.get('compiled') else 'eager'} | {_f(r.get('warm_up_s'))} |"
            for s, r in sorted(lanes.items(), key=lambda item: int(item[0]))]
    lines = [f"## Lane steps: several streams' steps as one forward ({streams.get('dtype')})", "",
             f"Every lane a {streams.get('step_rows')}-row step at a mid-cache position, the "
             f"median of {streams.get('repeats')} steps (models/lanes.py, "
             "docs/design-streams.md).", "",
             "| lanes | ms per step | x one lane | ms per lane | step | warm-up s |",
             "|---:|---:|---:|---:|---|---:|", *rows, ""]
    adoption, t1 = streams.get("adoption"), streams.get("t1")
    if adoption:
        lines.append(f"Adoption (a prompt of {adoption.get('positions')} positions copied from "
                     f"a pool slot into a lane): {_f(adoption.get('ms'), ' ms', 3)}.")
    if t1:
        verdict = "bit-identical" if t1.get("bit_identical") else \
            f"NOT bit-identical (largest logit difference {t1.get('max_logit_difference')})"
        lines.append(f"T1, {t1.get('lanes')} lanes: lane 0's rows with the other lanes "
                     f"parked against random rows there: {verdict}.")
    return [*lines, "", *_prompt_table(streams.get("prompt"))]


def _prompt_table(prompt: dict[str, Any] | None) -> list[str]:
    """The streams stage's batched prompt work: a vision call of K frames and a chunk step of
    K lanes (models/prompt_lanes.py), and T1 for prompt steps."""
    if not prompt or not prompt.get("frames"):
        return []
    frames = prompt["frames"]
    rows = [f"| {k} | {_f(r['vision_ms'], places=3)} | {_f(r['vision_ms'] / int(k), places=3)} "
            f"| {_f(r['chunk_ms'], places=3)} | {_f(r['chunk_ms'] / int(k), places=3)} | "
            f"{'compiled' if r.get('compiled') else 'eager'} |"
            for k, r in sorted(frames.items(), key=lambda item: int(item[0]))]
    lines = ["## Batched prompt work: several streams' frames as one step", "",
             f"Every lane a frame: one vision call of K frames, one chunk step of K lanes x "
             f"{prompt.get('chunk_rows')} rows with each chunk copied out into its slot "
             "(models/prompt_lanes.py); medians.", "",
             "| frames | vision ms | ms per frame | chunk step ms | ms per frame | step |",
             "|---:|---:|---:|---:|---:|---|", *rows, ""]
    t1 = prompt.get("t1")
    if t1:
        verdict = "bit-identical" if t1.get("bit_identical") else "NOT bit-identical"
        lines.append(f"T1, {t1.get('lanes')} lanes: lane 0's last row and cache with other "
                     f"frames in the other lanes against alone: {verdict}.")
    return [*lines, ""]


def run(args: argparse.Namespace) -> int:
    stages = collect(args.dirs)
    if not stages:
        print(f"crossspec bench gpu-report: no stage JSON in {', '.join(map(str, args.dirs))}",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"gpu-{device_tag(stages.get('env', {}).get('gpu', ''))}-{args.date}"
    stem.with_suffix(".json").write_text(json.dumps({"date": args.date, **stages}, indent=2))
    stem.with_suffix(".md").write_text(markdown(stages, args.date))
    print(f"wrote {stem}.md and {stem}.json")
    # the profile of every call's stages together (a later call's streams too), named for
    # this report, which holds them
    name = profile_name(stages, args.date)
    profile = measured_profile(stages, name, f"{args.out.name}/{stem.name}.md")
    if profile is None:
        print("no emulation profile: the run lacks the verifier's passes on the exact runtime "
              "or the drafter's costs", file=sys.stderr)
        return 0
    where = args.profiles
    if "lane_pass_ms_by_lanes" not in profile.get("verifier", {}):
        # a bundled profile prices batched streams too (test_models_emulated.py): one
        # without the streams stage's lane costs goes beside the report, said why
        where = args.out
        print(f"the profile has no lane costs (the streams stage did not run): written beside "
              f"the report, not into {args.profiles}", file=sys.stderr)
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.json"
    path.write_text(json.dumps(profile, indent=2) + "\n")
    print(f"wrote {path} (crossspec drive --emulate "
          f"{name if where == args.profiles else path})")
    return 0
