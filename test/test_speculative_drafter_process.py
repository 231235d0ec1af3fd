"""The drafter in its own process: the same draft as in process, and lossless captions."""

from __future__ import annotations

import threading

import pytest

from crossspec_ros.bench.engine import bag_windows
from crossspec_ros.models.pair import BUNDLED_PAIR, load_drafter, load_verifier
from crossspec_ros.paths import sample_bag
from crossspec_ros.speculative.drafter_process import DrafterProcess
from crossspec_ros.speculative.drafting import DraftChannel, run_drafter
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine
from crossspec_ros.speculative.stats import WindowStats


@pytest.fixture(scope="module")
def process():
    with DrafterProcess(str(BUNDLED_PAIR / "drafter")) as proc:
        yield proc


@pytest.fixture(scope="module")
def windows():
    return bag_windows(sample_bag(), 5)[2:5]


def _wait_done(channel: DraftChannel, timeout: float = 30.0) -> list[int]:
    with channel.cond:
        assert channel.cond.wait_for(lambda: channel.done, timeout=timeout)
        return list(channel.tokens)


def test_the_process_drafts_what_the_drafter_drafts_in_process(process, windows):
    drafter = load_drafter("")
    for window in windows:
        local = DraftChannel(lookahead=48)
        thread = threading.Thread(target=run_drafter, args=(
            drafter, window, local, lambda *a, **k: _Event(), WindowStats(), 30))
        thread.start()
        expected = _wait_done(local)
        local.stop()
        thread.join()
        remote = process.start(window, lookahead=48, max_new_tokens=30)
        assert _wait_done(remote) == expected
        assert process.first_token_ms > 0
        remote.stop()


class _Event:
    t_ms = 0.0


def test_the_engine_fed_by_a_drafter_process_confirms_the_verifiers_own_caption(process,
                                                                                windows):
    verifier, drafter = load_verifier(""), load_drafter("")
    engine = SpeculativeEngine(verifier, drafter, EngineConfig(max_new_tokens=30))
    for window in [*windows, *windows]:
        channel = process.start(window, lookahead=48, max_new_tokens=30)
        result = engine.run_window(window, draft=channel)
        assert result.tokens == verifier.reference_generate(verifier.prepare(window), 30)
    assert process.error is None


def test_a_drafter_process_that_cannot_load_says_why(tmp_path):
    from crossspec_ros.models.errors import ModelLoadError

    # the child's ModelLoadError comes back as one: the CLI prints it as for a thread
    with pytest.raises(ModelLoadError, match="no_drafter_here does not exist"):
        DrafterProcess(str(tmp_path / "no_drafter_here"))


def test_the_process_looks_at_a_window_as_the_drafter_does_here(process, windows):
    import torch

    drafter = load_drafter("")
    for window in windows:
        here = drafter.window_state(drafter.prepare(window))
        assert torch.allclose(process.look(window), here, atol=1e-5)


def test_on_draft_hears_each_draft_as_the_drafter_here_emits_it_with_the_window_state(
        process, windows):
    import torch

    from crossspec_ros.speculative.events import EngineEvent, EventKind

    drafter = load_drafter("")
    window = windows[0]
    here: list[EngineEvent] = []
    local = DraftChannel(lookahead=48)
    thread = threading.Thread(target=run_drafter, args=(
        drafter, window, local,
        lambda kind, **f: here.append(EngineEvent(kind, 0, 0.0, **f)) or here[-1],
        WindowStats(), 30))
    thread.start()
    _wait_done(local)
    local.stop()
    thread.join()
    heard: list[tuple] = []
    remote = process.start(window, lookahead=48, max_new_tokens=30,
                           on_draft=lambda kind, **f: heard.append((kind, f)))
    _wait_done(remote)
    remote.stop()
    assert process.wait_idle(timeout=10.0)
    drafts = [e for e in here if e.kind is EventKind.DRAFT]
    assert [f["tokens"] for _, f in heard] == [e.tokens for e in drafts]
    assert [f["text"] for _, f in heard] == [e.text for e in drafts]
    assert heard[-1][1]["log_probs"] == pytest.approx(drafts[-1].log_probs, abs=1e-4)
    assert all(kind is EventKind.DRAFT for kind, _ in heard)
    assert torch.allclose(remote.window_state, local.window_state, atol=1e-5)
