"""`make setup` gives the venv what `ros2 launch crossspec drive.launch.py` and `ros2 run crossspec
crossspec` look up, as a colcon build installs it (scripts/install_ros_layout.sh): the launch
files and config under share/crossspec, the command under lib/crossspec, and AMENT_PREFIX_PATH
from the venv's activate script. Checked against a stand-in venv (the script's links, its
idempotence) and against the venv this suite runs in when `make setup` made it (the lookups of
ament_index_python, ros2launch and launch_ros, the latter two where they are installed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install_ros_layout.sh"
SETUP_VENV = (Path(sys.prefix) / ".crossspec-msgs").is_file()  # scripts/setup.sh made it
LAUNCH_FILES = sorted(p.name for p in (ROOT / "launch").glob("*.launch.py"))


def _install(venv: Path, checkout: Path = ROOT) -> None:
    result = subprocess.run(["bash", str(SCRIPT), str(venv), str(checkout)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


# the parts of python's venv activate script that matter here
STAND_IN_ACTIVATE = """deactivate () {
    if [ ! "${1:-}" = "nondestructive" ] ; then
        unset VIRTUAL_ENV
        unset -f deactivate
    fi
}
deactivate nondestructive
VIRTUAL_ENV="%s"
export VIRTUAL_ENV
"""


def _stand_in_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text(STAND_IN_ACTIVATE % venv)
    return venv


def _ros2launch_finds(share: Path, file_name: str) -> list[str]:
    """ros2launch.api.get_share_file_path_from_package's walk (no followlinks), verbatim."""
    return [os.path.join(root, file_name) for root, _dirs, files in os.walk(share)
            if file_name in files]


def _ament_prefix_path_after(venv: Path, before: str | None, then: str = "") -> str:
    """AMENT_PREFIX_PATH after sourcing the venv's activate script (``then``: more commands)."""
    env = {k: v for k, v in os.environ.items() if k != "AMENT_PREFIX_PATH"}
    if before is not None:
        env["AMENT_PREFIX_PATH"] = before
    script = f'. "{venv}/bin/activate"; {then} printf %s "${{AMENT_PREFIX_PATH-unset}}"'
    result = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                            check=True, timeout=30)
    assert not result.stderr, result.stderr
    return result.stdout


def test_the_venv_gets_links_to_the_launch_files_config_and_command(tmp_path):
    venv = _stand_in_venv(tmp_path)
    _install(venv)
    share = venv / "share" / "crossspec"
    for name in LAUNCH_FILES:
        assert (share / "launch" / name).resolve() == ROOT / "launch" / name
        # a directory link would hide the files from ros2 launch's walk: these are file links
        assert _ros2launch_finds(share, name) == [str(share / "launch" / name)]
    assert (share / "config").resolve() == ROOT / "config"
    assert (share / "rosbags").resolve() == ROOT / "rosbags"
    command = venv / "lib" / "crossspec" / "crossspec"
    assert os.readlink(command) == "../../bin/crossspec"  # the venv's own entry point


def test_activate_exports_ament_prefix_path_once_and_deactivate_takes_it_out(tmp_path):
    venv = _stand_in_venv(tmp_path)
    _install(venv)
    _install(venv)
    assert (venv / "bin" / "activate").read_text().count("crossspec: AMENT_PREFIX_PATH") == 1
    ros = "/opt/ros/kilted"
    assert _ament_prefix_path_after(venv, None) == str(venv)
    assert _ament_prefix_path_after(venv, ros) == f"{venv}:{ros}"
    assert _ament_prefix_path_after(venv, None, then=f'. "{venv}/bin/activate";') == str(venv)
    assert _ament_prefix_path_after(venv, ros, then="deactivate;") == ros
    assert _ament_prefix_path_after(venv, None, then="deactivate;") == "unset"


def test_an_older_block_in_activate_is_replaced_not_added_to(tmp_path):
    venv = _stand_in_venv(tmp_path)
    _install(venv)
    activate = venv / "bin" / "activate"
    first = activate.read_text()
    begin = next(line for line in first.splitlines() if "crossspec: AMENT_PREFIX_PATH" in line)
    older = f"{begin}\necho an older block\n# <<< crossspec\n"
    activate.write_text(STAND_IN_ACTIVATE % venv + older)
    _install(venv)
    assert activate.read_text() == first


def test_a_second_run_changes_nothing_and_follows_the_checkout(tmp_path):
    checkout = tmp_path / "checkout"
    for name in ("launch", "config", "rosbags"):
        (checkout / name).mkdir(parents=True)
    (checkout / "launch" / "a.launch.py").write_text("")
    (checkout / "launch" / "b.launch.py").write_text("")
    venv = _stand_in_venv(tmp_path)
    real_config = venv / "share" / "crossspec" / "config"
    real_config.mkdir(parents=True)  # as a colcon-style install into the prefix leaves it
    _install(venv, checkout)
    launch_dir = venv / "share" / "crossspec" / "launch"

    def state():
        return {str(p.relative_to(venv)): (os.lstat(p).st_ino, os.lstat(p).st_mtime_ns)
                for p in sorted(venv.rglob("*"))}

    before = state()
    _install(venv, checkout)
    assert state() == before  # nothing rewritten
    assert real_config.is_dir() and not real_config.is_symlink()  # left alone

    (checkout / "launch" / "b.launch.py").unlink()
    (checkout / "launch" / "c.launch.py").write_text("")
    _install(venv, checkout)
    assert sorted(p.name for p in launch_dir.iterdir()) == ["a.launch.py", "c.launch.py"]


@pytest.mark.skipif(not SETUP_VENV, reason="not the venv scripts/setup.sh made")
def test_the_setup_venv_resolves_the_package_as_ros2_launch_and_ros2_run_do(monkeypatch):
    from ament_index_python.packages import get_package_prefix, get_package_share_directory

    monkeypatch.setenv("AMENT_PREFIX_PATH", sys.prefix)  # what `source .venv/bin/activate` sets
    share = Path(get_package_share_directory("crossspec"))
    assert share == Path(sys.prefix) / "share" / "crossspec"
    assert (share / "package.xml").is_file()
    assert (share / "config" / "drive.yaml").resolve() == ROOT / "config" / "drive.yaml"
    assert LAUNCH_FILES and all(_ros2launch_finds(share, name) for name in LAUNCH_FILES)
    command = Path(get_package_prefix("crossspec")) / "lib" / "crossspec" / "crossspec"
    assert os.access(command, os.X_OK)
    probe = subprocess.run([str(command), "--help"], capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and "crossspec" in probe.stdout, probe.stderr


@pytest.mark.skipif(not SETUP_VENV, reason="not the venv scripts/setup.sh made")
def test_ros2_launch_and_launch_ros_find_the_launch_file_and_executable(monkeypatch):
    ros2launch_api = pytest.importorskip("ros2launch.api")  # ROS launch: not on PyPI
    substitutions = pytest.importorskip("launch_ros.substitutions")
    from launch import LaunchContext

    monkeypatch.setenv("AMENT_PREFIX_PATH", sys.prefix)
    found = ros2launch_api.get_share_file_path_from_package(
        package_name="crossspec", file_name="drive.launch.py")
    assert Path(found).resolve() == ROOT / "launch" / "drive.launch.py"
    executable = substitutions.ExecutableInPackage(
        package="crossspec", executable="crossspec").perform(LaunchContext())
    assert Path(executable) == Path(sys.prefix) / "lib" / "crossspec" / "crossspec"
