#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, run the gpu-marked tests (real NVML, real
# CUDA-event timer), then a short real collection with `--device cuda` (NVML sampler and
# CUDA-event timers in the loop), the collectors' costs on the GPU, and an evaluation of what
# was learned from the log (the default predictors, and the service's answers at admission time).
#
#   make gpu-check                 # uses .venv when present, else python3 on PATH
#   OUT=/some/dir make gpu-check   # where the log and the evaluation go (default results/gpu-check)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
OUT=${OUT:-results/gpu-check}
DURATION=${GPU_CHECK_DURATION:-120}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0
echo "== devices"; nvidia-smi -L || status=1
$PY - <<'PY' || status=1
import torch, pynvml
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0))
pynvml.nvmlInit(); print("NVML driver", pynvml.nvmlSystemGetDriverVersion())
PY
echo "== gpu-marked tests"
$PY -m pytest -q -p no:cacheprovider -o addopts="" -m gpu -rA $(grep -rl "mark.gpu" tests) || status=1
echo "== collect on the GPU (${DURATION} s)"
$PY -m predictor.cli collect --device cuda --duration "$DURATION" --workers 2 --rate 200 \
    --quiet -o "$OUT/gpu-run.jsonl.gz" || status=1
$PY - "$OUT/gpu-run.jsonl.gz" <<'PY' || status=1
import collections, statistics, sys
from predictor.records.logio import read_records
records, _ = read_records(sys.argv[1])
kinds = collections.Counter((r.device_kind, r.source) for r in records)
print(f"{len(records)} records; device kinds and sources: {dict(kinds)}")
signals = collections.Counter(k for r in records for k in r.signals)
print("signals present (records):", dict(signals))
slow = [r.latency_ms / r.solo_latency_ms for r in records if r.solo_latency_ms]
for n in range(4):
    s = [r.latency_ms / r.solo_latency_ms for r in records if r.solo_latency_ms and len(r.co_runners) == n]
    if s:
        print(f"co-runners={n}: {len(s)} records, median slowdown {statistics.median(s):.3f}")
if not any(r.device.startswith("gpu") for r in records):
    sys.exit("no record from a GPU")
PY
echo "== the collectors' costs: NVML calls, the NVML sampler at its rate, the CUDA-event timer"
$PY -m experiments.bench.bench_gpu_collectors --out "$OUT/collectors" || status=1
echo "== evaluate (the default predictors, and the service's coverage at admission time)"
$PY -m predictor.cli evaluate "$OUT/gpu-run.jsonl.gz" --admission \
    --json "$OUT/gpu-evaluate.json" || status=1
exit $status
