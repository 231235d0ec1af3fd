"""ModelSession semantics on every backend: feed, rollback, KV cache, batched feeding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from synthetic_windows import random_window

from crossspec_ros.models.tiny import tiny_eventgpt_drafter, tiny_llava_drafter, tiny_verifier

ATOL = 1e-5


BACKENDS = {
    "video_llava": lambda: tiny_verifier(seed=1, init_range=0.3),
    "eventgpt": lambda: tiny_eventgpt_drafter(seed=2, init_range=0.3),
    "llava": lambda: tiny_llava_drafter(seed=3, init_range=0.3),
}


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def model_and_inputs(request):
    model = BACKENDS[request.param]()
    return model, model.prepare(random_window())


def _tokens(model, n: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(3, model.info.proposable_ids, n)]


def _kv(session) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in session.cache.layers]


def test_rollback_then_same_continuation_matches_a_fresh_session(model_and_inputs):
    model, inputs = model_and_inputs
    first, wrong, cont = _tokens(model, 3, 1), _tokens(model, 4, 2), _tokens(model, 3, 3)
    rolled = model.prefill(inputs)
    rolled.feed(first + wrong)
    rolled.rollback(len(first))
    assert rolled.generated == first
    fresh = model.prefill(inputs)
    fresh.feed(first)
    assert torch.allclose(rolled.last_logits, fresh.last_logits, atol=ATOL)
    assert torch.allclose(rolled.feed(cont), fresh.feed(cont), atol=ATOL)


def test_kv_cache_after_rollback_equals_cache_built_from_scratch(model_and_inputs):
    model, inputs = model_and_inputs
    first, extra = _tokens(model, 4, 4), _tokens(model, 5, 5)
    rolled = model.prefill(inputs)
    rolled.feed(first[:2])
    rolled.feed(first[2:] + extra)
    rolled.rollback(len(first))
    scratch = model.prefill(inputs)
    scratch.feed(first)
    assert rolled.seq_len == scratch.seq_len == scratch.prompt_len + len(first)
    for (k1, v1), (k2, v2) in zip(_kv(rolled), _kv(scratch), strict=True):
        assert k1.shape == k2.shape
        assert torch.allclose(k1, k2, atol=ATOL) and torch.allclose(v1, v2, atol=ATOL)


def test_feeding_k_tokens_at_once_equals_feeding_them_one_by_one(model_and_inputs):
    model, inputs = model_and_inputs
    tokens = _tokens(model, 6, 6)
    batched = model.prefill(inputs).feed(tokens)
    single = model.prefill(inputs)
    rows = torch.stack([single.feed([t])[0] for t in tokens])
    assert batched.shape == (len(tokens), model.info.vocab_size)
    assert batched.dtype == torch.float32
    assert torch.allclose(batched, rows, atol=ATOL)
    assert torch.equal(batched.argmax(-1), rows.argmax(-1))


def test_rollback_to_zero_restores_the_prefill_distribution(model_and_inputs):
    model, inputs = model_and_inputs
    session = model.prefill(inputs)
    start = session.last_logits.clone()
    session.feed(_tokens(model, 3, 7))
    session.rollback(0)
    assert session.n_generated == 0 and session.seq_len == session.prompt_len
    assert torch.equal(session.last_logits, start)
    session.rollback(0)  # no-op
    assert session.feed([]).shape == (0, model.info.vocab_size)


def test_rollback_beyond_generated_raises(model_and_inputs):
    model, inputs = model_and_inputs
    session = model.prefill(inputs)
    session.feed(_tokens(model, 2, 8))
    with pytest.raises(ValueError, match="holds 2"):
        session.rollback(3)


def test_greedy_session_loop_equals_transformers_generate(model_and_inputs):
    model, inputs = model_and_inputs
    loop = model.generate_greedy(inputs, 10)
    assert loop == model.reference_generate(inputs, 10)
    assert len(loop) == 10 or loop[-1] == model.info.eos_token_id


def test_prefill_records_timing(model_and_inputs):
    model, inputs = model_and_inputs
    timing = model.prefill(inputs).timing
    assert timing.vision_ms > 0 and timing.prefill_ms > 0
    assert timing.total_ms == pytest.approx(timing.vision_ms + timing.prefill_ms)


def test_a_proposal_fed_with_the_prefill_equals_one_fed_after_it(model_and_inputs):
    model, inputs = model_and_inputs
    proposal, cont = _tokens(model, 5, 4), _tokens(model, 3, 5)
    joint, rows = model.prefill_with_proposal(inputs, proposal)
    apart = model.prefill(inputs)
    expected = torch.cat([apart.last_logits[None], apart.feed(proposal)])
    assert rows.shape == (len(proposal) + 1, model.info.vocab_size)
    assert torch.allclose(rows, expected, atol=ATOL)
    assert joint.generated == proposal and joint.seq_len == apart.seq_len
    joint.rollback(2)
    apart.rollback(2)
    assert torch.allclose(joint.last_logits, apart.last_logits, atol=ATOL)
    assert torch.allclose(joint.feed(cont), apart.feed(cont), atol=ATOL)


def test_an_empty_proposal_is_a_plain_prefill(model_and_inputs):
    model, inputs = model_and_inputs
    session, rows = model.prefill_with_proposal(inputs, [])
    assert rows.shape == (1, model.info.vocab_size) and session.generated == []
    assert torch.allclose(rows[0], model.prefill(inputs).last_logits, atol=ATOL)


def test_a_tree_fed_with_the_prefill_gives_each_node_the_rows_of_its_own_path(model_and_inputs):
    model, inputs = model_and_inputs
    if not getattr(model, "supports_tree_prefill", False):
        pytest.skip("this backend feeds only chains with its prefill")
    a, b, c, d, e = _tokens(model, 5, 6)
    tokens, parents = [a, b, c, d, e], [-1, 0, 1, 0, 3]  # a-b-c and a-d-e
    session, rows = model.prefill_with_proposal(inputs, tokens, parents)
    assert rows.shape == (6, model.info.vocab_size) and session.generated == []
    for node, path in ((0, [a]), (2, [a, b, c]), (4, [a, d, e])):
        _, chain_rows = model.prefill_with_proposal(inputs, path)
        assert torch.allclose(rows[node + 1], chain_rows[-1], atol=ATOL), node
        assert torch.allclose(rows[0], chain_rows[0], atol=ATOL)
    session.keep_path([0, 3, 4])  # the second branch: the cache gathers it
    apart, _ = model.prefill_with_proposal(inputs, [a, d, e])
    assert session.generated == [a, d, e] and session.seq_len == apart.seq_len
    cont = _tokens(model, 3, 7)
    assert torch.allclose(session.feed(cont), apart.feed(cont), atol=ATOL)


def test_tree_attention_is_causal_over_the_chain_and_follows_ancestors_in_the_tree():
    from crossspec_ros.models.hf_session import tree_attention

    allowed, positions = tree_attention(cached=2, causal=2, parents=[-1, 0, -1])
    assert allowed.tolist() == [
        [True, True, True, False, False, False, False],   # chain token 0
        [True, True, True, True, False, False, False],    # chain token 1
        [True, True, True, True, True, False, False],     # node 0 (depth 1)
        [True, True, True, True, True, True, False],      # node 1, under node 0
        [True, True, True, True, False, False, True],     # node 2, beside node 0
    ]
    assert positions.tolist() == [2, 3, 4, 5, 4]
    with pytest.raises(ValueError, match="parent of token 1"):
        tree_attention(0, 0, [-1, 1])
