"""The tiny-pair trainer: losses fall on a memorisable set, save/load keeps the weights."""

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.train.data import caption_ids, encode_windows, tokenizer_words
from crossspec_ros.train.tiny_pair import PairConfig, build_pair, load_pair, save_pair, train_pair


@dataclass
class FakeWindow:
    frames: list
    events: EventBatch
    caption_verifier: str
    caption_drafter: str
    attributes: dict


def fake_windows(n: int) -> list[FakeWindow]:
    rng = np.random.default_rng(0)
    captions = [("The ego car drives on a straight road.", "The ego car is driving straight."),
                ("The ego car is stopped at an intersection.",
                 "The ego car waits at a crossroads.")]
    out = []
    for i in range(n):
        k = int(rng.integers(0, 200))
        events = EventBatch(np.sort(rng.integers(0, 10**9, k)), rng.integers(0, 64, k),
                            rng.integers(0, 48, k), rng.integers(0, 2, k), 64, 48)
        frames = [np.full((48, 64, 3), 40 + 150 * (i % 2), np.uint8) for _ in range(8)]
        out.append(FakeWindow(frames, events, *captions[i % 2], {}))
    return out


SMALL = PairConfig(verifier_hidden=32, verifier_layers=1, drafter_hidden=32, drafter_layers=1,
                   verifier_image=28, drafter_image=28, verifier_steps=60, drafter_steps=60,
                   batch_size=4, lr=1e-2, warmup_steps=3)


def test_training_lowers_both_losses_on_a_tiny_set():
    verifier, drafter = build_pair(SMALL, tokenizer_words())
    data = encode_windows(fake_windows(8), verifier, drafter)
    losses = train_pair(verifier, drafter, data, SMALL)
    for name in ("verifier", "drafter"):
        first, last = np.mean(losses[name][:3]), np.mean(losses[name][-3:])
        assert np.isfinite(last) and last < 0.5 * first, (name, first, last)


def test_saved_pair_loads_with_identical_outputs(tmp_path):
    verifier, drafter = build_pair(SMALL, tokenizer_words())
    window = fake_windows(1)[0]
    save_pair(verifier, drafter, tmp_path, SMALL)
    verifier2, drafter2 = load_pair(tmp_path)
    frames = window.frames
    a = verifier.prefill(verifier.prepare_frames(frames)).last_logits
    b = verifier2.prefill(verifier2.prepare_frames(frames)).last_logits
    torch.testing.assert_close(a, b)
    a = drafter.prefill(drafter.prepare(window)).last_logits
    b = drafter2.prefill(drafter2.prepare(window)).last_logits
    torch.testing.assert_close(a, b)
    assert (tmp_path / "verifier" / "model.safetensors").is_file()
    assert not list(tmp_path.rglob("*.bin"))  # safetensors only


def test_captions_outside_the_vocabulary_are_refused_clearly():
    verifier, _ = build_pair(SMALL, tokenizer_words())
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        caption_ids(verifier.tokenizer, "The ego car flies to the moon.", 2)
