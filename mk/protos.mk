# gRPC code generation at set-up time; include from the Makefile with `include mk/protos.mk`.
# `make protos` is idempotent and fast when the generated code is up to date; the package
# imports the generated code statically and never generates it at run time.
# `make protos-check` fails (exit 1) when the generated code is missing or older than protos/.
PYTHON_VENV ?= .venv/bin/python
PROTO_SOURCES := $(shell find protos -name '*.proto' 2>/dev/null)
PROTO_STAMP := predictor/rpc/generated/interference/_source_hash.txt

.PHONY: protos protos-check
protos: $(PROTO_STAMP)

$(PROTO_STAMP): $(PROTO_SOURCES) predictor/rpc/codegen.py
	$(PYTHON_VENV) -m predictor.rpc.codegen
	@touch $@

protos-check:
	$(PYTHON_VENV) -m predictor.rpc.codegen --check
