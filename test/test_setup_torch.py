"""scripts/install_torch.sh: which torch build `make setup` installs, keeps or replaces (CUDA=0:
the CPU build, never over a CUDA build; CUDA=1: a CUDA build over a CPU one, and a clear error
when the indexes give a CPU build; uv first when the venv has it, pip when it fails). Run against
a stand-in venv whose python and uv record their commands, so no wheel is downloaded."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install_torch.sh"
# a venv's python: `-c CODE` answers the torch build from ./torch (absent: no torch), `-m pip`
# appends its arguments to ./pip.log and installs what the spec and FAKE_INDEX_GIVES say
FAKE_PYTHON = r"""#!/usr/bin/env bash
here=$(dirname "$0")/..
if [ "$1" = -c ]; then
  [ -f "$here/torch" ] || exit 1
  cat "$here/torch"; exit 0
fi
shift 2  # -m pip
echo "$*" >> "$here/pip.log"
case "$1" in
  uninstall) rm -f "$here/torch" ;;
  install)
    case "$*" in
      *+cpu*--index-url*) echo cpu > "$here/torch" ;;
      *+cpu*) [ "$FAKE_INDEX_HAS_CPU_BUILD" = 1 ] || exit 1; echo cpu > "$here/torch" ;;
      *--index-url*) echo cuda > "$here/torch" ;;
      *) echo "$FAKE_INDEX_GIVES" > "$here/torch" ;;
    esac ;;
esac
"""
# the venv's uv (scripts/installer.sh): `pip install ARGS` appends ARGS to ./uv.log and installs
# torch's CPU build, or fails when FAKE_UV_FAILS=1
FAKE_UV = r"""#!/usr/bin/env bash
here=$(dirname "$0")/..
shift 2  # pip install
echo "$*" >> "$here/uv.log"
[ "$FAKE_UV_FAILS" = 1 ] && exit 1
case "$*" in *+cpu*) echo cpu > "$here/torch" ;; esac
"""


def run_script(tmp_path: Path, have: str | None, cuda: bool, uv: bool = False, **env: str
               ) -> tuple[subprocess.CompletedProcess, list[str], str | None]:
    """Without ``uv``, the venv has none and pip cannot install it: the pip path."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for name, text in [("python", FAKE_PYTHON), *([("uv", FAKE_UV)] if uv else [])]:
        (venv / "bin" / name).write_text(text)
        (venv / "bin" / name).chmod(0o755)
    if have:
        (venv / "torch").write_text(have)
    result = subprocess.run(["bash", str(SCRIPT), str(venv)], capture_output=True, text=True,
                            env={**os.environ, "CUDA": "1" if cuda else "0",
                                 "FAKE_INDEX_GIVES": "cuda", "FAKE_INDEX_HAS_CPU_BUILD": "1",
                                 **env}, timeout=60)
    log = (venv / "pip.log").read_text().splitlines() if (venv / "pip.log").exists() else []
    if not uv:  # the attempt to install uv into the venv, which the stand-in pip cannot do
        log = [line for line in log if not line.startswith("install uv==")]
    build = (venv / "torch").read_text().strip() if (venv / "torch").exists() else None
    return result, log, build


def test_a_fresh_venv_gets_the_cpu_build_from_the_configured_indexes(tmp_path):
    result, log, build = run_script(tmp_path, None, cuda=False)
    assert result.returncode == 0, result.stderr
    assert build == "cpu" and log == ["install torch==2.13.0+cpu -q --disable-pip-version-check"]


def test_without_a_cpu_build_on_the_indexes_it_comes_from_pytorchs_cpu_index(tmp_path):
    result, log, build = run_script(tmp_path, None, cuda=False, FAKE_INDEX_HAS_CPU_BUILD="0")
    assert result.returncode == 0, result.stderr
    assert build == "cpu" and "--index-url https://download.pytorch.org/whl/cpu" in log[-1]


@pytest.mark.parametrize("have", ["cpu", "cuda"])
def test_an_installed_torch_is_kept_without_cuda(tmp_path, have):
    result, log, build = run_script(tmp_path, have, cuda=False)
    assert result.returncode == 0 and log == [] and build == have


def test_cuda_replaces_a_cpu_build_and_keeps_a_cuda_one(tmp_path):
    result, log, build = run_script(tmp_path, "cpu", cuda=True)
    assert result.returncode == 0, result.stderr
    assert build == "cuda" and log[0].startswith("uninstall -y torch")
    assert log[1].startswith("install torch==2.13.0 ") and "+cpu" not in log[1]
    result, log, build = run_script(tmp_path / "again", "cuda", cuda=True)
    assert result.returncode == 0 and log == [] and build == "cuda"


def test_cuda_uses_the_given_index(tmp_path):
    url = "https://download.pytorch.org/whl/cu130"
    result, log, build = run_script(tmp_path, None, cuda=True, FAKE_INDEX_GIVES="cpu",
                                    TORCH_INDEX_URL=url)
    assert result.returncode == 0, result.stderr
    assert build == "cuda" and f"--index-url {url}" in log[-1]


def test_cuda_that_yields_a_cpu_build_fails_and_says_what_to_set(tmp_path):
    result, _, build = run_script(tmp_path, None, cuda=True, FAKE_INDEX_GIVES="cpu")
    assert result.returncode == 1 and build == "cpu"
    assert "installed a CPU build" in result.stderr and "TORCH_INDEX_URL=" in result.stderr


def test_with_uv_in_the_venv_the_cpu_build_comes_through_uv_with_pips_find_links(tmp_path):
    result, log, build = run_script(tmp_path, None, cuda=False, uv=True,
                                    PIP_FIND_LINKS="/opt/wheels")
    assert result.returncode == 0, result.stderr
    uv_log = (tmp_path / "venv" / "uv.log").read_text().splitlines()
    assert build == "cpu" and log == []
    assert uv_log == [f"--python {tmp_path}/venv/bin/python -q --find-links /opt/wheels "
                      "torch==2.13.0+cpu"]


def test_when_uv_fails_pip_installs_the_cpu_build(tmp_path):
    result, log, build = run_script(tmp_path, None, cuda=False, uv=True, FAKE_UV_FAILS="1")
    assert result.returncode == 0, result.stderr
    assert build == "cpu" and log[0] == "install torch==2.13.0+cpu -q --disable-pip-version-check"
