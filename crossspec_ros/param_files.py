"""ROS 2 parameter files read the way rcl reads them (rcl_yaml_param_parser) and matched to
nodes the way rclpy matches them, so that a file means the same to `crossspec drive --config`
and `crossspec windows --config` as to `crossspec node ... --ros-args --params-file` (rclpy).

Values (rcl types a scalar itself, not by YAML 1.1's rules):
  - quoted or tagged ``!!str``: a string;
  - ``true``/``yes``/``on``/``y`` (and ``True``, ``YES``, ...): true; ``false``/``no``/``off``/
    ``n``: false;
  - a whole C integer (``strtoll``, base 0: ``12``, ``-3``, ``0x1f``, ``017`` is octal 15):
    an integer;
  - a whole C double (``strtod``: ``1.5``, ``2.``, ``1e3``, ``0x1p3``, ``inf``, ``nan``, and
    YAML's ``.inf``/``.nan``): a float;
  - anything else a string: ``1_000``, ``~``, ``null``, and a number out of a double's range
    (``1e999``: ``strtod`` reports ERANGE).

Sections: the keys above ``ros__parameters`` are joined with "/" into the node name
(``/robot1/crossspec_verifier:`` and ``robot1: {crossspec_verifier: ...}`` name the same
node); keys nested under ``ros__parameters`` are joined with "." into parameter names
(``qos_overrides./clock.subscription.depth``). A section applies to a node when its name,
with ``/*`` standing for one namespace token and ``/**`` for any number of them, matches the
node's fully qualified name (``/**``, ``/**/crossspec_verifier``, ``/*/crossspec_verifier``,
``/robot1/crossspec_verifier``, ``crossspec_verifier``); matching sections are merged in the
order they first appear in the file, so a later one wins (as rclpy merges them).

What rcl would refuse, or what rclpy would silently skip although the author clearly meant
something (a node section without ``ros__parameters``, a value outside it), is a
ParameterError naming the file and the section.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from crossspec_ros.text import single_spaced

PARAMS_KEY = "ros__parameters"
WILDCARDS = ("*", "**")


class ParameterError(ValueError):
    """A parameter file or value that cannot be used (the message says which and why)."""


@dataclass(frozen=True)
class Section:
    """One node section of a parameter file: its name as rcl joins it and its parameters
    (nested names joined with ".")."""

    name: str
    params: dict[str, Any]

    @property
    def node(self) -> str:
        """The node-name part of the section name: a node name, or "*" / "**" (any node)."""
        return self.name.rsplit("/", 1)[-1]

    @property
    def for_any_node(self) -> bool:
        return self.node in WILDCARDS

    def applies_to(self, fully_qualified_name: str) -> bool:
        """Whether rclpy gives this section's parameters to the node of that name."""
        return section_matches(self.name, fully_qualified_name)


def fully_qualified_name(node_name: str, namespace: str = "/") -> str:
    """``/ns/name`` (``/name`` in the root namespace), as rcl names a node."""
    namespace = "/" + namespace.strip("/") if namespace.strip("/") else ""
    return f"{namespace}/{node_name}"


def section_matches(section_name: str, fully_qualified_name: str) -> bool:
    """rclpy's rule: the section name (made absolute) as a regular expression in which "/*"
    stands for one namespace token, so "/**" becomes any number of them."""
    pattern = section_name if section_name.startswith("/") else "/" + section_name
    pattern = pattern.replace("/*", "(/[A-Za-z0-9_]+)")
    return re.fullmatch(pattern, fully_qualified_name) is not None


def read_sections(path: str | Path) -> list[Section]:
    """The node sections of a parameter file in the order rclpy merges them (first
    appearance; a name met again adds to its first section). Raises ParameterError for a
    file rcl would refuse and for parts rclpy would silently skip."""
    path = Path(path)
    document = _load(path)
    if document is None:
        return []
    if not isinstance(document, dict):
        raise ParameterError(f"{path}: expected a mapping of node names to {PARAMS_KEY} "
                             f"(e.g. '/**: {PARAMS_KEY}: window_length_s: 1.0')")
    sections: dict[str, dict[str, Any]] = {}
    _collect(path, document, [], sections)
    return [Section(name, params) for name, params in sections.items()]


# -- reading ---------------------------------------------------------------------------------

class _RclLoader(yaml.SafeLoader):
    """PyYAML with rcl's typing: every plain (unquoted, untagged) scalar goes to
    ``rcl_scalar``; mapping keys stay the text written."""

    yaml_implicit_resolvers: ClassVar[dict] = {}  # own table: YAML 1.1's typing rules do not apply

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        mapping = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    None, None, "a key must be a name, not a list or a mapping",
                    key_node.start_mark)
            if key_node.value in mapping:  # PyYAML keeps the last one silently
                raise yaml.constructor.ConstructorError(
                    None, None, f"'{key_node.value}' is given twice in one mapping (which "
                    "value was meant?): keep one", key_node.start_mark)
            mapping[key_node.value] = self.construct_object(value_node, deep=deep)
        return mapping


_PLAIN = "!crossspec/rcl-plain"
_RclLoader.add_implicit_resolver(_PLAIN, re.compile(r".*", re.DOTALL), None)
_RclLoader.add_constructor(_PLAIN, lambda _loader, node: rcl_scalar(node.value))


