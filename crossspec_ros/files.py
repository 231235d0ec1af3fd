"""File modes of what crossspec writes for its users (models, label caches, bags).

safetensors writes its files with mode 0600 and ``tempfile.mkdtemp`` makes 0700 directories,
so a distilled drafter or a converted bag would be readable by its owner only: another account
on the robot or the GPU server (a ROS launch under a service user) could not load it. Results
get the modes a plain ``open``/``mkdir`` would have given them under the process's umask.
"""

from __future__ import annotations

import os
from pathlib import Path


def current_umask() -> int:
    """The process's umask, read without changing it (os.umask sets it, briefly, for every
    thread); from /proc where Linux has it."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: str | Path) -> None:
    """``path`` (a file, or a directory and everything under it) with the modes the umask
    gives new files (0666 & ~umask) and directories (0777 & ~umask). Links are left alone."""
    root = Path(path)
    mask = current_umask()
    for item in [root, *(root.rglob("*") if root.is_dir() else ())]:
        if item.is_symlink():
            continue
        os.chmod(item, (0o777 if item.is_dir() else 0o666) & ~mask)
