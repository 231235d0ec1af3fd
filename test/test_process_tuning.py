"""process_tuning: the settings every model-running process takes (threads, GIL, heap)."""

import gc
import weakref

from crossspec_ros.process_tuning import settle_heap


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
