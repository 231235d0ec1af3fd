"""Distillation: teach the drafter to say what the verifier says (``crossspec distill``).

The verifier labels the user's own windows for free: its greedy caption of a window is
exactly what the engine will confirm, so it is the target a drafter must predict from its
own input (the events). ``finetune`` trains the drafter's weights on those captions
(sequence-level distillation: next-token cross-entropy on the verifier's tokens, in the
drafter's ids; a drafter with another tokenizer gets them re-tokenized through their text),
``finetune_lora`` the same through LoRA adapters (a 7B drafter on one GPU);
``head`` trains a small draft head (``models/draft_head.py``) on the verifier's own ids from
what the frozen drafter saw of each window.

Everything here is deterministic from the seed and resumable: the batch at step s comes
from a permutation seeded by (seed, epoch), and a checkpoint (weights + AdamW moments, in
safetensors) lets an interrupted run continue to the same weights it would have reached.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from crossspec_ros.files import follow_umask
from crossspec_ros.models.draft_head import DraftHead
from crossspec_ros.speculative.vocab import same_vocabulary
from crossspec_ros.train.evaluate import events_before_lead
from crossspec_ros.train.tiny_pair import drafter_loss, warmup_cosine

MIN_WINDOWS = 16  # fewer labelled windows cannot fill one batch: nothing worth learning


class DistillError(ValueError):
    """Input distillation cannot use (no frames, no events, too few windows)."""


@dataclass
class DistillConfig:
    """How the drafter is trained on the verifier's captions."""

    seed: int = 0
    steps: int = 600
    batch_size: int = 16
    lr: float = 1e-3
    warmup_steps: int = 30
    checkpoint_every: int = 100
    lora_rank: int = 0       # --method lora: the adapters' rank (0: no LoRA)
    lora_alpha: float = 0.0  # their scale numerator (updates scaled by alpha / rank)


@dataclass
class Labels:
    """Windows the verifier captioned: the drafter's preprocessed input and the target."""

    drafter_pixels: torch.Tensor         # [N, images, 3, S, S] float16
    captions: list[list[int]]            # the verifier's greedy caption, drafter ids
    skipped: dict[str, int] = field(default_factory=dict)  # why windows were left out
    verifier_tokens: list[list[int]] = field(default_factory=list)  # the same, verifier ids
    windows: int = -1  # the windows labelled (-1: one example each, as many as captions)

    def __len__(self) -> int:
        """The examples: a window once per lead it was labelled at."""
        return len(self.captions)

    @property
    def labelled_windows(self) -> int:
        return len(self.captions) if self.windows < 0 else self.windows


def to_drafter_ids(verifier: Any, drafter: Any, tokens: list[int]) -> list[int]:
    """The verifier's caption as drafter ids: the same ids where the two share a
    vocabulary, else its text re-tokenized; EOS kept (mapped) where the verifier ended."""
    ended = bool(tokens) and tokens[-1] == verifier.info.eos_token_id
    body = tokens[:-1] if ended else tokens
    if same_vocabulary(verifier, drafter) and all(
            t < drafter.info.proposable_ids for t in body):
        ids = list(body)
    else:
        text = verifier.tokenizer.decode(body, skip_special_tokens=True)
        ids = list(drafter.tokenizer(text, add_special_tokens=False).input_ids)
    return [*ids, drafter.info.eos_token_id] if ended else ids


def label_windows(verifier: Any, drafter: Any, windows: Iterable[Any], max_new_tokens: int,
                  progress: Callable[[int], None] | None = None,
                  leads_ms: Sequence[float] = (0.0,)) -> Labels:
    """Caption each window with the verifier (greedy) and preprocess its events for the
    drafter, once per lead in ``leads_ms``: the events before ``t1 - lead``, what the draft
    node reads of a window it drafts that long before the close (``draft_lead_ms``), each
    labelled with the caption of the whole window. Windows without RGB frames or without
    events are counted and left out, and so is a lead that leaves a window no event."""
    pixels: list[torch.Tensor] = []
    captions: list[list[int]] = []
    own: list[list[int]] = []
    skipped: dict[str, int] = {}
    labelled = 0
    for window in windows:
        events = getattr(window, "events", None)
        if not getattr(window, "frames", None):
            skipped["no RGB frames"] = skipped.get("no RGB frames", 0) + 1
        elif events is None or len(events) == 0 or events.width == 0:
            skipped["no events"] = skipped.get("no events", 0) + 1
        else:
            tokens = verifier.generate_greedy(verifier.prepare(window), max_new_tokens)
            caption = to_drafter_ids(verifier, drafter, tokens)
            labelled += 1
            for lead in leads_ms:
                seen = events_before_lead(window, lead)
                if len(seen.events) == 0:
                    skipped["no events before a lead"] = \
                        skipped.get("no events before a lead", 0) + 1
                    continue
                pixels.append(drafter.prepare(seen).pixel_values.half())
                captions.append(caption)
                own.append(list(tokens))
        if progress:
            progress(1)
    if not captions:
        return Labels(torch.zeros((0,)), [], skipped, windows=labelled)
    return Labels(torch.stack(pixels), captions, skipped, own, windows=labelled)


