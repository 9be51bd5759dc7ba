#!/usr/bin/env bash
# Re-record every CPU collection the studies use, one at a time (never two at
# once: on a small machine two collections would interfere with each other and
# with the interference they are measuring). 19 minutes of load plus about 30 s
# of start-up and solo profiling per collection: about 24 minutes in all.
#
#   experiments/collect_all.sh            # all of them
#   experiments/collect_all.sh cpu-drift  # only the named ones
#
# Output: experiments/data/<name>.jsonl.gz (coloc/v1), documented in
# experiments/data/README.md; a collection recorded with a schedule also gets
# <name>.schedule holding the schedule text (the drift study reads it). There
# is no separate cpu-workers-2: it would be the very command of cpu-load-medium
# (rate 40, all six models, 2 workers, seed 0), which the concurrency study
# reads as its 2-worker point.
set -euo pipefail
cd "$(dirname "$0")/.."
PREDICTOR=${PREDICTOR:-.venv/bin/predictor}
DATA=experiments/data
ALL_MODELS=resnet,vgg,mobilenet,bert,gpt2,mlp
mkdir -p "$DATA"

collect() {  # name, then predictor collect arguments
    local name=$1; shift
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi
    echo "== $name: $PREDICTOR collect $* -o $DATA/$name.jsonl.gz ($(date -u +%FT%TZ))"
    "$PREDICTOR" collect "$@" --quiet -o "$DATA/$name.jsonl.gz"
}
ONLY="$*"

# Load levels (study 1): all six models, 2 workers.
collect cpu-load-low     --duration 120 --models $ALL_MODELS --rate 15 --workers 2 --seed 0
collect cpu-load-medium  --duration 120 --models $ALL_MODELS --rate 40 --workers 2 --seed 0
collect cpu-load-high    --duration 120 --models $ALL_MODELS --rate 90 --workers 2 --seed 0
# Two model sets (study 1).
collect cpu-models-vision   --duration 90 --models resnet,vgg,mobilenet --rate 40 --workers 2 --seed 1
collect cpu-models-language --duration 90 --models bert,gpt2,mlp        --rate 40 --workers 2 --seed 2
# Drift (study 2): model mix and rate change at 60 s and 120 s.
DRIFT_SCHEDULE="0:resnet,mobilenet@30;60:bert,gpt2,vgg@70;120:mlp,resnet,gpt2@40"
collect cpu-drift --duration 180 --models $ALL_MODELS --workers 2 --seed 3 --schedule "$DRIFT_SCHEDULE" \
    && echo "$DRIFT_SCHEDULE" > "$DATA/cpu-drift.schedule"
# Concurrency (study 3): same mix and rate, 3 and 4 workers (2 workers: cpu-load-medium).
collect cpu-workers-3 --duration 120 --models $ALL_MODELS --rate 40 --workers 3 --seed 0
collect cpu-workers-4 --duration 120 --models $ALL_MODELS --rate 40 --workers 4 --seed 0
# At 40 requests/s three or four workers are seldom all busy; at 90/s they are
# (2 workers at 90/s: cpu-load-high).
collect cpu-workers-3-r90 --duration 90 --models $ALL_MODELS --rate 90 --workers 3 --seed 0
collect cpu-workers-4-r90 --duration 90 --models $ALL_MODELS --rate 90 --workers 4 --seed 0

