"""Distillation and its evaluation as pipelines, out of the command line: `crossspec distill`
and `crossspec eval-draft` (cli/distill_cmd.py) parse and print; this module labels, trains,
evaluates and writes. Progress goes through ``progress`` (``progress.progress_bar`` by
default: a bar on a terminal, lines in a log), notes through ``note``; a request that cannot be
met raises DistillError with the one line to show."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossspec_ros.progress import progress_bar

RESULT = {"finetune": "drafter", "lora": "adapter", "head": "head"}  # OUT/<this>

Progress = Callable[[int, str], Any]  # (total, what) -> a bar: update(n), set_postfix, with


class DistillError(ValueError):
    """What stops a distillation, in one line (nothing is written)."""


@dataclass
class DistillSettings:
    """One distillation: what to learn from, how, and where the result goes."""

    method: str                     # finetune, lora or head
    out: Path
    steps: int
    batch_size: int
    lr: float
    seed: int = 0
    bags: list[Path] = field(default_factory=list)  # recorded, already read into windows
    sim_windows: int = 0            # simulated training windows added
    max_new_tokens: int = 48
    device: str = "cpu"
    verifier_model: str = ""        # "": the bundled tiny verifier
    drafter_model: str = ""         # "": the bundled drafter, undistilled
    lora_rank: int = 16
    lora_alpha: float = 32.0
    eval_windows: int = 100         # held-out windows compared after (0: none)
    workers: int = 2                # simulation processes
    # each window's events cut this long before its close, one example per lead: what the
    # draft node reads of a window it drafts early (draft_lead_ms); (0,): whole windows
    leads_ms: tuple[float, ...] = (0.0,)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def heldout_windows(n: int, workers: int, image_size: int, progress: Progress = progress_bar
                    ) -> list:
    """``n`` held-out simulated windows (seeds never used to train or distill)."""
    from crossspec_ros.train.data import generate_windows, heldout_keys

    keys = heldout_keys(n)
    with progress(len(keys), "simulating held-out windows") as bar:
        return list(generate_windows(keys, image_size, workers, progress=bar.update))


def simulated_windows(keys: list[tuple[int, int]], workers: int, desc: str,
                      render_hz: float | None, progress: Progress = progress_bar) -> list[Any]:
    from crossspec_ros.train.data import SIM_IMAGE_SIZE, generate_windows

    with progress(len(keys), desc) as bar:
        return [w.as_window() for w in generate_windows(
            keys, SIM_IMAGE_SIZE, workers, progress=bar.update, event_render_hz=render_hz)]


def heldout(n: int, workers: int, progress: Progress = progress_bar) -> list[Any]:
    """Held-out simulated windows (seeds never used to train or distill), sensor-rate events."""
    from crossspec_ros.train.data import SIM_IMAGE_SIZE

    return [w.as_window() for w in heldout_windows(n, workers, SIM_IMAGE_SIZE, progress)]


def references(verifier: Any, drafter: Any, windows: list[Any], max_new_tokens: int = 48,
               progress: Progress = progress_bar) -> list[list[int]]:
    """The verifier's greedy captions in the drafter's ids."""
    from crossspec_ros.train.distill import to_drafter_ids

    out = []
    with progress(len(windows), "verifier captions") as bar:
        for window in windows:
            tokens = verifier.generate_greedy(verifier.prepare(window), max_new_tokens)
            out.append(to_drafter_ids(verifier, drafter, tokens))
            bar.update(1)
    return out


def compare(drafters: dict[str, Any], windows: list[Any], refs: list[list[int]],
            proposal: int, progress: Progress = progress_bar) -> dict[str, Any]:
    """Each drafter's draft quality against the verifier's captions ``refs``."""
    from crossspec_ros.train.evaluate import draft_quality

    report: dict[str, Any] = {"windows": len(windows)}
    for name, drafter in drafters.items():
        with progress(len(windows), f"drafter '{name}'") as bar:
            report[name] = draft_quality(drafter, windows, refs, proposal, bar.update)
    return report


def lead_sweep(drafter: Any, windows: list[Any], refs: list[list[int]], leads: list[float],
               proposal: int, changes: list[bool | None] | None,
               progress: Progress = progress_bar) -> list[dict[str, Any]]:
    """``drafter``'s draft quality per lead (ms): each window drafted from its events before
    ``t1 - lead`` against ``refs`` (the verifier's captions of the whole windows), over all
    windows and the scene-change ones (``changes``; None: no split). ``evaluate.lead_quality``
    per lead."""
    from crossspec_ros.train.evaluate import lead_quality

    rows = []
    for lead in leads:
        with progress(len(windows), f"drafts {lead:g} ms before the close") as bar:
            rows.append(lead_quality(drafter, windows, refs, lead, proposal, changes,
                                     bar.update))
    return rows


def plot_leads(report: dict[str, Any], path: Path) -> None:
    """Acceptance against the lead: all windows and (where split) the scene-change ones."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["leads"]
    leads = [r["lead_ms"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(leads, [r["acceptance"] for r in rows], marker="o",
            label=f"all windows ({report['windows']})")
    if report.get("scene_changes"):
        changed = [(r["lead_ms"], r["changes"]["acceptance"]) for r in rows
                   if r["changes"] and r["changes"]["acceptance"] is not None]
        ax.plot([x for x, _ in changed], [y for _, y in changed], marker="s",
                label=f"scene-change windows ({report['scene_changes']})")
    ax.set_xlabel("lead: draft begun this long before the window's close (ms)")
    ax.set_ylabel(f"acceptance (rounds of {report['proposal']} tokens)")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"drafter '{report['drafter']}' against the verifier's caption of the "
                 "whole window", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def head_report(head: Any, drafter: Any, windows: list[Any], refs: list[list[int]],
                proposal: int = 8, progress: Progress = progress_bar) -> dict[str, Any]:
    from crossspec_ros.train.evaluate import head_quality

    with progress(len(windows), "draft head") as bar:
        return head_quality(head, drafter, windows, refs, proposal, bar.update)


def distill_drafter(settings: DistillSettings, windows: list[Any],
                    progress: Progress = progress_bar,
                    note: Callable[[str], None] = _stderr) -> dict[str, Any]:
    """Label ``windows`` (and ``settings.sim_windows`` simulated ones) with the verifier, train
    the drafter (or a head over it) on the labels, evaluate it on held-out windows and write
    the result to ``settings.out`` (complete or not at all). Returns the card (also
    OUT/distill.json). Labels are cached and training checkpoints beside OUT (OUT.cache/)."""
    import torch

    from crossspec_ros.models.pair import BUNDLED_PAIR
    from crossspec_ros.train.distill import publish_directory

    s = settings
    windows = list(windows)
    started = time.perf_counter()
    torch.manual_seed(s.seed)
    drafter_source = s.drafter_model or str(BUNDLED_PAIR / "drafter")
    verifier, drafter = _load_pair(s, drafter_source)
    sources, cache, labels = _verifier_labels(s, verifier, drafter, drafter_source, windows,
                                              progress, note)
    label_s = time.perf_counter() - started

    training = _train(s, verifier, drafter, labels, cache, progress)
    train_s = time.perf_counter() - started - label_s

    card = _card(s, sources, labels, drafter, training, label_s, train_s)
    if s.eval_windows > 0:
        card["heldout"] = _heldout_report(s, verifier, drafter, training.head, drafter_source,
                                          progress)
    card["total_s"] = round(time.perf_counter() - started, 1)
    head, peft_model, losses = training.head, training.peft_model, training.losses
    trained = peft_model if peft_model is not None else head if head is not None else drafter
    publish_directory(lambda tmp: write_result(tmp, s.method, trained, card, losses,
                                               s.drafter_model), s.out)
    training.checkpoint.unlink(missing_ok=True)
    return card


def _load_pair(s: DistillSettings, drafter_source: str) -> tuple[Any, Any]:
    """(verifier, drafter) for ``s``; DistillError when one cannot be loaded or the drafter
    is not of the EventGPT family the methods train."""
    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.models.eventgpt_drafter import EventGPTDrafter
    from crossspec_ros.models.pair import load_drafter, load_verifier

    try:
        verifier = load_verifier(s.verifier_model, device=s.device)
        drafter = load_drafter(drafter_source, device=s.device)
    except ModelLoadError as err:  # a missing model, no CUDA here: say so, write nothing
        raise DistillError(str(err)) from err
    if not isinstance(drafter, EventGPTDrafter):
        raise DistillError(f"--method {s.method} trains EventGPT-family drafters; "
                           f"{drafter_source} is another kind")
    return verifier, drafter


def _verifier_labels(s: DistillSettings, verifier: Any, drafter: Any, drafter_source: str,
                     windows: list[Any], progress: Progress, note: Callable[[str], None]
                     ) -> tuple[list[str], Path, Any]:
    """(sources, cache directory, labels): the verifier's labels for ``windows`` and the
    simulated training windows (added to ``windows``), from the cache beside OUT when it
    has them; DistillError when too few windows are usable."""
    from crossspec_ros.models.pair import BUNDLED_PAIR
    from crossspec_ros.train.config import TRAIN_EVENT_RENDER_HZ
    from crossspec_ros.train.data import training_keys
    from crossspec_ros.train.distill import (
        MIN_WINDOWS,
        label_windows,
        labels_key,
        load_labels,
        save_labels,
    )

    if s.sim_windows > 0:
        keys = training_keys(s.sim_windows, seed=s.seed)
        windows.extend(simulated_windows(keys, s.workers, "simulating training windows",
                                         TRAIN_EVENT_RENDER_HZ, progress))
    cache = s.out.with_name(s.out.name + ".cache")
    sources = [str(b.resolve()) for b in s.bags]
    if s.sim_windows > 0:
        sources.append(f"sim:{s.sim_windows}:{s.seed}")
    key = labels_key(sources, s.verifier_model or str(BUNDLED_PAIR / "verifier"),
                     drafter_source, s.max_new_tokens, s.leads_ms)
    labels = load_labels(cache / "labels.safetensors", key)
    if labels is None:
        with progress(len(windows), "verifier labelling windows") as bar:
            labels = label_windows(verifier, drafter, windows, s.max_new_tokens, bar.update,
                                   s.leads_ms)
        if len(labels) >= MIN_WINDOWS:
            save_labels(labels, cache / "labels.safetensors", key)
    else:
        note(f"labels: {labels.labelled_windows} windows from the cache {cache}")
    skipped = ", ".join(f"{n} {why}" for why, n in labels.skipped.items())
    if skipped:
        note(f"left out: {skipped}")
    if len(labels) < MIN_WINDOWS:
        raise DistillError(f"only {len(labels)} usable windows (left out: {skipped or 'none'})"
                           f"; distillation needs at least {MIN_WINDOWS} with RGB frames and "
                           "events. Record longer, or add --bag / --sim-windows.")
    return sources, cache, labels


@dataclass
class _Training:
    """What training left: its config and checkpoint file, the losses, and the head (method
    head) or peft model (method lora) it trained; both None when it trained the drafter."""

    config: Any
    checkpoint: Path
    losses: list[float]
    head: Any = None
    peft_model: Any = None


def _train(s: DistillSettings, verifier: Any, drafter: Any, labels: Any, cache: Path,
           progress: Progress) -> _Training:
    """Train by ``s.method`` on ``labels``, checkpointing in ``cache``."""
    import torch

    from crossspec_ros.models.draft_head import DraftHead, HeadConfig
    from crossspec_ros.train.distill import (
        DistillConfig,
        finetune,
        finetune_lora,
        train_head,
        window_states,
    )

    lora = s.method == "lora"
    config = DistillConfig(seed=s.seed, steps=s.steps, batch_size=s.batch_size, lr=s.lr,
                           lora_rank=s.lora_rank if lora else 0,
                           lora_alpha=s.lora_alpha if lora else 0.0)
    checkpoint = cache / f"checkpoint-{s.method}.safetensors"
    head = peft_model = None
    if s.method == "head":
        with progress(len(labels), "drafter window states") as bar:
            contexts = window_states(drafter, labels, bar.update)
        torch.manual_seed(s.seed)
        head = DraftHead(HeadConfig(
            context_dim=contexts.shape[1], vocab_size=verifier.info.vocab_size,
            proposable_ids=verifier.info.proposable_ids,
            eos_token_id=verifier.info.eos_token_id))
    with progress(config.steps, "distilling") as bar:
        def on_step(step: int, loss: float) -> None:
            bar.update(1)
            if step % 20 == 0:
                bar.set_postfix(loss=f"{loss:.3f}")

        if lora:
            peft_model, losses = finetune_lora(drafter, labels, config, checkpoint, on_step)
        elif head is None:
            losses = finetune(drafter, labels, config, checkpoint, on_step)
        else:
            losses = train_head(head, contexts, labels, config, checkpoint, on_step)
    return _Training(config, checkpoint, losses, head, peft_model)


def _card(s: DistillSettings, sources: list[str], labels: Any, drafter: Any,
          training: _Training, label_s: float, train_s: float) -> dict[str, Any]:
    """The distillation's card (OUT/distill.json), before its held-out report and total."""
    config, losses = training.config, training.losses
    card: dict[str, Any] = {
        "method": s.method, "seed": s.seed, "bags": sources,
        "windows": labels.labelled_windows, "left_out": labels.skipped,
        "leads_ms": list(s.leads_ms), "examples": len(labels),
        "config": {"steps": config.steps, "batch_size": config.batch_size, "lr": config.lr},
        "started_from": s.drafter_model or "bundled (undistilled)",
        "verifier": s.verifier_model or "bundled",
        "question": drafter.query if hasattr(drafter, "query") else None,
        "final_loss": round(sum(losses[-20:]) / len(losses[-20:]), 4),
        "labelling_s": round(label_s, 1), "training_s": round(train_s, 1),
    }
    if training.peft_model is not None:
        trainable, total = training.peft_model.get_nb_trainable_parameters()
        card["lora"] = {"rank": config.lora_rank, "alpha": config.lora_alpha,
                        "trainable_parameters": trainable, "all_parameters": total}
    return card


def _heldout_report(s: DistillSettings, verifier: Any, drafter: Any, head: Any,
                    drafter_source: str, progress: Progress) -> dict[str, Any]:
    """Draft quality on ``s.eval_windows`` held-out windows: the distilled drafter against
    the undistilled one, or (method head) the drafter and its head. Trained at leads, both
    drafters again per lead past 0 (``at_leads``: each window's events before ``t1 - lead``
    against the verifier's caption of the whole window, as ``eval-draft --leads``)."""
    from crossspec_ros.models.pair import load_drafter

    held = heldout(s.eval_windows, s.workers, progress)
    refs = references(verifier, drafter, held, s.max_new_tokens, progress)
    if head is None:
        drafters = {"distilled": drafter,
                    "undistilled": load_drafter(drafter_source, device=s.device)}
        report = compare(drafters, held, refs, 8, progress)
        leads = [lead for lead in s.leads_ms if lead > 0]
        if leads:
            report["at_leads"] = {name: lead_sweep(model, held, refs, leads, 8, None, progress)
                                  for name, model in drafters.items()}
        return report
    report = compare({"drafter": drafter}, held, refs, 8, progress)
    report["head"] = head_report(head, drafter, held, refs, progress=progress)
    return report


def write_result(directory: Path, method: str, trained: Any, card: dict,
                 losses: list[float], drafter_source: str) -> None:
    """``trained``: the drafter (finetune), its peft model (lora) or the head."""
    from crossspec_ros.models.eventgpt_checkpoint import save_eventgpt
    from crossspec_ros.models.lora import save_adapter
    from crossspec_ros.train.plots import plot_losses

    out = directory / RESULT[method]
    if method == "finetune":
        save_eventgpt(trained.model, out, tokenizer=trained.tokenizer)
    elif method == "lora":
        save_adapter(trained, out, base=recorded_source(drafter_source))
    else:
        trained.save(out, extra={"drafter": recorded_source(drafter_source)})
    (directory / "distill.json").write_text(json.dumps(card, indent=2))
    plot_losses({card["method"]: losses}, directory / "loss.png",
                title=f"drafter distillation ({card['method']})")


def recorded_source(drafter_source: str) -> str:
    """How a result names the drafter it builds on: "" = the bundled default; inside the
    package, relative to its data directory (so the package can move); else absolute."""
    from crossspec_ros.models.pair import BUNDLED_PAIR

    if not drafter_source:
        return ""
    source = Path(drafter_source).resolve()
    if source.is_relative_to(BUNDLED_PAIR):
        return str(source.relative_to(BUNDLED_PAIR))
    return str(source)
