"""Lanes (models/lanes.py): several streams' decoding steps as one [S, B] forward. A stream's
rows, and so its greedy caption and what its verification passes accept, are bit-identical
whatever the other lanes hold or do; a live prefill adopted into a lane is the one-shot
prefill's cache bit for bit; the batcher runs a step when every active lane has submitted or
the gather wait ends, on an injected clock."""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from typing import Any

import pytest
import torch
from decoding_rows import teacher_forced_rows

from crossspec_ros.models.lanes import LaneRequest, StepBatcher, use_lanes
from crossspec_ros.models.static_runtime import RuntimeOptions
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine

EAGER_8 = RuntimeOptions(compile=False, step_rows=(8,))
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])


def lane_twins(verifier, lanes=3, dtype=None, gather_s=0.01, **kwargs):
    """``lanes`` twins of the verifier (its own copy of the weights when ``dtype`` casts
    them) on one laned runtime of 8-row steps."""
    base = copy.copy(verifier)
    base.__dict__.pop("_static_runtimes", None)
    base.runtime = None
    if dtype is not None:
        base.model = copy.deepcopy(verifier.model).to(dtype)
    return use_lanes(base, EAGER_8, lanes, max_new_tokens=48, gather_s=gather_s, **kwargs)


def lane_cache(twin, end):
    """A copy of the twin's lane's K/V, positions [0, end), every layer."""
    laned, lane = twin.runtime.laned, twin.runtime.lane
    return [(layer.keys[lane, :, :end].clone(), layer.values[lane, :, :end].clone())
            for layer in laned.cache.layers]


def one_shot_reference(twin, window):
    """A one-shot prefill of ``window`` on ``twin`` (closed after): its greedy first token,
    its last logits, its lane's cache and the rows of feeding that token."""
    one_shot = twin.prefill(twin.prepare(window))
    token = int(one_shot.last_logits.argmax())
    first, cache = one_shot.last_logits.clone(), lane_cache(twin, one_shot.pos)
    fed = one_shot.feed([token])
    one_shot.close()
    return token, first, cache, fed


def run_threads(threads, timeout_s: float = 300.0) -> None:
    """Start ``threads`` and wait for each (generous bound: a loaded CI machine)."""
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s)


def same_cache(a, b):
    return all(torch.equal(x, y) for pair_a, pair_b in zip(a, b, strict=True)
               for x, y in zip(pair_a, pair_b, strict=True))


class Background:
    """Other streams decoding other windows on their own threads until stopped."""

    def __init__(self, twins, windows):
        self.stop, self.errors = threading.Event(), []
        self.threads = [threading.Thread(target=self._decode, args=(t, windows[i % len(windows)]))
                        for i, t in enumerate(twins)]

    def _decode(self, twin, window):
        try:
            inputs = twin.prepare(window)
            while not self.stop.is_set():
                twin.generate_greedy(inputs, 12)
        except BaseException as err:  # reported by the test
            self.errors.append(err)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)
        assert not self.errors, self.errors


# ------------------------------------------------------------------ one step, other lanes
@DTYPES
def test_a_lanes_rows_do_not_depend_on_what_the_other_lanes_hold(bundled, windows, dtype):
    twins = lane_twins(bundled[0], 4, dtype)
    laned = twins[1].runtime.laned
    session = twins[1].prefill(twins[1].prepare(windows[0]))
    pos, d = session.pos, laned.pool.embed.weight.shape[1]
    mine = LaneRequest(pos, laned.pool.embed_ids([int(session.last_logits.argmax()), 5, 9])[0])
    alone = laned.step({1: mine})
    cache = lane_cache(twins[1], pos + 3)
    others = (twins[0].prefill(twins[0].prepare(windows[1])),
              twins[2].prefill(twins[2].prepare(windows[2])))
    g = torch.Generator().manual_seed(0)
    variants = {  # the real windows first: the others write over lanes 0 and 2 after them
        "other windows": {k: LaneRequest(s.pos, laned.pool.embed_ids(
            [int(s.last_logits.argmax())])[0]) for k, s in zip((0, 2), others, strict=True)},
        "zeros": {k: LaneRequest(pos, torch.zeros(8, d)) for k in (0, 2, 3)},
        "random": {k: LaneRequest(int(torch.randint(0, pos, (), generator=g)),
                                  3 * torch.randn(k + 2, d, generator=g)) for k in (0, 3)},
        "parked": {},
    }
    for name, requests in variants.items():
        out = laned.step({1: mine, **requests})
        assert torch.equal(out[1][0], alone[1][0]) and torch.equal(out[1][1], alone[1][1]), name
        assert same_cache(lane_cache(twins[1], pos + 3), cache), name


