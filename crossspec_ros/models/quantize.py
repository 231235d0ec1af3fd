"""4-bit NF4 quantization of a model already in memory (bitsandbytes ``Linear4bit``).

Checkpoints are quantized as transformers loads them (``loading.quantization_config``). The
full-size architectures with random weights (``full_size.py``) have no checkpoint, so the GPU
benchmark quantizes them here instead, layer by layer, with the settings of that loading
path: NF4, double-quantized statistics, the model's float dtype for the matrix products, and
the output head left in float (transformers keeps ``lm_head`` unquantized too). bitsandbytes
also runs 4-bit layers on the CPU (slowly), which is how the tests exercise this path.
"""

from __future__ import annotations

import torch
from torch import nn

from crossspec_ros.models.errors import QuantizationUnavailableError
from crossspec_ros.models.loading import bitsandbytes_available

KEEP_IN_FLOAT = ("lm_head",)


def quantize_linear_layers_4bit(root: nn.Module, compute_dtype: torch.dtype | None = None,
                                keep: tuple[str, ...] = KEEP_IN_FLOAT) -> int:
    """Replace every ``nn.Linear`` under ``root`` (except children named in ``keep``) by an
    NF4 ``Linear4bit`` on the same device; returns how many were replaced. Each float weight
    is freed as its layer is replaced, so the peak is the float model plus one layer."""
    if not bitsandbytes_available():
        raise QuantizationUnavailableError(
            "4-bit quantization needs bitsandbytes, not installed here; `pip install "
            "bitsandbytes` or run without quantization")
    import bitsandbytes as bnb

    replaced = 0
    for parent in list(root.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear or name in keep:
                continue
            weight = child.weight.data
            layer = bnb.nn.Linear4bit(child.in_features, child.out_features,
                                      bias=child.bias is not None,
                                      compute_dtype=compute_dtype or weight.dtype,
                                      compress_statistics=True, quant_type="nf4",
                                      device="meta")
            layer.weight = bnb.nn.Params4bit(weight, requires_grad=False,
                                             compress_statistics=True, quant_type="nf4")
            if child.bias is not None:
                layer.bias = nn.Parameter(child.bias.data, requires_grad=False)
            setattr(parent, name, layer.to(weight.device))  # .to quantizes the weight
            replaced += 1
    return replaced


def quantize_caption_model_4bit(model: object) -> int:
    """A caption model's layers in NF4 the way its checkpoint would load in 4 bits: an
    EventGPT drafter's language model only (``load_eventgpt``), the whole of a transformers
    LLaVA-family model otherwise (its ``lm_head`` kept). Returns the layers replaced."""
    from crossspec_ros.models.eventgpt import EventGPTModel

    module = getattr(model, "model", None)
    if not isinstance(module, nn.Module):
        raise TypeError(f"{type(model).__name__} holds no torch model to quantize")
    if isinstance(module, EventGPTModel):
        module = module.language_model
    return quantize_linear_layers_4bit(module)
