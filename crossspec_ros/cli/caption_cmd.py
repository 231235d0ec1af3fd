"""`crossspec caption [BAG]`: caption a bag's windows with the speculative engine, live.

The library pipeline without ROS: bag -> synchronizer -> engine (drafter on events,
verifier on RGB) -> a live line per window: the draft with its latency, then the confirmed
caption with its latency and acceptance. ``--check-lossless`` also runs the verifier alone on
each window afterwards and compares. The ROS graph (`crossspec drive`) builds on the same.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from crossspec_ros.cli.model_args import add_model_arguments, model_overrides
from crossspec_ros.paths import sample_bag
from crossspec_ros.run_record import checkable, lossless_verdict
from crossspec_ros.run_rows import draft_line, not_lossless_line
from crossspec_ros.run_summary import captioned_line
from crossspec_ros.stamps import ns_to_seconds
from crossspec_ros.sync.captions import CaptionStatus


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "caption", help="caption a bag's windows with the engine (draft, then confirmed)",
        description=__doc__)
    parser.add_argument("bag", nargs="?", type=Path, default=sample_bag(),
                        help="bag, ROS 2 or ROS 1 (default: the bundled sample bag)")
    parser.add_argument("--models", type=Path, default=None,
                        help="trained pair directory with verifier/ and drafter/ (default: "
                        "the bundled tiny pair; --verifier-model/--drafter-model win)")
    parser.add_argument("--max-windows", type=int, default=0, help="stop after N windows")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--check-lossless", action="store_true",
                        help="compare each confirmed caption with the verifier run alone")
    parser.add_argument("--caption-corpus", default="", metavar="FILE",
                        help="earlier captions of the verifier, one per line (proposer "
                        "corpus_ngram; default: the verifier directory's captions.txt if it "
                        "has one; none: no corpus)")
    parser.add_argument("--json", type=Path, metavar="OUT",
                        help="write one JSON object per window (JSON lines)")
    add_model_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    checked = _check_options(args)
    if checked is None:
        return 2
    truth, params = checked
    from crossspec_ros.process_tuning import settle_heap, tune_process_for_models

    tune_process_for_models(params["device"])  # the graph's settings, before torch loads more
    built = _build_engine(args, params)
    if built is None:
        return 2
    engine, verifier = built
    settle_heap()  # no full collection walking the models in the middle of a window
    rows = _caption_bag(engine, truth, args)
    if rows is None:
        return 1
    print_summary(rows)
    from crossspec_ros.models.emulated import emulation_of

    device = emulation_of(verifier)
    if device is not None:  # the latencies above are the profile's, not this machine's
        print(f"EMULATED {device.profile.label}: {device.verdict()}")
    return 0 if all(r.get("lossless", True) for r in rows) else 1


def _check_options(args: argparse.Namespace) -> tuple[dict[int, str], dict[str, Any]] | None:
    """The bag's ground truth and the validated parameters, before any model loads; None,
    said in one line, for a bad bag or option."""
    from crossspec_ros.bags.inputs import check_bag, read_ground_truth
    from crossspec_ros.events.errors import EventSourceError
    from crossspec_ros.params import (
        ENGINE_PARAMS,
        MODEL_PARAMS,
        RUNTIME_PARAMS,
        ParameterError,
        check_against_vocabulary,
        validate,
    )

    try:  # before any model loads: a bad bag or option fails at once
        check_bag(args.bag)
        truth = read_ground_truth(args.bag)  # optional: what cannot be read is skipped
        given = model_overrides(args)
        if args.models is not None:
            for part in ("verifier", "drafter"):
                given.setdefault(f"{part}_model", str(args.models / part))
        given["max_new_tokens"] = args.max_new_tokens
        given["caption_corpus"] = args.caption_corpus
        params = validate(given, [*MODEL_PARAMS, *RUNTIME_PARAMS, *ENGINE_PARAMS],
                          where="command line")
        check_against_vocabulary(params, where="command line")  # before a model loads
    except (EventSourceError, ParameterError) as err:
        print(f"crossspec caption: {err}", file=sys.stderr)
        return None
    return truth, params


def _build_engine(args: argparse.Namespace, params: dict[str, Any]) -> tuple[Any, Any] | None:
    """The speculative engine over the loaded pair (and draft head, corpus), with its
    verifier, composed as the nodes compose it; None, said in one line, where a model, the
    corpus or the config is bad."""
    from crossspec_ros.composition import build_engine
    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.models.pair import load_from_params
    from crossspec_ros.params import ParameterError
    from crossspec_ros.speculative.corpus import CorpusError

    try:
        verifier, drafter = load_from_params(params)
        engine = build_engine(params, verifier, drafter, where="command line",
                              runtimes=("verifier", "drafter"),
                              say=lambda line: print(f"crossspec caption: {line}",
                                                     file=sys.stderr))
    except (ModelLoadError, CorpusError, ParameterError) as err:
        print(f"crossspec caption: {err}", file=sys.stderr)
        return None
    return engine, verifier


def _caption_bag(engine: Any, truth: dict[int, str], args: argparse.Namespace) -> list[dict] | None:
    """Caption the bag's windows live (each row also to --json as it is done); None, said in
    one line, where the bag's events cannot be read."""
    from crossspec_ros.bags.inputs import iter_bag_windows
    from crossspec_ros.events.errors import EventSourceError
    from crossspec_ros.sync.synchronizer import WindowSynchronizer

    out = args.json.open("w") if args.json else None
    rows: list[dict] = []
    try:
        for window in iter_bag_windows(args.bag, WindowSynchronizer()):
            if args.max_windows and len(rows) >= args.max_windows:
                break
            rows.append(caption_window(engine, window, truth.get(window.id), args))
            if out:
                out.write(json.dumps(rows[-1]) + "\n")
                out.flush()
    except EventSourceError as err:
        print(f"crossspec caption: {err}", file=sys.stderr)
        return None
    finally:
        if out:
            out.close()
    return rows


