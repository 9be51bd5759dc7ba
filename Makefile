# Two commands do everything on a fresh machine:
#   make demo   start the service and run the real CPU workload against it
#   make test   run the test suite
# Both create .venv/ first (torch==2.13.0 CPU build first, then the project with its dev, ray and
# workload extras). A light install without torch (the service alone) is `pip install .`.
# The test targets print why each skipped test was skipped (-rs).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.stamp-installed
# Third-party GPU measurements (docs/datasets.md): not part of the repository. Tests and studies use them
# when INTERFERENCE_DATA names the folder holding them (make test INTERFERENCE_DATA=/path/to/data),
# and skip them otherwise: no default path points outside the checkout.

.PHONY: setup front demo test test-slow lint evaluate gpu-check clean

setup: $(STAMP)
	$(MAKE) --no-print-directory protos
	@$(MAKE) --no-print-directory front

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH_PIN)
	$(BIN)/pip install --quiet -e '.[dev,ray,workload]'
	touch $@

PYTHON_VENV := $(BIN)/python
include mk/protos.mk

# The C++ admission front of `predictor serve --front` (predictor/rpc/front.py): built where g++ and
# Debian's libgrpc++-dev are (apt-get install libgrpc++-dev); without them --front says so and its tests skip.
FRONT := build/admission_front

front: $(FRONT)

$(FRONT): front/admission_front.cc
	@if pkg-config --exists grpc++ 2>/dev/null; then \
		mkdir -p build && g++ -O2 -std=c++17 -Wall -Wextra $< $$(pkg-config --cflags --libs grpc++) -o $@ \
		&& echo "built $@"; \
	else \
		echo "not built: $@ needs libgrpc++-dev (apt-get install libgrpc++-dev); predictor serve --front is unavailable"; \
	fi

demo: setup
	$(BIN)/predictor demo

test: setup
	$(BIN)/python -m pytest -q -rs

test-slow: setup
	$(BIN)/python -m pytest -q -rs -m slow

lint: setup
	$(BIN)/ruff check predictor collectors experiments tests

evaluate: setup
	$(BIN)/predictor evaluate predictor/data/cpu-default.jsonl.gz

# On a machine with a CUDA GPU: the gpu-marked tests, a real collection on the GPU, its evaluation.
gpu-check:
	scripts/gpu_check.sh

clean:
	rm -rf $(VENV) predictor/rpc/generated/interference build
