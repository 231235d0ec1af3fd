#!/usr/bin/env bash
# Gives a venv prefix what a colcon build of crossspec installs for `ros2 launch crossspec
# drive.launch.py` and `ros2 run crossspec crossspec` (CMakeLists.txt, CROSSSPEC_INSTALL_PYTHON):
#   share/crossspec/launch/*        links to the checkout's launch files (a directory of file
#                                   links: ros2 launch walks share/crossspec to find a launch file,
#                                   and that walk does not follow a linked directory)
#   share/crossspec/{config,rosbags} links to the checkout's directories
#   lib/crossspec/crossspec         a link to the venv's `crossspec` command (launch_ros' Node and
#                                   `ros2 run` look for executables in lib/<package>)
#   bin/activate                    exports AMENT_PREFIX_PATH (this venv added once; deactivate
#                                   takes it out): ros2cli and launch_ros find packages through
#                                   it, and nothing else sets it
# share/crossspec/package.xml and the ament index entry come from the messages' build
# (scripts/setup.sh). Links, so edits in the checkout show without a rebuild. Idempotent: a link
# that is already right is not touched; a launch file gone from the checkout loses its link; a
# real directory in place of a link (a colcon-style install into the venv) is left alone.
# Usage: install_ros_layout.sh VENV [CHECKOUT]   (scripts/setup.sh calls it)
set -euo pipefail
VENV=$1
ROOT=${2:-$(cd "$(dirname "$0")/.." && pwd)}
SHARE=$VENV/share/crossspec

link() {  # link TARGET NAME: NAME -> TARGET unless it is that already
  [ "$(readlink "$2" || true)" = "$1" ] || ln -sfn "$1" "$2"
}

mkdir -p "$SHARE/launch" "$VENV/lib/crossspec"
for target in "$ROOT"/launch/*; do
  if [ -f "$target" ]; then link "$target" "$SHARE/launch/$(basename "$target")"; fi
done
find "$SHARE/launch" -maxdepth 1 -xtype l -delete
for name in config rosbags; do
  if [ -L "$SHARE/$name" ] || [ ! -e "$SHARE/$name" ]; then link "$ROOT/$name" "$SHARE/$name"; fi
done
link ../../bin/crossspec "$VENV/lib/crossspec/crossspec"

# bin/activate: a block between these marker lines, replaced when its text changes
BEGIN="# >>> crossspec: AMENT_PREFIX_PATH (install_ros_layout.sh)"
END="# <<< crossspec"
BLOCK=$(cat <<'SH'
# ros2 launch/run find packages through AMENT_PREFIX_PATH: this venv goes in front (once);
# deactivate takes it out again
case ":${AMENT_PREFIX_PATH:-}:" in
  *":$VIRTUAL_ENV:"*) ;;
  *) export AMENT_PREFIX_PATH="$VIRTUAL_ENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}" ;;
esac
if typeset -f deactivate > /dev/null 2>&1; then
  eval "_crossspec_$(typeset -f deactivate)"
  deactivate () {
    if [ -n "${VIRTUAL_ENV:-}" ]; then
      AMENT_PREFIX_PATH=$(printf %s ":${AMENT_PREFIX_PATH:-}:" | sed -e "s#:$VIRTUAL_ENV:#:#g" \
        -e 's#^:##' -e 's#:$##')
      if [ -n "$AMENT_PREFIX_PATH" ]; then export AMENT_PREFIX_PATH; else unset AMENT_PREFIX_PATH; fi
    fi
    _crossspec_deactivate "$@"
  }
fi
SH
)
ACTIVATE=$VENV/bin/activate
if [ -f "$ACTIVATE" ]; then
  wanted=$(printf '%s\n%s\n%s' "$BEGIN" "$BLOCK" "$END")
  have=$(sed -n "/^$BEGIN\$/,/^$END\$/p" "$ACTIVATE")
  if [ "$have" != "$wanted" ]; then
    sed -i "/^$BEGIN\$/,/^$END\$/d" "$ACTIVATE"
    printf '%s\n' "$wanted" >> "$ACTIVATE"
  fi
fi
