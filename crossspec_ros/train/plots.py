"""Loss curves of the tiny pair's training, as a PNG."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_losses(losses: dict[str, list[float]], path: Path,
                title: str = "tiny pair training") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, values in losses.items():
        values = np.asarray(values)
        window = max(1, len(values) // 50)
        smooth = np.convolve(values, np.ones(window) / window, mode="valid")
        ax.plot(values, alpha=0.25)
        ax.plot(np.arange(len(smooth)) + window - 1, smooth, label=f"{name} (smoothed)")
    ax.set_xlabel("step")
    ax.set_ylabel("caption token cross-entropy")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
