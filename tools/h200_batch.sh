#!/usr/bin/env bash
# Several GPU runs in one device call (the device returns at most 8 files: everything written
# goes into one archive, $OUT/h200-batch.tgz; unpack it here with `tar xzf`).
# Usage (device tool): PARTS="suite sensitivity models" bash tools/h200_batch.sh
# Parts: suite (tools/h200_full.sh's cuda suite, WORKERS=8), sensitivity, bench, matching,
# models (tools/h200_models.sh, RUNS=1 by default), ranks (tools/h200_ranks.sh: one rank on CUDA, NCCL), serial (the README's plain `python3 -m pytest -m cuda`, timed).
set -u
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}
WORK=$(mktemp -d)
TORCH=$(python3 -c "import torch; print(torch.__version__.split('+')[0])")
for part in ${PARTS:-suite}; do
  SECONDS=0
  case $part in
    suite) mkdir -p "$WORK/timeline"  # when each test ran, per worker (tools/pytest_timeline.py)
           PYTHONPATH=tools${PYTHONPATH:+:$PYTHONPATH} TIMELINE_DIR=$WORK/timeline OUT=$WORK WORKERS=${WORKERS:-8} SENSITIVITY=0 BENCH=0 \
             bash tools/h200_full.sh -p pytest_timeline > "$WORK/suite.log" 2>&1
           python3 tools/pytest_timeline.py "$WORK/timeline" >> "$WORK/suite.log" 2>&1 ;;
    sensitivity) OUT=$WORK SUITE=0 BENCH=0 bash tools/h200_full.sh > "$WORK/sensitivity.log" 2>&1 ;;
    bench) OUT=$WORK SUITE=0 SENSITIVITY=0 bash tools/h200_full.sh > "$WORK/bench.log" 2>&1 ;;
    matching) OUT=$WORK SUITE=0 SENSITIVITY=0 BENCH=0 MATCHING=1 bash tools/h200_full.sh > "$WORK/matching.log" 2>&1 ;;
    models) OUT=$WORK RUNS=${RUNS:-1} RUN_FROM=${RUN_FROM:-1} bash tools/h200_models.sh ${MODELS_ARGS:-} > "$WORK/models.log" 2>&1 ;;
    ranks) OUT=$WORK/ranks bash tools/h200_ranks.sh > "$WORK/ranks.log" 2>&1 ;;
    serial) timeout ${SERIAL_LIMIT:-300} python3 -m pytest -m cuda -p no:cacheprovider -q > "$WORK/serial.log" 2>&1
            echo "serial cuda suite: exit $? in ${SECONDS}s" >> "$WORK/serial.log" ;;
  esac
  echo "$part: ${SECONDS}s" | tee -a "$WORK/parts.log"
  tail -3 "$WORK/$part.log" 2>/dev/null
  # packed after every part, so that a call stopped at the device's limit still returns the parts that ended
  tar czf "$FINAL/h200-batch.tgz" -C "$WORK" .
done
