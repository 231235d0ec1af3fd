"""EventGPT's released checkpoint layout: config.json + weights, read and written.

Layout (as EventChatModel saves it): LM keys as in ``LlamaForCausalLM`` (``model.embed_tokens``,
``model.layers.N``, ``model.norm``, ``lm_head.weight``), ``model.visual_projector.{0,2}``,
``model.feature_adaptor``, the CLIP tower under ``model.visual_tower.visual_tower.vision_model``.
config.json is a LlamaConfig plus ``model_type: EventChat_llama``, ``mm_visual_tower`` (the
CLIP tower's name or path), ``event_feature_adaptor``, ``mm_use_im_start_end`` and
``mm_use_im_patch_token``. The release carries no vision config (its code loads the tower by
name), so crossspec writes one under ``crossspec_vision_config`` (ignored by the original
code) and otherwise falls back to the tower's local config.json or the known ViT-L/14-336.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import CLIPVisionConfig, CLIPVisionModel, LlamaConfig, LlamaForCausalLM

from crossspec_ros.models.errors import ModelLoadError
from crossspec_ros.models.eventgpt import (
    CLIP_L14_336,
    EventGPTConfig,
    EventGPTModel,
    clip_l14_336_config,
)
from crossspec_ros.models.loading import (
    COPY_AGAIN,
    check_layout,
    check_model_directory,
    config_errors,
    quantization_config,
    read_json,
    read_state_dict,
    resolve_device,
    resolve_dtype,
    weight_files,
)

MODEL_TYPE = "EventChat_llama"
VISION_CONFIG_KEY = "crossspec_vision_config"
_MM_KEYS = {"mm_visual_tower", "event_feature_adaptor", "mm_use_im_start_end",
            "mm_use_im_patch_token", VISION_CONFIG_KEY}
_NOT_LLAMA = {"model_type", "architectures", "auto_map", "transformers_version", *_MM_KEYS}
# (release prefix, module prefix); the first match wins, so the generic "model." comes last
_PREFIXES = (
    ("model.visual_tower.visual_tower.vision_model.", "visual_tower."),
    ("model.visual_projector.", "visual_projector."),
    ("model.feature_adaptor.", "feature_adaptor."),
    ("model.", "language_model.model."),
    ("lm_head.", "language_model.lm_head."),
)


def to_release_key(key: str) -> str:
    """EventGPTModel state-dict key -> released checkpoint key."""
    for release, module in _PREFIXES:
        if key.startswith(module):
            return release + key[len(module):]
    raise KeyError(f"no release name for module key {key}")


def from_release_key(key: str) -> str:
    """Released checkpoint key -> EventGPTModel state-dict key (unknown keys kept as is)."""
    for release, module in _PREFIXES:
        if key.startswith(release):
            return module + key[len(release):]
    return key


def config_to_json(config: EventGPTConfig) -> dict[str, Any]:
    """config.json content in the release's form (plus the vision config, see module doc)."""
    data = config.text.to_dict()
    data.update(
        model_type=MODEL_TYPE, architectures=["EventChatModel"],
        mm_visual_tower=config.mm_visual_tower, mm_use_im_start_end=config.mm_use_im_start_end,
        mm_use_im_patch_token=config.mm_use_im_patch_token,
    )
    if config.feature_adaptor:
        data["event_feature_adaptor"] = True  # the reference code tests hasattr only
    vision = config.vision.to_dict()
    vision.pop("transformers_version", None)
    data[VISION_CONFIG_KEY] = vision
    return data


def config_from_json(data: dict[str, Any], vision_tower_dir: str | Path | None = None
                     ) -> EventGPTConfig:
    """EventGPTConfig from a release config.json dict."""
    if data.get("use_event_qformer"):
        raise ModelLoadError("EventGPT checkpoints with the event Q-former (use_event_qformer) "
                             "are not supported; use a checkpoint with the feature adaptor")
    if "mm_visual_tower" not in data:
        raise ModelLoadError("config.json has no mm_visual_tower: not an EventGPT checkpoint")
    text = LlamaConfig(**{k: v for k, v in data.items() if k not in _NOT_LLAMA})
    tower = str(data["mm_visual_tower"])
    return EventGPTConfig(
        text=text, vision=_vision_config(data, tower, vision_tower_dir), mm_visual_tower=tower,
        mm_use_im_start_end=bool(data.get("mm_use_im_start_end", False)),
        mm_use_im_patch_token=bool(data.get("mm_use_im_patch_token", True)),
        feature_adaptor="event_feature_adaptor" in data,
    )


