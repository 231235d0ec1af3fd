"""`crossspec bench engine`: every way of captioning a window, side by side, in one run
(the measurement itself: ``engine.py``, imported when the command runs).

Modes (every one on every window; the order is shuffled per window (seeded) so drift, noise
and cache warmth hit all alike; the first ``--warmup`` windows run but are not counted; the
process has the thread settings of the live graph, ``process_tuning``):
  hf_generate      transformers ``generate`` on the verifier: what a user would write instead
  verifier_alone   crossspec's plain greedy loop (one forward per token) on the transformers
                   runtime (eager, a DynamicCache per window): today's path
  verifier_alone_compiled
                   the same loop on a compiled static runtime of one-row steps: the fastest
                   plain decoder, the baseline of the paired speedups (with compiling)
  verifier_alone_exact
                   the same loop on the speculative modes' runtime (static, every pass
                   ``--step-rows`` rows): the captions those modes equal bit for bit
  prompt_lookup    transformers prompt-lookup decoding (``prompt_lookup_num_tokens``). Video-
                   LLaVA's generate re-sends the video pixels on assisted steps and fails
                   (transformers 5.23), so the merged prompt embeddings are passed instead
  history_only     the engine with the suffix trie over earlier captions, no drafter
  draft_only       the engine with the live drafter (always on) and suffix matches in its
                   draft only
  crossspec        the default policy: everything on, the caption corpus included (the
                   bundled verifier's captions of 600 simulated drives, never the sample
                   bag's; ``--caption-corpus``)
  crossspec_head   with --head DIR: the suffix trie and a draft head (the drafter looks at
                   the window once, on a thread; the head proposes in the verifier's)
  crossspec_head_process
                   the same, the drafter looking at the window in a process of its own
  after_close_alone, live_alone, text_only, crossspec_live
                   with --live: the live graphs, as `crossspec drive --compare` runs them,
                   through the product's own verifier and draft loops (bench/live_replay.py):
                   the windows' frames and event packets replayed at their stamps into the
                   nodes' synchronizers; the verifier alone after the close, alone with live
                   prefill and early start, crossspec without its drafter (earlier captions
                   and the corpus), and crossspec's draft + verifier; the scene-change
                   windows (caption unlike the window before's) are reported apart. Latency after
                   the verifier's synchronizer closed the window, as the drive reports it. The
                   two alone graphs decode in one-row steps (a static runtime of their own,
                   compiled as the run is), the others in ``--step-rows`` rows, as drive's
                   nodes do (comparison.py)
  crossspec_live_transformers
                   crossspec_live on the transformers runtime: the static runtime's gain
  crossspec_process
                   the default policy with the drafter in a process of its own, as the
                   graph's draft node runs it (CPU, bundled pair; full-size with
                   --drafter-process)
  draft_only_distilled, crossspec_distilled, crossspec_distilled_process
                   with --distilled DIR: the same with that drafter (the bundled pair's
                   drafter is the distilled one the nodes load; --distilled
                   crossspec_ros/data/tiny_pair/drafter compares the undistilled one)
  oracle@a=A       the real drafter's compute, its tokens replaced by the verifier's own,
                   each right with probability A (draft stream only, always on): speedup
                   per acceptance, at the pace the real drafter drafts
  oracle_free@a=A  with --free-oracles: the same drafts without the drafter's compute, there
                   at once (the speedup the acceptance alone allows)
Latency runs from the moment the window is handed over (its close) to the last confirmed
token. Ratios are paired: per window, the baseline's latency over the mode's, then the median
and interquartile range of those ratios. Every mode's tokens are compared with
``hf_generate``'s, token for token.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from crossspec_ros.bench.arguments import bench_float_type
from crossspec_ros.cli.arg_types import whole_number
from crossspec_ros.params import ATTENTION_CHOICES
from crossspec_ros.paths import sample_bag


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "engine", help="every decoding mode on the same windows, paired ratios",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # the groups below add their options in the order --help lists them
    _add_decoding_options(parser)
    add_model_options(parser)
    _add_mode_options(parser)
    _add_output_options(parser)
    parser.set_defaults(func=run)


def _add_decoding_options(parser: argparse.ArgumentParser) -> None:
    """The windows, the decode's lengths and the extra drafters (oracles, a process)."""
    parser.add_argument("--windows", type=int, default=24,
                        help="windows, warm-up included (default 24: the sample bag)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="first windows run but not counted (default 2)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--max-proposal", type=int, default=24,
                        help="deepest proposal per verifier pass (default 24)")
    parser.add_argument("--oracle", type=float, nargs="*", default=[0.2, 0.5, 0.8],
                        metavar="A", help="also run oracle drafters of these acceptances")
    parser.add_argument("--drafter-process", action="store_true",
                        help="full-size on a GPU: also run crossspec_process, the drafter "
                        "in a process of its own (a third 7B in GPU memory; the bundled "
                        "pair on a CPU always runs it)")
    parser.add_argument("--free-oracles", action="store_true",
                        help="also run the oracles without the drafter's compute "
                        "(oracle_free@a=A)")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The device, the pair, its float type and quantization, and the runtime it steps on."""
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--models", choices=("bundled", "tiny-random", "full-size"),
                        default="bundled",
                        help="bundled: the trained tiny pair the nodes load by default (its "
                        "drafter distilled on the verifier's captions; default); tiny-random: an "
                        "untrained tiny pair; full-size: the 7B architectures with random "
                        "weights (GPU)")
    parser.add_argument("--dtype", type=bench_float_type, choices=("bfloat16", "float32"),
                        default="bfloat16",
                        help="float type of the full-size pair (default bfloat16; float32 "
                        "is the one in which verifying k tokens at once gives the plain "
                        "decode's exact logits on a GPU)")
    parser.add_argument("--quantization", choices=("none", "4bit"), default="none",
                        help="4bit: both models' layers in NF4 (bitsandbytes; the output head "
                        "kept), as crossspec loads 4-bit checkpoints (default none; a "
                        "--distilled drafter stays unquantized)")
    parser.add_argument("--runtime", choices=("static", "transformers"), default="static",
                        help="the speculative modes' runtime (node parameter runtime; default "
                        "static)")
    parser.add_argument("--emulate", metavar="PROFILE",
                        help="the target's costs on this machine: every model call lasts what "
                        "PROFILE says it costs there (h100-bf16-eager-2026-11-24, "
                        "h100-bf16-limit, or a profile file; models/emulated.py), the tokens "
                        "still computed here. Steps eager, no drafter process; every output "
                        "says emulated and whether the emulation held")
    parser.add_argument("--no-compile", action="store_true",
                        help="static runtime: eager steps (no verifier_alone_compiled)")
    parser.add_argument("--attention", choices=ATTENTION_CHOICES, default="auto",
                        help="static runtime: attention over the cache (the node parameter "
                        "attention; auto: split_kv for a compiled verifier on a GPU, else sdpa)")
    parser.add_argument("--step-rows", type=int, default=32,
                        help="static runtime: rows of every verifier pass (node parameter "
                        "step_rows; default 32)")


def _add_mode_options(parser: argparse.ArgumentParser) -> None:
    """The windows' bag and the modes beyond the default ones (live graphs, head, corpus)."""
    parser.add_argument("--bag", type=Path, default=sample_bag(),
                        help="bag whose windows are decoded (default: the sample bag; "
                        "'pattern' for moving test patterns)")
    parser.add_argument("--no-prompt-lookup", action="store_true",
                        help="skip the transformers prompt-lookup baseline")
    parser.add_argument("--distilled", type=Path, metavar="DIR",
                        help="also run this drafter (crossspec distill's OUT/drafter; the "
                        "bundled pair's is the distilled one already): modes "
                        "draft_only_distilled and crossspec_distilled")
    parser.add_argument("--live", action="store_true",
                        help="also run the live graphs (Video-LLaVA verifiers): "
                        "after_close_alone, live_alone and crossspec_live replay the windows' "
                        "messages through the product's loops (one window length per window "
                        "per graph and round)")
    parser.add_argument("--live-rounds", type=whole_number(1), default=2, metavar="N",
                        help="rounds of the live graphs, every other one in reverse order "
                        "(default 2)")
    parser.add_argument("--head", type=Path, metavar="DIR",
                        help="also run a draft head (crossspec distill --method head's "
                        "OUT/head): mode crossspec_head (history + the head)")
    parser.add_argument("--caption-corpus", default="", metavar="FILE",
                        help="the crossspec modes' caption corpus (proposer corpus_ngram; "
                        "crossspec corpus writes one); default: the verifier directory's "
                        "captions.txt if it has one (the bundled one does); none: no corpus")


