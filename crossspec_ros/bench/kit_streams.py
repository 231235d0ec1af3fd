"""The GPU kit's ``streams`` stage (issue 57, docs/design-streams.md section 5): what one
``[S, B]`` lane step (``models/lanes.py``) and a lane's adoption copy cost on the kit's
verifier, and T1 of the exactness contract in the kit's dtype.

On the verifier's exact runtime (``kit.exact``: one step shape of ``step_rows`` rows), for
S = 1, 2, 4, 8 a ``LanedLM`` is built as ``use_lanes`` builds it (its step compiled by its
warm-up when the kit compiles), then every lane requests a ``step_rows``-row step at a
mid-cache position: the median of ``repeats`` steps is ``lane_pass_ms_by_lanes[S]``. On the
largest S: ``lane_copy_ms``, the median of ``repeats`` adoptions of a whole prompt
(``LanedLM.adopt``), and T1: lane 0's hidden states and logits are bit-identical whether the
other lanes are parked or hold random rows at random positions. The pool's own caches are the
exact runtime's (``use_lanes`` would build another pool of ``2 S + 1`` caches that this stage
does not time). ``kit_profile.measured_profile`` writes the medians as measured costs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

LANE_COUNTS = (1, 2, 4, 8)


def stage_streams(kit: Any) -> dict[str, Any]:
    """The stage (gpu_kit.STAGES): each S's step cost, the adoption copy and T1."""
    import gc

    import torch

    from crossspec_ros.models.lanes import LanedLM

    pool = kit.exact.runtime
    result: dict[str, Any] = {
        "model": kit.exact.info.name, "dtype": kit.dtype, "device": kit.device,
        "step_rows": pool.max_rows, "repeats": kit.repeats, "pool": pool.describe(),
        "lanes": {}}
    for lanes in LANE_COUNTS:
        laned = LanedLM(pool, lanes)
        warm_up_s = laned.warm_up()
        pos = (laned.park_at - laned.rows) // 2  # mid-cache: every lane at one position
        requests = {lane: _request(laned, pos, seed=lane) for lane in range(lanes)}
        steps = _timed(lambda laned=laned, requests=requests: laned.step(requests),
                       kit.repeats)
        result["lanes"][str(lanes)] = {
            "ms_per_step": round(statistics.median(steps), 3),
            "ms_per_step_all": [round(ms, 3) for ms in steps], "position": pos,
            "compiled": laned.compiled, "compile_failed": laned.compile_failed,
            "warm_up_s": warm_up_s, "eager_steps": laned.eager_steps}
        kit.log(f"[streams] {laned.shape}: {statistics.median(steps):.3f} ms a step "
                f"({'compiled' if laned.compiled else 'eager'}, warm-up {warm_up_s:.1f} s)")
        if lanes == LANE_COUNTS[-1]:
            result["adoption"] = _adoption(laned, kit)
            result["t1"] = _t1(laned)
            kit.log(f"[streams] adoption {result['adoption']['ms']:.3f} ms; T1 "
                    f"{'holds' if result['t1']['bit_identical'] else 'FAILS'}")
        del laned, requests
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    result["lane_pass_ms_by_lanes"] = {s: r["ms_per_step"] for s, r in result["lanes"].items()}
    result["lane_copy_ms"] = result["adoption"]["ms"]
    return result


def _request(laned: Any, pos: int, seed: int, rows: int | None = None) -> Any:
    """A lane's step of ``rows`` (default the step's) embedded random tokens at ``pos``."""
    import torch

    from crossspec_ros.models.lanes import LaneRequest

    vocab = laned.pool.embed.weight.shape[0]
    ids = torch.randint(0, vocab, (rows or laned.rows,),
                        generator=torch.Generator().manual_seed(seed))
    return LaneRequest(pos, laned.pool.embed_ids(ids.tolist())[0])


def _timed(call: Any, repeats: int) -> list[float]:
    """Milliseconds of each of ``repeats`` calls after one untimed (each call synchronizes
    the device before it returns: ``LanedLM.step``, ``adopt``)."""
    call()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def _adoption(laned: Any, kit: Any) -> dict[str, Any]:
    """The median of ``repeats`` copies of a whole prompt from a pool slot into the last
    lane (what a window's first step costs once)."""
    positions = min(kit.exact.prompt_layout()[0], laned.park_at)
    slot = laned.pool.acquire()
    try:
        copies = _timed(lambda: laned.adopt(laned.lanes - 1, slot, positions), kit.repeats)
    finally:
        laned.pool.release(slot)
    return {"ms": round(statistics.median(copies), 3), "positions": positions,
            "ms_all": [round(ms, 3) for ms in copies]}


def _t1(laned: Any) -> dict[str, Any]:
    """T1 (docs/design-streams.md section 3): lane 0's rows with every other lane parked,
    then with the others holding random rows at random positions, then parked again."""
    import torch

    pos = (laned.park_at - laned.rows) // 2
    mine = _request(laned, pos, seed=1000)
    generator = torch.Generator().manual_seed(7)
    others = {lane: _request(laned, int(torch.randint(0, pos + 1, (), generator=generator)),
                             seed=1000 + lane, rows=1 + lane % laned.rows)
              for lane in range(1, laned.lanes)}
    alone = laned.step({0: mine})[0]
    variants = {"random rows in the other lanes": laned.step({0: mine, **others})[0],
                "parked again": laned.step({0: mine})[0]}
    same = {name: torch.equal(rows[0], alone[0]) and torch.equal(rows[1], alone[1])
            for name, rows in variants.items()}
    largest = max(float((rows[1] - alone[1]).abs().max()) for rows in variants.values())
    return {"lanes": laned.lanes, "position": pos, "compiled": laned.compiled,
            "bit_identical": all(same.values()), "variants": same,
            "max_logit_difference": largest}
