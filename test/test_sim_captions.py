"""Caption grammar: both styles parse back, agree on about half their tokens, small vocabulary."""

from __future__ import annotations

import numpy as np
import pytest

from crossspec_ros.sim.captions import (
    all_facts,
    caption,
    caption_vocabulary,
    detokenize,
    lcs_length,
    parse_caption,
    style_agreement,
    tokenize,
)
from crossspec_ros.sim.scene import Drive, Facts

FACTS = all_facts()


def drive_facts(n_seeds: int = 200, windows: int = 30) -> list[Facts]:
    return [Drive(seed).facts_at(k + 0.5) for seed in range(n_seeds) for k in range(windows)]


@pytest.mark.parametrize("style", ["verifier", "drafter"])
def test_every_caption_of_both_styles_parses_back_to_its_facts(style):
    assert len(FACTS) > 5000
    for facts in FACTS:
        assert parse_caption(caption(facts, style)) == facts.as_dict()


def test_random_paraphrases_parse_back_too():
    rng = np.random.default_rng(0)
    for i in rng.choice(len(FACTS), 1500, replace=False):
        assert parse_caption(caption(FACTS[i], "random", rng)) == FACTS[i].as_dict()


def test_a_style_is_a_function_of_the_facts():
    facts = Facts("curve_left", "slowing", "none", "night", "car", "red", "ahead")
    assert caption(facts, "drafter") == caption(facts, "drafter")
    assert caption(facts) == ("The ego car slows down on a road curving left at night. "
                              "A red car is ahead in the same lane.")
    assert caption(facts, "drafter") == ("The ego car is braking in a left-hand bend in the "
                                         "dark. A car painted red is in front of our car.")


def test_styles_agree_on_about_half_of_the_verifier_tokens_over_drives():
    scores = [style_agreement(caption(f), caption(f, "drafter")) for f in drive_facts()]
    lcs = np.mean([s["lcs"] for s in scores])
    position = np.mean([s["position"] for s in scores])
    prefix = np.mean([s["prefix"] for s in scores])
    # measured over 200 seeds x 30 windows: lcs 0.534, position 0.243, prefix 0.152
    assert 0.45 < lcs < 0.62
    assert 0.2 < position < 0.35
    assert 0.1 < prefix < 0.2  # "the ego car" is shared, the verb differs
    # and no window has identical captions in both styles, none disagrees completely
    assert all(0.3 < s["lcs"] < 1.0 for s in scores)


def test_drafter_captions_name_car_colours_even_though_events_cannot_see_them():
    facts = Facts("straight", "driving", other="car", other_color="yellow",
                  other_action="oncoming")
    assert "yellow" in tokenize(caption(facts, "drafter"))


def test_vocabulary_is_small_and_covers_every_caption_token():
    vocab = caption_vocabulary()
    assert 80 <= len(vocab) <= 200 and len(set(vocab)) == len(vocab)
    assert "." in vocab and "," in vocab
    rng = np.random.default_rng(1)
    seen = set()
    for facts in FACTS:
        for style in ("verifier", "drafter", "random"):
            seen.update(tokenize(caption(facts, style, rng)))
    assert seen <= set(vocab)
    assert all(tok == tok.lower() for tok in vocab)


def test_tokens_round_trip_to_the_caption_text():
    for facts in FACTS[::97]:
        for style in ("verifier", "drafter"):
            text = caption(facts, style)
            assert detokenize(tokenize(text)) == text


def test_broken_captions_parse_as_unknown_instead_of_raising():
    attrs = parse_caption("A red banana.")
    assert attrs["ego"] == "unknown" and attrs["road"] == "unknown"
    assert parse_caption("")["ego"] == "unknown"


def test_lcs_length():
    assert lcs_length(list("abcbdab"), list("bdcaba")) == 4
    assert lcs_length([], ["a"]) == 0
