"""Process-wide settings for running several models in one Python process.

``tune_process_for_models`` is called once at start-up by everything that runs models
(``crossspec drive``, ``crossspec node``, ``crossspec bench engine``), so that a benchmark
measures under exactly the thread set-up of the live graph: a ratio of latencies taken under
different thread settings is not a measurement (two 2-thread OpenMP pools on 2 shared cores
collapse under any other load). ``settle_heap`` follows every loading of models (the nodes'
configure, the bench, the drafter process), so that no window pays for the garbage
collector walking them.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

SWITCH_INTERVAL_S = 2e-4
COMPILE_CACHE = Path.home() / ".cache" / "crossspec" / "inductor"  # TORCHINDUCTOR_CACHE_DIR


def tune_process_for_models(device: str = "cpu") -> dict[str, float]:
    """Hand the GIL over often (a thread returning from a torch op otherwise waits up to 5 ms
    for it, per op) and, on CPU, give each model thread one intra-op thread (concurrent
    OpenMP pools oversubscribe). Returns the settings, for reports."""
    # compiled kernels kept across starts (static runtime): set before torch._dynamo is
    # imported, which fills in its own default under /tmp
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(COMPILE_CACHE))
    import torch

    sys.setswitchinterval(SWITCH_INTERVAL_S)
    if str(device).startswith("cpu"):
        torch.set_num_threads(1)
    if torch.cuda.is_available():
        # cuDNN's attention fails (mha_graph.execute) on the verification steps' masked
        # multi-token queries (H100, torch 2.11+cu130); flash / memory-efficient SDPA do not
        torch.backends.cuda.enable_cudnn_sdp(False)
    return {"torch_threads": torch.get_num_threads(),
            "switch_interval_s": sys.getswitchinterval()}


def settle_heap() -> None:
    """Collect, then take every object alive now out of the cyclic collector's walks (call it
    after loading or unloading models).

    Loaded models are hundreds of thousands of Python objects (374,000 with the bundled
    pair), and a full collection walks them all: 166 ms measured, landing in whichever
    window runs then (7 in one ``bench engine`` run, up to 194 ms). Frozen objects are still
    freed by their reference counts; a frozen cycle dropped later (an unloaded model) is
    reclaimed by the next call, which unfreezes before it collects."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
