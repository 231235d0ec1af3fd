"""Open ROS 2 bags as `ros2 bag record` writes them, with rosbags (every reader goes here).

Two things rosbags 0.11.9 does not read on its own:
- a ``metadata.yaml`` whose ``storage_identifier`` is empty (some rosbag2 versions write it
  so): the storage is told by the files' extension (.mcap, .db3), and a temporary directory
  of links to the bag's files with a completed metadata.yaml is read instead;
- MCAP schemas in ``ros2idl`` with ``#include`` lines (rosidl writes one per dependency):
  rosbags' IDL parser rejects them. rosbag2 stores each dependency as its own section of the
  schema, so the lines carry nothing and are dropped before parsing.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import rosbags.highlevel.anyreader as _anyreader
import yaml
from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import Reader

STORAGE_BY_SUFFIX = {".mcap": "mcap", ".db3": "sqlite3"}
_parse_idl = _anyreader.get_types_from_idl


def without_preprocessor_lines(idl: str) -> str:
    """``idl`` without its ``#include``/``#pragma`` lines."""
    return "\n".join(line for line in idl.splitlines() if not line.lstrip().startswith("#"))


def _parse_idl_without_includes(idl: str):  # type: ignore[no-untyped-def]
    return _parse_idl(without_preprocessor_lines(idl))


_anyreader.get_types_from_idl = _parse_idl_without_includes


def readable_path(path: str | Path) -> Path:
    """``path``, or a stand-in directory when its metadata.yaml names no storage."""
    path = Path(path)
    metadata = path / "metadata.yaml"
    if not metadata.is_file():
        return path
    try:
        doc = yaml.safe_load(metadata.read_text())
        info = doc["rosbag2_bagfile_information"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return path  # the reader reports what is wrong with it
    if info.get("storage_identifier"):
        return path
    suffixes = {Path(name).suffix for name in info.get("relative_file_paths") or []}
    storages = {STORAGE_BY_SUFFIX[s] for s in suffixes if s in STORAGE_BY_SUFFIX}
    if len(storages) != 1:
        return path
    info["storage_identifier"] = storages.pop()
    stand_in = Path(tempfile.mkdtemp(prefix="crossspec-bag-"))
    atexit.register(shutil.rmtree, stand_in, ignore_errors=True)
    for item in path.iterdir():
        if item.name != "metadata.yaml":
            (stand_in / item.name).symlink_to(item.resolve())
    (stand_in / "metadata.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return stand_in


def any_reader(path: str | Path) -> AnyReader:
    """An AnyReader (deserializing; not yet opened) for the bag at ``path``."""
    return AnyReader([readable_path(path)])


def raw_reader(path: str | Path) -> Reader:
    """A rosbag2 Reader (raw messages; not yet opened) for the bag at ``path``."""
    return Reader(readable_path(path))