def _add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="write engine.json, engine.md and engine.png into DIR")
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the report as JSON")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write the plots as PNG")


def run(args: argparse.Namespace) -> int:
    import torch

    from crossspec_ros.bench import engine as bench

    if not _arguments_valid(args) or (args.emulate and not profile_loads(args.emulate)):
        return 2
    import datetime
    import platform

    from crossspec_ros.models.emulated import emulation_of
    from crossspec_ros.models.loading import resolve_device
    from crossspec_ros.process_tuning import tune_process_for_models

    device = str(resolve_device(args.device))
    tuning = tune_process_for_models(device)  # the live graph's settings, for every mode
    verifier, drafter, label = load_pair(args, device)
    emulated = emulation_of(verifier)
    windows = _windows(args)
    if len(windows) <= args.warmup:
        print(f"crossspec bench engine: {args.bag} has {len(windows)} windows with RGB; "
              f"need more than --warmup {args.warmup}", file=sys.stderr)
        return 2
    distilled, head = _load_extra_drafters(args, device)
    processes = _drafter_processes(args, device)
    corpus = _corpus(args.caption_corpus, verifier)
    try:
        report = bench.run_engine_bench(
            verifier, drafter, windows, max_new_tokens=args.max_new_tokens,
            runtime=_runtime_options(args), distilled=distilled, processes=processes,
            head=head, live=args.live, live_rounds=args.live_rounds,
            corpus=corpus.captions if corpus else (),
            max_proposal=args.max_proposal, oracle_acceptances=tuple(args.oracle),
            free_oracles=args.free_oracles,
            prompt_lookup=not args.no_prompt_lookup, warmup=args.warmup, settle=True,
            log=lambda s: print(s, file=sys.stderr, flush=True))
    finally:
        for process in processes.values():
            process.close()
    if emulated is not None:  # never a measurement of this machine: says so everywhere
        report["emulation"] = emulated.report()
        label = f"{label} [{emulated.profile.label}]"
    report.update({"models": label, "quantization": args.quantization, "device": device,
                   "bag": str(args.bag), **tuning,
                   "caption_corpus": corpus.summary() if corpus else None,
                   "date": datetime.date.today().isoformat(),
                   "machine": f"{platform.machine()}, {_cpu_count()} cores"
                   + (f", {torch.cuda.get_device_name()}" if device.startswith("cuda")
                      else "")})
    table = bench.markdown_table(report)
    _print_summary(report, table, emulated)
    _write_outputs(args, report, table, label, device)
    return 0 if report["lossless"] else 1


