"""Command-line argument types the benchmarks share."""

from __future__ import annotations

# the benchmarks' float types by torch's names; the node parameter's short names are taken too
BENCH_FLOAT_TYPES = {"bfloat16": "bfloat16", "float32": "float32", "bf16": "bfloat16",
                     "fp32": "float32"}


def bench_float_type(text: str) -> str:
    """argparse type of a benchmark's --dtype: bf16 or bfloat16, fp32 or float32 -> torch's
    name (the JSON reports name it so)."""
    return BENCH_FLOAT_TYPES.get(text.lower(), text)
