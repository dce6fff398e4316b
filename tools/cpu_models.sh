#!/usr/bin/env bash
# The real-model corpus on this CPU: the cpu half of tests/test_real_models.py (each step of
# real_models/ at its tiny CPU size, default settings), RUNS times one after another, each run writing its own
# results file under a temporary folder; then results/cpu-models-torch<version>.json (the first run,
# which `python3 -m leaklab catalog` renders in docs/harness.md) and the flips between the runs
# (results/models-gate/, rendered there too).
# Usage: bash tools/cpu_models.sh [pytest options, e.g. -n 2]; RUNS=3 by default; LOAD=1 runs beside
# two CPU-bound processes (started and stopped here).
set -u
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
TORCH=$(python3 -c "import torch; print(torch.__version__.split('+')[0])")
WHEN=$(date -u +%Y-%m-%dT%H:%MZ)
work=$(mktemp -d)
load=()
if [[ ${LOAD:-0} != 0 ]]; then
  for _ in 1 2; do python3 -c "while True: pass" & load+=($!); done
fi
trap 'kill "${load[@]}" 2>/dev/null; rm -rf "$work"' EXIT
for run in $(seq 1 "$RUNS"); do
  SECONDS=0
  python3 -m pytest -m "models and not cuda" -p no:cacheprovider -q -rs "$@" tests/test_real_models.py \
    --leaklab-results "$work/run$run.json" >"$work/pytest-$run.log" 2>&1
  code=$?
  echo "run $run: exit $code in ${SECONDS}s: $(tail -1 "$work/pytest-$run.log")"
done
files=$(ls "$work"/run*.json 2>/dev/null | sort -V)
[[ -n "$files" ]] || { echo "no results file was written" >&2; exit 1; }
how="${*:-serial}$([[ ${LOAD:-0} != 0 ]] && echo ', beside two CPU-bound processes')"
labelled=()
for file in $files; do labelled+=("$how=$file"); done
mkdir -p results/models-gate
python3 tools/models_runs.py --keep "results/cpu-models-torch$TORCH.json" \
  --json "results/models-gate/cpu-models-torch$TORCH-${RUNS}runs-$(date -u +%Y%m%dT%H%M).json" "${labelled[@]}" \
  --note "python3 -m pytest -m 'models and not cuda'${*:+ $*} tests/test_real_models.py --leaklab-results on the 2-core CI machine (no GPU)$([[ ${LOAD:-0} != 0 ]] && echo ', beside two CPU-bound processes'), $WHEN"
