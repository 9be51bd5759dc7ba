#!/usr/bin/env sh
# Generate the gRPC Python code from protos/ into predictor/rpc/generated/ (idempotent, fast when
# up to date). Uses $PYTHON, else the project's .venv, else python3.
set -eu
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
exec "$PYTHON" -m predictor.rpc.codegen "$@"
