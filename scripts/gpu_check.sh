#!/usr/bin/env bash
# scripts/gpu_check.sh: everything crossspec measures on a GPU machine, in stages that each fit
# one device call (10 minutes), about 20 minutes in all on an H100.
#
#   here (with a registry):  scripts/gpu_check.sh fetch
#       the packages the device's image lacks, for its Python 3.12, unpacked into .gpu/site
#       (git-ignored; ~30 MB: the working tree and what it carries must stay under 64 MiB)
#   on the device:           scripts/gpu_check.sh run STAGE [OUT]     (OUT defaults to $OUT)
#       env          the machine, torch, CUDA, the packages found
#       tests        the CUDA tests (test/test_models_gpu.py: streams, the static runtime on
#                    CUDA eager and compiled, bit-exact, the engine on it)
#       exactness    k-token verification against one-token decoding, full-size verifier,
#                    per runtime (transformers, static, static compiled), bf16, fp32, 4-bit
#       passes       ms per pass of 1/4/8/16 tokens per runtime, memory of each model and
#                    the pair (bf16, 4-bit)
#       engine-bf16  bench engine --models full-size in bf16: every mode, the verifier alone
#                    eager (transformers) and compiled, crossspec on the compiled static runtime
#       engine-4bit  the same with both models in 4-bit NF4
#   here:                    scripts/gpu_check.sh report DIR...
#       docs/gpu-<device>-<date>.{md,json} from the stages' JSON (crossspec bench gpu-report)
#   anywhere:                scripts/gpu_check.sh smoke [OUT]
#       every stage's commands on the CPU, small, with the tiny random pair: that the kit runs
#       (test/test_gpu_check.py runs it; CI has no GPU)
#
# The device reaches no registry: `fetch` runs here first, and each device call carries
# .gpu (run(command="scripts/gpu_check.sh run STAGE", carry=[".gpu"])). Compiled kernels
# are cached in build/inductor, which a warm device machine keeps between calls.
set -euo pipefail
cd "$(dirname "$0")/.."

# What the device's image lacks (its packages: the device tool's KINDS.md), pinned as in
# requirements.txt: transformers 5.23 (the static runtime's cache API), its tokenizers and
# hub client, rosbags and its readers (the sample bag's windows), evt3 (the drafter's events),
# bitsandbytes (4-bit; only its CUDA 13 library is kept: the wheel holds one per CUDA version).
WHEELS=(transformers==5.23.0 tokenizers==0.23.3 huggingface_hub==2.4.0 httpx2==2.16.2
        rosbags==0.11.9 apsw==3.54.1.0 backports.zstd==1.8.0 lz4==4.4.5 ruamel.yaml==0.19.1
        evt3==0.4.1 bitsandbytes==0.50.2)
PLATFORMS=(manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64
           manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64
           manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)
SITE=.gpu/site

say() { printf '\033[1m[gpu_check]\033[0m %s\n' "$*" >&2; }

fetch() {
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  rm -rf "$SITE" && mkdir -p "$SITE"
  local platform_args=()
  for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
  say "unpacking ${#WHEELS[@]} packages for CPython 3.12 into $SITE"
  python3 -m pip install -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platform_args[@]}" --target "$SITE" "${WHEELS[@]}"
  find "$SITE/bitsandbytes" -name 'libbitsandbytes_*.so' ! -name '*cuda130*' \
    ! -name '*cpu*' -delete
  say "$(du -sh .gpu | cut -f1) in .gpu (the working tree: $(git ls-files -z | du -ch \
    --files0-from=- | tail -1 | cut -f1))"
}

# the Python that runs crossspec on the device: its own torch, the carried packages first
python_env() {
  export PYTHONPATH="$PWD/$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  export TORCHINDUCTOR_CACHE_DIR="$PWD/build/inductor" TRANSFORMERS_VERBOSITY=error
  mkdir -p build/inductor
}

PYTHON=${PYTHON:-python3}  # the device's: the one that holds its torch
crossspec() { "$PYTHON" -m crossspec_ros.cli.main "$@"; }

