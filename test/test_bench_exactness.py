"""`crossspec bench exactness`: k-token feeding against one-token decoding, position by position."""

from crossspec_ros.bench.engine import pattern_windows, tiny_random_pair
from crossspec_ros.bench.exactness import window_exactness


def test_k_token_feeding_gives_the_one_token_argmax_on_the_cpu_in_float32():
    verifier = tiny_random_pair("cpu")[0]
    for window in pattern_windows(2):
        result = window_exactness(verifier, window, max_new_tokens=12, k=4)
        assert result["tokens"] >= 1 and result["argmax_differs_at"] == []
        assert result["max_logit_difference"] < 1e-3


def test_a_verifier_whose_multi_token_pass_rounds_otherwise_is_caught_where_it_flips(
        monkeypatch):
    verifier = tiny_random_pair("cpu")[0]
    window = pattern_windows(1)[0]
    clean = window_exactness(verifier, window, max_new_tokens=6, k=3)
    session_type = type(verifier.prefill(verifier.prepare(window)))
    feed = session_type.feed

    def rounding_feed(self, token_ids):  # a k-token pass whose argmax moves by one id
        logits = feed(self, token_ids)
        return logits.roll(1, dims=-1) if len(token_ids) > 1 else logits

    monkeypatch.setattr(session_type, "feed", rounding_feed)
    flipped = window_exactness(verifier, window, max_new_tokens=6, k=3)
    assert clean["argmax_differs_at"] == [] and flipped["argmax_differs_at"]
    assert flipped["max_logit_difference"] > 0
