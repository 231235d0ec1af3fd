"""`crossspec distill` and `crossspec eval-draft`: a drafter that says what the verifier says."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from crossspec_ros.train.pipeline import RESULT, compare, head_report, heldout, references

DISTILLED = "distilled/drafter"      # the bundled drafter distilled on simulated drives
HEAD = "distilled_head/head"         # a draft head over the distilled drafter's window state
LORA = "distilled_lora/adapter"      # LoRA adapters over the undistilled drafter
DEFAULT_LEADS = "0,300,600"  # ms: the leads distill trains at (--leads; draft_lead_ms)
METHOD_DEFAULTS = {"finetune": {"steps": 600, "batch_size": 16, "lr": 1e-3},
                   "lora": {"steps": 600, "batch_size": 16, "lr": 3e-3},
                   "head": {"steps": 3000, "batch_size": 64, "lr": 3e-3}}


def register(subparsers: argparse._SubParsersAction) -> None:
    _register_distill(subparsers)
    _register_eval_draft(subparsers)


def _register_distill(subparsers: argparse._SubParsersAction) -> None:
    distill = subparsers.add_parser(
        "distill", help="train the drafter on the verifier's own captions of your recordings",
        description="Runs the verifier over the windows of the given bags (or of simulated "
        "training drives) and trains the drafter to predict its greedy captions from the "
        "drafter's own input (events). The labels are cached beside --out (OUT.cache/), so a "
        "second run does not re-label; training checkpoints there too and resumes after an "
        "interruption. The result (OUT/drafter in the EventGPT layout, OUT/distill.json, "
        "OUT/loss.png) appears only when complete; load it with drafter_model:=OUT/drafter "
        "or `crossspec eval-draft --drafter OUT/drafter` (OUT/adapter for --method lora). "
        "Deterministic from --seed.")
    distill.add_argument("--bag", type=Path, action="append", default=[],
                         help="a bag (ROS 2 or ROS 1) with RGB frames and events "
                         "(repeatable)")
    distill.add_argument("--sim-windows", type=int, default=0, metavar="N",
                         help="also N windows of simulated training drives (never the "
                         "held-out ones)")
    distill.add_argument("--out", type=Path, required=True, help="output directory")
    _add_method_options(distill)
    _add_training_options(distill)
    distill.add_argument("--verifier-model", default="", help="Video-LLaVA directory "
                         "(default: the bundled tiny verifier)")
    distill.add_argument("--drafter-model", default="", help="EventGPT directory to start "
                         "from (default: the bundled tiny drafter, undistilled)")
    distill.add_argument("--eval-windows", type=int, default=100,
                         help="held-out simulated windows evaluated before and after (0: skip)")
    distill.add_argument("--workers", type=int, default=2, help="simulation processes")
    distill.set_defaults(func=run_distill)


def _add_method_options(distill: argparse.ArgumentParser) -> None:
    """--method and the LoRA adapters' shape."""
    distill.add_argument("--method", choices=tuple(METHOD_DEFAULTS), default="finetune",
                         help="finetune: the drafter's weights learn the verifier's captions; "
                         "lora: the same through LoRA adapters on its language model (and "
                         "its projector whole), saved as a peft adapter (OUT/adapter; what a "
                         "7B drafter needs on one GPU); head: a small draft head learns them "
                         "from what the drafter saw (OUT/head; the drafter itself unchanged)")
    distill.add_argument("--lora-rank", type=int, default=16, help="--method lora: the "
                         "adapters' rank (default 16)")
    distill.add_argument("--lora-alpha", type=float, help="--method lora: updates are scaled "
                         "by alpha / rank (default 2 x rank)")


def _per_method(key: str) -> str:
    """``key``'s default for each method, for the help text (run_distill fills them in)."""
    return ", ".join(f"{m} {d[key]:g}" for m, d in METHOD_DEFAULTS.items())


def _add_training_options(distill: argparse.ArgumentParser) -> None:
    """The seed, optimizer, caption length and device."""
    distill.add_argument("--seed", type=int, default=0)
    distill.add_argument("--steps", type=int,
                         help=f"optimizer steps (default: {_per_method('steps')})")
    distill.add_argument("--batch-size", type=int,
                         help=f"windows per step (default: {_per_method('batch_size')})")
    distill.add_argument("--lr", type=float,
                         help=f"peak learning rate (default: {_per_method('lr')})")
    distill.add_argument("--max-new-tokens", type=int, default=48)
    distill.add_argument("--leads", default=DEFAULT_LEADS, metavar="MS,MS,...",
                         help="train on each window once per lead: its events before the "
                         "close minus the lead (ms), labelled with the verifier's caption of "
                         "the whole window, as the draft node drafts a window before it "
                         f"closes (draft_lead_ms; default {DEFAULT_LEADS}; 0: whole windows "
                         "only)")
    distill.add_argument("--device", default="cpu", help="where the models run and train "
                         "(cpu or cuda; --method head trains on cpu)")


