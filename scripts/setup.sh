#!/usr/bin/env bash
# Sets up everything crossspec needs on a fresh machine with only Python and the registries:
#   .venv (torch first: the CPU build; CUDA=1 a CUDA build), ROS 2 kilted wheels, Python deps,
#   the rosidl message build (crossspec/msg and, where the real package is absent, the
#   event_camera_msgs stand-in), and crossspec_ros itself (editable). Idempotent: steps whose
#   inputs did not change are skipped, so `make test` and `make drive` can call it every time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv
PYTHON=${PYTHON:-python3}
# pip reads PIP_* variables itself (PIP_QUIET must be a number there): not one of those
SETUP_QUIET=${SETUP_QUIET:--q}

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }
# shellcheck source=scripts/installer.sh
. "$ROOT/scripts/installer.sh"

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi

# torch first (CPU build; CUDA=1: a CUDA build), so nothing below pulls another one
SETUP_QUIET=$SETUP_QUIET bash "$ROOT/scripts/install_torch.sh" "$VENV"

REQ_HASH=$(hash_of requirements.txt requirements-ros.txt)
if [ "$(cat "$VENV/.crossspec-requirements" 2>/dev/null)" != "$REQ_HASH" ]; then
  say "installing Python dependencies (requirements.txt)"
  venv_install -r requirements.txt
  "$VENV/bin/python" -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
  echo "$REQ_HASH" > "$VENV/.crossspec-requirements"
fi

# The ROS wheels' CMake files point at the wheel build machine's Python; repoint them here.
PYINC=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
NPINC=$("$VENV/bin/python" -c "import numpy; print(numpy.get_include())")
{ grep -rl /opt/python/cp311-cp311 "$VENV"/share/*/cmake 2>/dev/null || true; } | xargs -r sed -i \
  -e "s#/opt/python/cp311-cp311/include/python3.11#$PYINC#g" \
  -e "s#/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include#$NPINC#g"

build_interfaces() {  # $1: package source dir, $2: name
  say "building ROS interfaces: $2"
  local build="$ROOT/build/interfaces/$2"
  rm -rf "$build"
  AMENT_PREFIX_PATH="$VENV" CMAKE_PREFIX_PATH="$VENV" cmake -S "$1" -B "$build" \
    -DCMAKE_INSTALL_PREFIX="$VENV" -DBUILD_TESTING=OFF -DCROSSSPEC_INSTALL_PYTHON=OFF \
    -DPython3_EXECUTABLE="$VENV/bin/python" -Wno-dev > "$build.log" 2>&1 \
    && cmake --build "$build" -j"$(nproc)" >> "$build.log" 2>&1 \
    && cmake --install "$build" >> "$build.log" 2>&1 \
    || { echo "[setup] building $2 failed; the log: $build.log" >&2; tail -30 "$build.log" >&2; exit 1; }
}
mkdir -p "$ROOT/build/interfaces"

EVP=test/interfaces/event_camera_msgs
EV_HASH=$(hash_of $EVP/package.xml $EVP/CMakeLists.txt $EVP/msg/*.msg)
if [ "$(cat "$VENV/.crossspec-event-camera-msgs" 2>/dev/null)" != "$EV_HASH" ]; then
  if [ -f "$VENV/share/event_camera_msgs/package.xml" ] \
     && ! grep -q "Test-only, wire-compatible stand-in" "$VENV/share/event_camera_msgs/package.xml"; then
    say "event_camera_msgs already installed (the real package); not building the stand-in"
  else
    build_interfaces "$EVP" event_camera_msgs
  fi
  echo "$EV_HASH" > "$VENV/.crossspec-event-camera-msgs"
fi

MSG_HASH=$(hash_of package.xml CMakeLists.txt msg/*.msg action/*.action)
if [ "$(cat "$VENV/.crossspec-msgs" 2>/dev/null)" != "$MSG_HASH" ]; then
  build_interfaces "$ROOT" crossspec
  echo "$MSG_HASH" > "$VENV/.crossspec-msgs"
fi

if ! "$VENV/bin/python" -c "import crossspec_ros.cli.main" 2>/dev/null \
   || [ ! -x "$VENV/bin/crossspec" ]; then
  say "installing crossspec_ros (editable) and the crossspec command"
  venv_install --no-deps --no-build-isolation -e .
fi

# share/crossspec/{launch,config,rosbags}, lib/crossspec/crossspec and AMENT_PREFIX_PATH in the
# venv's activate script: what `ros2 launch crossspec ...` needs where launch is installed
bash "$ROOT/scripts/install_ros_layout.sh" "$VENV"

# Byte-compile the venv once per set of packages: uv installs no .pyc, and where
# PYTHONDONTWRITEBYTECODE is set (this machine sets it) none is ever written, so every process
# compiled torch, transformers and sympy from source on import: 15 s for torch + transformers
# + a Llama model here against 7 s compiled (2026-11-29), paid by every node, drive and test
# process. Whichever installer ran, the same step; ~35 s on 2 cores.
PYC_HASH=$(hash_of requirements.txt requirements-ros.txt scripts/install_torch.sh \
  <(ls "$VENV"/lib/python3*/site-packages))
if [ "$(cat "$VENV/.crossspec-bytecode" 2>/dev/null)" != "$PYC_HASH" ]; then
  say "byte-compiling the venv's packages (once)"
  # rc 1 for a file this Python cannot compile (torch's py312_intrinsics.py on 3.11): left out
  "$VENV/bin/python" -m compileall -q -j 0 "$VENV"/lib/python3*/site-packages > /dev/null \
    2>&1 || true
  echo "$PYC_HASH" > "$VENV/.crossspec-bytecode"
fi

"$VENV/bin/python" - <<'PY'
import crossspec.action, crossspec.msg, event_camera_msgs.msg, rclpy  # noqa: F401  (the build works)
PY
say "ready: $VENV (activate with: source .venv/bin/activate)"
