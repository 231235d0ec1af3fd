"""Which drafter and verifier to run, from node parameters: the bundled tiny pair by default,
or a Video-LLaVA and an EventGPT given by path (or hub id in the local cache)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crossspec_ros.models.errors import ModelNotFoundError
from crossspec_ros.models.eventgpt_drafter import EventGPTDrafter
from crossspec_ros.models.loading import check_model_directory, read_json
from crossspec_ros.models.lora import adapter_base, is_lora_adapter, merge_adapter
from crossspec_ros.models.video_llava import VideoLlavaVerifier
from crossspec_ros.paths import BUNDLED_PAIR, DEFAULT_DRAFTER


def _trained_question(directory: Path) -> dict[str, str]:
    """A pair trained (or a drafter distilled) by crossspec records the question it was
    trained on; ask it that."""
    for name in ("training.json", "distill.json"):
        meta = directory.parent / name
        if meta.is_file():
            question = read_json(meta, f"it is the card crossspec wrote next to {directory}; "
                                 "restore it or remove it").get("question")
            if question:
                return {"question": str(question)}
    return {}


def _quantization(value: str) -> str | None:
    return None if value in ("", "none") else value


def load_verifier(source: str = "", *, device: str = "cpu", dtype: str = "fp32",
                  quantization: str = "none") -> VideoLlavaVerifier:
    """Video-LLaVA from ``source`` (empty: the bundled tiny verifier)."""
    directory = Path(source) if source else BUNDLED_PAIR / "verifier"
    kwargs: dict[str, Any] = _trained_question(directory) if directory.is_dir() else {}
    return VideoLlavaVerifier.load(str(directory) if directory.is_dir() else source,
                                   dtype=dtype, device=device,
                                   quantization=_quantization(quantization), **kwargs)


FULL_SIZE_RANDOM = "full-size-random"  # the GPU benchmark's EventGPT-7B, random weights


def load_drafter(source: str = "", *, device: str = "cpu", dtype: str = "fp32",
                 quantization: str = "none") -> Any:
    """The drafter at ``source`` (empty: the bundled tiny drafter): an EventGPT in its
    released layout, or any transformers LLaVA (config.json ``model_type: llava``; a local
    directory or a hub id in the local cache) reading event images. ``FULL_SIZE_RANDOM``
    builds the EventGPT-7B architecture with random weights (``models/full_size.py``)."""
    if source == FULL_SIZE_RANDOM:
        return _full_size_drafter(device, dtype, quantization)
    directory = Path(source) if source else BUNDLED_PAIR / "drafter"
    kwargs = _trained_question(directory)
    if is_lora_adapter(directory):
        return _adapted_drafter(directory, kwargs.get("question"), device=device, dtype=dtype,
                                quantization=quantization)
    if _model_type(source or str(directory)) == "llava":
        from crossspec_ros.models.llava_drafter import LlavaEventDrafter

        return LlavaEventDrafter.load(source or directory, dtype=dtype, device=device,
                                      quantization=_quantization(quantization), **kwargs)
    if "question" in kwargs:
        kwargs = {"query": kwargs["question"]}
    return EventGPTDrafter.load(directory, dtype=dtype, device=device,
                                quantization=_quantization(quantization), **kwargs)


def _full_size_drafter(device: str, dtype: str, quantization: str) -> EventGPTDrafter:
    import torch

    from crossspec_ros.models.full_size import full_size_eventgpt_drafter
    from crossspec_ros.models.loading import resolve_dtype

    if _quantization(quantization) not in (None, "4bit", "nf4"):  # before building 7B
        raise ValueError(f"the full-size random drafter quantizes to 4-bit only, not "
                         f"{quantization!r}")
    torch.manual_seed(0)
    drafter = full_size_eventgpt_drafter(device, resolve_dtype(dtype))
    if _quantization(quantization):
        from crossspec_ros.models.quantize import quantize_caption_model_4bit

        quantize_caption_model_4bit(drafter)
    return drafter


def _adapted_drafter(directory: Path, question: str | None, **load: Any) -> EventGPTDrafter:
    """The base drafter an adapter (``crossspec distill --method lora``) names, with the
    adapter merged into its weights."""
    base_source = adapter_base(directory)
    if base_source and is_lora_adapter(base_source):
        raise ModelNotFoundError(f"{directory}: its base {base_source} is an adapter too; an "
                                 "adapter must name a whole drafter")
    drafter = load_drafter(base_source, **load)
    if not isinstance(drafter, EventGPTDrafter):
        raise ModelNotFoundError(f"{directory}: LoRA adapters are for EventGPT drafters; its "
                                 f"base {base_source} is not one")
    drafter.model = merge_adapter(drafter.model, directory)
    if question:
        drafter.query = question
    return drafter


def _model_type(source: str) -> str | None:
    """config.json's model_type of a local directory or cached hub id (None if there is no
    config.json: the EventGPT loader names what is missing). A config.json that is not a
    JSON object raises ModelLoadError."""
    from crossspec_ros.models.errors import ModelLoadError
    from crossspec_ros.models.loading import resolve_source

    try:
        config = Path(resolve_source(source, False)) / "config.json"
    except (ModelLoadError, OSError, ValueError):
        return None
    if not config.is_file():
        return None
    return read_json(config).get("model_type")


def load_from_params(params: dict[str, Any], verifier: bool = True, drafter: bool = True
                     ) -> tuple[VideoLlavaVerifier | None, EventGPTDrafter | None]:
    """The models a node needs, from validated MODEL_PARAMS values."""
    common = {"device": params["device"], "dtype": params["dtype"],
              "quantization": params["quantization"]}
    return (load_verifier(params["verifier_model"], **common) if verifier else None,
            load_drafter(drafter_source(params), **common) if drafter else None)


def drafter_source(params: dict[str, Any]) -> str:
    """Where the drafter of validated MODEL_PARAMS values is: drafter_model, else the drafter
    a draft head reads, else the default (paths.DEFAULT_DRAFTER, the distilled bundled one)."""
    source = params["drafter_model"]
    if not source and params.get("draft_head"):  # the drafter whose window state it reads
        source = head_drafter_source(params["draft_head"])
    if not source and DEFAULT_DRAFTER.is_dir():
        source = str(DEFAULT_DRAFTER)
    return source


HEAD_HINT = "pass the head directory crossspec distill --method head wrote (OUT/head)"


def load_head(directory: str | Path, device: str = "cpu") -> tuple[Any, EventGPTDrafter]:
    """A draft head (``crossspec distill --method head``) and the drafter whose window state
    it reads, as its head.json records it (a relative path: inside the bundled data)."""
    return load_draft_head(directory), load_drafter(head_drafter_source(directory),
                                                    device=device)


def load_draft_head(directory: str | Path) -> Any:
    """A draft head alone (the verifier's side; its drafter runs elsewhere), or a
    ModelLoadError naming the file that is missing or damaged."""
    from crossspec_ros.models.draft_head import DraftHead

    check_model_directory(directory, HEAD_HINT)
    _head_meta(directory)
    try:
        return DraftHead.load(directory)
    except (OSError, ValueError, RuntimeError, TypeError, KeyError) as err:
        raise ModelNotFoundError(
            f"{directory}: not a draft head ({type(err).__name__}: {' '.join(str(err).split())}"
            f"); {HEAD_HINT}") from err


def _head_meta(directory: str | Path) -> dict[str, Any]:
    return read_json(Path(directory) / "head.json", HEAD_HINT)


def head_drafter_source(directory: str | Path) -> str:
    """The drafter a draft head reads, as its head.json records it ("": the bundled one;
    a relative path: inside the bundled data)."""
    source = _head_meta(directory).get("drafter", "")
    if source and not Path(source).is_absolute():
        source = str(BUNDLED_PAIR / source)
    return source
