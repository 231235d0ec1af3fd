"""The graph composed once (crossspec_ros/composition.py): what the nodes, caption and the
bench's replay build through."""

from __future__ import annotations

from contextlib import nullcontext

import pytest

from crossspec_ros.composition import build_engine, caption_patience_s, share_turns, verifier_loop
from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier
from crossspec_ros.params import DRAFT_NODE_PARAMS, VERIFIER_NODE_PARAMS, ParameterError, validate
from crossspec_ros.speculative.draft_loop import DraftLoop
from crossspec_ros.speculative.loop_clock import ManualClock
from crossspec_ros.speculative.verifier_first import VerifierFirst


@pytest.fixture(scope="module")
def verifier():
    return tiny_verifier(seed=1)


def test_a_parameter_that_does_not_fit_the_verifier_is_refused_before_its_runtime_is_prepared(
        verifier, monkeypatch):
    import crossspec_ros.models.runtime_setup as runtime_setup

    prepared = []
    monkeypatch.setattr(runtime_setup, "prepare_runtime",
                        lambda model, *a: prepared.append(model) or "prepared")
    vocab = verifier.info.vocab_size
    p = validate({"acceptance": f"top_k:{vocab + 1}", "caption_corpus": "none"},
                 VERIFIER_NODE_PARAMS)
    with pytest.raises(ParameterError, match="node 'v' parameters: 'acceptance'"):
        build_engine(p, verifier, where="node 'v' parameters")
    assert prepared == []  # refused in one line, nothing compiled first


def test_the_engine_carries_the_parameters_and_says_what_it_prepared(verifier, monkeypatch):
    import crossspec_ros.models.runtime_setup as runtime_setup

    monkeypatch.setattr(runtime_setup, "prepare_runtime",
                        lambda model, p, role, n: f"{role}: {n} tokens")
    said = []
    p = validate({"max_new_tokens": 9, "max_proposal": 3, "caption_corpus": "none"},
                 VERIFIER_NODE_PARAMS)
    engine = build_engine(p, verifier, where="test", say=said.append)
    assert (engine.config.max_new_tokens, engine.config.max_proposal) == (9, 3)
    assert said == ["verifier: 9 tokens"] and engine.verifier is verifier
    assert build_engine(p, verifier, where="test", runtimes=(), say=said.append) and \
        said == ["verifier: 9 tokens"]  # the bench prepared its runtimes itself


def test_the_caption_books_patience_is_the_lateness_a_window_and_half_a_second():
    p = validate({"max_lateness_s": 0.25, "window_length_s": 1.0}, VERIFIER_NODE_PARAMS)
    assert caption_patience_s(p) == 1.75
    loop = verifier_loop(p, on_captions=lambda _c: None, on_confirmed=lambda *_a: None,
                         clock=ManualClock(), lock=nullcontext())
    assert loop.book.patience_s == 1.75


def test_a_drafter_sharing_the_process_pauses_for_the_verifiers_turn_and_hears_it_finish():
    loop = DraftLoop(validate({}, DRAFT_NODE_PARAMS), on_draft=lambda *_a: None,
                     clock=ManualClock(), lock=nullcontext())
    loop.configure(tiny_eventgpt_drafter(seed=1), None)
    shared = VerifierFirst(max_pause_s=5.0)
    share_turns(shared, loop)
    with shared.turn():
        assert loop.held
    assert not loop.held
    shared.finished((0, 4), 12.0)
    assert (0, 4) in loop.verifier_finished


def test_several_streams_are_refused_in_one_line_where_the_runtime_or_emulation_cannot_serve(
        verifier):
    from crossspec_ros.composition import verifier_streams

    p = validate({"runtime": "transformers", "caption_corpus": "none"}, VERIFIER_NODE_PARAMS)
    with pytest.raises(ParameterError, match="batched streams need the static runtime"):
        verifier_streams(p, verifier, 2, graph="batched", where="test")
    with pytest.raises(ValueError, match="graph 'lanes' is not one of batched, separate"):
        verifier_streams(p, verifier, 2, graph="lanes", where="test")
    static = validate({"stream_prompts": "batched", "caption_corpus": "none"},
                      VERIFIER_NODE_PARAMS)
    with pytest.raises(ParameterError, match="test: stream_prompts batched needs the "
                       "streams' steps in lanes"):
        verifier_streams(static, verifier, 2, graph="separate", where="test")
    emulated = validate({"emulate": "h100-bf16-limit", "caption_corpus": "none"},
                        VERIFIER_NODE_PARAMS)
    # the emulation must wrap the calls before the turns do: said, not deadlocked later
    with pytest.raises(ValueError, match="emulate h100-bf16-limit before the device's turns"):
        verifier_streams(emulated, verifier, 2, graph="separate", where="test")


def test_separate_streams_are_one_engine_each_on_the_verifier_with_the_window_budget(verifier):
    from crossspec_ros.composition import verifier_streams

    p = validate({"compile": False, "caption_corpus": "none", "window_length_s": 0.5,
                  "stream_budget_ms": 80.0},
                 VERIFIER_NODE_PARAMS)
    streams = verifier_streams(p, verifier, 3, graph="separate", where="test")
    assert len({id(e) for e in streams.engines}) == 3  # each stream's own history
    [model] = set(streams.models)  # one runtime, caches for every stream's two windows
    assert model.runtime.options.caches == 7 and streams.batcher is None
    assert all(e.verifier is model for e in streams.engines)
    assert streams.due.budget_s == 0.08 and streams.due.open_s == 0.5
    assert streams.counters() == {} and streams.prompt_batcher is None


@pytest.mark.parametrize(("prompts", "batched"), [("auto", True), ("batched", True),
                                                  ("separate", False)])
def test_batched_streams_batch_their_prompt_frames_unless_told_not_to(verifier, prompts,
                                                                       batched):
    from crossspec_ros.composition import verifier_streams

    p = validate({"compile": False, "caption_corpus": "none", "stream_prompts": prompts},
                 VERIFIER_NODE_PARAMS)
    streams = verifier_streams(p, verifier, 2, graph="batched", where="test")
    assert (streams.prompt_batcher is not None) == batched
    assert all(m.runtime.batches_prompts == batched for m in streams.models)
    assert ("prompt_steps" in streams.counters()) == batched
