"""The bundled tiny pair: a Video-LLaVA verifier on 8 RGB frames and an EventGPT drafter on
event images, both tiny, sharing one word-level tokenizer trained on the caption grammar.

Dimensions keep the real asymmetry: the verifier reads 8 frames x 17 visual tokens with a
wider, deeper language model; the drafter reads 5 event images pooled to 22 tokens with a
small one, so the verifier's prefill costs several times the drafter's (as for the 7B pair).
The two are trained on different paraphrase mixes of the same facts (sim/captions.py), so
their greedy captions agree only partly, as real drafters and verifiers do.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from crossspec_ros.files import follow_umask
from crossspec_ros.models.eventgpt import EVENT_TOKEN_INDEX
from crossspec_ros.models.eventgpt_checkpoint import save_eventgpt
from crossspec_ros.models.eventgpt_drafter import EventGPTDrafter
from crossspec_ros.models.tiny import tiny_eventgpt, tiny_tokenizer, tiny_video_llava
from crossspec_ros.models.video_llava import VideoLlavaVerifier
from crossspec_ros.paths import BUNDLED_PAIR
from crossspec_ros.sim.scene import ATTRIBUTES
from crossspec_ros.sim.visibility import EVENT_VISIBLE
from crossspec_ros.train.config import PairConfig
from crossspec_ros.train.data import PairData
from crossspec_ros.train.probe import AttributeProbe, attribute_labels

BUNDLED_DIR = BUNDLED_PAIR  # the committed pair (crossspec_ros/data/tiny_pair)
QUESTION = "Describe the driving scene."


def build_pair(config: PairConfig, words: list[str]) -> tuple[VideoLlavaVerifier,
                                                               EventGPTDrafter]:
    """Untrained pair with tokenizers over ``words`` (shared ordinary ids)."""
    v_tok = tiny_tokenizer("video_llava", words)
    d_tok = tiny_tokenizer("eventgpt", words)
    verifier_model = tiny_video_llava(
        v_tok, seed=config.seed, hidden=config.verifier_hidden, layers=config.verifier_layers,
        heads=config.heads, vision_hidden=config.verifier_hidden // 2, vision_layers=2,
        image_size=config.verifier_image, patch_size=config.patch_size)
    drafter_model = tiny_eventgpt(
        d_tok, seed=config.seed + 1, hidden=config.drafter_hidden, layers=config.drafter_layers,
        heads=config.heads, vision_hidden=config.drafter_hidden // 2, vision_layers=2,
        image_size=config.drafter_image, patch_size=config.patch_size)
    verifier = VideoLlavaVerifier(verifier_model, v_tok, question=QUESTION)
    drafter = EventGPTDrafter(drafter_model, d_tok, query=QUESTION)
    return verifier, drafter


def warmup_cosine(step: int, total: int, warmup: int) -> float:
    """Learning-rate factor: linear warm-up, then cosine decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(total - warmup, 1)))


def _pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    return ids, mask