def _arguments_valid(args: argparse.Namespace) -> bool:
    """Whether the options go together; says on stderr why not (the command exits 2)."""
    if args.windows < args.warmup + 1 or args.warmup < 0 or args.max_new_tokens < 1:
        print("crossspec bench engine: need --windows > --warmup >= 0 and --max-new-tokens "
              ">= 1", file=sys.stderr)
        return False
    if args.step_rows < 1:
        print("crossspec bench engine: --step-rows must be >= 1", file=sys.stderr)
        return False
    if args.drafter_process and args.models != "full-size":
        print("crossspec bench engine: --drafter-process is for --models full-size (the "
              "bundled pair on a CPU runs its drafter process anyway)", file=sys.stderr)
        return False
    return True


def profile_loads(profile: str, command: str = "crossspec bench engine") -> bool:
    """Whether --emulate PROFILE can be used (said on stderr by ``command`` when not), before
    any model loads."""
    from crossspec_ros.models.emulated import CostProfile, ProfileError

    try:
        CostProfile.load(profile)
    except ProfileError as err:
        print(f"{command}: --emulate: {err}", file=sys.stderr)
        return False
    return True


def load_pair(args: argparse.Namespace, device: str) -> tuple[Any, Any, str]:
    """(verifier, drafter, label) of --models, quantized and emulated as the options say."""
    import torch

    from crossspec_ros.bench import engine as bench

    torch.manual_seed(0)
    if args.models == "full-size":
        verifier, drafter, label = bench.full_size_pair(device, getattr(torch, args.dtype))
    else:
        build = {"bundled": bench.bundled_pair, "tiny-random": bench.tiny_random_pair}
        verifier, drafter, label = build[args.models](device)
    if args.quantization == "4bit":
        verifier, drafter, label = bench.quantized_4bit(verifier, drafter, label)
    print(f"models: {label} on {device}", file=sys.stderr)
    if args.emulate:  # the nodes' door: both models on the process's device of the profile
        from crossspec_ros.models.emulated import emulate

        for model, role in ((verifier, "verifier"), (drafter, "drafter")):
            emulated = emulate(model, role, args.emulate)
        print(emulated.profile.describe(), file=sys.stderr)
    return verifier, drafter, label


def _windows(args: argparse.Namespace) -> list[Any]:
    """The windows decoded: --bag's, or moving test patterns for --bag pattern."""
    from crossspec_ros.bench import engine as bench

    if str(args.bag) == "pattern":
        return bench.pattern_windows(args.windows)
    return bench.bag_windows(args.bag, args.windows)


def _load_extra_drafters(args: argparse.Namespace, device: str) -> tuple[Any, Any]:
    """(the --distilled drafter, the --head draft head), each None when not asked for."""
    distilled = None
    if args.distilled is not None:
        from crossspec_ros.models.pair import load_drafter

        distilled = load_drafter(str(args.distilled), device=device)
        if args.emulate:
            from crossspec_ros.models.emulated import emulate

            emulate(distilled, "drafter", args.emulate)
    head = None
    if args.head is not None:
        from crossspec_ros.models.pair import load_head

        head = load_head(args.head, device=device)
    return distilled, head