# -- the label cache ------------------------------------------------------------------------
def labels_key(sources: list[str], verifier_dir: str, drafter_dir: str,
               max_new_tokens: int, leads_ms: Sequence[float] = (0.0,)) -> str:
    """What the labels depend on: the inputs (paths with size and mtime), both models' files
    (not a verifier's caption corpus: it changes no caption), the caption length limit and
    the leads the drafter's input was cut at."""
    from crossspec_ros.speculative.corpus import CORPUS_FILE

    parts = [f"max_new_tokens={max_new_tokens}"]
    if tuple(leads_ms) != (0.0,):  # labels made before leads existed keep their key
        parts.append("leads_ms=" + ",".join(f"{float(lead):g}" for lead in leads_ms))
    for source in [*sources, verifier_dir, drafter_dir]:
        path = Path(source)
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name != CORPUS_FILE) \
            if path.is_dir() else [path]
        for f in files:
            stat = f.stat() if f.exists() else None
            parts.append(f"{f}:{stat.st_size if stat else '-'}:{stat.st_mtime_ns if stat else '-'}")
        if not files:
            parts.append(str(source))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _padded(rows: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(rows), max(len(r) for r in rows)), -1, dtype=torch.int64)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row, dtype=torch.int64)
    return out


def _unpadded(rows: torch.Tensor) -> list[list[int]]:
    return [[int(t) for t in row if t >= 0] for row in rows.tolist()]


def save_labels(labels: Labels, path: Path, key: str) -> None:
    tensors = {"drafter_pixels": labels.drafter_pixels.contiguous(),
               "captions": _padded(labels.captions),
               "verifier_tokens": _padded(labels.verifier_tokens)}
    _atomic(path, lambda tmp: save_file(
        tensors, tmp, metadata={"key": key, "skipped": json.dumps(labels.skipped),
                                "windows": str(labels.labelled_windows)}))


def load_labels(path: Path, key: str) -> Labels | None:
    """The cached labels, or None when there are none for ``key``."""
    if not path.is_file():
        return None
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
    if metadata.get("key") != key:
        return None
    tensors = load_file(str(path))
    if "verifier_tokens" not in tensors:  # written before heads were trained: label again
        return None
    return Labels(tensors["drafter_pixels"], _unpadded(tensors["captions"]),
                  json.loads(metadata["skipped"]), _unpadded(tensors["verifier_tokens"]),
                  windows=int(metadata.get("windows", -1)))


# -- training -------------------------------------------------------------------------------
def batch_indices(step: int, n: int, batch_size: int, seed: int) -> list[int]:
    """The windows of step ``step``: a function of (seed, step) alone, so a resumed run
    draws the same batches."""
    per_epoch = max(n // batch_size, 1)
    epoch, offset = divmod(step, per_epoch)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
    return order[offset * batch_size:(offset + 1) * batch_size].tolist()


def finetune(drafter: Any, labels: Labels, config: DistillConfig,
             checkpoint: Path | None = None,
             progress: Callable[[int, float], None] | None = None) -> list[float]:
    """Train the drafter's weights on the verifier's captions; returns the loss per step.
    With ``checkpoint``: resumes from it when it matches this run, and writes it every
    ``config.checkpoint_every`` steps."""
    _check_enough(labels)

    def loss_of(index: list[int]) -> torch.Tensor:
        return drafter_loss(drafter, labels.drafter_pixels[index],
                            [labels.captions[i] for i in index])[0]

    return _train(drafter.model, loss_of, len(labels), config, checkpoint, progress)


def finetune_lora(drafter: Any, labels: Labels, config: DistillConfig,
                  checkpoint: Path | None = None,
                  progress: Callable[[int, float], None] | None = None
                  ) -> tuple[Any, list[float]]:
    """``finetune`` through LoRA adapters (``models/lora.py``): the drafter's language model
    learns low-rank updates, its projector and adaptor learn whole, the rest stays frozen.
    ``drafter`` is adapted in place; returns the peft model (it saves the adapter) and the
    loss per step."""
    from crossspec_ros.models.lora import add_lora

    _check_enough(labels)
    torch.manual_seed(config.seed)  # the adapters' initial weights
    peft_model = add_lora(drafter.model, config.lora_rank, config.lora_alpha)
    return peft_model, finetune(drafter, labels, config, checkpoint, progress)


def window_states(drafter: Any, labels: Labels,
                  progress: Callable[[int], None] | None = None) -> torch.Tensor:
    """[N, hidden] what the (frozen) drafter saw in each labelled window."""
    from crossspec_ros.models.eventgpt_drafter import EventInputs

    prompt = drafter.prompt_ids()
    states = []
    for pixels in labels.drafter_pixels:
        states.append(drafter.window_state(EventInputs(prompt, pixels.float())))
        if progress:
            progress(1)
    return torch.stack(states)


def train_head(head: DraftHead, contexts: torch.Tensor, labels: Labels,
               config: DistillConfig, checkpoint: Path | None = None,
               progress: Callable[[int, float], None] | None = None) -> list[float]:
    """Train a draft head on the verifier's captions (its own ids) from the drafter's window
    states ``contexts`` (``window_states``); resumable like ``finetune``."""
    _check_enough(labels)
    if len(labels.verifier_tokens) != len(labels):
        raise DistillError("these labels have no verifier tokens; label the windows again")

    def loss_of(index: list[int]) -> torch.Tensor:
        rows = [labels.verifier_tokens[i] for i in index]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), head.config.eos_token_id, dtype=torch.long)
        targets = torch.full((len(rows), width), -100, dtype=torch.long)
        for k, row in enumerate(rows):
            ids[k, :len(row)] = torch.tensor(row)
            targets[k, :len(row)] = torch.tensor(row)
        logits = head(contexts[index], ids)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

    return _train(head, loss_of, len(labels), config, checkpoint, progress)