def verifier_loss(verifier: VideoLlavaVerifier, pixels: torch.Tensor,
                  captions: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token loss on the caption tokens, given the video prompt (prompt not scored), and
    the visual tokens the language model read: [B, frames * tokens, hidden] (frames kept
    apart, so a probe can see motion between them)."""
    projector = verifier.model.model.multi_modal_projector
    seen: list[torch.Tensor] = []
    hook = projector.register_forward_hook(lambda _m, _i, out: seen.append(out))
    prompt = verifier.prompt_ids(verifier.num_frames * verifier.tokens_per_frame)[0].tolist()
    caption_ids, caption_mask = _pad(captions, verifier.info.eos_token_id)
    batch = len(captions)
    prompt_ids = torch.tensor(prompt).expand(batch, -1)
    ids = torch.cat([prompt_ids, caption_ids], dim=1)
    mask = torch.cat([torch.ones_like(prompt_ids), caption_mask], dim=1)
    labels = torch.cat([torch.full_like(prompt_ids, -100),
                        caption_ids.masked_fill(caption_mask == 0, -100)], dim=1)
    try:
        out = verifier.model(input_ids=ids, attention_mask=mask, labels=labels,
                             pixel_values_videos=pixels.float())
    finally:
        hook.remove()
    return out.loss, seen[0].reshape(batch, -1, seen[0].shape[-1])


def drafter_loss(drafter: EventGPTDrafter, pixels: torch.Tensor,
                 captions: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The same loss for the drafter (event tokens pooled per window, batched), and those
    pooled event tokens: [B, T + N, hidden]."""
    model = drafter.model
    device, dtype = model.device, model.dtype  # a GPU and bf16 for a full-size drafter
    batch, images = pixels.shape[:2]
    pixels = pixels.flatten(0, 1).to(device, model.vision_dtype)
    features = model.visual_tower(pixel_values=pixels).last_hidden_state.to(dtype)
    features = model.feature_adaptor(model.visual_projector(features))
    features = features.view(batch, images, *features.shape[1:])       # [B, T, N, C]
    events = torch.cat([features.mean(dim=2), features.mean(dim=1)], dim=1)  # [B, T+N, C]
    prompt = drafter.prompt_ids().tolist()
    at = prompt.index(EVENT_TOKEN_INDEX)
    embed = model.language_model.get_input_embeddings()
    before = embed(torch.tensor(prompt[:at], device=device)).expand(batch, -1, -1)
    after = embed(torch.tensor(prompt[at + 1:], device=device)).expand(batch, -1, -1)
    caption_ids, caption_mask = (t.to(device) for t in _pad(captions,
                                                            drafter.info.eos_token_id))
    embeds = torch.cat([before, events, after, embed(caption_ids)], dim=1)
    n_prompt = embeds.shape[1] - caption_ids.shape[1]
    mask = torch.cat([torch.ones(batch, n_prompt, dtype=torch.long, device=device),
                      caption_mask], dim=1)
    labels = torch.cat([torch.full((batch, n_prompt), -100, dtype=torch.long, device=device),
                        caption_ids.masked_fill(caption_mask == 0, -100)], dim=1)
    loss = model.language_model(inputs_embeds=embeds, attention_mask=mask, labels=labels).loss
    return loss, events


LossFn = Callable[[torch.Tensor, list[list[int]]], tuple[torch.Tensor, torch.Tensor]]


def train_model(module: nn.Module, loss_fn: LossFn, pixels: torch.Tensor,
                captions: list[list[int]], *, steps: int, batch_size: int, lr: float,
                warmup: int, seed: int, probe: AttributeProbe | None = None,
                probe_labels: torch.Tensor | None = None, probe_weight: float = 0.0,
                progress: Callable[[int, float], None] | None = None) -> list[float]:
    """AdamW with warm-up and cosine decay over shuffled mini-batches; returns the caption
    losses. With a ``probe``, its attribute loss on the visual tokens (weighted) joins in."""
    generator = torch.Generator().manual_seed(seed)
    params = [*module.parameters(), *(probe.parameters() if probe is not None else ())]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    module.train()
    losses: list[float] = []
    order = torch.randperm(len(captions), generator=generator)
    cursor = 0
    for step in range(steps):
        if cursor + batch_size > len(order):
            order, cursor = torch.randperm(len(captions), generator=generator), 0
        index = order[cursor:cursor + batch_size]
        cursor += batch_size
        for group in optimizer.param_groups:
            group["lr"] = lr * warmup_cosine(step, steps, warmup)
        caption_loss, visual = loss_fn(pixels[index], [captions[i] for i in index.tolist()])
        loss = caption_loss
        if probe is not None and probe_labels is not None and probe_weight > 0:
            loss = loss + probe_weight * probe.loss(visual, probe_labels[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(caption_loss.item())
        if progress:
            progress(step, losses[-1])
    module.eval()
    return losses


def train_pair(verifier: VideoLlavaVerifier, drafter: EventGPTDrafter, data: PairData,
               config: PairConfig, progress: Callable[[str, int, float], None] | None = None
               ) -> dict[str, list[float]]:
    """Train both models on ``data``; deterministic from ``config.seed``."""
    torch.manual_seed(config.seed)
    common = {"batch_size": config.batch_size, "lr": config.lr, "warmup": config.warmup_steps,
              "probe_weight": config.probe_weight}
    losses = {}
    with torch.no_grad():  # one row through each model: the probes' input sizes
        v_visual = verifier_loss(verifier, data.verifier_pixels[:1], data.verifier_captions[:1])[1]
        d_visual = drafter_loss(drafter, data.drafter_pixels[:1], data.drafter_captions[:1])[1]
    probe, labels = _probe(data.attributes, ATTRIBUTES, v_visual)
    losses["verifier"] = train_model(
        verifier.model, lambda p, c: verifier_loss(verifier, p, c), data.verifier_pixels,
        data.verifier_captions, steps=config.verifier_steps, seed=config.seed, **common,
        probe=probe, probe_labels=labels,
        progress=(lambda s, v: progress("verifier", s, v)) if progress else None)
    # the drafter's probe asks only what events can show (colours would teach it to guess)
    probe, labels = _probe(data.attributes[:len(data.drafter_captions)],
                           sorted(EVENT_VISIBLE), d_visual)
    losses["drafter"] = train_model(
        drafter.model, lambda p, c: drafter_loss(drafter, p, c), data.drafter_pixels,
        data.drafter_captions, steps=config.drafter_steps, seed=config.seed + 1, **common,
        probe=probe, probe_labels=labels,
        progress=(lambda s, v: progress("drafter", s, v)) if progress else None)
    return losses


def _probe(attributes: list[dict], names: Sequence[str], visual: torch.Tensor
           ) -> tuple[AttributeProbe | None, torch.Tensor | None]:
    """A probe for ``names`` sized to one batch's ``visual`` tokens (None without labels)."""
    names = [k for k in names if attributes and all(k in a for a in attributes)]
    if not names:
        return None, None
    values, labels = attribute_labels(attributes, names)
    return AttributeProbe(values, visual[0].numel()), labels


def save_pair(verifier: VideoLlavaVerifier, drafter: EventGPTDrafter, out: Path,
              config: PairConfig, extra: dict | None = None) -> None:
    """verifier/ (transformers layout + tokenizer + preprocessor) and drafter/ (EventGPT
    release layout + tokenizer), safetensors only, plus training.json."""
    out.mkdir(parents=True, exist_ok=True)
    v_dir = out / "verifier"
    verifier.model.save_pretrained(v_dir, safe_serialization=True)
    verifier.tokenizer.save_pretrained(v_dir)
    size = verifier.preprocess.size
    crop = verifier.preprocess.crop or size
    (v_dir / "preprocessor_config.json").write_text(json.dumps(
        {"size": {"shortest_edge": size}, "crop_size": {"height": crop, "width": crop}},
        indent=2))
    save_eventgpt(drafter.model, out / "drafter", tokenizer=drafter.tokenizer)
    (out / "training.json").write_text(json.dumps(
        {"config": asdict(config), "question": QUESTION, **(extra or {})}, indent=2))
    follow_umask(out)  # safetensors writes 0600: readable by the robot's other accounts too


def load_pair(directory: str | Path = BUNDLED_DIR, device: str = "cpu"
              ) -> tuple[VideoLlavaVerifier, EventGPTDrafter]:
    """The trained pair from ``directory`` (default: the bundled one), fp32."""
    directory = Path(directory)
    verifier = VideoLlavaVerifier.load(directory / "verifier", dtype="fp32", device=device,
                                       question=QUESTION)
    drafter = EventGPTDrafter.load(directory / "drafter", dtype="fp32", device=device,
                                   query=QUESTION)
    return verifier, drafter


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    return fn(), time.perf_counter() - t0
