#!/usr/bin/env bash
# Puts torch 2.13.0 into a venv before anything else can pull it in (scripts/setup.sh calls it).
#   CUDA=0 (default): the CPU build, unless the venv already has a torch (a CUDA build stays:
#                     `make test` after `make setup CUDA=1` keeps it). Tried first from the
#                     configured indexes as 2.13.0+cpu, then from PyTorch's CPU index: plain PyPI's
#                     Linux wheel is the CUDA build, gigabytes a CPU machine does not need.
#   CUDA=1:           a CUDA build, replacing a CPU build; from TORCH_INDEX_URL when set (e.g.
#                     https://download.pytorch.org/whl/cu130), else from the configured indexes
#                     (PyPI's Linux wheel). A CPU build coming back is an error that says what to do.
# Usage: install_torch.sh VENV
set -euo pipefail
VENV=$1
CUDA=${CUDA:-0}
TORCH_VERSION=2.13.0
CPU_INDEX_URL=${CPU_INDEX_URL:-https://download.pytorch.org/whl/cpu}
# pip reads PIP_* variables itself (PIP_QUIET must be a number there): not one of those
SETUP_QUIET=${SETUP_QUIET:--q}

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
# shellcheck source=scripts/installer.sh
. "$(dirname "$0")/installer.sh"
# which torch the venv has: none, cpu or cuda
torch_build() {
  "$VENV/bin/python" -c "import torch; print('cuda' if torch.version.cuda else 'cpu')" \
    2>/dev/null || echo none
}

have=$(torch_build)
if [ "$CUDA" = 1 ]; then
  [ "$have" = cuda ] && exit 0
  if [ "$have" = cpu ]; then
    say "replacing the CPU build of torch with a CUDA build (CUDA=1)"
    venv_pip uninstall -y torch
  else
    say "installing torch $TORCH_VERSION (a CUDA build: CUDA=1)"
  fi
  venv_install "torch==$TORCH_VERSION" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
  if [ "$(torch_build)" != cuda ]; then
    echo "[setup] CUDA=1, but pip installed a CPU build of torch $TORCH_VERSION (your indexes" \
      "offer no CUDA build for this machine): run again with TORCH_INDEX_URL set to one of" \
      "PyTorch's CUDA indexes, e.g. make setup CUDA=1" \
      "TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130 (docs/gpu.md)" >&2
    exit 1
  fi
  say "torch: $("$VENV/bin/python" -c "import torch; print(torch.__version__, 'CUDA', torch.version.cuda)")"
elif [ "$have" = none ]; then
  say "installing torch $TORCH_VERSION (CPU build) first, so nothing pulls CUDA wheels"
  venv_install "torch==$TORCH_VERSION+cpu" 2>/dev/null \
    || venv_install "torch==$TORCH_VERSION+cpu" --index-url "$CPU_INDEX_URL"
fi
