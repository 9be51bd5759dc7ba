# Two commands do everything on a fresh machine:
#   make demo   start the service and run the real CPU workload against it
#   make test   run the test suite
# Both create .venv/ first (torch==2.13.0 CPU build first, then the project).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0
STAMP := $(VENV)/.stamp-installed
PROTOS := $(wildcard protos/interference/v1/*.proto)
GENERATED := predictor/rpc/generated/.stamp

.PHONY: setup demo test test-slow lint evaluate clean

setup: $(STAMP) $(GENERATED)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH_PIN)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

$(GENERATED): $(PROTOS) scripts/gen_protos.sh $(STAMP)
	PYTHON=$(BIN)/python sh scripts/gen_protos.sh
	touch $@

demo: setup
	$(BIN)/predictor demo

test: setup
	$(BIN)/python -m pytest -q

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

lint: setup
	$(BIN)/ruff check predictor collectors experiments tests

evaluate: setup
	$(BIN)/predictor evaluate predictor/data/cpu-default.jsonl.gz

clean:
	rm -rf $(VENV) predictor/rpc/generated/*_pb2*.py $(GENERATED)
