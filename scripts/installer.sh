# Sourced by setup.sh and install_torch.sh (needs VENV, SETUP_QUIET, say): how packages go into
# the venv. uv installs the same pinned wheels as pip in a fraction of the time (on the 2-core
# reference machine, 2026-11-27: torch 46 s -> 7 s, requirements.txt 115 s -> 4 s), so it is the
# first choice; pip is the way whenever uv cannot be had or fails, and SETUP_INSTALLER=pip
# forces it. Both read the same wheels: pip's find-links (PIP_FIND_LINKS) are passed to uv.
UV_VERSION=0.13.9

venv_pip() { "$VENV/bin/python" -m pip "$@" $SETUP_QUIET --disable-pip-version-check 2>&1 \
  | { grep -v -E "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"; }

# the venv's uv, installed on first use; empty when SETUP_INSTALLER=pip or it cannot be had
venv_uv() {
  [ "${SETUP_INSTALLER:-uv}" = pip ] && return 0
  if [ ! -x "$VENV/bin/uv" ]; then
    venv_pip install "uv==$UV_VERSION" >/dev/null 2>&1 || return 0
  fi
  [ -x "$VENV/bin/uv" ] && echo "$VENV/bin/uv"
  return 0
}

# install "$@" (pip install's arguments) into the venv: uv first, pip when uv is absent or fails
venv_install() {
  local uv links=()
  uv=$(venv_uv)
  if [ -n "$uv" ]; then
    for link in ${PIP_FIND_LINKS:-}; do links+=(--find-links "$link"); done
    if "$uv" pip install --python "$VENV/bin/python" $SETUP_QUIET "${links[@]}" "$@"; then
      return 0
    fi
    say "uv could not install $*; trying pip"
  fi
  venv_pip install "$@"
}
