"""The dependency lists: requirements-ros.txt (what a ROS 2 install adds with pip) and
requirements.txt (the PyPI setup, which includes it) cover every library crossspec_ros imports,
and the ROS list never replaces what the distro owns."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what a ROS install takes from apt, by module: the rosdep key package.xml must name
ROSDEP_KEYS = {"numpy": "python3-numpy", "yaml": "python3-yaml", "h5py": "python3-h5py",
               "tqdm": "python3-tqdm", "matplotlib": "python3-matplotlib", "PIL": "python3-pil"}
# built by rosidl from this repository (crossspec) or the distro's package (event_camera_msgs)
BUILT_HERE = {"crossspec", "event_camera_msgs"}
# torch is installed first and on its own (CPU or CUDA build: docs/gpu.md, docs/ros.md)
INSTALLED_APART = {"torch"}
# modules whose wheel does not say which distribution it belongs to
DISTRIBUTION_OF = {"dv_processing": "dv-processing"}


def requirement_names(path: Path) -> dict[str, str]:
    """name (normalised) -> the whole line, for each requirement in ``path`` (not -r lines)."""
    names = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            name = re.split(r"[\[=<>~!]", line)[0]
            names[normalise(name)] = line
    return names


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules() -> set[str]:
    modules = set()
    for path in (ROOT / "crossspec_ros").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - {"crossspec_ros", "__future__"}


def test_every_imported_library_comes_from_ros_a_rosdep_key_or_requirements_ros():
    ros_list = requirement_names(ROOT / "requirements-ros.txt")
    package = ET.parse(ROOT / "package.xml").getroot()
    keys = {e.text for e in package if e.tag in ("depend", "exec_depend")}
    distributions = importlib.metadata.packages_distributions()
    unaccounted = []
    for module in sorted(imported_modules()):
        owners = [normalise(d) for d in distributions.get(module, [DISTRIBUTION_OF.get(module)])
                  if d]
        if module in ROSDEP_KEYS:
            assert ROSDEP_KEYS[module] in keys, f"package.xml lacks {ROSDEP_KEYS[module]}"
        elif module in BUILT_HERE or module in INSTALLED_APART:
            continue
        elif any(o.startswith("ros-") for o in owners):
            assert module in keys, f"package.xml lacks the ROS package {module}"
        elif not any(o in ros_list for o in owners):
            unaccounted.append((module, owners))
    assert not unaccounted, f"imported but in neither package.xml nor requirements-ros.txt: " \
                            f"{unaccounted}"


def test_requirements_ros_leaves_the_distros_packages_alone_and_pins_the_rest():
    ros_list = requirement_names(ROOT / "requirements-ros.txt")
    distro_owned = [n for n in ros_list
                    if n.startswith(("ros-", "colcon", "catkin")) or n in {
                        "numpy", "pyyaml", "matplotlib", "pillow", "h5py", "tqdm", "pytest",
                        "ruff", "hypothesis", "torch"}]
    assert not distro_owned
    assert all("==" in line for line in ros_list.values()), ros_list


def test_requirements_txt_includes_the_ros_list_once_and_adds_the_pypi_setup():
    text = (ROOT / "requirements.txt").read_text()
    assert "-r requirements-ros.txt" in text.splitlines()
    pypi = requirement_names(ROOT / "requirements.txt")
    assert not set(pypi) & set(requirement_names(ROOT / "requirements-ros.txt"))
    assert {"ros-rclpy", "numpy", "pytest", "colcon-core"} <= set(pypi)
    # the setup re-installs when either list changes
    assert "hash_of requirements.txt requirements-ros.txt" in \
        (ROOT / "scripts" / "setup.sh").read_text()
