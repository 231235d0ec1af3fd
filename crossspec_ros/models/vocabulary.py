"""A verifier's vocabulary size read from its files, before it loads (no torch): so a
parameter that cannot run on it (``acceptance: top_k:K`` with K past the vocabulary) is refused
in one line at once, not after the models load and compile."""

from __future__ import annotations

import json
from pathlib import Path

from crossspec_ros.paths import BUNDLED_PAIR


def vocabulary_size(source: str) -> int | None:
    """Rows of the verifier's logits as its ``config.json`` states them (Video-LLaVA's
    ``text_config.vocab_size``), for ``verifier_model`` = ``source`` (empty: the bundled
    tiny verifier; a local directory; a hub id in the local cache). None where the files do
    not tell (absent, unreadable, another layout): the check then waits for the model."""
    config = _config_file(source)
    if config is None:
        return None
    try:
        data = json.loads(config.read_text())
    except (OSError, ValueError):
        return None
    size = data.get("text_config", {}).get("vocab_size", data.get("vocab_size"))
    return size if isinstance(size, int) and size > 0 else None


def _config_file(source: str) -> Path | None:
    directory = Path(source) if source else BUNDLED_PAIR / "verifier"
    if directory.is_dir():
        return directory / "config.json" if (directory / "config.json").is_file() else None
    try:  # a hub id: its config.json in the local cache, if any (never downloaded here)
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(source, "config.json")
    except Exception:  # not a valid repo id, or no hub library: the files do not tell
        return None
    return Path(found) if isinstance(found, str) else None
