"""The tiny-pair trainer: losses fall on a memorisable set, save/load keeps the weights."""

import sys
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from crossspec_ros.events.batch import EventBatch
from crossspec_ros.train.data import caption_ids, encode_windows, tokenizer_words, training_keys
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
        attributes = {"road": ("straight", "intersection")[i % 2],
                      "ego": ("driving", "stopped")[i % 2]}
        out.append(FakeWindow(frames, events, *captions[i % 2], attributes))
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


def test_rgb_only_windows_train_the_verifier_alone():
    verifier, drafter = build_pair(SMALL, tokenizer_words())
    data = encode_windows(fake_windows(6), verifier, drafter, rgb_only=fake_windows(4))
    assert len(data.verifier_captions) == len(data.attributes) == len(data) == 10
    assert data.verifier_pixels.shape[0] == 10
    assert data.drafter_pixels.shape[0] == len(data.drafter_captions) == 6


def test_training_keys_take_one_window_from_each_of_n_training_drives():
    from crossspec_ros.sim.dataset import HELDOUT_SEED_START, TRAIN_SEEDS

    keys = training_keys(500, seed=3)
    drives = [d for d, _ in keys]
    assert len(set(drives)) == 500 and all(d in TRAIN_SEEDS for d in drives)
    assert max(drives) < HELDOUT_SEED_START
    assert keys == training_keys(500, seed=3) and keys != training_keys(500, seed=4)
    with pytest.raises(ValueError, match="one per drive"):
        training_keys(len(TRAIN_SEEDS) + 1)


def test_attribute_probe_labels_values_and_learns_a_separable_attribute():
    from crossspec_ros.train.probe import AttributeProbe, attribute_labels

    attrs = [{"road": r, "ego": "driving"} for r in ("straight", "curve_left") * 16]
    values, labels = attribute_labels(attrs, ["road", "ego"])
    assert values == {"road": ["curve_left", "straight"], "ego": ["driving"]}
    assert labels.shape == (32, 2) and labels[:2, 0].tolist() == [1, 0]
    torch.manual_seed(0)
    features = torch.randn(32, 3, 4) + 2.0 * labels[:, :1, None].float()  # road is visible
    probe = AttributeProbe(values, 12)
    optimizer = torch.optim.Adam(probe.parameters(), lr=0.05)
    first = probe.loss(features, labels).item()
    for _ in range(50):
        optimizer.zero_grad()
        probe.loss(features, labels).backward()
        optimizer.step()
    assert probe.loss(features, labels).item() < 0.2 * first


def test_progress_in_a_log_prints_a_line_every_tenth_of_the_way(capsys, monkeypatch):
    from crossspec_ros.progress import progress_bar

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    with progress_bar(25, "training verifier") as bar:
        for step in range(25):
            bar.set_postfix(loss=f"{1 / (step + 1):.3f}")
            bar.update(1)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 10
    assert lines[-1].startswith("training verifier: 25/25") and lines[-1].endswith("loss 0.040")
