"""Where a benchmark's numbers go besides the terminal: its --json and --plot files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def save_outputs(report: Any, json_path: Path | None, plot_path: Path | None = None,
                 plot: Callable[[Path], None] | None = None) -> None:
    """Write ``report`` as JSON to ``json_path`` and call ``plot(plot_path)``, each only when
    its path was given; say what was written."""
    if json_path:
        json_path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {json_path}")
    if plot_path and plot is not None:
        plot(plot_path)
        print(f"wrote {plot_path}")
