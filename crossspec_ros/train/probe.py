"""Training-only attribute probes: linear heads reading scene facts from visual tokens.

A caption loss alone teaches the tiny models their grammar long before it teaches them to
look: for hundreds of steps the only visual signal is a handful of attribute words in a
25-token caption. A probe adds a direct signal: from the model's own visual tokens (after
the projector; the verifier's eight frames side by side, so motion is in reach), one linear
head per attribute predicts its value, and its cross-entropy joins the caption loss.
Measured on 3000 training windows, 600 steps (frames averaged then): held-out verifier
attribute accuracy 0.62 without the probe, 0.73 with it (weight 1; 0.70 with weight 3).
The heads are discarded after training: saved models are the plain architectures.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional


def attribute_labels(attributes: Sequence[dict], names: Sequence[str]
                     ) -> tuple[dict[str, list[str]], torch.Tensor]:
    """Per attribute, its values seen in ``attributes`` (sorted), and a [rows, names] label
    tensor of value indices."""
    values = {k: sorted({str(a[k]) for a in attributes}) for k in names}
    labels = torch.tensor([[values[k].index(str(a[k])) for k in names] for a in attributes],
                          dtype=torch.long).reshape(len(attributes), len(names))
    return values, labels


class AttributeProbe(nn.Module):
    """One linear head per attribute over flattened visual tokens [B, tokens * hidden]."""

    def __init__(self, values: dict[str, list[str]], in_features: int) -> None:
        super().__init__()
        self.names = list(values)
        self.heads = nn.ModuleList(nn.Linear(in_features, len(values[k])) for k in self.names)

    def loss(self, features: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over the attributes; ``labels``: [B, attributes]."""
        flat = features.flatten(1)
        return sum(functional.cross_entropy(head(flat), labels[:, i])
                   for i, head in enumerate(self.heads)) / len(self.heads)
