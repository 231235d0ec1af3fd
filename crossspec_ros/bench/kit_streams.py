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
does not time). Then the streams' prompt work batched (``models/prompt_lanes.py``), for K =
1, 2, 4, 8 streams: a ``PromptLanes`` of K lanes, every lane a frame's chunk at the prompt's
second chunk: the median of ``repeats`` vision calls of K frames (``vision_ms_by_batch[K]``)
and of ``repeats`` chunk steps of K lanes with each chunk's positions copied out into its
slot (``chunk_ms_by_frames[K]``); on the largest K, T1 for prompt steps (lane 0's last row
and its slot's new positions whatever the other lanes' frames hold). ``kit_profile
.measured_profile`` writes the medians as measured costs.
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
    result["prompt"] = _prompt_batches(kit, pool)
    return result


def _prompt_batches(kit: Any, pool: Any) -> dict[str, Any]:
    """For each K of ``LANE_COUNTS``: the median vision call of K frames and chunk step of K
    lanes (module docstring); T1 for prompt steps on the largest K."""
    import gc

    import torch

    from crossspec_ros.models.prompt_lanes import PromptLanes

    verifier = kit.exact
    _, chunks = verifier.prompt_layout()
    out: dict[str, Any] = {"chunk_rows": max(chunks), "frames": {}}
    for k in LANE_COUNTS:
        prompt = PromptLanes(pool, verifier._encode, k, chunks)
        warm_up_s = prompt.warm_up()
        slots = [pool.acquire() for _ in range(k)]
        try:
            requests = {lane: _frame(verifier, slots[lane], chunks, seed=lane)
                        for lane in range(k)}
            vision = _timed(lambda p=prompt, r=requests: _synced(p, lambda: p._features(r)),
                            kit.repeats)
            step = _chunk_step(prompt, requests)
            chunk = _timed(step, kit.repeats)
            out["frames"][str(k)] = {
                "vision_ms": round(statistics.median(vision), 3),
                "chunk_ms": round(statistics.median(chunk), 3),
                "vision_ms_all": [round(ms, 3) for ms in vision],
                "chunk_ms_all": [round(ms, 3) for ms in chunk],
                "compiled": prompt.laned.compiled, "warm_up_s": warm_up_s,
                "eager_steps": prompt.laned.eager_steps}
            kit.log(f"[streams] prompt of {k} frames: vision {statistics.median(vision):.3f} ms, "
                    f"chunk step {statistics.median(chunk):.3f} ms")
            if k == LANE_COUNTS[-1]:
                out["t1"] = _prompt_t1(prompt, requests, verifier, chunks)
                kit.log(f"[streams] prompt T1 "
                        f"{'holds' if out['t1']['bit_identical'] else 'FAILS'}")
        finally:
            for slot in slots:
                pool.release(slot)
        del prompt
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    out["chunk_ms_by_frames"] = {k: r["chunk_ms"] for k, r in out["frames"].items()}
    out["vision_ms_by_batch"] = {k: r["vision_ms"] for k, r in out["frames"].items()}
    return out


def _frame(verifier: Any, slot: Any, chunks: list[int], seed: int) -> Any:
    """A frame request of random pixels at the prompt's second chunk (its placeholders)."""
    import numpy as np
    import torch

    from crossspec_ros.models.prompt_lanes import FrameRequest

    image = np.random.default_rng(seed).integers(0, 256, (224, 224, 3), dtype=np.uint8)
    pixels = verifier.preprocess([image]).unsqueeze(0).to(verifier.device,
                                                          verifier.vision_dtype)
    ids = torch.full((1, chunks[1]), verifier.placeholder_id, device=verifier.device)
    return FrameRequest(verifier, slot, chunks[0], ids, pixels, stamp_ns=None)


def _synced(prompt: Any, call: Any) -> Any:
    from crossspec_ros.models.streams import inference, synchronize

    with inference(prompt.device, prompt.pool.stream):
        out = call()
        synchronize(prompt.device, prompt.pool.stream)
    return out


def _chunk_step(prompt: Any, requests: dict[int, Any]) -> Any:
    """A timed call: the chunk step of every lane (embeddings made before, untimed) and each
    chunk's positions copied out into its slot, as ``PromptLanes.step`` does after its
    vision call."""
    chunks = _synced(prompt, lambda: prompt.chunk_requests(requests,
                                                           prompt._features(requests)))

    def step() -> None:
        prompt.laned.step(chunks)
        for lane, r in requests.items():
            prompt.laned.copy(lane, r.slot, r.pos, r.pos + r.rows, into_lane=False)
    return step


def _prompt_t1(prompt: Any, requests: dict[int, Any], verifier: Any,
               chunks: list[int]) -> dict[str, Any]:
    """T1 for prompt steps: lane 0's last row and its slot's new positions alone, with the
    other lanes' frames of other random pixels, and alone again."""
    import torch

    mine = requests[0]

    def run(with_others: bool) -> tuple[Any, list[Any]]:
        others = {lane: _frame(verifier, r.slot, chunks, seed=100 + lane)
                  for lane, r in requests.items() if lane} if with_others else {}
        rows = _synced(prompt, lambda: prompt.step({0: mine, **others}))[0]
        end = mine.pos + mine.rows
        cache = [layer.keys[0, :, mine.pos:end].clone() for layer in mine.slot.cache.layers]
        return rows, cache

    alone = run(False)
    variants = {"other frames in the other lanes": run(True), "alone again": run(False)}
    same = {name: torch.equal(rows[1], alone[0][1]) and torch.equal(rows[0], alone[0][0])
            and all(torch.equal(a, b) for a, b in zip(cache, alone[1], strict=True))
            for name, (rows, cache) in variants.items()}
    return {"lanes": prompt.lanes, "compiled": prompt.laned.compiled,
            "bit_identical": all(same.values()), "variants": same}


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