def caption_window(engine, window, truth: str | None, args: argparse.Namespace) -> dict:
    from crossspec_ros.speculative.events import EventKind

    row: dict = {"window": window.id, "t0": ns_to_seconds(window.t0),
                 "t1": ns_to_seconds(window.t1)}
    if not window.has_rgb:  # the verifier cannot run (drafting alone comes with the ROS graph)
        row.update(status=CaptionStatus.UNVERIFIED.name, draft_text="", confirmed_text="")
        print(f"[{window.id}] no RGB: UNVERIFIED", flush=True)
        return row
    draft_shown = False
    result_text = ""
    draft_error = None
    for event in engine.stream(window):
        if event.kind is EventKind.DRAFT and event.done and not draft_shown:
            print(draft_line(str(window.id), event.t_ms, event.text), flush=True)
            draft_shown = True
        elif event.kind is EventKind.DRAFT_ERROR and draft_error is None:
            draft_error = event.text  # e.g. a window without events: the verifier goes on
            print(f"[{window.id}] no draft  {draft_error}", flush=True)
        elif event.kind is EventKind.FINAL:
            result_text = event.text
    result = engine.last_result
    stats = result.stats
    print(f"[{window.id}] confirmed {stats.confirmed_done_ms:6.1f} ms  {result_text}"
          f"   (accepted {stats.total_accepted}/{stats.total_proposed}, "
          f"{stats.rounds} rounds)", flush=True)
    row.update(status=CaptionStatus.FINAL.name, draft_text=result.draft_text,
               confirmed_text=result.text,
               draft_first_token_ms=_num(stats.draft_first_token_ms),
               confirmed_done_ms=_num(stats.confirmed_done_ms), accepted=stats.total_accepted,
               proposed=stats.total_proposed, ground_truth=truth, draft_error=draft_error)
    if stats.acceptance_rule:
        row["acceptance_rule"] = stats.acceptance_rule  # LOSSY by choice: counted apart
    if args.check_lossless and checkable(engine):
        row.update(lossless_verdict(engine, window, result.tokens, stats.acceptance_rule))
        if row.get("lossless") is False:
            print(not_lossless_line(str(window.id), row["verifier_only_text"]), flush=True)
    return row


def _num(x: float) -> float | None:
    from crossspec_ros.summaries import rounded

    return rounded(x)


def print_summary(rows: list[dict]) -> None:
    """One line over the captioned windows (run_summary.captioned_line)."""
    print(captioned_line(rows))
