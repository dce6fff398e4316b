#!/usr/bin/env bash
# The real-model corpus on the lent H200 (device tool), from the bare checkout: the cuda half of
# tests/test_real_models.py (each step of real_models/ at its realistic CUDA size, with default
# settings), RUNS times serially, each run writing its own results file; then the flips between
# runs (a verdict, or a per-resource verdict, that differs), as tools/flake_gate.py finds them.
# Writes under $OUT: h200-models-torch<version>.json (the first run: copy it to results/ and run
# `python3 -m leaklab catalog`), h200-models-torch<version>-gate.json (the flips: copy it to results/models-gate/),
# h200-models-run<N>.json, pytest-<N>.log, flips.txt.
# Usage: bash tools/h200_models.sh [pytest options, e.g. -k "causal_lm or timm"]; RUNS=3 by default;
# COST=1 adds the check's cost (h200-models-cost-torch<version>.json), RUNS=0 COST=1 runs only that.
# Runs spread over several calls (the device's 10-minute limit): RUN_FROM=N numbers them from N;
# then `python3 tools/models_runs.py h200-models-run*.json` here lists the flips between all of them.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
RUNS=${RUNS:-3}
RUN_FROM=${RUN_FROM:-1}  # the first run's number, so that runs made over several calls have distinct files
TORCH=$(python3 -c "import torch; print(torch.__version__.split('+')[0])")
WHEN=$(date -u +%Y-%m-%dT%H:%MZ)
# files are named for the card lent (the device tool may lend an H100 for an H200 call), as tools/h200_full.sh does
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
GPU=${GPU:-unknown GPU}
case $GPU in *H200*) CARD=h200 ;; *H100*) CARD=h100 ;; *) CARD=gpu ;; esac
# a step stuck past 300 s fails its test, where pytest-timeout is installed (tools/h200_full.sh uses it too)
TIMEOUT=$(python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout 300")
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import transformers, timm, torchmetrics, peft, lightning as l; print('transformers', transformers.__version__, \
'timm', timm.__version__, 'torchmetrics', torchmetrics.__version__, 'peft', peft.__version__, 'lightning', l.__version__)"
if [[ $RUNS -gt 0 ]]; then
  for run in $(seq "$RUN_FROM" $((RUN_FROM + RUNS - 1))); do
    SECONDS=0
    python3 -m pytest -m "models and cuda" -p no:cacheprovider -q -rs $TIMEOUT "$@" tests/test_real_models.py \
      --leaklab-results "$OUT/$CARD-models-run$run.json" >"$OUT/pytest-$run.log" 2>&1
    code=$?
    echo "run $run: exit $code in ${SECONDS}s: $(tail -1 "$OUT/pytest-$run.log")"
  done
  files=$(ls "$OUT"/$CARD-models-run*.json 2>/dev/null | sort -V)
  [[ -n "$files" ]] || { echo "no results file was written" >&2; exit 1; }
  labelled=()
  for file in $files; do labelled+=("serial=$file"); done
  python3 tools/models_runs.py --keep "$OUT/$CARD-models-torch$TORCH.json" --json "$OUT/$CARD-models-torch$TORCH-gate.json" "${labelled[@]}" \
    --note "python3 -m pytest -m 'models and cuda' tests/test_real_models.py --leaklab-results on the lent $GPU (device tool), $WHEN" \
    | tee "$OUT/flips.txt"
fi
# COST=1: issue 28's item 7, each bounded idiom checked against the same calls run bare in one process
# (leaklab bench --models, 3 rounds), written to $CARD-models-cost-torch<version>.json.
if [[ ${COST:-0} != 0 ]]; then
  SECONDS=0
  python3 -m leaklab bench --models --device cuda --results "$OUT/$CARD-models-cost-torch$TORCH.json" \
    --note "leaklab bench --models --device cuda on the lent $GPU (device tool), $WHEN" 2>&1 | tee "$OUT/cost.log"
  echo "bench --models: ${SECONDS}s"
fi
