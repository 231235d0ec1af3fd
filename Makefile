# crossspec: the two front-door commands are `make drive` and `make test`; both set up first.
VENV      := .venv
BIN       := $(VENV)/bin
CROSSSPEC := $(BIN)/crossspec
# The bag `make drive` replays: the bundled sample bag once it exists, else a generated
# test-pattern bag (moving shapes; see crossspec_ros/bags/test_pattern.py).
SAMPLE_BAG := rosbags/sample
PATTERN_BAG := build/test_pattern
BAG ?= $(if $(wildcard $(SAMPLE_BAG)),$(SAMPLE_BAG),$(PATTERN_BAG))
PYTEST_ARGS ?=

.PHONY: setup drive test lint bench clean

setup:
	@bash scripts/setup.sh

drive: setup
	@if [ "$(BAG)" = "$(PATTERN_BAG)" ] && [ ! -e "$(PATTERN_BAG)" ]; then \
	  $(CROSSSPEC) make-test-bag $(PATTERN_BAG); fi
	$(CROSSSPEC) events $(BAG)
	$(CROSSSPEC) windows $(BAG)

test: setup lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check .

bench: setup
	$(CROSSSPEC) bench decode --json build/bench_decode.json

clean:
	rm -rf build install log .pytest_cache .hypothesis
