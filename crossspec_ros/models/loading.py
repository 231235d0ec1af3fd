"""Checkpoint, dtype, device and quantization loading shared by the backends.

Safety: weights are read from safetensors, or from ``.bin`` files only through
``torch.load(weights_only=True)``; remote code is never trusted. Hub ids are resolved from
the local Hugging Face cache unless downloads are explicitly allowed.
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from crossspec_ros.models.errors import (
    CheckpointLayoutError,
    DeviceUnavailableError,
    ModelLoadError,
    ModelNotFoundError,
    QuantizationUnavailableError,
    UnsupportedDtypeError,
)
from crossspec_ros.text import single_spaced

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32, "float32": torch.float32,
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16,
}
QUANTIZATIONS = ("4bit", "nf4", "8bit", "int8")
# Buffers that old checkpoints saved but current modules recompute (safe to drop).
IGNORABLE_KEYS = (re.compile(r".*rotary_emb\.inv_freq$"),
                  re.compile(r".*embeddings\.position_ids$"))


def resolve_device(device: str | torch.device | None) -> torch.device:
    """A torch.device that exists here; CUDA without a GPU raises DeviceUnavailableError."""
    dev = torch.device("cpu" if device is None else device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"device '{dev}' was requested but CUDA is not available on this machine "
                f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
                "use device 'cpu' or run on a machine with an NVIDIA GPU"
            )
        index = 0 if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise DeviceUnavailableError(
                f"device '{dev}' was requested but only {torch.cuda.device_count()} CUDA "
                "device(s) exist; pick an index below that"
            )
        return torch.device("cuda", index)
    if dev.type != "cpu":
        raise DeviceUnavailableError(f"device '{dev}' is not supported; use 'cpu' or 'cuda[:N]'")
    return dev


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """torch dtype from a name (fp32/bf16/fp16 or their long names)."""
    if isinstance(dtype, torch.dtype):
        if dtype in DTYPES.values():
            return dtype
        raise UnsupportedDtypeError(f"dtype {dtype} is not supported; use one of fp32, bf16, fp16")
    key = str(dtype).lower().removeprefix("torch.")
    if key not in DTYPES:
        raise UnsupportedDtypeError(
            f"dtype '{dtype}' is not supported; use one of fp32, bf16, fp16 "
            "(4-bit/8-bit are chosen with the quantization option, not the dtype)"
        )
    return DTYPES[key]


def bitsandbytes_available() -> bool:
    """True when the bitsandbytes package can be imported."""
    return importlib.util.find_spec("bitsandbytes") is not None


def accelerate_available() -> bool:
    """True when accelerate (needed by transformers' bitsandbytes loading) can be imported."""
    return importlib.util.find_spec("accelerate") is not None


def quantization_config(quantization: str | None, compute_dtype: torch.dtype) -> Any | None:
    """A transformers BitsAndBytesConfig for '4bit' (NF4) or '8bit', None for no quantization."""
    if quantization in (None, "", "none"):
        return None
    name = str(quantization).lower()
    if name not in QUANTIZATIONS:
        raise ModelLoadError(
            f"quantization '{quantization}' is not supported; use none, 4bit (NF4) or 8bit"
        )
    missing = [name for name, ok in (("bitsandbytes", bitsandbytes_available()),
                                     ("accelerate", accelerate_available())) if not ok]
    if missing:
        raise QuantizationUnavailableError(
            f"quantization '{quantization}' needs {' and '.join(missing)}, not installed here; "
            f"`pip install {' '.join(missing)}` or load without quantization"
        )
    from transformers import BitsAndBytesConfig

    if name in ("4bit", "nf4"):
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                  bnb_4bit_compute_dtype=compute_dtype,
                                  bnb_4bit_use_double_quant=True)
    return BitsAndBytesConfig(load_in_8bit=True)


def _looks_like_hub_id(source: str) -> bool:
    return (not source.startswith(("/", ".", "~")) and source.count("/") == 1
            and not source.endswith("/"))


