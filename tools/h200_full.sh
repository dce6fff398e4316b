#!/usr/bin/env bash
# The full GPU run on the lent H200 (device tool), from the bare checkout: every cuda-marked test
# (case pairs, attribution, empty_cache benchmark), the catalog's results file, and the
# harness's overheads. Writes under $OUT: pytest.log, bench.json (pytest-benchmark),
# <card>-torch<version>.json (h200-…: the results the catalog reads), <card>-bench-torch<version>.json.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
TORCH=$(python3 -c "import torch; print(torch.__version__.split('+')[0])")
WHEN=$(date -u +%Y-%m-%dT%H:%MZ)
# The card is named from the machine: the device tool may lend an H100 for an H200 call.
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
GPU=${GPU:-unknown GPU}
# Files are named for that card (h200-…, h100-…), so an H100's figures never stand in for an H200's.
case $GPU in *H200*) CARD=h200 ;; *H100*) CARD=h100 ;; *) CARD=gpu ;; esac
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# WORKERS=N (8 on the H200's 16 cores) runs the cuda suite over N pytest-xdist processes (each its own CUDA context and
# caching allocator, so no run reads another's counters); pytest-benchmark's own timings are off
# under xdist, the catalog's timings come from `leaklab bench` below.
SECONDS=0
if [[ ${SUITE:-1} != 0 ]]; then
  timeout 400 python3 -m pytest -m cuda -p no:cacheprovider -q -rs --timeout 120 ${WORKERS:+-n $WORKERS} "$@" \
    --durations=15 --leaklab-results "$OUT/$CARD-torch$TORCH.json" 2>&1 | tee "$OUT/pytest.log"
  echo "cuda suite wall time: ${SECONDS}s (workers: ${WORKERS:-none})${*:+ with: $(printf "%q " "$@")}" | tee -a "$OUT/pytest.log"
fi
[[ -f "$OUT/$CARD-torch$TORCH.json" ]] && python3 - "$OUT/$CARD-torch$TORCH.json" "$WHEN" "$GPU" <<'PY'
import json, sys
from leaklab.files import atomic_write
path, when, gpu = sys.argv[1], sys.argv[2], sys.argv[3]
doc = json.load(open(path))
doc["note"] = f"python3 -m pytest -m cuda --leaklab-results on the lent {gpu} (device tool), {when}"
atomic_write(path, json.dumps(doc, indent=1))  # the file stays whole if this fails
PY
# SENSITIVITY=0 leaves the sensitivity grid out (when the verdict rules did not change since the
# committed h200-sensitivity file), to keep the call inside the device's 10-minute limit.
if [[ ${SENSITIVITY:-1} != 0 ]]; then
  timeout 240 python3 -m leaklab bench --device cuda --sensitivity --results "$OUT/$CARD-sensitivity-torch$TORCH.json" \
    --note "leaklab bench --sensitivity on the lent $GPU (device tool), $WHEN" 2>&1 | tail -25
fi
# BENCH=0 leaves the benchmarks out (when the probe did not change since the committed bench file).
if [[ ${BENCH:-1} != 0 ]]; then
  timeout 150 python3 -m leaklab bench --device cuda --results "$OUT/$CARD-bench-torch$TORCH.json" \
    --note "leaklab bench --device cuda on the lent $GPU (device tool), $WHEN"
fi
# MATCHING=1: held-out leaky steps from public reports, each checked and matched to the catalog.
# MATCHING_ROUNDS=12 (or 11,12): only those rounds' steps, their rows merged into the committed file's;
# MATCHING_STEPS_FILE=names.txt: only the steps named there (comma-separated), merged the same way.
if [[ ${MATCHING:-0} != 0 ]]; then
  STEPS=$([[ -n ${MATCHING_STEPS_FILE:-} ]] && cat "$MATCHING_STEPS_FILE")
  [[ -n ${MATCHING_ROUNDS:-}$STEPS && -f results/$CARD-matching-torch$TORCH.json ]] && cp "results/$CARD-matching-torch$TORCH.json" "$OUT/"
  timeout ${MATCHING_LIMIT:-450} python3 -m leaklab bench --device cuda --matching ${MATCHING_ROUNDS:+--rounds $MATCHING_ROUNDS} \
    ${STEPS:+--steps $STEPS} \
    --results "$OUT/$CARD-matching-torch$TORCH.json" \
    --note "leaklab bench --matching on the lent $GPU (device tool), $WHEN" 2>&1 | tail -14
fi
# One report as a user sees it.
python3 -m leaklab check tests/data/user_steps.py:grows --device cuda --attribute --steps 10 --quiet > "$OUT/user-report-cuda.txt" 2>&1