# ------------------------------------------------------------------ decoding in a lane


@DTYPES
def test_verification_rows_in_a_lane_equal_one_token_decoding_while_other_lanes_decode(
        bundled, windows, dtype):
    twins = lane_twins(bundled[0], 3, dtype)
    alone = teacher_forced_rows(twins[0], windows[0], 7, max_tokens=16)  # the other lanes idle
    with Background(twins[1:], windows[1:]):
        for k in (3, 7):  # with the pending token: 4 and 8 rows of the 8-row shape
            single, chunked = teacher_forced_rows(twins[0], windows[0], k, max_tokens=16)
            assert len(single) == len(chunked) == len(alone[0])
            for i, (a, b, c) in enumerate(zip(single, chunked, alone[0], strict=True)):
                assert torch.equal(a, b) and torch.equal(a, c), (k, i)


@pytest.mark.slow
def test_a_compiled_lane_step_is_warmed_up_once_and_stays_exact_whatever_the_others_do(
        bundled, windows):
    """Inductor, fullgraph (the design's first risk: the lane cache's scatter in the
    graph): one compile at the warm-up, none later, no eager step; verification rows equal
    one-token decoding in the lane while the other lanes decode, and equal them alone."""
    from torch._dynamo.utils import counters

    twins = lane_twins(bundled[0], 3, torch.bfloat16)
    laned = twins[0].runtime.laned
    laned.warm_up(compile=True)
    assert laned.compiled and laned.compile_failed is None
    graphs = counters["stats"]["unique_graphs"]
    alone = teacher_forced_rows(twins[0], windows[0], 7, max_tokens=16)
    with Background(twins[1:], windows[1:]):
        single, chunked = teacher_forced_rows(twins[0], windows[0], 7, max_tokens=16)
    for a, b, c in zip(single, chunked, alone[0], strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert counters["stats"]["unique_graphs"] == graphs and laned.eager_steps == 0


def test_a_live_prefill_adopted_into_a_lane_gives_the_one_shot_prefills_cache_bit_for_bit(
        bundled, windows):
    from crossspec_ros.models.live_prefill import LivePrefill

    twin = lane_twins(bundled[0], 2, torch.bfloat16)[1]
    window = windows[1]
    token, first, cache, fed = one_shot_reference(twin, window)
    live = LivePrefill(twin)
    for frame in window.frames:
        live.add_frame(frame.image, frame.stamp_ns)
    session, _ = live.finish(())
    assert twin.runtime.laned.lane_copies == 2
    assert torch.equal(session.last_logits, first)
    assert same_cache(lane_cache(twin, session.pos), cache)
    assert torch.equal(session.feed([token]), fed)


def test_a_streams_captions_are_unchanged_when_other_streams_run_other_windows_or_stop(
        bundled, windows):
    """Three engines on three threads over rotations of the windows, the third removed after
    one window, and a fourth stream that fails mid-window; every caption (greedy decoding
    and verification passes of proposals from the history, as the windows repeat) equals
    its stream's own with the other lanes idle."""
    twins = lane_twins(bundled[0], 4, torch.bfloat16)
    engines = [SpeculativeEngine(t, None, EngineConfig(max_new_tokens=24)) for t in twins[:3]]
    alone = [[e.verifier_only(w) for w in windows] for e in engines]
    plans = [[0, 1, 2, 0, 1, 2], [1, 2, 0, 1, 2, 0], [2]]
    results: dict[int, list] = {}
    errors: list[BaseException] = []
    accepted: dict[int, int] = {}  # proposals the verification passes accepted, by stream

    def drive(k):
        try:
            runs = [(i, engines[k].run_window(windows[i])) for i in plans[k]]
            results[k] = [(i, r.tokens) for i, r in runs]
            accepted[k] = sum(sum(r.stats.accepted.values()) + r.stats.prefill_accepted
                              for _, r in runs)
        except BaseException as err:  # reported below
            errors.append(err)

    def fail_mid_window():
        session = twins[3].prefill(twins[3].prepare(windows[0]))
        for _ in range(3):
            session.feed([int(session.last_logits.argmax())])
        raise ValueError("a stream's engine fails")

    def failing():
        with contextlib.suppress(ValueError):  # its session goes with the frame: lane idle
            fail_mid_window()

    run_threads([threading.Thread(target=drive, args=(k,)) for k in range(3)]
                + [threading.Thread(target=failing)])
    assert not errors and sorted(results) == [0, 1, 2], errors
    for k, captions in results.items():
        assert [tokens for _, tokens in captions] == [alone[k][i] for i in plans[k]], k
    batcher = twins[0].runtime.batcher
    assert not batcher.counters.failed_steps and batcher.active == set()
    # how the steps grouped and what the passes accepted (timing-dependent: shown with -s)
    print("lanes per step:", dict(batcher.counters.lanes_per_step), "accepted:", accepted)


# ------------------------------------------------------------------ a lane's owner
def test_a_lane_is_waited_for_from_its_windows_first_step_until_its_session_ends(
        bundled, windows):
    twins = lane_twins(bundled[0], 2)
    batcher = twins[0].runtime.batcher
    session = twins[1].prefill(twins[1].prepare(windows[0]))
    assert batcher.active == {1}
    session.close()
    assert batcher.active == set()


def test_a_later_window_takes_the_lane_and_the_earlier_session_refuses_to_step(
        bundled, windows):
    twin = lane_twins(bundled[0], 2)[0]
    earlier = twin.prefill(twin.prepare(windows[0]))
    later = twin.prefill(twin.prepare(windows[1]))
    with pytest.raises(RuntimeError, match="lost its lane"):
        earlier.feed([5])
    token = int(later.last_logits.argmax())
    rows = later.feed([token])
    del earlier, later
    again = twin.prefill(twin.prepare(windows[1]))
    assert torch.equal(again.feed([token]), rows)


def test_lanes_need_one_step_shape():
    with pytest.raises(ValueError, match="lanes"):
        RuntimeOptions(step_rows=(1, 8), lanes=2)
    with pytest.raises(ValueError, match="lanes"):
        RuntimeOptions(lanes=0)


# ------------------------------------------------------------------ the batcher
class ManualClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class RecordingLanes:
    """Stands in for a LanedLM: records each step's lanes; ``fail`` raises once."""

    def __init__(self):
        self.steps: list[set[int]] = []
        self.fail: BaseException | None = None
        self.during_step = None  # called inside the next step

    def step(self, requests):
        self.steps.append(set(requests))
        if self.during_step is not None:
            hook, self.during_step = self.during_step, None
            hook()
        if self.fail is not None:
            err, self.fail = self.fail, None
            raise err
        return {lane: (torch.tensor([r.pos]), torch.tensor([lane])) for lane, r in
                requests.items()}


def batcher_of(lanes=(0, 1), gather_s=0.05):
    clock, laned = ManualClock(), RecordingLanes()
    batcher = StepBatcher(laned, gather_s, clock)
    for lane in lanes:
        batcher.activate(lane)
    return batcher, laned, clock


def request(pos=3):
    return LaneRequest(pos, torch.zeros(1, 4))


def test_a_lane_that_never_submits_delays_a_step_by_the_gather_wait_only():
    batcher, laned, clock = batcher_of()
    ticket = batcher.submit(0, request())
    assert not batcher.ready()
    clock.now += 0.049
    assert not batcher.ready()
    clock.now += 0.001
    assert batcher.ready()
    assert batcher.result(ticket)[1].item() == 0
    assert laned.steps == [{0}]  # lane 1 parked
    assert batcher.counters.gather_wait_ms == pytest.approx(50.0)


def test_a_released_lane_is_not_waited_for():
    batcher, laned, _ = batcher_of()
    ticket = batcher.submit(0, request())
    assert not batcher.ready()
    batcher.deactivate(1)
    assert batcher.ready()
    batcher.result(ticket)
    assert laned.steps == [{0}]


def test_a_step_waits_for_every_active_lane_and_carries_them_together():
    batcher, laned, _ = batcher_of((0, 1, 2))
    out: dict[int, int] = {}

    def stream(lane):
        out[lane] = int(batcher.run(lane, request(lane))[0].item())

    threads = [threading.Thread(target=stream, args=(lane,)) for lane in (0, 1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert out == {0: 0, 1: 1, 2: 2}
    assert laned.steps == [{0, 1, 2}]  # the manual clock never ends the gather wait
    assert batcher.counters.lanes_per_step == {3: 1}


def test_a_lane_arriving_during_a_step_rides_the_next_one():
    batcher, laned, clock = batcher_of((0,))
    late: list = []

    def window_starts_on_lane_1():  # while lane 0's step runs
        batcher.activate(1)
        late.append(batcher.submit(1, request()))

    laned.during_step = window_starts_on_lane_1
    batcher.result(batcher.submit(0, request()))
    assert laned.steps == [{0}] and not late[0].done
    assert not batcher.ready()  # lane 0 is active: waited for until the gather wait ends
    clock.now += 0.05
    batcher.result(late[0])
    assert laned.steps == [{0}, {1}]


def test_a_failing_step_reaches_every_rider_and_the_next_step_runs():
    batcher, laned, clock = batcher_of()
    laned.fail = ValueError("device fault")
    tickets = [batcher.submit(lane, request()) for lane in (0, 1)]
    for ticket in tickets:
        with pytest.raises(RuntimeError, match="device fault"):
            batcher.result(ticket)
    assert batcher.counters.failed_steps == 1
    ticket = batcher.submit(1, request())
    clock.now += 0.05
    assert batcher.result(ticket)[1].item() == 1
    assert laned.steps == [{0, 1}, {1}]


def test_an_expected_lane_is_waited_for_until_it_submits_or_its_wait_ends():
    """A stream whose prompt was just prefilled is expected: the step waits for its first
    rows (the streams prefilled together decode together), but no longer than its wait."""
    batcher, laned, clock = batcher_of((0,))
    batcher.expect(1, 0.03)
    first = batcher.submit(0, request())
    clock.now += 0.02
    assert not batcher.ready()
    second = batcher.submit(1, request())
    assert batcher.ready()
    batcher.result(first), batcher.result(second)
    assert laned.steps == [{0, 1}]
    batcher.expect(1, 0.03)  # expected again, never comes
    third = batcher.submit(0, request())
    clock.now += 0.029
    assert not batcher.ready()
    clock.now += 0.002
    assert batcher.ready()
    batcher.result(third)
    assert laned.steps == [{0, 1}, {0}]
    batcher.expect(1, 0.03)
    batcher.deactivate(1)  # its window ended: not expected any more
    batcher.result(batcher.submit(0, request()))
    assert laned.steps[-1] == {0}


def test_a_wait_behind_a_running_step_is_no_gather_wait():
    """Rows submitted while a step ran wait the gather time from the step's end for the
    active lanes that have not submitted, not from their own submission."""
    batcher, laned, clock = batcher_of((0, 1, 2))
    behind: list = []

    def lane_1_submits_during_a_long_step():
        behind.append(batcher.submit(1, request()))
        clock.now += 0.2

    laned.during_step = lane_1_submits_during_a_long_step
    ticket = batcher.submit(0, request())
    clock.now += 0.05  # lanes 1 and 2 do not come: the gather wait ends
    batcher.result(ticket)
    assert not batcher.ready()  # lanes 0 and 2 active, the device free for no time yet
    clock.now += 0.049
    assert not batcher.ready()
    clock.now += 0.002
    batcher.result(behind[0])
    assert laned.steps == [{0}, {1}]


def test_a_laned_object_that_expects_lanes_holds_the_step_for_them():
    batcher, laned, clock = batcher_of(())
    laned.expected_lanes = lambda pending: {1} - set(pending)
    ticket = batcher.submit(0, request())
    assert not batcher.ready()
    clock.now += 0.05
    assert batcher.ready()
    batcher.result(ticket)
    tickets = [batcher.submit(0, request()), batcher.submit(1, request())]
    assert batcher.ready()
    for t in tickets:
        batcher.result(t)
    assert laned.steps == [{0}, {0, 1}]


def test_rows_submitted_while_a_step_waits_for_the_device_ride_it():
    """The step takes the device's turn first and its riders then: a lane submitting while
    another call holds the device rides the step that was waiting for it."""
    from types import SimpleNamespace

    from crossspec_ros.models.device_turns import DeviceTurns

    turns = DeviceTurns()
    batcher, laned, _ = batcher_of((0,), gather_s=0.0)
    laned.pool = SimpleNamespace(lm=SimpleNamespace(_device_turns=turns))
    out: dict[int, Any] = {}

    def stream(lane):
        out[lane] = batcher.run(lane, request(lane))

    turns.acquire()  # another call holds the device
    first = threading.Thread(target=stream, args=(0,))
    first.start()
    until(lambda: turns._waiting)  # the step of lane 0 waits for the device
    second = threading.Thread(target=stream, args=(1,))
    second.start()
    until(lambda: 1 in batcher._pending)
    turns.release()
    for t in (first, second):
        t.join(timeout=30)
    assert laned.steps == [{0, 1}] and set(out) == {0, 1}


def until(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)
