"""process_tuning: the settings every model-running process takes (threads, GIL, heap)."""

import gc
import sys
import weakref

import torch

from crossspec_ros.process_tuning import settle_heap, tune_process_for_models


class _Cycle:
    def __init__(self) -> None:
        self.me = self  # only the cyclic collector can free it


def test_settle_heap_freezes_what_is_alive_out_of_the_collectors_walks():
    kept = _Cycle()
    settle_heap()
    try:
        assert gc.get_freeze_count() > 0
        assert gc.is_tracked(kept) and all(o is not kept for o in gc.get_objects())  # frozen
    finally:
        gc.unfreeze()


def test_settle_heap_reclaims_a_frozen_cycle_dropped_later():
    dropped = _Cycle()
    alive = weakref.ref(dropped)
    settle_heap()  # frozen while alive (a loaded model)
    try:
        del dropped  # unloaded: a cycle among frozen objects, no full collection frees it
        gc.collect()
        assert alive() is not None
        settle_heap()  # unfreezes, then collects
        assert alive() is None
    finally:
        gc.unfreeze()


def test_tuning_turns_cudnn_attention_off_where_cuda_is_present(monkeypatch):
    # cuDNN's SDPA fails on the masked multi-token verification steps (seen on an H100)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    interval, enabled = sys.getswitchinterval(), torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    try:
        tune_process_for_models("cuda")
        assert torch.backends.cuda.cudnn_sdp_enabled() is False
    finally:
        torch.backends.cuda.enable_cudnn_sdp(enabled)
        sys.setswitchinterval(interval)