def resolve_source(source: str | Path, allow_download: bool = False) -> str:
    """A local directory or hub id to pass to ``from_pretrained``.

    A hub id that is not in the local cache raises ModelNotFoundError unless downloads are
    allowed (then the id itself is returned and transformers downloads it).
    """
    text = str(source)
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(
                f"model directory {path} has no config.json (found: {_listing(path)}); "
                "point to a directory written by save_pretrained"
            )
        return str(path)
    if not _looks_like_hub_id(text):
        raise ModelNotFoundError(
            f"model directory {path} does not exist; pass an existing local directory or a "
            "Hugging Face hub id such as LanguageBind/Video-LLaVA-7B-hf"
        )
    if allow_download:
        return text
    from huggingface_hub import constants, try_to_load_from_cache

    cached = try_to_load_from_cache(text, "config.json")
    if isinstance(cached, str):
        return str(Path(cached).parent)
    raise ModelNotFoundError(
        f"'{text}' is not a local directory and is not in the Hugging Face cache "
        f"({constants.HF_HUB_CACHE}), and crossspec never downloads a model. Download it "
        f"where the hub is reachable (`hf download {text}`) into that cache, or into a "
        "directory and pass the directory"
    )


def _listing(path: Path, limit: int = 8) -> str:
    names = sorted(p.name for p in path.iterdir())
    shown = ", ".join(names[:limit]) + (" ..." if len(names) > limit else "")
    return shown or "nothing"


def weight_files(directory: str | Path) -> list[Path]:
    """The checkpoint's weight files: safetensors if any, else ``*.bin`` shards."""
    path = Path(directory)
    if not path.is_dir():
        raise ModelNotFoundError(f"checkpoint directory {path} does not exist")
    for pattern in ("*.safetensors", "*.bin"):
        files = sorted(p for p in path.glob(pattern) if p.name != "training_args.bin")
        if files:
            return files
    raise ModelNotFoundError(
        f"checkpoint directory {path} holds no weights (*.safetensors or *.bin; found: "
        f"{_listing(path)}); copy the model's weight files there"
    )


def refused_pickle(file: str | Path, err: BaseException) -> ModelLoadError:
    """The clean error for a .bin checkpoint that ``weights_only=True`` will not unpickle:
    the refusal's own reason (torch's message around it is advice for other situations)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    reason = type(err).__name__
    for i, line in enumerate(lines):
        if "Unsupported global" in line:
            reason = line
            break
        if "WeightsUnpickler error:" in line:
            detail = line.split("WeightsUnpickler error:", 1)[1].strip()
            reason = detail or (lines[i + 1] if i + 1 < len(lines) else line)
            break
    return ModelLoadError(
        f"cannot read {file} as plain tensors: weights_only=True refuses what it holds "
        f"({reason.rstrip('.')}). Convert the checkpoint to safetensors from a trusted copy.")


def read_state_dict(directory: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory (safetensors, or .bin via weights_only)."""
    state: dict[str, torch.Tensor] = {}
    for file in weight_files(directory):
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            check_safetensors(file)
            state.update(load_file(str(file), device="cpu"))
        else:
            try:
                part = torch.load(str(file), map_location="cpu", weights_only=True)
            except Exception as err:  # pickles with code objects are refused here
                raise refused_pickle(file, err) from err
            if not isinstance(part, Mapping):
                raise CheckpointLayoutError(f"{file} does not hold a state dict of tensors")
            state.update(part)
    return state


# The JSON files a loader here (or transformers, peft, tokenizers under it) reads from a model
# directory; each must hold an object. Other JSON files a user keeps there are not ours to judge.
MODEL_JSON_FILES = ("config.json", "generation_config.json", "preprocessor_config.json",
                    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "added_tokens.json", "model.safetensors.index.json", "head.json",
                    "adapter_config.json")
