"""The tiny pair's training settings (no torch here: the command line reads the defaults)."""

from __future__ import annotations

from dataclasses import dataclass

# Training events are simulated from renders at 25 Hz instead of the sensor model's 200 Hz:
# ~5x cheaper, and on held-out windows the drafter's preprocessed event images differ by 4-7 %
# of their signal (mean absolute difference; 50 Hz: 4-5 %; event counts within 3 %), because
# the simulator interpolates log intensity between renders and the event image ignores sub-
# chunk timing. Evaluation always uses the sensor model's rate.
TRAIN_EVENT_RENDER_HZ = 25.0


@dataclass
class PairConfig:
    """Dimensions of the pair and how it is trained."""

    seed: int = 0
    verifier_hidden: int = 128
    verifier_layers: int = 4
    verifier_image: int = 56
    drafter_hidden: int = 64
    drafter_layers: int = 2
    drafter_image: int = 56
    patch_size: int = 14            # 4 x 4 patches + CLS = 17 tokens per image
    heads: int = 4
    train_windows: int = 6500       # verifier windows (RGB); the first drafter_windows of
    drafter_windows: int = 2200     # them are simulated with events too and train the drafter
    event_render_hz: float = TRAIN_EVENT_RENDER_HZ  # training events' render rate (see data)
    verifier_steps: int = 1750
    drafter_steps: int = 2000
    batch_size: int = 16
    lr: float = 2e-3
    warmup_steps: int = 50
    probe_weight: float = 1.0       # attribute probes on the visual tokens (train/probe.py)