def _vision_config(data: dict[str, Any], tower: str, tower_dir: str | Path | None
                   ) -> CLIPVisionConfig:
    if VISION_CONFIG_KEY in data:
        return CLIPVisionConfig(**data[VISION_CONFIG_KEY])
    for candidate in (tower_dir, tower):
        if candidate is not None and (Path(candidate) / "config.json").is_file():
            return CLIPVisionConfig.from_pretrained(str(candidate), local_files_only=True)
    if tower.rstrip("/").endswith(CLIP_L14_336.split("/")[1]):
        return clip_l14_336_config()
    raise ModelLoadError(
        f"config.json names vision tower '{tower}', which is neither a local directory nor "
        f"{CLIP_L14_336}; pass vision_tower_dir= pointing to that CLIP model's directory"
    )


def save_eventgpt(model: EventGPTModel, directory: str | Path, tokenizer: Any = None,
                  fmt: str = "safetensors") -> Path:
    """Write ``model`` in the released layout (config.json + model.safetensors or .bin)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    state: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for key, tensor in model.state_dict().items():
        if isinstance(model.feature_adaptor, torch.nn.Identity) and "feature_adaptor" in key:
            continue
        t = tensor.detach().to("cpu").contiguous()
        if t.data_ptr() in seen:  # tied weights: safetensors refuses shared storage
            t = t.clone()
        seen.add(t.data_ptr())
        state[to_release_key(key)] = t
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    elif fmt == "bin":
        torch.save(state, out / "pytorch_model.bin")
    else:
        raise ValueError(f"fmt must be 'safetensors' or 'bin', got {fmt!r}")
    import json

    (out / "config.json").write_text(json.dumps(config_to_json(model.config), indent=2),
                                     encoding="utf-8")
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out))
    return out


def expected_layout(config: EventGPTConfig) -> dict[str, tuple[int, ...]]:
    """Release key -> shape of every tensor an EventGPTModel of ``config`` holds."""
    with torch.device("meta"):
        skeleton = EventGPTModel(config)
    shapes = {to_release_key(k): tuple(v.shape) for k, v in skeleton.state_dict().items()}
    if config.text.tie_word_embeddings:
        shapes.pop("lm_head.weight", None)
    return shapes


def load_eventgpt(directory: str | Path, *, dtype: str | torch.dtype = "bf16",
                  quantization: str | None = None, device: str | torch.device = "cpu",
                  vision_tower_dir: str | Path | None = None) -> EventGPTModel:
    """An EventGPTModel from a released-layout directory (LM optionally 4-bit/8-bit)."""
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype)
    quant = quantization_config(quantization, torch_dtype)
    path = Path(directory)
    weight_files(path)  # clear error for a missing directory or no weights
    check_model_directory(path)  # config.json an object, every safetensors file whole
    try:
        config = config_from_json(read_json(path / "config.json"), vision_tower_dir)
    except config_errors() as err:  # values of the wrong kind for a LlamaConfig
        raise ModelLoadError(f"{path / 'config.json'} does not describe an EventGPT model "
                             f"({type(err).__name__}: {' '.join(str(err).split())}): "
                             f"{COPY_AGAIN}") from err
    state = read_state_dict(path)
    expected = expected_layout(config)
    tower_keys = [k for k in expected if k.startswith(_PREFIXES[0][0])]
    separate_tower = vision_tower_dir is not None and not any(k in state for k in tower_keys)
    if separate_tower:  # tower weights from the CLIP model directory, the rest from here
        expected = {k: v for k, v in expected.items() if k not in tower_keys}
    check_layout(expected, state, where=str(path))
    parts: dict[str, dict[str, torch.Tensor]] = {
        "language_model": {}, "visual_tower": {}, "visual_projector": {}, "feature_adaptor": {}}
    for key, tensor in state.items():
        if key in expected:  # the rest are ignorable buffers (rotary inv_freq, position_ids)
            head, _, tail = from_release_key(key).partition(".")
            parts[head][tail] = tensor
    lm_kwargs: dict[str, Any] = {"dtype": torch_dtype}
    if quant is not None:
        lm_kwargs.update(quantization_config=quant, device_map={"": str(dev)})
    lm = LlamaForCausalLM.from_pretrained(None, config=config.text,
                                          state_dict=parts["language_model"], **lm_kwargs)
    if separate_tower:
        tower = CLIPVisionModel.from_pretrained(str(vision_tower_dir), dtype=torch_dtype,
                                                local_files_only=True)
    else:
        tower = CLIPVisionModel.from_pretrained(None, config=config.vision,
                                                state_dict=parts["visual_tower"],
                                                dtype=torch_dtype)
    model = EventGPTModel(config, language_model=lm, visual_tower=tower.to(dev))
    model.visual_projector.load_state_dict(parts["visual_projector"])
    model.feature_adaptor.load_state_dict(parts["feature_adaptor"])
    model.visual_projector.to(dev, torch_dtype)
    model.feature_adaptor.to(dev, torch_dtype)
    if quant is None:
        lm.to(dev)
    return model.eval()
