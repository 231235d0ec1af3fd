"""crossspec's parameters: one declaration per parameter (name, type, default, doc, check),
read from ROS-style YAML (``/node: ros__parameters:``, ``/**`` for all nodes) and validated
with a clear error. Nodes declare the same parameters to rclpy; the CLI reads the YAML here.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class ParameterError(ValueError):
    """A parameter file or value that cannot be used (message says which and why)."""


@dataclass(frozen=True)
class Param:
    name: str
    default: Any
    doc: str
    check: Callable[[Any], bool] | None = None
    requirement: str = ""  # shown when check fails, e.g. "> 0"

    @property
    def type(self) -> type:
        return type(self.default)


def positive(x: Any) -> bool:
    return x > 0


def non_negative(x: Any) -> bool:
    return x >= 0


SYNC_PARAMS = [
    Param("event_topic", "/event_camera/events", "event_camera_msgs/EventPacket input"),
    Param("rgb_topic", "/camera/image_raw", "sensor_msgs/Image or CompressedImage input"),
    Param("window_length_s", 1.0, "caption window length [s]; ids = floor(t / length)",
          positive, "> 0"),
    Param("frames_per_window", 8, "RGB frames sampled uniformly per window", positive, ">= 1"),
    Param("max_lateness_s", 1.0, "a window closes this long after its end even if the other "
          "stream is silent [s]", non_negative, ">= 0"),
    Param("reorder_slack_s", 0.02, "tolerated reordering within a stream [s]", non_negative,
          ">= 0"),
    Param("reset_threshold_s", 2.0, "a jump back in time larger than this resets the "
          "synchronizer (bag loop) [s]", positive, "> 0"),
    Param("max_pending_windows", 16, "windows buffered before the oldest is dropped", positive,
          ">= 1"),
]


def load_yaml_params(path: str | Path, node_name: str) -> dict[str, Any]:
    """``/**`` parameters overlaid by the node's own (``/name`` or ``name``) from a YAML file."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError as err:
        raise ParameterError(f"parameter file {path} does not exist") from err
    except yaml.YAMLError as err:
        raise ParameterError(f"parameter file {path} is not valid YAML: {err}") from err
    if not isinstance(doc, dict):
        raise ParameterError(f"{path}: expected a mapping of node names to ros__parameters")
    merged: dict[str, Any] = {}
    for key in ("/**", node_name, f"/{node_name}"):
        section = doc.get(key)
        if section is None:
            continue
        if not isinstance(section, dict) or not isinstance(
                section.get("ros__parameters", {}), dict):
            raise ParameterError(f"{path}: section '{key}' needs a 'ros__parameters' mapping")
        merged.update(section.get("ros__parameters", {}))
    return merged


def validate(values: dict[str, Any], spec: list[Param], where: str = "parameters",
             allow_unknown: bool = False) -> dict[str, Any]:
    """Defaults overlaid by ``values``, each checked; raises ParameterError on the first
    problem with what is wrong, where, and what is expected."""
    by_name = {p.name: p for p in spec}
    out = {p.name: p.default for p in spec}
    for name, value in values.items():
        param = by_name.get(name)
        if param is None:
            if allow_unknown:
                continue
            close = difflib.get_close_matches(name, by_name, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ParameterError(f"{where}: unknown parameter '{name}'{hint}; known: "
                                 f"{', '.join(sorted(by_name))}")
        if param.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, param.type) or (param.type is int and isinstance(value, bool)):
            raise ParameterError(f"{where}: '{name}' must be {param.type.__name__}, got "
                                 f"{value!r} ({type(value).__name__})")
        if param.check is not None and not param.check(value):
            raise ParameterError(f"{where}: '{name}' = {value!r} is invalid: must be "
                                 f"{param.requirement} ({param.doc})")
        out[name] = value
    return out
