"""`crossspec bench gpu-report DIR...`: the stages of ``scripts/gpu_check.sh`` as one dated
report, JSON and Markdown, under docs/ (the README's GPU section quotes it).

Each stage leaves JSON files (``env.json``, ``tests.json``, ``exactness-*.json``,
``passes-*.json``, ``engine-*.json``); this reads whatever came back, says which are missing,
and writes the tables: the verifier's costs per runtime against the physical limits (FACTS.md:
prefill >= ~30 ms, decode >= ~4.4 ms per token in bf16 and >= ~1.5 ms in 4-bit on an H100),
pass cost for 1/4/8/16 tokens, memory, exactness per runtime and float type, and the engine's
paired speedups. Nothing is computed that a stage did not measure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path
from typing import Any

STAGE_FILES = ("env", "tests", "exactness-bfloat16", "exactness-float32", "exactness-4bit",
               "passes-bfloat16", "passes-4bit", "engine-bfloat16", "engine-4bit")
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
    parser.set_defaults(func=run)


def collect(dirs: list[Path]) -> dict[str, Any]:
    """Stage name -> its JSON, from the first directory that has it."""
    found: dict[str, Any] = {}
    for directory in dirs:
        for name in STAGE_FILES:
            path = directory / f"{name}.json"
            if name not in found and path.is_file():
                found[name] = json.loads(path.read_text())
    return found


def _f(value: Any, unit: str = "", places: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{places}f}{unit}"


def markdown(stages: dict[str, Any], date: str) -> str:
    env = stages.get("env", {})
    device = env.get("gpu", "no GPU recorded")
    lines = [f"# crossspec on {device}: scripts/gpu_check.sh ({date})", "",
             f"{device}; torch {env.get('torch', '?')}, CUDA {env.get('cuda', '?')}, "
             f"transformers {env.get('transformers', '?')}, bitsandbytes "
             f"{env.get('bitsandbytes', '?')}. Stages missing: "
             f"{', '.join(n for n in STAGE_FILES if n not in stages) or 'none'}.", ""]
    tests = stages.get("tests")
    if tests:
        lines += [f"CUDA tests: {tests.get('summary', '?')}", ""]
    lines += _verifier_table(stages)
    lines += _passes_table(stages)
    lines += _exactness_table(stages)
    lines += _engine_table(stages)
    return "\n".join(lines) + "\n"


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


def _passes_table(stages: dict[str, Any]) -> list[str]:
    lines = []
    for quant in ("bfloat16", "4bit"):
        passes = stages.get(f"passes-{quant}")
        if not passes:
            continue
        lines += [f"## One verifier pass, {passes.get('models', quant)}", "",
                  "| runtime | 1 token ms | 4 | 8 | 16 | 8 tokens x 1 token |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, r in passes["runtimes"].items():
            ms = r["ms_per_pass"]
            lines.append(f"| {name} | {ms['1']:.2f} | {ms['4']:.2f} | {ms['8']:.2f} | "
                         f"{ms['16']:.2f} | {r['x_one_token']['8']:.2f}x |")
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
    for quant in ("bfloat16", "4bit"):
        engine = stages.get(f"engine-{quant}")
        if not engine:
            continue
        base = engine.get("baseline", "verifier_alone")
        lines += [f"## bench engine, {engine.get('models', quant)}, {engine['windows']} windows",
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


def run(args: argparse.Namespace) -> int:
    stages = collect(args.dirs)
    if not stages:
        print(f"crossspec bench gpu-report: no stage JSON in {', '.join(map(str, args.dirs))}",
              file=sys.stderr)
        return 2
    found = re.search(r"\b[A-Z]\d{2,4}\b", stages.get("env", {}).get("gpu", ""))
    device = found.group(0).lower() if found else "gpu"
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"gpu-{device}-{args.date}"
    stem.with_suffix(".json").write_text(json.dumps({"date": args.date, **stages}, indent=2))
    stem.with_suffix(".md").write_text(markdown(stages, args.date))
    print(f"wrote {stem}.md and {stem}.json")
    return 0