COPY_AGAIN = "copy it again from where the model came from"


def read_json(path: str | Path, what_to_do: str = COPY_AGAIN) -> dict[str, Any]:
    """A JSON object from a file, with a one-line error naming the file when it is missing,
    malformed or not an object (``what_to_do`` ends the message)."""
    file = Path(path)
    if not file.is_file():
        raise ModelNotFoundError(f"{file} is missing; the model directory needs it: "
                                 f"{what_to_do}")
    try:
        raw = file.read_bytes()
    except OSError as err:
        raise ModelLoadError(f"{file} cannot be read ({_one_line(err)}): {what_to_do}") from err
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as err:  # UnicodeDecodeError is a ValueError too
        raise ModelLoadError(f"{file} is not valid JSON ({_one_line(err)}): "
                             f"{what_to_do}") from err
    if not isinstance(data, dict):
        raise ModelLoadError(f"{file} must hold a JSON object, not a JSON "
                             f"{_json_kind(data)}: {what_to_do}")
    return data


def check_safetensors(file: str | Path, what_to_do: str = COPY_AGAIN) -> None:
    """ModelLoadError unless ``file`` is a whole safetensors file: its header parses and its
    tensors' bytes are all there (a copy cut short fails here, before any model is built).
    Reads the header only."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt") as handle:
            handle.keys()
    except Exception as err:  # SafetensorError, OSError: one message for the user
        raise ModelLoadError(f"{file} is not a whole safetensors file ({_one_line(err)}): "
                             f"it is truncated or damaged; {what_to_do}") from err


def check_torch_checkpoint(file: str | Path, what_to_do: str = COPY_AGAIN) -> None:
    """ModelLoadError if ``file`` (a ``.bin``) is a zip-format PyTorch checkpoint whose end
    is missing (its central directory, read here, is the last thing written). Older pickle
    files have no such end to check; ``weights_only`` loading judges those."""
    import zipfile

    try:
        with open(file, "rb") as stream:
            if stream.read(4) != b"PK\x03\x04":
                return
        with zipfile.ZipFile(file):
            pass
    except (OSError, zipfile.BadZipFile) as err:
        raise ModelLoadError(f"{file} is not a whole PyTorch checkpoint ({_one_line(err)}): "
                             f"it is truncated or damaged; {what_to_do}") from err


def check_model_directory(directory: str | Path, what_to_do: str = COPY_AGAIN) -> None:
    """What every loader checks before it reads a model directory (verifier, drafter, draft
    head, LoRA adapter): each JSON file of ``MODEL_JSON_FILES`` present holds an object and
    each weight file (``*.safetensors``, zip-format ``*.bin``) is whole. Raises
    ModelLoadError (one line naming the file and what to do); missing files are the
    loaders' to name, as they know which they need."""
    path = Path(directory)
    for name in MODEL_JSON_FILES:
        if (path / name).is_file():
            read_json(path / name, what_to_do)
    for file in sorted(path.glob("*.safetensors")):
        check_safetensors(file, what_to_do)
    for file in sorted(path.glob("*.bin")):
        check_torch_checkpoint(file, what_to_do)


def config_errors() -> tuple[type[BaseException], ...]:
    """What building a model config from a config.json with values of the wrong kind raises
    (transformers' configs are strict dataclasses)."""
    from huggingface_hub.errors import StrictDataclassError

    return (TypeError, ValueError, KeyError, StrictDataclassError)


def _json_kind(data: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(data), "number")


def _one_line(err: BaseException) -> str:
    return single_spaced(err)


def check_layout(expected: Mapping[str, tuple[int, ...]], found: Mapping[str, torch.Tensor],
                 where: str) -> None:
    """Raise CheckpointLayoutError naming the first missing/unexpected/mis-shaped keys."""
    found_keys = {k for k in found if not any(p.match(k) for p in IGNORABLE_KEYS)}
    shapes = [(k, tuple(found[k].shape), tuple(expected[k]))
              for k in sorted(set(expected) & found_keys)
              if tuple(found[k].shape) != tuple(expected[k])]
    raise_layout_error(where, missing=set(expected) - found_keys,
                       unexpected=found_keys - set(expected), mismatched=shapes)


