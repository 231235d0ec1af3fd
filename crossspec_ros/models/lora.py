"""LoRA adapters for an EventGPT drafter (``crossspec distill --method lora``), through peft.

A 7B drafter cannot be fine-tuned whole on one GPU next to its AdamW moments (~4x the weights),
and a distilled copy of it would weigh 14 GB. LoRA trains low-rank updates of the language
model's projections instead, and the event projector and adaptor whole (they are small and
they are what turns events into words); the result is a peft adapter directory
(``adapter_config.json`` + ``adapter_model.safetensors``, loadable by peft's own tools) whose
``base_model_name_or_path`` names the drafter it adapts. ``load_drafter`` on such a directory
loads that base and merges the adapter into its weights: the merged drafter costs what the base
costs per token.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from crossspec_ros.models.errors import ModelNotFoundError
from crossspec_ros.models.loading import check_model_directory, read_json

ADAPTER_CONFIG = "adapter_config.json"
# the language model's attention and MLP projections; the vision tower's q/k/v stay frozen
LORA_TARGETS = (r".*language_model\..*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj"
                r"|down_proj)")
TRAINED_WHOLE = ["visual_projector", "feature_adaptor"]
# peft imports bitsandbytes, whose CPU backend warns on import that an optional kernel
# package is missing (4-bit on CPU is not used here): not the user's concern
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)


def is_lora_adapter(directory: str | Path) -> bool:
    """Whether ``directory`` holds a peft adapter (rather than a whole drafter)."""
    return (Path(directory) / ADAPTER_CONFIG).is_file()


def add_lora(model: Any, rank: int, alpha: float) -> Any:
    """Wrap an ``EventGPTModel`` for LoRA training (in place: ``model``'s projections become
    LoRA layers, everything else frozen but the projector and adaptor). Returns the
    ``PeftModel``, which saves the adapter. The adapters' initial weights come from torch's
    global generator: seed it first for a deterministic run."""
    from peft import LoraConfig, get_peft_model

    if rank < 1 or alpha <= 0:
        raise ValueError(f"LoRA needs rank >= 1 and alpha > 0, got {rank} and {alpha}")
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0,
                        target_modules=LORA_TARGETS, modules_to_save=list(TRAINED_WHOLE))
    return get_peft_model(model, config)


def save_adapter(peft_model: Any, directory: Path, base: str) -> None:
    """The adapter in peft's layout; ``base``: the drafter it adapts ("" = the bundled one; a
    relative path = inside the bundled data), recorded as ``base_model_name_or_path``."""
    peft_model.peft_config["default"].base_model_name_or_path = base
    peft_model.save_pretrained(str(directory))
    (directory / "README.md").unlink(missing_ok=True)  # peft's model-card template


ADAPTER_HINT = "pass the adapter directory crossspec distill --method lora wrote (OUT/adapter)"


def adapter_base(directory: str | Path) -> str:
    """The drafter an adapter adapts, as recorded ("" = the bundled one; a relative path is
    resolved inside the bundled data). Checks the adapter's files first (ModelLoadError
    naming a damaged one), so no base drafter is loaded for an adapter that cannot be."""
    from crossspec_ros.paths import BUNDLED_PAIR

    check_model_directory(directory, ADAPTER_HINT)
    base = read_json(Path(directory) / ADAPTER_CONFIG, ADAPTER_HINT).get(
        "base_model_name_or_path") or ""
    if base and not Path(base).is_absolute():
        base = str(BUNDLED_PAIR / base)
    return base


def merge_adapter(model: Any, directory: str | Path) -> Any:
    """``model`` (the base ``EventGPTModel``) with the adapter at ``directory`` merged into
    its weights; returns the plain model."""
    from peft import PeftModel

    check_model_directory(directory, ADAPTER_HINT)
    try:
        peft_model = PeftModel.from_pretrained(model, str(directory))
    except (OSError, ValueError, RuntimeError, KeyError) as err:
        raise ModelNotFoundError(
            f"{directory}: the adapter does not fit its base drafter ({type(err).__name__}: "
            f"{err}); was it trained on another drafter?") from err
    return peft_model.merge_and_unload().eval()
