"""Where installed ROS package data lives, with or without a sourced ROS environment."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The bundled tiny model pair (crossspec train-tiny) and what was distilled from it.
BUNDLED_PAIR = Path(__file__).resolve().parent / "data" / "tiny_pair"
# The drafter the nodes run when drafter_model is empty: the bundled one distilled on the
# verifier's captions from each window's events cut 0, 300 and 600 ms before its close, as the
# draft node drafts a window before it closes (crossspec distill --leads; docs/drafters.md:
# acceptance at a 600 ms lead 0.735 against 0.631 for the one distilled on whole windows,
# "distilled/drafter", on the sample drive). Distilled drafts read like the final captions
# (make drive, 2026-11-25: token agreement median 0.88-0.95 against 0.55) at the same size and
# speed. "" elsewhere (load_drafter, adapters' bases) is the undistilled bundled one.
DEFAULT_DRAFTER = BUNDLED_PAIR / "distilled_leads" / "drafter"

# The bundled sample bag (a rosbag2 directory; see rosbags/README.md): in the source tree, or
# in share/crossspec/rosbags of a colcon install.
_SOURCE_SAMPLE_BAG = Path(__file__).resolve().parents[1] / "rosbags" / "sample"


def sample_bag() -> Path:
    """The bundled sample bag (source checkout first, then the installed share/)."""
    if _SOURCE_SAMPLE_BAG.is_dir():
        return _SOURCE_SAMPLE_BAG
    try:
        return package_share_dir("crossspec") / "rosbags" / "sample"
    except FileNotFoundError:
        return _SOURCE_SAMPLE_BAG


def package_share_dir(package: str) -> Path:
    """share/<package> from AMENT_PREFIX_PATH, else from this interpreter's prefix (the venv).

    The PyPI setup installs messages into the venv prefix and sets no ROS variables, so the
    venv's own share/ is searched too. Raises FileNotFoundError naming where it looked.
    """
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    prefixes.append(sys.prefix)
    for prefix in prefixes:
        candidate = Path(prefix) / "share" / package
        if (candidate / "package.xml").is_file():
            return candidate
    raise FileNotFoundError(
        f"ROS package '{package}' not found in {prefixes}; run `make setup` (PyPI setup) or "
        "source your ROS workspace (install/setup.bash)"
    )