def _register_eval_draft(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser(
        "eval-draft", help="how often drafters' tokens are accepted, side by side",
        description="On held-out simulated windows (or a bag's windows), the draft proposed in "
        "rounds against the verifier's greedy caption: acceptance (accepted / proposed), "
        "accepted tokens per verifier pass, teacher-forced token agreement and exact "
        "captions, for the default drafter (what `crossspec drive` uses), the undistilled "
        "one and --drafter (without it: the bundled distilled drafter and LoRA adapter).")
    evaluate.add_argument("--drafter", type=Path, help="a drafter (or LoRA adapter) "
                          "directory to compare too (default: the bundled distilled one)")
    evaluate.add_argument("--windows", type=int, default=100, help="held-out windows")
    evaluate.add_argument("--head", type=Path, help="a draft head directory to compare too "
                          "(default: the bundled one, if any)")
    evaluate.add_argument("--bag", type=Path, help="use this bag's windows instead")
    evaluate.add_argument("--proposal", type=int, default=8,
                          help="draft tokens proposed per round (default 8)")
    evaluate.add_argument("--workers", type=int, default=2, help="simulation processes")
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument("--leads", metavar="MS,MS,...", help="instead of the drafters' "
                          "table: the default drafter (or --drafter) drafting each window "
                          "from its events before the close minus each lead (ms, e.g. "
                          "0,100,200,400,600), as the draft node's early start does, against "
                          "the verifier's caption of the whole window; per lead over all "
                          "windows and, for --bag, the scene-change windows (reference "
                          "caption unlike the previous window's)")
    evaluate.add_argument("--plot", type=Path, metavar="PNG", help="with --leads: write "
                          "acceptance against the lead as a PNG")
    evaluate.set_defaults(func=run_eval_draft)


def parse_leads(text: str) -> list[float]:
    """``--leads``: comma-separated non-negative milliseconds, sorted and without repeats
    (whole numbers stay ints, for the output); ValueError says what is wrong, in one line."""
    items = text.split(",")
    if not text.strip() or any(not item.strip() for item in items):
        raise ValueError(f"--leads {text!r}: need milliseconds separated by commas, "
                         "e.g. 0,100,200")
    leads: set[float] = set()
    for item in items:
        try:
            lead = float(item)
        except ValueError:
            raise ValueError(f"--leads: {item.strip()!r} is not a number of milliseconds"
                             ) from None
        if not math.isfinite(lead) or lead < 0:
            raise ValueError(f"--leads: {item.strip()!r}: a lead is a finite number of "
                             "milliseconds >= 0")
        leads.add(lead)
    return [int(lead) if lead.is_integer() else lead for lead in sorted(leads)]


def _fail(command: str, message: str) -> int:
    print(f"crossspec {command}: {message}", file=sys.stderr)
    return 2


def _bag_windows(path: Path) -> list[Any]:
    from crossspec_ros.bags.inputs import iter_bag_windows
    from crossspec_ros.sync.synchronizer import WindowSynchronizer

    return list(iter_bag_windows(path, WindowSynchronizer()))


def run_distill(args: argparse.Namespace) -> int:
    if not args.bag and args.sim_windows <= 0:
        return _fail("distill", "nothing to learn from: give --bag BAG (repeatable) and/or "
                     "--sim-windows N")
    for name, value in METHOD_DEFAULTS[args.method].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.method == "head" and args.device != "cpu":
        return _fail("distill", "--method head trains on the CPU (a head is small); drop "
                     "--device")
    if args.lora_alpha is None:
        args.lora_alpha = 2.0 * args.lora_rank
    try:
        leads = parse_leads(args.leads)
    except ValueError as err:
        return _fail("distill", str(err))
    if args.steps < 1 or args.batch_size < 1 or args.lr <= 0 or args.max_new_tokens < 1 \
            or args.lora_rank < 1 or args.lora_alpha <= 0:
        return _fail("distill", "need --steps >= 1, --batch-size >= 1, --lr > 0, "
                     "--max-new-tokens >= 1, --lora-rank >= 1 and --lora-alpha > 0")
    from crossspec_ros.events.errors import EventSourceError

    windows: list[Any] = []
    for bag in args.bag:  # read before any model loads: a bad bag fails fast
        try:
            found = _bag_windows(bag)
        except EventSourceError as err:
            return _fail("distill", str(err))
        if not found:
            return _fail("distill", f"{bag}: no complete window in this bag (too short?)")
        windows.extend(found)

    from crossspec_ros.train.pipeline import DistillError, DistillSettings, distill_drafter

    settings = DistillSettings(
        method=args.method, out=args.out, steps=args.steps, batch_size=args.batch_size,
        lr=args.lr, seed=args.seed, bags=list(args.bag), sim_windows=args.sim_windows,
        max_new_tokens=args.max_new_tokens, device=args.device,
        verifier_model=args.verifier_model, drafter_model=args.drafter_model,
        lora_rank=args.lora_rank, lora_alpha=args.lora_alpha, eval_windows=args.eval_windows,
        workers=args.workers, leads_ms=tuple(float(lead) for lead in leads))
    try:
        card = distill_drafter(settings, windows)
    except DistillError as err:
        return _fail("distill", str(err))
    print(card_summary(card))
    print(f"wrote {args.out}/{RESULT[args.method]} (the whole card: {args.out}/distill.json)",
          file=sys.stderr)
    return 0


def card_summary(card: dict[str, Any]) -> str:
    """The distillation card in a few lines (the whole card is OUT/distill.json)."""
    leads = card.get("leads_ms") or [0.0]
    at = "" if list(leads) == [0.0] else \
        f" at leads {', '.join(f'{lead:g}' for lead in leads)} ms ({card.get('examples')} examples)"
    lines = [f"distilled ({card.get('method')}) on {card.get('windows')} windows{at}, "
             f"{card.get('config', {}).get('steps')} steps, final loss {card.get('final_loss')}, "
             f"{card.get('total_s')} s (labelling {card.get('labelling_s')} s, training "
             f"{card.get('training_s')} s)"]
    held = card.get("heldout") or {}
    rows = {name: r for name, r in held.items() if isinstance(r, dict) and "acceptance" in r}
    if rows:
        lines.append(f"held-out windows: {held.get('windows')}")
        lines.append(f"  {'':<12} {'acceptance':>10} {'accepted/pass':>13} "
                     f"{'token agreement':>15} {'exact':>6}")
        for name, r in rows.items():
            lines.append(f"  {name:<12} {r['acceptance']:>10.3f} "
                         f"{r.get('accepted_per_pass', float('nan')):>13.2f} "
                         f"{r.get('token_agreement', float('nan')):>15.3f} "
                         f"{r.get('exact_caption_rate', float('nan')):>6.2f}")
    for name, sweep in (held.get("at_leads") or {}).items():
        lines.append(f"  {name} drafting before the close: " + ", ".join(
            f"{row['lead_ms']:g} ms {row['acceptance']:.3f}" for row in sweep))
    return "\n".join(lines)


def _eval_draft_leads_option(args: argparse.Namespace) -> tuple[list[float] | None, str]:
    """--leads parsed (None: not given) and what is wrong with the options ("" nothing),
    before a bag is read or a model loads."""
    if args.windows < 1 or args.proposal < 1:
        return None, "need --windows >= 1 and --proposal >= 1"
    leads = None
    if args.leads is not None:
        try:
            leads = parse_leads(args.leads)
        except ValueError as err:
            return None, str(err)
        if args.head is not None:
            return None, "--leads measures a drafter, not a draft head: drop --head"
    if args.plot is not None and leads is None:
        return None, "--plot draws the --leads measurement: give --leads"
    if args.plot is not None and not args.plot.parent.is_dir():
        return None, f"{args.plot}: no such directory {args.plot.parent}"
    return leads, ""


def run_eval_draft(args: argparse.Namespace) -> int:
    leads, problem = _eval_draft_leads_option(args)
    if problem:
        return _fail("eval-draft", problem)
    from crossspec_ros.events.errors import EventSourceError

    if args.bag is not None:
        try:
            windows = [w for w in _bag_windows(args.bag) if w.frames and len(w.events)]
        except EventSourceError as err:
            return _fail("eval-draft", str(err))
        if not windows:
            return _fail("eval-draft", f"{args.bag}: no window with RGB frames and events")
        windows = windows[:args.windows]
    if args.drafter is not None and not args.drafter.is_dir():
        return _fail("eval-draft", f"{args.drafter}: no such drafter directory")
    if leads is not None:
        return _eval_draft_leads(args, leads, windows if args.bag is not None else None)
    from crossspec_ros.models.pair import BUNDLED_PAIR, load_drafter, load_verifier
    from crossspec_ros.paths import DEFAULT_DRAFTER

    verifier = load_verifier("")
    distilled = args.drafter or BUNDLED_PAIR / DISTILLED
    drafters = {"undistilled": load_drafter(""), "distilled": load_drafter(str(distilled))}
    if Path(distilled).resolve() != DEFAULT_DRAFTER.resolve():  # the nodes' default too
        drafters["default"] = load_drafter(str(DEFAULT_DRAFTER))
    if args.drafter is None and (BUNDLED_PAIR / LORA).is_dir():
        drafters["lora"] = load_drafter(str(BUNDLED_PAIR / LORA))
    if args.bag is None:
        windows = heldout(args.windows, args.workers)
    refs = references(verifier, drafters["undistilled"], windows)
    report = compare(drafters, windows, refs, args.proposal)
    default = "default" if "default" in drafters else "distilled"
    report["default"] = report[default]  # what drafter_model "" runs, under its own name
    labels = {default: f"{default} (default)"} if default != "default" else {}
    head_dir = args.head or BUNDLED_PAIR / HEAD
    if head_dir.is_dir():
        from crossspec_ros.models.pair import load_head

        head, head_drafter = load_head(head_dir)
        report["head"] = head_report(head, head_drafter, windows, refs, args.proposal)
        drafters["head"] = head
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{report['windows']} windows, {args.proposal} draft tokens per round")
    print(f"{'drafter':<20} {'acceptance':>10} {'accepted/pass':>14} {'token agreement':>16} "
          f"{'exact':>6}")
    for name in drafters:  # each drafter once; the default is marked
        r = report[name]
        print(f"{labels.get(name, name):<20} {r['acceptance']:>10.3f} "
              f"{r['accepted_per_pass']:>14.2f} "
              f"{r['token_agreement']:>16.3f} {r['exact_caption_rate']:>6.2f}")
    return 0


def _eval_draft_leads(args: argparse.Namespace, leads: list[float],
                      bag_windows: list[Any] | None) -> int:
    """``eval-draft --leads``: one drafter, each window drafted from its events before
    ``t1 - lead`` per lead, against the verifier's caption of the whole window."""
    from crossspec_ros.models.pair import load_drafter, load_verifier
    from crossspec_ros.paths import DEFAULT_DRAFTER
    from crossspec_ros.train.evaluate import scene_changes
    from crossspec_ros.train.pipeline import lead_sweep, plot_leads

    verifier = load_verifier("")
    drafter = load_drafter(str(args.drafter or DEFAULT_DRAFTER))
    windows = bag_windows if bag_windows is not None else heldout(args.windows, args.workers)
    refs = references(verifier, drafter, windows)  # once: the whole windows' captions
    report: dict[str, Any] = {"windows": len(windows), "proposal": args.proposal,
                              "drafter": str(args.drafter) if args.drafter else "default"}
    changes = None
    if bag_windows is None:  # held-out windows come from different drives: no "previous"
        report["scene_changes"] = None
        report["scene_changes_note"] = ("held-out simulated windows are not consecutive: "
                                        "the scene-change split needs --bag")
    else:
        changes = scene_changes([w.key for w in windows], refs)
        report["scene_changes"] = sum(c is True for c in changes)
        report["scene_changes_of"] = sum(c is not None for c in changes)  # had a previous
    report["leads"] = lead_sweep(drafter, windows, refs, leads, args.proposal, changes)
    if args.plot is not None:
        plot_leads(report, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    if args.json:
        print(json.dumps(report))
        return 0
    print(leads_table(report))
    return 0


def leads_table(report: dict[str, Any]) -> str:
    """The ``--leads`` report as a table: per lead, all windows | the scene-change ones."""
    def rates(r: dict[str, Any] | None) -> str:
        if r is None or r["acceptance"] is None:
            return f"{'-':>10} {'-':>13} {'-':>15} {'-':>6}"
        return (f"{r['acceptance']:>10.3f} {r['accepted_per_pass']:>13.2f} "
                f"{r['token_agreement']:>15.3f} {r['exact_caption_rate']:>6.2f}")

    changes = report["scene_changes"]
    split = (f"{changes} scene changes in {report['scene_changes_of']} windows after their "
             "predecessor" if changes is not None else report["scene_changes_note"])
    header = (f"{'acceptance':>10} {'accepted/pass':>13} {'token agreement':>15} "
              f"{'exact':>6}")
    lines = [f"{report['windows']} windows, {report['proposal']} draft tokens per round, "
             f"drafter {report['drafter']}; {split}",
             f"{'lead ms':>8} {'no events':>9} | {header} | scene changes: {header}"]
    for r in report["leads"]:
        lines.append(f"{r['lead_ms']:>8g} {r['no_events'] + r['skipped']:>9} | {rates(r)} | "
                     f"{'':15}{rates(r['changes'])}")
    return "\n".join(lines)
