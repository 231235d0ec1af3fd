"""The draft head: its greedy chains, its file format, its training, and the engine with it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from synthetic_windows import random_window

from crossspec_ros.models.draft_head import DraftHead, HeadConfig
from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_verifier
from crossspec_ros.speculative import engine as engine_module
from crossspec_ros.speculative.engine import EngineConfig, SpeculativeEngine
from crossspec_ros.speculative.events import EventKind
from crossspec_ros.train.distill import DistillConfig, label_windows, train_head, window_states


def _head(seed: int = 0, vocab: int = 40, context: int = 16) -> DraftHead:
    torch.manual_seed(seed)
    return DraftHead(HeadConfig(context_dim=context, vocab_size=vocab, proposable_ids=vocab - 3,
                                eos_token_id=2, hidden=24, embed=8)).eval()


def test_greedy_chains_follow_the_teacher_forced_argmax_and_reuse_their_state():
    head = _head()
    context = torch.randn(16)
    chain, _ = head.propose(context, [], 12)
    with torch.no_grad():
        logits = head(context[None], torch.tensor([chain]))[0]
    cfg = head.config
    for t, token in enumerate(chain):
        allowed = logits[t, :cfg.proposable_ids]
        expected = int(torch.argmax(allowed))
        if logits[t, cfg.eos_token_id] > allowed[expected]:
            expected = cfg.eos_token_id
        assert token == expected
    # a later round continues from the state after the confirmed prefix: same tokens
    _, state = head.propose(context, chain[:2], 1)
    later, _ = head.propose(context, chain[:5], len(chain) - 5, state)
    assert later == chain[5:]


def test_a_saved_head_loads_with_the_same_proposals(tmp_path):
    head = _head(seed=3)
    head.save(tmp_path / "head", extra={"drafter": "somewhere"})
    back = DraftHead.load(tmp_path / "head")
    context = torch.randn(16)
    assert back.propose(context, [5, 6], 8)[0] == head.propose(context, [5, 6], 8)[0]


@pytest.fixture(scope="module")
def trained():
    verifier = tiny_verifier(seed=1, init_range=0.3)
    drafter = tiny_eventgpt_drafter(seed=2, init_range=0.3)
    labels = label_windows(verifier, drafter, [random_window(s) for s in range(16)], 8)
    contexts = window_states(drafter, labels)
    info = verifier.info
    torch.manual_seed(0)
    head = DraftHead(HeadConfig(contexts.shape[1], info.vocab_size, info.proposable_ids,
                                info.eos_token_id, hidden=32, embed=16))
    initial = copy.deepcopy(head)
    config = DistillConfig(seed=0, steps=60, batch_size=8, lr=1e-2, warmup_steps=2)
    losses = train_head(head, contexts, labels, config)
    return verifier, drafter, head, initial, contexts, labels, config, losses


def test_a_head_learns_the_verifiers_captions_deterministically(trained):
    _, _, head, initial, contexts, labels, config, losses = trained
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    again = copy.deepcopy(initial)
    assert train_head(again, contexts, labels, config) == losses
    # teacher-forced, it now predicts most of the verifier's tokens of its training windows
    ids = torch.tensor(labels.verifier_tokens)
    with torch.no_grad():
        predicted = head(contexts, ids).argmax(-1)
    assert (predicted == ids).float().mean().item() > 0.5


@pytest.fixture()
def after_the_look(monkeypatch):
    """Wraps a verifier so that it reads each window only once the engine's draft head has
    looked at it (``HeadRun.join``): the head's proposals then come from the first round on,
    whichever thread the scheduler runs first."""
    from crossspec_ros.speculative.head import HeadRun

    runs: list[HeadRun] = []

    class Recorded(HeadRun):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            runs.append(self)

    monkeypatch.setattr(engine_module, "HeadRun", Recorded)

    def wrap(verifier):
        class AfterTheLook:
            def __getattr__(self, name):
                return getattr(verifier, name)

            def prepare(self, window, *args, **kwargs):
                runs[-1].join()  # the look ends: a state, an error or none
                return verifier.prepare(window, *args, **kwargs)

        return AfterTheLook()

    return wrap


def test_the_engine_with_a_head_proposes_from_it_and_stays_lossless(trained, after_the_look):
    verifier, drafter, head, *_ = trained
    engine = SpeculativeEngine(after_the_look(verifier), drafter, EngineConfig(
        max_new_tokens=8, proposers=("history_ngram", "draft_head")), head=head)
    proposed = 0
    for seed in range(6):
        window = random_window(seed % 3)  # windows seen in training: the head knows them
        result = engine.run_window(window)
        assert result.tokens == verifier.reference_generate(verifier.prepare(window), 8)
        proposed += result.stats.proposed.get("draft_head", 0)
    assert proposed > 0


def test_a_head_whose_drafter_fails_stays_silent_and_says_why(trained):
    verifier, drafter, head, *_ = trained

    class Broken:
        def __getattr__(self, name):
            return getattr(drafter, name)

        def prepare(self, window):
            raise RuntimeError("events unreadable")

    engine = SpeculativeEngine(verifier, Broken(), EngineConfig(
        max_new_tokens=8, proposers=("draft_head",)), head=head)
    result = engine.run_window(random_window(0))
    assert result.tokens == verifier.reference_generate(verifier.prepare(random_window(0)), 8)
    errors = [e.text for e in result.events if e.kind is EventKind.DRAFT_ERROR]
    assert errors and "events unreadable" in errors[0]
    assert result.stats.proposed.get("draft_head", 0) == 0


def test_the_drafters_prefill_leaves_its_window_state_and_the_same_first_logits():
    from transformers import DynamicCache

    drafter = tiny_eventgpt_drafter(seed=3, init_range=0.3)
    inputs = drafter.prepare(random_window(1))
    session = drafter.prefill(inputs)
    assert torch.equal(session.window_state, drafter.window_state(inputs))
    with torch.inference_mode():  # the prefill as a causal LM computes it, last row only
        out = drafter.model.language_model(
            inputs_embeds=drafter._embeds(inputs), use_cache=True, logits_to_keep=1,
            past_key_values=DynamicCache(config=drafter.model.config.text))
    assert torch.equal(session.last_logits, out.logits[0, -1].float())


def test_a_draft_channel_hands_over_the_window_state_or_none_when_the_window_ends():
    import threading

    from crossspec_ros.speculative.drafting import DraftChannel

    channel, got = DraftChannel(), []
    waiter = threading.Thread(target=lambda: got.append(channel.wait_window_state()))
    waiter.start()
    channel.set_window_state(torch.ones(4))
    waiter.join(timeout=5)
    assert torch.equal(got[0], torch.ones(4))
    ended = DraftChannel()
    ended.stop()  # the verifier finished first, or the draft node sends no state
    assert ended.wait_window_state() is None


def test_the_engine_with_a_head_reads_the_local_drafters_own_prefill(trained, after_the_look):
    verifier, drafter, head, *_ = trained
    looks = []

    class Counting:
        def __getattr__(self, name):
            return getattr(drafter, name)

        def window_state(self, inputs):
            looks.append(1)
            return drafter.window_state(inputs)

    # the verifier starts once the head has the window state the drafter's prefill left
    engine = SpeculativeEngine(after_the_look(verifier), Counting(), EngineConfig(
        max_new_tokens=8, proposers=("draft_stream", "draft_head"), drafter_gate=False),
        head=head)
    result = engine.run_window(random_window(0))
    assert result.tokens == verifier.reference_generate(verifier.prepare(random_window(0)), 8)
    assert result.stats.proposed.get("draft_head", 0) > 0 and not looks  # no second look


def test_a_window_state_of_the_wrong_size_leaves_the_head_silent_and_says_why(trained):
    verifier, drafter, head, *_ = trained
    engine = SpeculativeEngine(verifier, drafter, EngineConfig(
        max_new_tokens=8, proposers=("draft_head",)), head=head)
    result = engine.run_window(random_window(0), look=lambda: torch.zeros(3))
    assert result.tokens == verifier.reference_generate(verifier.prepare(random_window(0)), 8)
    errors = [e.text for e in result.events if e.kind is EventKind.DRAFT_ERROR]
    assert errors and "has 3 values" in errors[0] and "head.json" in errors[0]
    assert result.stats.proposed.get("draft_head", 0) == 0
