# crossspec: the two front-door commands are `make drive` and `make test`; both set up first.
VENV      := .venv
BIN       := $(VENV)/bin
CROSSSPEC := $(BIN)/crossspec
# The bag `make drive` replays: the bundled sample bag (rosbags/README.md), or BAG=...
BAG ?= rosbags/sample
PYTEST_ARGS ?=
# CUDA=1: set up with a CUDA build of torch (scripts/install_torch.sh; docs/gpu.md)
CUDA ?= 0

.PHONY: setup drive test lint bench clean

setup:
	@CUDA=$(CUDA) bash scripts/setup.sh

DRIVE_ARGS ?=

drive: setup
	@mkdir -p build
	$(CROSSSPEC) drive --bag $(BAG) --compare --check-lossless --json build/drive.jsonl $(DRIVE_ARGS)

test: setup lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .

bench: setup
	@mkdir -p build/bench
	$(CROSSSPEC) bench decode --json build/bench/decode.json --plot build/bench/decode.png
	$(CROSSSPEC) bench event-rate --json build/bench/event_rate.json --plot build/bench/event_rate.png
	$(CROSSSPEC) bench lossy --json build/bench/lossy.json --plot build/bench/lossy.png
	$(CROSSSPEC) bench engine --out build/bench --live --distilled crossspec_ros/data/tiny_pair/distilled/drafter --head crossspec_ros/data/tiny_pair/distilled_head/head

clean:
	rm -rf build install log .pytest_cache .hypothesis