def raise_layout_error(where: str, missing: Iterable[str], unexpected: Iterable[str],
                       mismatched: Iterable[tuple[str, tuple, tuple]], limit: int = 5) -> None:
    """CheckpointLayoutError when anything is missing or mis-shaped (else return)."""
    missing, unexpected, mismatched = sorted(missing), sorted(unexpected), sorted(mismatched)
    if not (missing or mismatched or unexpected):
        return
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing key(s), first: {_first(missing, limit)}")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected key(s), first: {_first(unexpected, limit)}")
    if mismatched:
        parts.append("shape mismatch (checkpoint != model): " + ", ".join(
            f"{k} {tuple(a)} != {tuple(b)}" for k, a, b in mismatched[:limit]))
    raise CheckpointLayoutError(
        f"checkpoint {where} does not match the architecture: " + "; ".join(parts)
        + ". Check that config.json matches the weights and that the checkpoint uses the "
        "expected key layout"
    )


def _first(keys: Iterable[str], limit: int) -> str:
    keys = list(keys)
    return ", ".join(keys[:limit]) + (" ..." if len(keys) > limit else "")


def load_hf_model(model_cls: Any, source: str | Path, *, dtype: str | torch.dtype = "bf16",
                  quantization: str | None = None, device: str | torch.device = "cpu",
                  allow_download: bool = False) -> Any:
    """``model_cls.from_pretrained`` with checked device/dtype/quantization and clear errors."""
    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype)
    quant = quantization_config(quantization, torch_dtype)
    where = resolve_source(source, allow_download)
    if Path(where).is_dir():
        check_model_directory(where)
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "weights_only": True,
                              "local_files_only": not allow_download,
                              # report layout problems ourselves instead of a random init
                              "output_loading_info": True, "ignore_mismatched_sizes": True}
    if quant is not None:
        kwargs.update(quantization_config=quant, device_map={"": str(dev)})
    try:
        model, info = model_cls.from_pretrained(where, **kwargs)
    except OSError as err:  # transformers reports missing files/cache misses as OSError
        raise ModelNotFoundError(f"cannot load {model_cls.__name__} from {where}: {err}") from err
    except pickle.UnpicklingError as err:  # a .bin that weights_only=True refuses
        files = [f.name for f in Path(str(where)).glob("*.bin")] if Path(str(where)).is_dir() \
            else []
        raise refused_pickle(Path(str(where)) / (files[0] if files else "*.bin"), err) from err
    except config_errors() as err:  # config.json's values are not this model's
        raise ModelLoadError(
            f"{Path(where) / 'config.json'} does not describe a {model_cls.__name__} "
            f"({type(err).__name__}: {_one_line(err)}): {COPY_AGAIN}") from err
    if info["missing_keys"] or info["mismatched_keys"]:
        raise_layout_error(where, info["missing_keys"], info["unexpected_keys"],
                           info["mismatched_keys"])
    if quant is None:
        model = model.to(dev)
    return model.eval()


def load_tokenizer(source: str | Path, allow_download: bool = False) -> Any:
    """A transformers tokenizer from a model directory (or cached hub id), clear when absent."""
    from transformers import AutoTokenizer

    where = resolve_source(source, allow_download)
    try:
        return AutoTokenizer.from_pretrained(where, local_files_only=not allow_download)
    except Exception as err:  # missing files, or files the tokenizer's parsers refuse
        raise ModelNotFoundError(
            f"no usable tokenizer in {where} ({type(err).__name__}: {_one_line(err)}); copy "
            "the model's tokenizer files (tokenizer.json or tokenizer.model with "
            "tokenizer_config.json) there"
        ) from err