def _load(path: Path) -> Any:
    try:
        text = path.read_text()
    except FileNotFoundError as err:
        raise ParameterError(f"parameter file {path} does not exist") from err
    except (OSError, UnicodeDecodeError) as err:
        raise ParameterError(f"parameter file {path} cannot be read: {err}") from err
    try:
        return yaml.load(text, Loader=_RclLoader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as err:
        problem = single_spaced(err)
        raise ParameterError(f"parameter file {path} is not valid YAML: {problem}") from err


_TRUE = {"Y", "y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"}
_FALSE = {"N", "n", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}
_YAML_SPECIAL = {".nan": math.nan, ".NaN": math.nan, ".NAN": math.nan}
_YAML_SPECIAL.update({f"{sign}{inf}": (-math.inf if sign == "-" else math.inf)
                      for sign in ("", "+", "-") for inf in (".inf", ".Inf", ".INF")})
_C_INTEGER = re.compile(r"[ \t]*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_C_DECIMAL = re.compile(r"[ \t]*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_C_HEX_FLOAT = re.compile(r"[ \t]*[+-]?0[xX]([0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)"
                          r"([pP][+-]?\d+)?")
_C_INF_NAN = re.compile(r"[ \t]*([+-]?)(inf|infinity|nan(\([0-9A-Za-z_]*\))?)", re.IGNORECASE)
INT64 = (-2**63, 2**63 - 1)


def rcl_scalar(text: str) -> Any:
    """An unquoted scalar as rcl types it (see the module docstring); None for no value."""
    if text == "":
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    integer = _c_integer(text)
    if integer is not None:
        return integer
    number = _c_double(text)
    return text if number is None else number


def _c_integer(text: str) -> int | None:
    match = _C_INTEGER.fullmatch(text)
    if match is None:
        return None
    sign, digits = match.groups()
    base = 16 if digits[:2] in ("0x", "0X") else 8 if digits.startswith("0") else 10
    value = int(digits, base) * (-1 if sign == "-" else 1)
    return value if INT64[0] <= value <= INT64[1] else None  # ERANGE: strtod's turn


def _c_double(text: str) -> float | None:
    if text in _YAML_SPECIAL:
        return _YAML_SPECIAL[text]
    special = _C_INF_NAN.fullmatch(text)
    if special is not None:
        value = math.nan if special.group(2).lower().startswith("nan") else math.inf
        return -value if special.group(1) == "-" else value
    if _C_DECIMAL.fullmatch(text):
        value = float(text)
    elif _C_HEX_FLOAT.fullmatch(text):
        value = float.fromhex(text.strip())
    else:
        return None
    if math.isinf(value) or (abs(value) < sys.float_info.min and _nonzero_mantissa(text)):
        return None  # strtod's ERANGE (overflow or underflow): rcl keeps the text
    return value


def _nonzero_mantissa(text: str) -> bool:
    body = text.strip().lstrip("+-")
    if body[:2] in ("0x", "0X"):
        return any(c not in "0." for c in re.split("[pP]", body[2:])[0])
    return any(c not in "0." for c in re.split("[eE]", body)[0])


# -- sections --------------------------------------------------------------------------------

def _collect(path: Path, mapping: dict, keys: list[str], sections: dict[str, dict]) -> None:
    """Walk the node-name levels down to each ``ros__parameters`` (rcl's order)."""
    for key, value in mapping.items():
        if key == PARAMS_KEY:
            if not keys:
                raise ParameterError(f"{path}: '{PARAMS_KEY}' must sit under a node name, "
                                     f"e.g. '/**: {PARAMS_KEY}:' or '/crossspec_verifier: "
                                     f"{PARAMS_KEY}:'")
            name = _join(keys)
            _check_section_name(path, name)
            if not isinstance(value, dict):
                raise ParameterError(f"{path}: section '{name}' needs a '{PARAMS_KEY}' mapping "
                                     f"of parameter names to values, got {value!r}")
            sections.setdefault(name, {}).update(_flatten(path, name, value))
        elif isinstance(value, dict) and value:
            _collect(path, value, [*keys, key], sections)
        elif keys and not isinstance(value, dict):
            section = _join(keys)
            raise ParameterError(
                f"{path}: section '{section}' has '{key}' outside '{PARAMS_KEY}' (ROS 2 reads "
                f"a node's parameters only under it): write '{section}: {PARAMS_KEY}: {key}: "
                "...'")
        else:
            section = _join([*keys, key])
            raise ParameterError(
                f"{path}: section '{section}' has no '{PARAMS_KEY}' (ROS 2 would not read "
                f"it): write its parameters as '{section}: {PARAMS_KEY}: NAME: VALUE'")


def _join(keys: list[str]) -> str:
    """rcl joins node-name levels with "/" unless the name so far ends with one."""
    name = keys[0]
    for key in keys[1:]:
        name += key if name.endswith("/") else "/" + key
    return name


_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_section_name(path: Path, name: str) -> None:
    """rcl's check of a section name (it refuses the whole file otherwise)."""
    if name in ("/**", "/*"):
        return
    namespace, _, node = name.rpartition("/")
    problem = None
    if node not in WILDCARDS and not _TOKEN.fullmatch(node):
        problem = (f"'{node}' is not a node name (letters, digits and underscores, not "
                   "starting with a digit) nor * or **")
    elif namespace:
        for token in namespace.removeprefix("/").split("/"):
            if token == "":
                problem = "it repeats '/'"
            elif token not in WILDCARDS and not _TOKEN.fullmatch(token):
                problem = f"'{token}' is not a namespace name (letters, digits, underscores)"
            if problem:
                break
    if problem:
        raise ParameterError(f"{path}: section '{name}' is not a node name ROS 2 accepts: "
                             f"{problem}; e.g. '/**', '/crossspec_verifier', "
                             "'/robot1/crossspec_verifier', '/**/crossspec_verifier'")


def _flatten(path: Path, section: str, params: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out.update(_flatten(path, section, value, name))
        elif value is None:
            raise ParameterError(f"{path}: section '{section}': parameter '{name}' has no "
                                 "value")
        else:
            out[name] = value
    return out
