#!/usr/bin/env bash
# scripts/gpu_check.sh: everything crossspec measures on a GPU machine, in ONE device call that
# fits a 15-minute lease (docs/gpu.md gives the call to copy).
#
#   here (with a registry):  scripts/gpu_check.sh fetch
#       the packages the device's image lacks, for its Python 3.12, packed into
#       .gpu/site.tar.gz (git-ignored; ~24 MiB, unpacked there by run); refuses when the
#       working tree and .gpu pass the device's 64 MiB
#   on the device:           scripts/gpu_check.sh run all [OUT] [--budget SECONDS]
#       crossspec bench gpu-kit: one process loads each model once and runs, in priority order
#       against the budget (default 480 s), env, verifier (load, compile: seconds per shape),
#       exactness, passes, engine, fidelity, drafter, streams, trace (where each step's
#       time goes), then tuning, sharing (the drafter beside the verifier), engine-drafter
#       (the engine with the event drafter), prefill-compiled, exactness-float32, 4bit and
#       tests as the budget allows. Each
#       stage's JSON and stages.json are written as it goes (under build/gpu_kit) and packed
#       into OUT/kit.tar.gz after every stage (a call returns at most 8 files): a call cut at
#       its limit still brings back every finished stage.
#                            scripts/gpu_check.sh run STAGE[,STAGE] [OUT] [--budget SECONDS]
#       only those stages (and the ones they need); OUT defaults to $OUT
#   here:                    scripts/gpu_check.sh report DIR... (stage JSONs or kit.tar.gz)
#       docs/gpu-<device>-<date>.{md,json} from whatever stages came back (crossspec bench
#       gpu-report): skipped and failed stages named; and the run's emulation profile
#       (crossspec_ros/data/cost_profiles/<device>-<dtype>-static-<date>.json; beside the
#       report when the streams stage did not run: a bundled profile prices lanes too)
#   anywhere:                scripts/gpu_check.sh smoke [OUT] [--budget SECONDS]
#       the same kit on the CPU with the tiny random pair (eager steps), then the report: the
#       rehearsal that fails here, not there (test/test_gpu_check.py runs it; CI has no GPU)
#
# The device reaches no registry: `fetch` runs here first, and the device call carries .gpu.
# Compiled kernels are cached in build/inductor (the drafter's process reuses the parent's).
set -euo pipefail
cd "$(dirname "$0")/.."

# What the device's image lacks (its packages: the device tool's KINDS.md), pinned as in
# requirements.txt: transformers 5.23 (the static runtime's cache API), its tokenizers and
# hub client (httpx2, and what it imports: httpcore2, truststore), rosbags and its readers
# (the sample bag's windows), evt3 (the drafter's events), bitsandbytes (4-bit; only its CUDA
# 13 library is kept: the wheel holds one per CUDA version). The rehearsal (smoke) checks this
# list against what the kit imported (test/test_gpu_check.py).
WHEELS=(transformers==5.23.0 tokenizers==0.23.3 huggingface_hub==2.4.0 httpx2==2.16.2
        httpcore2==2.16.2 truststore==0.10.5 rosbags==0.11.9 apsw==3.54.1.0
        backports.zstd==1.8.0 lz4==4.4.5 ruamel.yaml==0.19.1 evt3==0.4.1 bitsandbytes==0.50.2)
PLATFORMS=(manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64
           manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64
           manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)
SITE=.gpu/site
SITE_PACKED=.gpu/site.tar.gz

say() { printf '\033[1m[gpu_check]\033[0m %s\n' "$*" >&2; }

fetch() {
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  rm -rf "$SITE" && mkdir -p "$SITE"
  local platform_args=()
  for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
  say "unpacking ${#WHEELS[@]} packages for CPython 3.12 into $SITE"
  python3 -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platform_args[@]}" --target "$SITE" "${WHEELS[@]}"
  find "$SITE/bitsandbytes" -name 'libbitsandbytes_*.so' ! -name '*cuda130*' \
    ! -name '*cpu*' -delete
  # unpacked, transformers alone is ~80 MiB: the call carries the site packed (~24 MiB) and
  # the device unpacks it (python_env)
  tar -C .gpu -czf "$SITE_PACKED" site && rm -rf "$SITE"
}

# the Python that runs crossspec on the device: its own torch, the carried packages first
python_env() {
  local site=""
  if [ "${CARRIED_SITE:-}" = 1 ]; then  # on the device: what fetch packed, unpacked once
    [ -d "$SITE" ] || tar -C .gpu -xzf "$SITE_PACKED"
    site="$PWD/$SITE:"
  fi
  export PYTHONPATH="$site$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  export TORCHINDUCTOR_CACHE_DIR="$PWD/build/inductor" TRANSFORMERS_VERBOSITY=error
  mkdir -p build/inductor
}

PYTHON=${PYTHON:-python3}  # the device's: the one that holds its torch
crossspec() { "$PYTHON" -m crossspec_ros.cli.main "$@"; }

# the device's limit on what a call carries: the working tree and .gpu together
DEVICE_CARRY_MIB=64

carry_check() {
  local tree gpu
  tree=$(git ls-files -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  gpu=$(du -sb .gpu 2>/dev/null | cut -f1 || echo 0)
  say "the working tree $((tree / 1048576)) MiB + .gpu $((${gpu:-0} / 1048576)) MiB" \
    "(a device call carries at most ${DEVICE_CARRY_MIB} MiB)"
  if [ $((tree + ${gpu:-0})) -gt $((DEVICE_CARRY_MIB * 1048576)) ]; then
    say "too much to carry: trim .gpu (or untracked files) below ${DEVICE_CARRY_MIB} MiB"
    return 1
  fi
}

run_kit() {
  local stages=$1 out=$2; shift 2
  mkdir -p "$out"
  python_env
  local only=()
  [ "$stages" = all ] || only=(--stages "$stages")
  crossspec bench gpu-kit "$out" --device "${DEVICE:-cuda}" --models "${MODELS:-full-size}" \
    "${only[@]}" "$@"
}

case "${1:-}" in
  fetch) fetch; carry_check ;;
  check) carry_check ;;
  run)
    stages=${2:?a stage list: all, or some of env,verifier,exactness,passes,engine,drafter,...}
    shift 2
    out=${OUT:-}
    if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then out=$1; shift; fi
    # a device call returns at most 8 files: the stages go to build/gpu_kit and OUT gets
    # them packed (kit.tar.gz, rewritten after every stage; `report` reads it)
    rm -rf build/gpu_kit
    CARRIED_SITE=1 run_kit "$stages" build/gpu_kit --pack "${out:?give OUT or set \$OUT}/kit.tar.gz" "$@"
    ;;
  report)
    # here, not on the device: the venv's Python (the carried site is the device's 3.12)
    shift
    [ -x .venv/bin/python ] && PYTHON=${REPORT_PYTHON:-.venv/bin/python}
    crossspec bench gpu-report "$@"
    ;;
  smoke)
    # the kit on the CPU, small: eager steps (compiling is what the GPU run measures)
    shift
    out=build/gpu_check_smoke
    if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then out=$1; shift; fi
    [ -x .venv/bin/python ] && PYTHON=${SMOKE_PYTHON:-.venv/bin/python}
    DEVICE=cpu MODELS=tiny-random run_kit all "$out" --windows 2 --max-new-tokens 4 \
      --no-compile --repeats 2 --pack "$out/kit.tar.gz" "$@" || say "the kit finished no stage"
    crossspec bench gpu-report "$out" --out "$out/docs" --profiles "$out/profiles"
    ;;
  *) sed -n '2,28p' "$0"; exit 2 ;;
esac
