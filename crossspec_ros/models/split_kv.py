"""Attention over a static cache split along its length, for the static runtime's steps
(``RuntimeOptions.attention = "split_kv"``).

Why: on an H200 a 32-row decoding step of the 7B verifier spent 3.25 of its ~9.8 ms in
attention (docs/gpu-h200-2026-11-29.md, the trace stage): the static runtime attends through
a boolean mask, so PyTorch's SDPA picks its memory-efficient kernel, which gives each head one
thread block: 32 blocks on 132 SMs read the cache's ~1.1 GB at ~0.35 TB/s. Split over the
cache's length (flash-decoding's idea), every (head, block of positions) pair is work of its
own: a batched matrix product per split, a softmax per split in float32, and one combine of
the splits weighted by their maxima. Compiled, that is cuBLAS's batched GEMMs and inductor's
fused reductions; whether it beats the SDPA kernel is the GPU kit's tuning stage's question.

**Exactness.** A row's output depends only on its own query, the cache and the step's shape
(the split layout is fixed by the cache's length), so the runtime stays exact by
construction, as with SDPA: every step after the prompt has the same shape. Its numbers are
not SDPA's (the scores are rounded to the model's dtype before the float32 softmax, as
transformers' eager attention does, and the splits are summed in another order): a
split_kv runtime's greedy caption is its own, possibly not the default runtime's at a
near-tie (the contract is per runtime, as for inductor's settings).

How it is reached: transformers' Llama attention calls the function registered for the
model's ``_attn_implementation`` with the forward's extra keyword arguments. ``install``
registers, for "sdpa", a function that runs this attention when the call carries
``kv_splits`` (only the static runtime's steps pass it) and transformers' own SDPA otherwise:
the same call as before, so every other path (HF generate, lanes, a runtime with the default
attention) is unchanged bit for bit. It is installed before any runtime compiles (compiled
graphs guard on the function they traced).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

# the cache in this many blocks of positions: with the verifier's 32 heads, 256 (head, block)
# products a step, enough to keep an H200's 132 SMs reading
KV_SPLITS = 8
ALIGN = 8  # positions per block a multiple of this (16-byte rows of bf16 K/V)
_INSTALL = threading.Lock()


def padded_length(length: int, splits: int = KV_SPLITS) -> int:
    """The cache length a split runtime allocates: ``length`` rounded up to ``splits`` equal
    blocks of a multiple of ``ALIGN`` positions (the positions past the real ones are masked,
    as every unwritten position of a static cache is)."""
    block = -(-length // splits)
    return splits * (-(-block // ALIGN) * ALIGN)


def split_kv_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       mask: torch.Tensor, scaling: float, splits: int) -> torch.Tensor:
    """Attention of ``query`` [b, heads, q, d] over ``key``/``value`` [b, kv_heads, L, d]
    (L a multiple of ``splits``) through a boolean ``mask`` [b or 1, 1, q, L] (True: attend),
    the cache cut into ``splits`` blocks of positions. Returns [b, q, heads, d] in the query's
    dtype (transformers' attention output layout). Every row must attend to at least one
    position (a causal row attends to itself); a block a row cannot see gets weight 0."""
    b, heads, q_len, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    groups, block = heads // kv_heads, length // splits
    if groups * kv_heads != heads or block * splits != length:
        raise ValueError(f"split_kv attention: {heads} heads over {kv_heads} K/V heads, "
                         f"{length} positions in {splits} splits do not divide")
    # the query heads sharing a K/V head (grouped-query attention) are rows of one product
    queries = query.reshape(b, kv_heads, groups * q_len, dim)
    keys = key.reshape(b, kv_heads, splits, block, dim)
    values = value.reshape(b, kv_heads, splits, block, dim)
    scores = torch.einsum("bhqd,bhskd->bhsqk", queries, keys).float() * scaling
    scores = scores.reshape(b, kv_heads, splits, groups, q_len, block)
    visible = mask.reshape(mask.shape[0], 1, q_len, splits, block).transpose(2, 3)[:, :, :, None]
    scores = scores.masked_fill(~visible, torch.finfo(torch.float32).min)
    peak = scores.amax(-1, keepdim=True)  # per split: a hidden split's peak is float32's min
    weights = torch.exp(scores - peak)
    total = weights.sum(-1, keepdim=True)
    partial = torch.einsum("bhsqk,bhskd->bhsqd",
                           weights.to(value.dtype).reshape(b, kv_heads, splits, groups * q_len,
                                                           block), values)
    partial = partial.reshape(b, kv_heads, splits, groups, q_len, dim)
    scale = torch.exp(peak - peak.amax(2, keepdim=True))  # 0 for a hidden split
    out = (partial.float() * scale).sum(2) / (total * scale).sum(2)
    return out.to(query.dtype).reshape(b, heads, q_len, dim).transpose(1, 2)


def install() -> None:
    """Route transformers' "sdpa" attention through ``_attention`` (module docstring); once."""
    from transformers import AttentionInterface

    with _INSTALL:
        current = AttentionInterface._global_mapping["sdpa"]
        if getattr(current, "crossspec_split_kv", False):
            return
        AttentionInterface.register("sdpa", _routed(current))


def _routed(sdpa: Any) -> Any:
    def attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, *args: Any, kv_splits: int | None = None,
                  **kwargs: Any) -> tuple[torch.Tensor, None]:
        if not kv_splits or attention_mask is None:
            return sdpa(module, query, key, value, attention_mask, *args, **kwargs)
        scaling = kwargs.get("scaling")
        return split_kv_attention(query, key, value, attention_mask,
                                  module.scaling if scaling is None else scaling,
                                  kv_splits), None

    attention.crossspec_split_kv = True  # type: ignore[attr-defined]
    return attention
