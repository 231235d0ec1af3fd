"""Tiny tokenizers and models: shared ordinary ids, distinct specials, determinism."""

from __future__ import annotations

import torch

from crossspec_ros.models.tiny import (
    ROLE_SPECIALS,
    shared_size,
    tiny_eventgpt,
    tiny_eventgpt_drafter,
    tiny_tokenizer,
    tiny_verifier,
    tiny_video_llava,
)


def test_drafter_and_verifier_share_every_ordinary_id():
    verifier, drafter = tiny_tokenizer("video_llava"), tiny_tokenizer("eventgpt")
    n = shared_size()
    v_vocab, d_vocab = verifier.get_vocab(), drafter.get_vocab()
    shared_v = {t: i for t, i in v_vocab.items() if i < n}
    shared_d = {t: i for t, i in d_vocab.items() if i < n}
    assert shared_v == shared_d and len(shared_v) == n
    text = "the car turns left at the intersection ."
    assert verifier(text).input_ids == drafter(text).input_ids


def test_special_tokens_sit_above_the_proposable_range_and_differ():
    n = shared_size()
    verifier, drafter = tiny_tokenizer("video_llava"), tiny_tokenizer("eventgpt")
    v_special = {verifier.convert_tokens_to_ids(t) for t in ROLE_SPECIALS["video_llava"]}
    d_special = {drafter.convert_tokens_to_ids(t) for t in ROLE_SPECIALS["eventgpt"]}
    assert min(v_special) >= n and min(d_special) >= n
    assert set(ROLE_SPECIALS["video_llava"]).isdisjoint(drafter.get_vocab())
    assert set(ROLE_SPECIALS["eventgpt"]).isdisjoint(verifier.get_vocab())


def test_model_infos_bound_proposals_by_the_shared_range():
    verifier, drafter = tiny_verifier(), tiny_eventgpt_drafter()
    assert verifier.info.proposable_ids == drafter.info.proposable_ids == shared_size()
    assert verifier.info.eos_token_id == drafter.info.eos_token_id == 2


def test_llava_tokenizer_numbers_ordinary_words_differently():
    verifier, llava = tiny_tokenizer("video_llava"), tiny_tokenizer("llava")
    text = "a red car waits"
    assert verifier(text).input_ids != llava(text).input_ids
    assert llava.decode(llava(text).input_ids, skip_special_tokens=True) == text


def test_tokenizer_round_trips_through_save_pretrained(tmp_path):
    from transformers import AutoTokenizer

    tok = tiny_tokenizer("eventgpt", words=["a", "car", "stops"])
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "a car stops <ev_start> zebra"
    assert loaded(text).input_ids == tok(text).input_ids
    assert loaded.convert_tokens_to_ids("<ev_end>") == len(tok) - 1
    assert tok(text).input_ids[-1] == tok.unk_token_id


def test_builders_are_deterministic_from_the_seed():
    tok = tiny_tokenizer("video_llava")
    a, b = tiny_video_llava(tok, seed=3), tiny_video_llava(tok, seed=3)
    c = tiny_video_llava(tok, seed=4)
    wa, wb, wc = (m.lm_head.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    e1, e2 = tiny_eventgpt(tiny_tokenizer("eventgpt"), seed=1, hidden=64), tiny_eventgpt(
        tiny_tokenizer("eventgpt"), seed=1, hidden=64)
    assert torch.equal(e1.feature_adaptor.weight, e2.feature_adaptor.weight)
    assert e1.feature_adaptor.weight.shape == (64, 64)
