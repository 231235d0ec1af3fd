# crossspec: the two front-door commands are `make drive` and `make test`; both set up first.
VENV      := .venv
BIN       := $(VENV)/bin
CROSSSPEC := $(BIN)/crossspec
# The bag `make drive` replays: the bundled sample bag (rosbags/README.md), or BAG=...
BAG ?= rosbags/sample
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (one per core on the 2-core reference machine; each
# test file runs whole on one worker, so a module's loaded models are shared): TEST_WORKERS=0
# runs in one process
TEST_WORKERS ?= 2
# CUDA=1: set up with a CUDA build of torch (scripts/install_torch.sh; docs/gpu.md)
CUDA ?= 0

.PHONY: setup drive test lint bench clean

setup:
	@CUDA=$(CUDA) bash scripts/setup.sh

DRIVE_ARGS ?=
# the target's regime after the CPU pass (make drive and make bench): the same runs on each
# emulated cost profile (models/emulated.py; every line says EMULATED); EMULATE= skips it
EMULATE ?= h200-bf16-static-2026-11-27 h100-bf16-eager-2026-11-24

drive: setup
	@mkdir -p build
	$(CROSSSPEC) drive --bag $(BAG) --compare --check-lossless --json build/drive.jsonl $(DRIVE_ARGS)
	@for profile in $(EMULATE); do \
	  $(CROSSSPEC) drive --bag $(BAG) --compare --rounds 1 --check-lossless --no-viz \
	    --emulate $$profile --json build/drive-$$profile.jsonl $(DRIVE_ARGS) || exit $$?; \
	done

test: setup lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .

BENCH_ENGINE_ARGS = --live --head crossspec_ros/data/tiny_pair/distilled_head/head

bench: setup
	@mkdir -p build/bench
	$(CROSSSPEC) bench decode --json build/bench/decode.json --plot build/bench/decode.png
	$(CROSSSPEC) bench event-rate --json build/bench/event_rate.json --plot build/bench/event_rate.png
	$(CROSSSPEC) bench lossy --json build/bench/lossy.json --plot build/bench/lossy.png
	$(CROSSSPEC) bench engine --out build/bench $(BENCH_ENGINE_ARGS)
	@for profile in $(EMULATE); do \
	  $(CROSSSPEC) bench engine --out build/bench/emulated-$$profile $(BENCH_ENGINE_ARGS) \
	    --emulate $$profile || exit $$?; \
	done

clean:
	rm -rf build install log .pytest_cache .hypothesis
