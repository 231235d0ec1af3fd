"""Text, one way everywhere: captions and messages compared and shown with their whitespace
runs as single spaces."""

from __future__ import annotations


def single_spaced(text: object) -> str:
    """``text`` (or ``str(text)``, e.g. an exception) on one line, every whitespace run one
    space, none at the ends."""
    return " ".join(str(text).split())