def _check_enough(labels: Labels) -> None:
    if len(labels) < MIN_WINDOWS:
        raise DistillError(f"{len(labels)} labelled windows; distillation needs at least "
                           f"{MIN_WINDOWS}")


def _train(model: torch.nn.Module, loss_of: Callable[[list[int]], torch.Tensor], n: int,
           config: DistillConfig, checkpoint: Path | None,
           progress: Callable[[int, float], None] | None) -> list[float]:
    """AdamW over deterministic batches (``batch_indices``) with warm-up and cosine decay;
    checkpointed and resumable. Returns the loss per step."""
    torch.manual_seed(config.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.01)
    run_key = hashlib.sha256(json.dumps([asdict(config), n]).encode()).hexdigest()
    losses: list[float] = []
    start = 0
    if checkpoint is not None and checkpoint.is_file():
        start, losses = _resume(checkpoint, run_key, model, optimizer)
    model.train()
    try:
        for step in range(start, config.steps):
            for group in optimizer.param_groups:
                group["lr"] = config.lr * warmup_cosine(step, config.steps, config.warmup_steps)
            loss = loss_of(batch_indices(step, n, config.batch_size, config.seed))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            losses.append(loss.item())
            if progress:
                progress(step, losses[-1])
            done = step + 1
            if checkpoint is not None and (done % config.checkpoint_every == 0
                                           or done == config.steps):
                _save_checkpoint(checkpoint, run_key, done, losses, model, optimizer)
    finally:
        model.eval()
    return losses


def _save_checkpoint(path: Path, run_key: str, step: int, losses: list[float],
                     model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    # what training changes: every weight of a whole fine-tune, only the adapters of a LoRA
    # run (a 7B base would be 14 GB per checkpoint otherwise)
    tensors = {f"model.{k}": v.detach().clone().contiguous()
               for k, v in model.named_parameters() if v.requires_grad}
    for index, state in optimizer.state_dict()["state"].items():
        for name, value in state.items():
            tensors[f"optim.{index}.{name}"] = torch.as_tensor(value).clone().contiguous()
    metadata = {"run": run_key, "step": str(step), "losses": json.dumps(losses)}
    _atomic(path, lambda tmp: save_file(tensors, tmp, metadata=metadata))


def _resume(path: Path, run_key: str, model: torch.nn.Module,
            optimizer: torch.optim.Optimizer) -> tuple[int, list[float]]:
    """(step, losses) from a checkpoint of this run; (0, []) for another run's."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
    if metadata.get("run") != run_key:
        return 0, []
    tensors = load_file(str(path))
    trained = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    unexpected = model.load_state_dict(trained, strict=False).unexpected_keys
    if unexpected:
        raise DistillError(f"{path}: the checkpoint holds weights this model has not "
                           f"({unexpected[:3]}...); delete it to start over")
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state,
                               "param_groups": optimizer.state_dict()["param_groups"]})
    return int(metadata["step"]), json.loads(metadata["losses"])


def _atomic(path: Path, write: Callable[[str], None]) -> None:
    """Write through a temporary file renamed over ``path``: never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    write(str(tmp))
    follow_umask(tmp)  # safetensors writes 0600
    os.replace(tmp, path)


def publish_directory(build: Callable[[Path], None], out: Path) -> None:
    """Build the result in a sibling directory, then swap it in for ``out`` (an
    interrupted run leaves ``out`` as it was)."""
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    build(tmp)
    follow_umask(tmp)
    old = out.with_name(out.name + ".old")
    if out.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