def _drafter_processes(args: argparse.Namespace, device: str) -> dict[str, Any]:
    """The drafter processes of the *_process modes, by mode suffix ("" for the default
    drafter's); the caller closes them."""
    from crossspec_ros.speculative.drafter_process import DrafterProcess

    processes: dict[str, DrafterProcess] = {}
    # a drafter process steps its drafter on the drafter's runtime of the run
    child = {"runtime": _runtime_options(args, "drafter"), "max_new_tokens": args.max_new_tokens}
    if args.drafter_process and args.models == "full-size":
        from crossspec_ros.models.pair import FULL_SIZE_RANDOM

        processes[""] = DrafterProcess(FULL_SIZE_RANDOM, device=device, dtype=args.dtype,
                                       quantization=args.quantization, **child)
    if args.models == "bundled" and device == "cpu" and not args.emulate:
        from crossspec_ros.models.pair import drafter_source, head_drafter_source
        from crossspec_ros.params import MODEL_PARAMS, validate

        # the drafter the draft node loads by default, as bench.bundled_pair's
        processes[""] = DrafterProcess(drafter_source(validate({}, MODEL_PARAMS)), **child)
        if args.distilled is not None:
            processes["_distilled"] = DrafterProcess(str(args.distilled), **child)
        if args.head is not None:  # the drafter whose window state the head reads
            processes["_head"] = DrafterProcess(head_drafter_source(args.head), **child)
    return processes


def _print_summary(report: dict[str, Any], table: str, emulated: Any) -> None:
    """The table and the headline lines on stdout: lossless, the paired speedup, live graphs."""
    from crossspec_ros.summaries import shown

    print(table)
    if emulated is not None:
        print(f"EMULATED ({emulated.profile.label}): {emulated.verdict()}")
    print(f"lossless: {report['lossless']}  paired speedup (crossspec vs {report['baseline']}): "
          f"{shown(report['paired_speedup_median'], '.2f', 'x')}")
    for name, graph in report.get("live", {}).get("graphs", {}).items():
        changes = graph.get("changes", {})
        print(f"live {name}: confirmed {shown(graph['confirmed_after_close_ms']['median'])} ms "
              f"after the close (median; {shown(graph.get('vs_live_alone_ms', {}).get('median'))}"
              f" ms against live_alone, {shown(graph.get('vs_text_only_ms', {}).get('median'))}"
              f" ms against text_only, paired; at the {changes.get('windows', 0)} scene "
              f"changes {shown(changes.get('confirmed_after_close_ms', {}).get('median'))} ms, "
              f"{shown(changes.get('vs_text_only_ms', {}).get('median'))} ms against "
              f"text_only), draft complete {shown(graph.get('draft_complete_ms_median'))} ms "
              f"after the close, before the FINAL caption in {graph['draft_before_final']} "
              "windows")


def _write_outputs(args: argparse.Namespace, report: dict[str, Any], table: str, label: str,
                   device: str) -> None:
    """engine.json/.md/.png under --out, or the --json and --plot files, each said on stdout."""
    from crossspec_ros.bench import engine as bench

    outputs = {"json": args.json, "plot": args.plot, "md": None}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        outputs = {"json": args.json or args.out / "engine.json",
                   "plot": args.plot or args.out / "engine.png", "md": args.out / "engine.md"}
    for key, path in outputs.items():
        if path is None:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if key == "json":
            path.write_text(json.dumps(report, indent=2))
        elif key == "md":
            path.write_text(table)
        else:
            bench.plot(report, path, f"{label}, {device}, {report['windows']} windows")
        print(f"wrote {path}")


def _runtime_options(args: argparse.Namespace, role: str = "verifier") -> Any:
    """The speculative modes' runtime of ``role`` from the options (None: transformers)."""
    from crossspec_ros.models.runtime_setup import runtime_options

    # with --emulate the steps run eager, as runtime_options decides for the nodes
    return runtime_options({"runtime": args.runtime, "compile": not args.no_compile,
                            "emulate": args.emulate or "", "device": args.device,
                            "attention": args.attention, "step_rows": args.step_rows}, role)


def _corpus(setting: str, verifier: Any) -> Any:
    """The caption corpus of the crossspec modes (None: none; "": the verifier's own)."""
    from crossspec_ros.speculative.corpus import load_corpus

    corpus = load_corpus(setting, verifier)
    if corpus is not None:
        print(f"caption corpus: {corpus.summary()}", file=sys.stderr)
    return corpus


def _cpu_count() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