run_stage() {
  local stage=$1 out=$2 device=${DEVICE:-cuda} models=${MODELS:-full-size}
  local windows=${WINDOWS:-8} tokens=${MAX_NEW_TOKENS:-32} extra=(${EXTRA:-})
  mkdir -p "$out"
  python_env
  case "$stage" in
    env)
      "$PYTHON" - "$out/env.json" <<'PY'
import importlib, json, sys
import torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none"}
for name in ("transformers", "bitsandbytes", "rosbags", "evt3", "peft", "tokenizers"):
    try:
        info[name] = getattr(importlib.import_module(name), "__version__", "?")
    except Exception as err:  # reported, not fatal: the stage that needs it says more
        info[name] = f"missing ({type(err).__name__})"
json.dump(info, open(sys.argv[1], "w"), indent=2)
print(info)
PY
      ;;
    tests)
      set +e
      "$PYTHON" -m pytest -q -p no:cacheprovider test/test_models_gpu.py 2>&1 \
        | tee "$out/tests.log"
      local code=${PIPESTATUS[0]}
      set -e
      "$PYTHON" - "$out/tests.log" "$out/tests.json" "$code" <<'PY'
import json, sys
summary = open(sys.argv[1]).read().strip().splitlines()[-1:]
json.dump({"exit": int(sys.argv[3]), "summary": summary[0] if summary else ""},
          open(sys.argv[2], "w"))
PY
      ;;
    exactness)
      for dtype in bfloat16 float32; do
        crossspec bench exactness --device "$device" --models "$models" --dtype "$dtype" \
          --windows 2 --max-new-tokens "$tokens" "${extra[@]}" \
          --json "$out/exactness-$dtype.json" || true
      done
      crossspec bench exactness --device "$device" --models "$models" --dtype bfloat16 \
        --quantization 4bit --windows 2 --max-new-tokens "$tokens" "${extra[@]}" \
        --json "$out/exactness-4bit.json" || true
      ;;
    passes)
      crossspec bench passes --device "$device" --models "$models" --dtype bfloat16 \
        "${extra[@]}" --json "$out/passes-bfloat16.json"
      crossspec bench passes --device "$device" --models "$models" --dtype bfloat16 \
        --quantization 4bit "${extra[@]}" --json "$out/passes-4bit.json"
      ;;
    engine-bf16|engine-4bit)
      local quant=none name=bfloat16
      if [ "$stage" = engine-4bit ]; then quant=4bit name=4bit; fi
      crossspec bench engine --device "$device" --models "$models" --dtype bfloat16 \
        --quantization "$quant" --no-prompt-lookup --windows "$windows" --warmup 2 \
        --max-new-tokens "$tokens" --oracle 0.5 0.8 --free-oracles "${extra[@]}" \
        --json "$out/engine-$name.json"
      ;;
    *) say "unknown stage '$stage'"; exit 2 ;;
  esac
}

case "${1:-}" in
  fetch) fetch ;;
  run) run_stage "${2:?a stage: env tests exactness passes engine-bf16 engine-4bit}" \
         "${3:-${OUT:?give OUT or set \$OUT}}" ;;
  report) shift; python_env; crossspec bench gpu-report "$@" ;;
  smoke)
    # the kit on the CPU, small: eager steps (compiling is what the GPU run measures)
    out=${2:-build/gpu_check_smoke}
    [ -x .venv/bin/python ] && PYTHON=${SMOKE_PYTHON:-.venv/bin/python}
    export DEVICE=cpu MODELS=tiny-random WINDOWS=3 MAX_NEW_TOKENS=6 EXTRA=--no-compile
    for stage in env exactness engine-bf16; do run_stage "$stage" "$out"; done
    EXTRA="--no-compile --repeats 2" run_stage passes "$out" 2>/dev/null || \
      say "passes: 4-bit needs bitsandbytes' CPU library (skipped in the smoke run)"
    crossspec bench gpu-report "$out" --out "$out/docs"
    ;;
  *) sed -n '2,34p' "$0"; exit 2 ;;
esac
